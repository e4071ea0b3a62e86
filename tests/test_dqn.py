"""Gorila DQN components in one process: epsilons, actors filling replay, learners pushing."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from envs import EnvConfig
from rltrain.ps.config import OptimizerConfig, ServerConfig
from rltrain.ps.server import LocalServer
from rltrain.replay import ReplayMemory
from rltrain.rl.config import AlgoConfig, DQNConfig, ReplayConfig, StopConfig, TrainConfig
from rltrain.rl.dqn import DQNActor, DQNLearner, LocalReplay, apex_epsilon, memory_args
from rltrain.rl.train import initial_params, probe_env


def cfg(env: str = "CartPole-v1", **dqn: object) -> TrainConfig:
    return TrainConfig(
        env=EnvConfig(id=env, num_envs=2),
        algo=AlgoConfig(name="dqn", rollout_length=4),
        dqn=dataclasses.replace(DQNConfig(batch_size=8, target_update=3), **dqn),  # type: ignore[arg-type]
        replay=ReplayConfig(capacity=500),
        optimizer=OptimizerConfig(name="adam", lr=1e-3),
        stop=StopConfig(max_env_steps=1000),
    )


def setup(c: TrainConfig) -> tuple[LocalServer, LocalReplay]:
    spec = probe_env(c)
    server = LocalServer(initial_params(c, spec), c.optimizer, ServerConfig(), 1)
    replay = LocalReplay([ReplayMemory(*memory_args(c, spec.obs_shape, spec.obs_dtype, 0))])
    return server, replay


def test_apex_epsilons() -> None:
    assert apex_epsilon(0.4, 7, 0, 8) == pytest.approx(0.4)
    assert apex_epsilon(0.4, 7, 7, 8) == pytest.approx(0.4**8)
    assert apex_epsilon(0.4, 7, 0, 1) == pytest.approx(0.4)
    eps = [apex_epsilon(0.4, 7, i, 4) for i in range(4)]
    assert eps == sorted(eps, reverse=True)


def test_decaying_epsilon() -> None:
    c = cfg(epsilon="decay", epsilon_start=1.0, epsilon_final=0.1, epsilon_decay_steps=8)
    actor = DQNActor(c, 0)
    assert actor.epsilon() == pytest.approx(1.0)
    server, replay = setup(c)
    actor.collect(server, replay, 1)  # 4 steps per env
    assert actor.epsilon() == pytest.approx(0.55)
    actor.collect(server, replay, 2)
    assert actor.epsilon() == pytest.approx(0.1)


def test_actor_fills_replay_and_learner_pushes() -> None:
    c = cfg()
    server, replay = setup(c)
    actor = DQNActor(c, 0)
    stats = actor.collect(server, replay, 10)
    assert stats.env_steps == 80 and stats.epsilon is not None
    assert replay.sizes()[0] > 60  # truncated steps are not stored; CartPole rarely truncates
    spec = probe_env(c)
    learner = DQNLearner(c, spec.obs_shape, spec.num_actions)
    out = learner.learn(server, replay, 5)
    assert out.updates == out.applied == 5
    assert server.pull().version == 5
    assert out.q_mean is not None and np.isfinite(out.q_mean)
    assert all(loss.td is not None and loss.td >= 0 for loss in out.losses)
    # target refreshed at version 0 and again once 3 versions have passed
    assert learner.target_version == 3


def test_atari_dqn_actor_blocks() -> None:
    c = cfg(env="ALE/Pong-v5")
    server, replay = setup(c)
    DQNActor(c, 0).collect(server, replay, 2)
    batch = replay.sample(0, 4)
    assert batch.obs.shape == (4, 4, 84, 84) and batch.obs.dtype == np.uint8
