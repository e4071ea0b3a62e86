"""Truncation is not termination: actors keep the final observation, learners bootstrap from it."""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
import pytest
import torch
from gymnasium import spaces

from rltrain.envs import EnvConfig
from rltrain.ps.config import OptimizerConfig
from rltrain.rl.actor import Actor
from rltrain.rl.config import AlgoConfig, StopConfig, TrainConfig
from rltrain.rl.learner import Learner

ENV_ID = "rltrain-test/Forever-v0"
LIMIT = 4


class Forever(gymnasium.Env[np.ndarray, np.int64]):
    """Reward 1 every step and never a terminal: only the time limit ends an episode. The
    observation counts the steps, so a final observation is told apart from a first one."""

    observation_space = spaces.Box(0.0, 100.0, shape=(1,), dtype=np.float32)
    action_space = spaces.Discrete(2)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action: np.int64) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.t += 1
        return np.array([self.t], np.float32), 1.0, False, False, {}


if ENV_ID not in gymnasium.registry:
    gymnasium.register(ENV_ID, entry_point=Forever, max_episode_steps=LIMIT)


def cfg(algo: str, gamma: float = 0.5) -> TrainConfig:
    return TrainConfig(
        env=EnvConfig(id=ENV_ID, num_envs=2),
        algo=AlgoConfig(name=algo, rollout_length=6, gamma=gamma, gae_lambda=1.0),
        optimizer=OptimizerConfig(name="sgd", lr=0.1),
        stop=StopConfig(max_env_steps=100),
    )


@pytest.mark.parametrize("algo", ["a3c", "ppo", "impala", "appo"])
def test_targets_bootstrap_from_the_final_observation(algo: str) -> None:
    """V = 2 everywhere is the true value of reward 1 forever at gamma 0.5 (1 / (1 - 0.5)):
    bootstrapping from V(final obs) at the time limit keeps every target at exactly 2, where
    treating the limit as a terminal would give 1, 1.5, 1.75 before it."""
    c = cfg(algo)
    actor = Actor(c, 0)
    r = actor.rollout()
    assert r.truncated[LIMIT - 1].all() and not r.terminated.any()
    assert r.final_at.tolist() == [[LIMIT - 1, 0], [LIMIT - 1, 1]]
    assert r.final_obs.flatten().tolist() == [LIMIT, LIMIT]  # the last state, not a reset one
    assert r.obs[LIMIT].flatten().tolist() == [0, 0]  # obs[t+1] is already the next episode
    learner = Learner(c, (1,), 2)
    with torch.no_grad():
        learner.model.value.weight.zero_()
        learner.model.value.bias.fill_(2.0)
        logits, values, final_values = learner.forward_rollout(r)
    targets, adv = learner.targets(r, logits, values, final_values)
    torch.testing.assert_close(targets, torch.full((6, 2), 2.0))
    torch.testing.assert_close(adv, torch.zeros(6, 2))
