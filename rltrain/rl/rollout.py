"""Typed records of the RL half: rollouts (actor -> learner) and work statistics."""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import torch

from rltrain import perf
from rltrain.normalize import NormStats, merge_all
from rltrain.rl.algos.losses import LossParts
from rltrain.rl.frames import blank_older, restack


@dataclass(frozen=True)
class Rollout:
    """T steps of B environments, stamped with the parameter version that acted."""

    actor_id: int
    version: int
    obs: torch.Tensor  # [T+1, B, *obs_shape]; obs[T] is the state to bootstrap from; or,
    # with frame_stack k > 1, the frames [T+k, B, *frame] that observations() restacks
    actions: torch.Tensor  # [T, B] int64, or [T, B, n] float32 (a Box, unclipped samples)
    rewards: torch.Tensor  # [T, B] float32, the training reward (clipped for Atari)
    terminated: torch.Tensor  # [T, B] bool
    truncated: torch.Tensor  # [T, B] bool
    behaviour_logits: torch.Tensor  # [T, B, P] the acting policy's parameters (V-trace's mu):
    # logits, or a Gaussian's means and log-stds (rl.distributions)
    final_obs: torch.Tensor  # [K, *obs_shape] last observations of the K truncated episodes
    final_at: torch.Tensor  # [K, 2] int64 (t, b) of each: truncated[t, b] is True
    episode_returns: tuple[float, ...] = ()  # raw scores of episodes that ended in the rollout
    episode_lengths: tuple[int, ...] = ()
    norm: NormStats | None = None  # what the actor saw since its last rollout (a delta)
    phases: dict[str, float] = field(default_factory=dict)  # the actor's seconds per phase
    first_step_at: float | None = None  # time.time() of the actor's first env step, on its
    # first rollout only: where start-up ends (summary.json's startup.first_step)
    obs_slot: int | None = None  # the observations wait in this slot of the run's ObsSlots
    # (``obs`` is then empty: they travel as the slot's number, see ObsSlots.attach)
    frame_stack: int = 1  # > 1: ``obs`` holds each step's newest frame (rltrain.rl.frames)
    blank: torch.Tensor | None = None  # [T+1, B] uint8 on the host, with frames: the blank
    # older frames of each stack (a new game's first stacks); None where no stack has any
    unsettled: tuple[tuple[int, RoundCount], ...] = ()  # (actor id, its envs yet to end a
    # game since it started: first_round_count) for each actor in it, at the rollout's end

    def to(self, device: torch.device) -> Rollout:
        """The tensors on ``device``, copied without waiting (a host-to-device copy that
        blocked would wait for the device's queue to drain first); itself when there."""
        if self.obs.device == device:
            return self

        def move(x: torch.Tensor) -> torch.Tensor:
            return x.to(device, non_blocking=True)

        return dataclasses.replace(
            self,
            obs=move(self.obs),
            actions=move(self.actions),
            rewards=move(self.rewards),
            terminated=move(self.terminated),
            truncated=move(self.truncated),
            behaviour_logits=move(self.behaviour_logits),
            final_obs=move(self.final_obs),
            final_at=move(self.final_at),
        )  # (``blank`` stays on the host: the young stacks are found there, blank_older)

    def observations(self, out: torch.Tensor | None = None) -> torch.Tensor:  # [T+1, B, *obs]
        """Every step's observation: ``obs``, or its frames restacked (a view, or a copy where
        a new game's stacks have blank frames: into ``out`` where it fits), on ``obs``'s
        device."""
        if self.frame_stack == 1:
            return self.obs
        stacks = restack(self.obs, self.frame_stack)
        return stacks if self.blank is None else blank_older(stacks, self.blank, out)

    @property
    def env_steps(self) -> int:
        return int(self.actions.shape[0] * self.actions.shape[1])

    def discounts(self, gamma: float) -> torch.Tensor:  # [T, B]
        """gamma, or 0 where the episode terminated: a terminal has no future.

        A truncation (a time limit) is not a terminal: the learner bootstraps there from the
        value of ``final_obs`` (Pardo et al. 2018, "Time limits in RL").
        """
        return gamma * (~self.terminated).float()

    def continues(self) -> torch.Tensor:  # [T, B] bool
        """False where an episode ended (either way): obs[t+1] then belongs to the next one, so
        no return or trace may run across it."""
        return ~(self.terminated | self.truncated)


EMPTY_OBS = torch.empty(0)
"""A rollout's ``obs`` while they wait in a slot (:class:`rltrain.rl.obs_slots.ObsSlots`)."""


def stack(rollouts: list[Rollout]) -> Rollout:
    """Concatenate rollouts along the batch dimension (IMPALA's learner batch)."""
    if len(rollouts) == 1:
        return rollouts[0]

    def cat(name: str) -> torch.Tensor:
        return torch.cat([getattr(r, name) for r in rollouts], dim=1)

    offsets, b = [], 0
    for r in rollouts:  # each rollout's final_at moves by the envs before it
        offsets.append(r.final_at + torch.tensor([0, b]))
        b += r.actions.shape[1]
    k = rollouts[0].frame_stack
    if any(r.frame_stack != k for r in rollouts):
        raise ValueError("rollouts of whole observations and of frames cannot be stacked")
    blank = None
    if any(r.blank is not None for r in rollouts):  # (zeros for those without blank frames)
        blank = torch.cat([_blank_of(r) for r in rollouts], dim=1)

    return Rollout(
        actor_id=-1,
        version=min(r.version for r in rollouts),
        obs=cat("obs") if rollouts[0].obs.numel() else EMPTY_OBS,  # (or in a slot)
        actions=cat("actions"),
        rewards=cat("rewards"),
        terminated=cat("terminated"),
        truncated=cat("truncated"),
        behaviour_logits=cat("behaviour_logits"),
        final_obs=torch.cat([r.final_obs for r in rollouts]),
        final_at=torch.cat(offsets),
        episode_returns=tuple(x for r in rollouts for x in r.episode_returns),
        episode_lengths=tuple(x for r in rollouts for x in r.episode_lengths),
        norm=merge_all([r.norm for r in rollouts]),
        phases=functools.reduce(perf.merge, (r.phases for r in rollouts), {}),
        first_step_at=earliest(r.first_step_at for r in rollouts),
        unsettled=tuple(x for r in rollouts for x in r.unsettled),
        frame_stack=k,
        blank=blank,
    )


def _blank_of(r: Rollout) -> torch.Tensor:  # [T+1, B] uint8
    if r.blank is not None:
        return r.blank
    steps, envs = r.actions.shape[0] + 1, r.actions.shape[1]
    return torch.zeros(steps, envs, dtype=torch.uint8)


def earliest(times: Iterable[float | None]) -> float | None:
    """The first of the times that are known (None when none is)."""
    known = [t for t in times if t is not None]
    return min(known) if known else None


class FirstRound:
    """Which of an actor's envs have not yet ended a game since the actor started.

    Every env starts its first game at once (a run's start, each ``--resume``, a restarted
    actor), so the first games to end are the shortest: in Pong the most lopsided scores, in
    CartPole the failures. Until every env has ended one, the last episodes are not a sample
    of the policy's play, however many there are (48 envs' last 48 games after a resume came
    from the 7 envs whose pole fell early: docs/training.md); the score stop waits for the
    round (:attr:`rltrain.rl.run.counters.Counters.settled`).
    """

    def __init__(self, envs: int) -> None:
        self.waiting = np.ones(envs, dtype=bool)  # [B]
        self.since = time.time()  # when this round began: RoundCount.since

    def saw(self, ended_in: Sequence[int]) -> None:
        """Games ended in these envs (their indices, ``StepBatch.episode_envs``)."""
        if len(ended_in):
            self.waiting[np.asarray(ended_in, dtype=np.int64)] = False

    @property
    def pending(self) -> int:
        """Envs still in their first game."""
        return int(self.waiting.sum())


class RoundCount(NamedTuple):
    """An actor's envs still in their first game (``pending``) at a rollout's end, and when
    that round began (``since``, ``time.time()`` at the actor's start or restart: on a Ray
    cluster a restart may be on another node, whose clock NTP keeps far closer than the
    seconds a restart takes)."""

    pending: int
    since: float


def first_round_count(rounds: Sequence[FirstRound]) -> RoundCount:
    """One actor's count over its env groups' rounds (all begun as the actor started)."""
    return RoundCount(sum(r.pending for r in rounds), min(r.since for r in rounds))


def newest_count(had: RoundCount | None, said: RoundCount) -> RoundCount:
    """The count that stands for an actor after ``said`` arrives where ``had`` stood.

    Counts arrive out of order: two learners report their batches in any order, and a
    restarted actor's rollouts can reach the trainer after rollouts of its previous life
    still queued at another learner. A later round wins (a restart); within one round the
    count only falls, so the smaller is the newer.
    """
    if had is None or said.since > had.since:
        return said
    if said.since < had.since:
        return had
    return said if said.pending < had.pending else had


LOSS_TERMS = ("policy", "value", "entropy", "td", "kl", "clip_fraction", "lag_kl")


@dataclass(frozen=True)
class LossStats:
    """Loss terms of one update; None where the algorithm has no such term."""

    grad_norm: float
    policy: float | None = None
    value: float | None = None
    entropy: float | None = None
    td: float | None = None  # DQN's Huber TD loss (dqn.atoms > 1: C51's cross-entropy)
    kl: float | None = None  # ppo/appo: mean KL(pi_old || current policy)
    clip_fraction: float | None = None  # ppo/appo: share of samples whose ratio was clipped
    lag_kl: float | None = None  # impala/appo: mean KL(actors' mu || learner's batch-start pi)
    action_std: float | None = None  # a Box policy: its Gaussian's std, the dimensions' mean

    def terms(self) -> dict[str, float]:
        """The loss terms this algorithm has, by name (``GradUpdate.losses``)."""
        return {n: v for n in LOSS_TERMS if (v := getattr(self, n)) is not None}


@dataclass
class WorkStats:
    """What a worker or learner reports back to the driver after a chunk of work."""

    env_steps: int = 0
    episode_returns: list[float] = field(default_factory=list)
    episode_lengths: list[int] = field(default_factory=list)
    updates: int = 0  # pushes
    applied: int = 0
    dropped: int = 0
    rejected: int = 0
    staleness: list[int] = field(default_factory=list)  # of applied updates
    lr_scales: list[float] = field(default_factory=list)  # theirs (server.staleness: scale)
    actor_lag: list[int] = field(default_factory=list)  # impala/appo: versions per batch from
    # the oldest parameters that acted in it to those the learner starts from
    losses: list[LossStats] = field(default_factory=list)
    seconds: float = 0.0
    epsilon: float | None = None  # dqn actors: exploration rate now
    q_mean: float | None = None  # dqn learners: mean Q(s, a) of the sampled batches
    support_beyond: float | None = None  # C51: the targets' probability past the support
    epochs: int | None = None  # appo learners: the epochs run over the batch (ppo.target_kl)
    clipped: float | None = None  # a Box: share of the action elements its map clipped
    phases: dict[str, float] = field(default_factory=dict)  # seconds per role/phase (perf.py)
    first_step_at: float | None = None  # time.time() of a process's first env step, if here
    version: int | None = None  # the server's version after a learner's last exchange
    unsettled: dict[int, RoundCount] = field(default_factory=dict)  # actor id -> its envs
    # yet to end a game since it started, the newest count of its rollouts here (newest_count)

    def add_rollout(self, r: Rollout) -> None:
        self.env_steps += r.env_steps
        for actor_id, said in r.unsettled:
            self.unsettled[actor_id] = newest_count(self.unsettled.get(actor_id), said)
        self.episode_returns.extend(r.episode_returns)
        self.episode_lengths.extend(r.episode_lengths)
        perf.merge(self.phases, r.phases)
        self.first_step_at = earliest((self.first_step_at, r.first_step_at))


@dataclass(frozen=True)
class Gradient:
    """One minibatch's flat gradient [P], its statistics and the samples it covers, all on
    the learner's device until :func:`read_losses` reads a batch's statistics at once: a read
    per minibatch would make the host wait for each backward pass before queuing the next,
    leaving a GPU idle between minibatches."""

    values: torch.Tensor  # [P]
    stats: torch.Tensor  # [8] grad norm, LossParts' five, lag_kl, action std
    samples: int
    lags: bool = False  # impala/appo: stats[6] is the actors' lag (else there is none)
    gaussian: bool = False  # a Box policy: stats[7] is its std (else there is none)
    absent: tuple[str, ...] = ()  # the loss's parts it does not have (LossTerms.absent)

    @property
    def finite(self) -> torch.Tensor:  # [] bool
        """Whether every value is finite, as its global norm says (GradUpdate.finite)."""
        return self.stats[0].isfinite()

    @property
    def loss(self) -> LossStats:
        """This gradient's statistics, read now (tests, diagnosis: a host sync)."""
        return read_losses([self])[0]


def read_losses(gradients: Sequence[Gradient]) -> list[LossStats]:
    """The statistics of ``gradients`` as numbers, read from the device in one transfer."""
    if not gradients:
        return []
    rows = torch.stack([g.stats for g in gradients]).tolist()
    return [_stats(g, row) for g, row in zip(gradients, rows, strict=True)]


def _stats(g: Gradient, row: list[float]) -> LossStats:
    norm, *parts, lag, std = row  # (Gradient.stats)
    named = {k: None if k in g.absent else v for k, v in zip(LossParts._fields, parts, strict=True)}
    return LossStats(
        norm, **named, lag_kl=lag if g.lags else None, action_std=std if g.gaussian else None
    )
