"""Actors: own a vector of environments and a policy copy, produce versioned rollouts."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import nn
from torch.nn.utils import vector_to_parameters

from envs import VectorEnv, make_env
from rltrain.ps.server import Server
from rltrain.records import Params
from rltrain.rl.config import TrainConfig
from rltrain.rl.models import build_policy
from rltrain.rl.rollout import Rollout


def frame_stack_of(obs_shape: tuple[int, ...]) -> int:
    """Frames per observation: the stack depth of image observations [C, H, W], else 1."""
    return obs_shape[0] if len(obs_shape) == 3 else 1


def load_params(net: nn.Module, params: Params, device: torch.device | None = None) -> None:
    """Copy a pulled flat parameter vector into ``net``."""
    with torch.no_grad():
        vector_to_parameters(params.values.to(device or "cpu"), net.parameters())


def acting_setup(
    cfg: TrainConfig, actor_id: int, build: Callable[..., nn.Module]
) -> tuple[VectorEnv, nn.Module, int]:
    """What every kind of actor starts with: pinned torch threads, its seeded environments and
    a network built by ``build`` (policy or Q) in eval mode."""
    torch.set_num_threads(cfg.runtime.threads_per_worker)
    seed = actor_seed(cfg, actor_id)
    env = make_env(cfg.env, seed=seed)
    model = build(cfg.model.kind, env.obs_shape, env.num_actions, cfg.model.hidden)
    model.eval()
    return env, model, seed


def actor_seed(cfg: TrainConfig, actor_id: int) -> int:
    """Actor i's environments are seeded seed + 1000 i (+ env index inside the vector)."""
    return cfg.seed + 1000 * (actor_id + 1)


class Actor:
    """Acts in ``cfg.env.num_envs`` environments with its copy of the policy.

    Plain Python: Ray runs it as an actor process (1 CPU, ``runtime.threads_per_worker``
    torch threads); tests run it in this process.
    """

    def __init__(self, cfg: TrainConfig, actor_id: int) -> None:
        self.cfg = cfg
        self.actor_id = actor_id
        self.env, self.model, seed = acting_setup(cfg, actor_id, build_policy)
        self.generator = torch.Generator().manual_seed(seed)
        self.obs = torch.from_numpy(np.asarray(self.env.reset(seed=seed)))
        self.version = -1
        self.rollouts = 0

    def load(self, params: Params) -> None:
        load_params(self.model, params)
        self.version = params.version

    def collect(self, server: Server) -> Rollout:
        """Pull every ``server.n_fetch`` rollouts, then act for one rollout."""
        if self.rollouts % self.cfg.server.n_fetch == 0 or self.version < 0:
            self.load(server.pull())
        return self.rollout()

    @torch.no_grad()
    def rollout(self) -> Rollout:
        """T steps of every environment with the current policy (sampled actions)."""
        T = self.cfg.algo.rollout_length
        obs, actions, rewards, terms, truncs, logits = [self.obs], [], [], [], [], []
        returns: list[float] = []
        lengths: list[int] = []
        for _ in range(T):
            lg, _ = self.model(self.obs)  # [B, A]
            a = torch.multinomial(torch.softmax(lg, -1), 1, generator=self.generator).squeeze(1)
            step = self.env.step(a.numpy())
            self.obs = torch.from_numpy(np.asarray(step.obs))
            obs.append(self.obs)
            actions.append(a)
            rewards.append(torch.from_numpy(np.asarray(step.reward, dtype=np.float32)))
            terms.append(torch.from_numpy(np.asarray(step.terminated, dtype=bool)))
            truncs.append(torch.from_numpy(np.asarray(step.truncated, dtype=bool)))
            logits.append(lg)
            returns.extend(step.episode_returns)
            lengths.extend(step.episode_lengths)
        self.rollouts += 1
        return Rollout(
            actor_id=self.actor_id,
            version=self.version,
            obs=torch.stack(obs),
            actions=torch.stack(actions),
            rewards=torch.stack(rewards),
            terminated=torch.stack(terms),
            truncated=torch.stack(truncs),
            behaviour_logits=torch.stack(logits),
            episode_returns=tuple(float(x) for x in returns),
            episode_lengths=tuple(int(x) for x in lengths),
        )

    def close(self) -> None:
        self.env.close()
