"""Actors: own a vector of environments and a policy copy, produce versioned rollouts."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn

from rltrain.envs import ActionSpace, EnvError, StepBatch, VectorEnv, make_env, make_env_groups
from rltrain.faults import EnvFailed
from rltrain.normalize import Moments, NormStats, RewardScaler
from rltrain.perf import PhaseTimer
from rltrain.ps.server import Server
from rltrain.records import Params
from rltrain.rl.algos.distributions import distribution
from rltrain.rl.algos.models import (
    ActorCritic,
    build_policy,
    build_qnet,
    load_flat,
    parameters_to_come,
)
from rltrain.rl.config import TrainConfig
from rltrain.rl.inputs import normalizes_obs
from rltrain.rl.obs_slots import Columns, ObsSlots
from rltrain.rl.rollout import EMPTY_OBS, FirstRound, Rollout, first_round_count, stack


class Policy(Protocol):
    """A policy that acts for an actor (:class:`rltrain.rl.inference.ActClient`)."""

    def act(
        self, obs: torch.Tensor, at: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, int]:
        """Sampled actions, logits [B, A] and the parameters' version, for ``obs`` [B, *obs];
        ``at``: where ``obs`` starts in the run's observation slots, when it is a view of them."""
        ...

    def reward_scale(self) -> float | None:
        """1 / std of the discounted return, of the parameters acting now (None: unknown)."""
        ...


def frame_stack_of(protocol: Mapping[str, Any]) -> int:
    """Frames per observation that replay may store once and restack: Atari's frame stack,
    else 1 (a gymnasium env's observations, its stacked images included, are kept whole)."""
    return int(protocol.get("frame_stack", 1))


def load_params(net: nn.Module, params: Params, device: torch.device | None = None) -> None:
    """Copy a pulled flat parameter vector into ``net``."""
    load_flat(net, params.values.to(device or "cpu"))


def policy_builder(cfg: TrainConfig) -> Callable[..., ActorCritic]:
    """``build_policy`` with the run's value torso and observation normalisation; called as
    ``build(kind, obs_shape, actions, hidden)``, like ``build_qnet``."""

    def build(
        kind: str, obs_shape: tuple[int, ...], actions: ActionSpace | int, hidden: int
    ) -> ActorCritic:
        clip = cfg.normalize.clip if normalizes_obs(cfg, obs_shape) else None
        m = cfg.model
        return build_policy(
            kind, obs_shape, actions, hidden, m.value_net, clip, m.precision, m.log_std_init
        )

    return build


def model_builder(cfg: TrainConfig) -> Callable[..., nn.Module]:
    """The run's network builder, ``build(kind, obs_shape, actions, hidden)``: the Q-network
    (with ``dqn.dueling``'s and ``dqn.atoms``' heads) or :func:`policy_builder`'s actor-critic."""
    if cfg.algo_spec.q_network:
        d = cfg.dqn
        return functools.partial(
            build_qnet, dueling=d.dueling, atoms=d.atoms, v_min=d.v_min, v_max=d.v_max
        )
    return policy_builder(cfg)


@contextlib.contextmanager
def env_faults() -> Iterator[None]:
    """Around an actor's own envs being made: one that cannot be made here, although the
    run's probe made one (its constructor failed this time), ends the run as a fault
    (:class:`EnvFailed`), not as the user's bad input (nor a process to restart)."""
    try:
        yield
    except EnvError as e:
        raise EnvFailed(str(e), traceback.format_exc()) from e


def acting_setup(
    cfg: TrainConfig, actor_id: int, build: Callable[..., nn.Module]
) -> tuple[VectorEnv, nn.Module, int]:
    """What every kind of actor starts with: pinned torch threads, its seeded environments and
    a network built by ``build`` (policy or Q) in eval mode."""
    torch.set_num_threads(cfg.runtime.threads_per_worker)
    seed = actor_seed(cfg, actor_id)
    with env_faults():
        env = make_env(cfg.env, seed=seed)
    model = build(cfg.model.kind, env.obs_shape, env.action_space, cfg.model.hidden)
    model.eval()
    return env, model, seed


def actor_seed(cfg: TrainConfig, actor_id: int) -> int:
    """Actor i's environments are seeded seed + 1000 i (+ env index inside the vector)."""
    return cfg.seed + 1000 * (actor_id + 1)


class Trace:
    """What one env group did during a rollout, step by step; becomes that group's
    :class:`Rollout` (the actor stacks its groups' along the batch).

    ``columns``: this group's columns of the actor's observation slot (:class:`~rltrain.rl.
    obs_slots.ObsSlots`), where each frame is written as it comes; None: the observations are
    kept in a list and stacked at the end."""

    def __init__(
        self, obs: torch.Tensor, scaler: RewardScaler | None, columns: Columns | None = None
    ) -> None:
        self.columns = columns
        if columns is not None:
            columns.first(obs)
        self.obs: list[torch.Tensor] = [obs]  # (the newest alone when written into columns)
        self.actions: list[torch.Tensor] = []
        self.logits: list[torch.Tensor] = []
        self.rewards: list[torch.Tensor] = []  # [B_g] float32 each
        self.terms: list[torch.Tensor] = []  # [B_g] bool each
        self.truncs: list[torch.Tensor] = []
        self.finals: list[np.ndarray] = []
        self.final_at: list[tuple[int, int]] = []
        self.returns: list[float] = []
        self.lengths: list[int] = []
        self.scaler = scaler
        self.seen_ret: Moments | None = None

    def now(self) -> tuple[torch.Tensor, int | None]:
        """The observation to act on [B_g, *obs], and where it starts in the observation slots
        (the policy worker reads it there) or None without them."""
        t = len(self.rewards)
        return self.obs[-1], None if self.columns is None else self.columns.at(t)

    def act(self, action: torch.Tensor, logits: torch.Tensor) -> None:
        self.actions.append(action)
        self.logits.append(logits)

    def record(self, step: StepBatch, scale: float | None) -> torch.Tensor:
        """Keep step t's outcome; returns the next observation."""
        t = len(self.rewards)
        obs = torch.from_numpy(np.asarray(step.obs))
        if self.columns is not None:  # the frame's one copy: into shared memory
            self.columns.write(t + 1, obs, step.episode_envs)
            self.obs.clear()  # (the slot keeps them: the newest alone is acted on)
        reward = np.asarray(step.reward, dtype=np.float32)
        if self.scaler is not None:
            reward, m = self.scaler(reward, step.terminated | step.truncated, scale)
            self.seen_ret = m if self.seen_ret is None else self.seen_ret.merge(m)
        self.obs.append(obs)
        self.rewards.append(torch.from_numpy(reward))
        self.terms.append(torch.from_numpy(np.asarray(step.terminated, dtype=bool)))
        self.truncs.append(torch.from_numpy(np.asarray(step.truncated, dtype=bool)))
        self.finals.append(np.asarray(step.final_obs))
        self.final_at.extend((t, int(b)) for b in np.flatnonzero(step.truncated))
        self.returns.extend(step.episode_returns)
        self.lengths.extend(step.episode_lengths)
        return obs

    def rollout(self, actor_id: int, version: int, norm_obs: bool) -> Rollout:
        """This group's rollout (its ``obs`` empty when they are in a slot)."""
        cols = self.columns
        stacked = torch.stack(self.obs) if cols is None else EMPTY_OBS  # (or in the slot)
        seen_obs = None
        if norm_obs:  # (the slot's stacks rebuilt for it alone: Atari's are not normalised)
            whole = stacked if cols is None else cols.observations()
            seen_obs = Moments.of(whole[1:].flatten(0, 1))
        seen = seen_obs is not None or self.seen_ret is not None
        return Rollout(
            actor_id=actor_id,
            version=version,
            obs=stacked,
            actions=torch.stack(self.actions),
            rewards=torch.stack(self.rewards),
            terminated=torch.stack(self.terms),
            truncated=torch.stack(self.truncs),
            behaviour_logits=torch.stack(self.logits),
            final_obs=torch.from_numpy(np.concatenate(self.finals)),
            final_at=torch.tensor(self.final_at, dtype=torch.int64).reshape(-1, 2),
            episode_returns=tuple(float(x) for x in self.returns),
            episode_lengths=tuple(int(x) for x in self.lengths),
            norm=NormStats(seen_obs, self.seen_ret) if seen else None,
        )


class Actor:
    """Acts in ``cfg.env.num_envs`` environments with its copy of the policy.

    The environments are stepped in ``env.groups`` groups, in turn: while one group's games run
    in ale-py's C++ threads the policy acts on the next group, so an Atari actor runs at the
    larger of the emulator's and the policy's cost rather than their sum (Sample Factory's
    double-buffered sampling, Petrenko et al. 2020).

    Plain Python: Ray runs it as an actor process (1 CPU, ``runtime.threads_per_worker``
    torch threads); tests run it in this process.
    """

    def __init__(
        self,
        cfg: TrainConfig,
        actor_id: int,
        policy: Policy | None = None,
        obs_slots: ObsSlots | None = None,
    ) -> None:
        """``policy``: the batched policy that acts for this actor (``runtime.inference``),
        which then pulls no parameters; None: its own copy acts. ``obs_slots``: the run's
        shared observation buffers, where a collect call lent a slot writes its frames."""
        self.cfg = cfg
        self.actor_id = actor_id
        self.policy = policy
        self.obs_slots = obs_slots
        torch.set_num_threads(cfg.runtime.threads_per_worker)
        seed = actor_seed(cfg, actor_id)
        with env_faults():
            self.groups = make_env_groups(cfg.env, seed)
        self.env = self.groups[0]  # shapes and action count (every group has the same)
        with parameters_to_come():  # pulled before it acts; unused with a batched policy
            self.model: ActorCritic = policy_builder(cfg)(
                cfg.model.kind, self.env.obs_shape, self.env.action_space, cfg.model.hidden
            )
        self.dist = distribution(self.env.action_space)
        self.model.eval()
        self.generator = torch.Generator().manual_seed(seed)
        # each group resets with the seeds make_env_groups gave it (env i of the actor: seed + i)
        self.obs = [torch.from_numpy(np.asarray(g.reset())) for g in self.groups]
        self.first_round = [FirstRound(g.num_envs) for g in self.groups]
        self.version = -1
        self.params: Params | None = None  # the last pulled: a pull sends only what is newer
        self.rollouts = 0
        self.timer = PhaseTimer("actor")  # a worker replaces it with its own
        # normalisation: the server's merged statistics act; this actor's own since its last
        # rollout travel with the rollout (a delta)
        self.norm_obs = normalizes_obs(cfg, self.env.obs_shape)
        self.stats = NormStats()
        self.scalers = [
            RewardScaler(g.num_envs, cfg.algo.gamma, cfg.normalize.clip)
            if cfg.normalize.reward
            else None
            for g in self.groups
        ]

    def load(self, params: Params, norm: bool = True) -> None:
        """Take pulled parameters (and, with ``norm``, their normalisation statistics)."""
        load_params(self.model, params)
        self.version = params.version
        self.params = params
        if norm and params.norm is not None:
            self.stats = params.norm
            self.model.set_norm(params.norm)

    def collect(self, server: Server, slot: int | None = None) -> Rollout:
        """Pull every ``server.n_fetch`` rollouts, then act for one rollout; the rollout
        carries this actor's time per phase since its last one. An actor with a batched
        policy (:mod:`rltrain.rl.inference`) pulls nothing: the policy acts. ``slot``: the
        observation slot lent for this rollout (its frames go there, see :class:`ObsSlots`)."""
        self.timer.begin()
        if self.policy is not None:
            rollout = self.rollout(self.policy, slot)
            return dataclasses.replace(rollout, phases=self.timer.take())
        if self.rollouts % self.cfg.server.n_fetch == 0 or self.version < 0:
            with self.timer.phase("pull"):
                params = server.pull(self.params)
            if params is not self.params:  # the server has moved on since
                with self.timer.phase("collate"):
                    self.load(params)
        rollout = self.rollout(slot=slot)
        return dataclasses.replace(rollout, phases=self.timer.take())

    def _act(
        self, obs: torch.Tensor, at: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, int]:
        """This actor's own policy: sampled actions, logits [B_g, A], its version."""
        logits = self.model.act_params(obs)  # [B_g, A]
        return self.dist.sample(logits, self.generator), logits, self.version

    @torch.no_grad()
    def rollout(self, policy: Policy | None = None, slot: int | None = None) -> Rollout:
        """T steps of every environment with the current policy (sampled actions), this
        actor's own or ``policy``'s (the rollout then carries the oldest version that acted);
        ``slot``: the frames go into that slot of the run's :class:`ObsSlots`.

        Group g's step t is sent to its emulators right after the policy acts on it, and
        received just before the policy acts on it again, one round of the other groups later.
        """
        act = self._act if policy is None else policy.act
        oldest = None
        T, timer = self.cfg.algo.rollout_length, self.timer
        first_step_at = time.time() if self.rollouts == 0 else None
        # the rewards' scale: that of the merged statistics acting (the batched policy's);
        # None before they know returns (each group's scaler then uses its own)
        scale = self.stats.reward_scale() if policy is None else policy.reward_scale()
        outs = self._slot_columns(slot)
        traces = [
            Trace(obs, sc, out) for obs, sc, out in zip(self.obs, self.scalers, outs, strict=True)
        ]
        for t in range(T + 1):
            for g, (env, trace) in enumerate(zip(self.groups, traces, strict=True)):
                if t > 0:
                    with timer.phase("env"):
                        step = env.recv()
                    with timer.phase("collate"):
                        self.obs[g] = trace.record(step, scale)
                        self.first_round[g].saw(step.episode_envs)
                if t == T:
                    continue
                with timer.phase("inference"):
                    action, logits, version = act(*trace.now())  # [B_g] or [B_g, n]; [B_g, A]
                    env.send(action.numpy())  # a Box's env clips to its bounds
                    trace.act(action, logits)
                oldest = version if oldest is None else min(oldest, version)
        self.rollouts += 1
        version = self.version if oldest is None else oldest
        with timer.phase("collate"):
            parts = [tr.rollout(self.actor_id, version, self.norm_obs) for tr in traces]
            batch = stack(parts)
        return dataclasses.replace(
            batch,
            actor_id=self.actor_id,
            version=version,
            first_step_at=first_step_at,
            obs_slot=slot,
            unsettled=((self.actor_id, first_round_count(self.first_round)),),
        )

    def _slot_columns(self, slot: int | None) -> list[Columns | None]:
        """Each group's columns of observation slot ``slot`` (None each without one)."""
        if slot is None:
            return [None] * len(self.groups)
        if self.obs_slots is None:
            raise ValueError(f"actor {self.actor_id} was lent slot {slot} but has no ObsSlots")
        lo, out = 0, list[Columns | None]()
        for g in self.groups:
            out.append(self.obs_slots.columns(slot, lo, lo + g.num_envs))
            lo += g.num_envs
        return out

    def close(self) -> None:
        for env in self.groups:
            env.close()
