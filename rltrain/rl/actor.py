"""Actors: own a vector of environments and a policy copy, produce versioned rollouts."""

from __future__ import annotations

import numpy as np
import torch
from torch.nn.utils import vector_to_parameters

from envs import make_env
from rltrain.ps.server import Server
from rltrain.records import Params
from rltrain.rl.config import TrainConfig
from rltrain.rl.models import build_policy
from rltrain.rl.rollout import Rollout


def actor_seed(cfg: TrainConfig, actor_id: int) -> int:
    """Actor i's environments are seeded seed + 1000 i (+ env index inside the vector)."""
    return cfg.seed + 1000 * (actor_id + 1)


class Actor:
    """Acts in ``cfg.env.num_envs`` environments with its copy of the policy.

    Plain Python: Ray runs it as an actor process (1 CPU, ``runtime.threads_per_worker``
    torch threads); tests run it in this process.
    """

    def __init__(self, cfg: TrainConfig, actor_id: int) -> None:
        torch.set_num_threads(cfg.runtime.threads_per_worker)
        self.cfg = cfg
        self.actor_id = actor_id
        seed = actor_seed(cfg, actor_id)
        self.env = make_env(cfg.env, seed=seed)
        self.model = build_policy(
            cfg.model.kind, self.env.obs_shape, self.env.num_actions, cfg.model.hidden
        )
        self.model.eval()
        self.generator = torch.Generator().manual_seed(seed)
        self.obs = torch.from_numpy(np.asarray(self.env.reset(seed=seed)))
        self.version = -1
        self.rollouts = 0

    def load(self, params: Params) -> None:
        with torch.no_grad():
            vector_to_parameters(params.values, self.model.parameters())
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
