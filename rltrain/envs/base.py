"""What actors see of an environment vector: :class:`VectorEnv`, :class:`StepBatch`, errors.

Every backend gives SAME-STEP auto-reset: when env i's episode ends at a step, that step's
reward/terminated/truncated belong to the ended episode and ``obs[i]`` is already the first
observation of the next one. An actor therefore never sees (nor has to skip) a "reset step",
and every transition it stores is a real one.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import numpy as np

from rltrain.errors import RLTrainError


class EnvError(RLTrainError, ValueError):
    """An environment that cannot be made (unknown id, unsupported spaces); one-line message."""


@dataclass(frozen=True)
class StepBatch:
    """One vector step. Arrays have leading dim B = num_envs."""

    obs: np.ndarray
    """[B, *obs_shape]: the observation to act on next (after an auto-reset: the new episode's
    first observation)."""
    reward: np.ndarray
    """[B] float32 training reward (clipped to its sign for Atari when clip_rewards)."""
    terminated: np.ndarray
    """[B] bool: training terminal (includes a lost life when episodic_life)."""
    truncated: np.ndarray
    """[B] bool: the episode hit its time limit (a cut, not a terminal: learners bootstrap from
    the value of ``final_obs``)."""
    final_obs: np.ndarray
    """[K, *obs_shape]: the last observation of each truncated episode, for the K envs in
    ``np.flatnonzero(truncated)`` in that order (``obs`` already holds the next episode's)."""
    episode_returns: list[float]
    """Raw (unclipped) game scores of the real episodes that ended at this step."""
    episode_lengths: list[int]
    """Their lengths in agent steps."""
    episode_envs: list[int] = field(default_factory=list)
    """The index of the env each of them ended in."""


@dataclass(frozen=True)
class ActionSpace:
    """What the policy outputs: ``n`` discrete actions, or (``continuous``) a vector of ``n``
    reals, clipped to [low, high] when the env steps (gymnasium's Discrete / 1-D Box)."""

    n: int
    continuous: bool = False
    low: tuple[float, ...] = ()
    high: tuple[float, ...] = ()
    mapping: str = "clip"
    """A Box's ``env.action_map``: how a sample reaches the env (:meth:`to_env`)."""
    dtype: str = "float32"
    """A Box's dtype: the env's actions are of it (float64 bounds rounded to float32 put
    actions outside them: float32(-0.1) < -0.1)."""
    start: int = 0
    """A Discrete's first action (gymnasium's ``Discrete(n, start)``): the policy picks
    0..n-1, the env takes start..start+n-1 (:meth:`to_env`, :meth:`from_env`)."""
    nvec: tuple[int, ...] = ()
    """MultiDiscrete (and MultiBinary, nvec all 2): the choices of each of the ``n``
    sub-actions, one categorical each; empty for Discrete and Box."""
    starts: tuple[int, ...] = ()
    """A MultiDiscrete's first action of each sub-action (gymnasium's ``start``)."""
    binary: bool = False
    """A MultiBinary (``nvec`` all 2, ``dtype`` int8): named and rebuilt as such."""

    @property
    def multi(self) -> bool:
        """Whether the actions are a vector of ``n`` discrete sub-actions (MultiDiscrete)."""
        return bool(self.nvec)

    @property
    def vector(self) -> bool:
        """Whether an action is a vector of ``n`` (a Box's reals, a MultiDiscrete's indices),
        not one index: its shape per step, and what a Q-network cannot rate."""
        return self.continuous or self.multi

    def describe(self) -> str:
        if self.continuous:
            return f"Box({self.n},)"
        if self.multi:
            return f"MultiBinary({self.n})" if self.binary else f"MultiDiscrete({list(self.nvec)})"
        return f"Discrete({self.n}, start={self.start})" if self.start else f"Discrete({self.n})"

    @property
    def params(self) -> int:
        """The width of the policy's output: n logits, or a Gaussian's n means and n log
        standard deviations (:mod:`rltrain.rl.algos.distributions`)."""
        if self.multi:  # the logits of every sub-action, side by side
            return sum(self.nvec)
        return 2 * self.n if self.continuous else self.n

    def bounded(self) -> np.ndarray:
        """[n] bool: the Box's dimensions with finite bounds on both sides."""
        return np.isfinite(self.low) & np.isfinite(self.high)

    def clipped(self, u: np.ndarray) -> float:
        """The share of the elements of a Box policy's samples ``u`` [..., n] that
        :meth:`to_env` clips: beyond [-1, 1] under ``affine``, beyond [low, high] under
        ``clip`` and on a dimension's one finite bound; none of ``tanh``'s bounded ones. A share
        near 1 is a policy pinned at its bounds (explore113: unseen in TensorBoard)."""
        u = np.asarray(u, np.float64).reshape(-1, self.n)
        low, high = np.asarray(self.low, np.float64), np.asarray(self.high, np.float64)
        outside = (u < low) | (u > high)
        if self.mapping != "clip":
            outside = np.where(self.bounded(), np.abs(u) > 1.0, outside)
            outside &= ~self.bounded() if self.mapping == "tanh" else True
        return float(outside.mean()) if u.size else 0.0

    def to_env(self, u: np.ndarray) -> np.ndarray:
        """The env's actions: int64 [B] (the policy's indices plus the Discrete's start), or
        [B, n] for the policy's samples ``u`` [B, n] of a Box (``env.action_map``).
        On the dimensions with finite bounds: ``affine``, u clipped to [-1, 1] and mapped
        linearly onto [low, high] (RLlib's normalize_actions); ``tanh``, low + (tanh(u) + 1)
        (high - low) / 2 (SAC's squashing, Haarnoja et al. 2018, appendix C); ``clip``, u
        clipped to [low, high]. Unbounded dimensions take u as it is (clipped to a half-bound).
        The learner keeps u, whose log-probability is the policy's."""
        if self.multi:  # [B, n] indices, each sub-action's from its start, in the env's dtype
            moved = np.asarray(u, np.int64) + np.asarray(self.starts or 0, np.int64)
            return moved.astype(self.dtype)  # (int32's contains() refused int64 actions)
        if not self.continuous:
            return np.asarray(u, np.int64) + self.start
        # in float64, the bounds as the env has them: in float32 the width of bounds near
        # float32's limits overflowed (NaN and pinned actions), and float64 bounds rounded
        u = np.asarray(u, np.float64)
        low, high = np.asarray(self.low, np.float64), np.asarray(self.high, np.float64)
        if self.mapping != "clip":
            bounded = self.bounded()
            lo = np.where(bounded, low, 0.0)
            half = np.where(bounded, 0.5 * high - 0.5 * low, 0.0)  # (no overflow at 1e308)
            unit = np.clip(u, -1.0, 1.0) if self.mapping == "affine" else np.tanh(u)
            u = np.where(bounded, lo + (unit + 1.0) * half, u)
        return np.clip(u, low, high).astype(self.dtype)

    def from_env(self, a: np.ndarray) -> np.ndarray:
        """The policy's actions whose :meth:`to_env` is the env's actions ``a``: indices
        int64 [B], or samples u [B, n] (``a`` clipped to the Box): a loop that acts in the
        env's units (``rltrain.make_env``'s, with ``rltrain.load_policy``'s actions) steps the
        vector, which maps them, with them."""
        if self.multi:
            return np.asarray(a, np.int64) - np.asarray(self.starts or 0, np.int64)
        if not self.continuous:
            return np.asarray(a, np.int64) - self.start
        low, high = np.asarray(self.low, np.float64), np.asarray(self.high, np.float64)
        a = np.clip(np.asarray(a, np.float64), low, high)
        if self.mapping == "clip":  # (float64: the env's own units, which to_env clips)
            return a
        mapped = self.bounded() & (high > low)
        lo, half = np.where(mapped, low, 0.0), np.where(mapped, 0.5 * high - 0.5 * low, 1.0)
        unit = np.clip((0.5 * a - 0.5 * lo) / half * 2.0 - 1.0, -1.0, 1.0)  # (no overflow at 1e308)
        if self.mapping == "tanh":  # (float64: atanh of 1 - 1e-12 is 14, whose tanh is 1.0)
            unit = np.arctanh(np.clip(unit, -1.0 + 1e-12, 1.0 - 1e-12))
        return np.where(mapped, unit, a)  # float64: an unbounded dimension as the env has it


class VectorEnv(abc.ABC):
    """What actors use: a batch of envs with SAME-STEP auto-reset semantics."""

    num_envs: int
    """B: environments stepped together."""
    obs_shape: tuple[int, ...]
    """Shape of one observation (uint8 [stack, size, size] for Atari)."""
    obs_dtype: np.dtype
    """uint8 for Atari frames, float32 for vector observations."""
    num_actions: int
    """Discrete actions: how many; continuous (Box) actions: their dimension."""
    action_space: ActionSpace
    """The action space (other spaces than Discrete and 1-D Box are rejected at make time)."""
    protocol: dict[str, object]
    """The protocol actually used (id, backend, frame skip, stack, sticky actions, clipping...),
    plain values, for stamping into the run's records."""
    flattened_from: Any = None
    """The env's own observation space (a gymnasium Space) when observations are flattened
    into one float vector (rltrain.envs.adapt.FlatObservation); None when used as they are."""
    transposed: bool = False
    """Whether the env's [H, W, C] images are moved to [C, H, W]
    (rltrain.envs.adapt.ChannelsFirst)."""
    obs_space: Any = None
    """A Gymnasium env's own observation space (its Box's bounds; rltrain.make_env's), None
    where the observations are rltrain's (Atari's uint8 stacks)."""
    stacked: int = 1
    """Images stacked into each observation of a Gymnasium image env
    (rltrain.envs.adapt.stack_frames; Atari's stack is its protocol's frame_stack)."""

    @abc.abstractmethod
    def reset(self, seed: int | None = None) -> np.ndarray:
        """Reset every env; env i is seeded ``seed + i`` (None: the seed given to make_env).

        Returns the first observations, [B, *obs_shape].
        """

    @abc.abstractmethod
    def step(self, actions: np.ndarray) -> StepBatch:
        """Apply one action per env (int64 [B], or float32 [B, n] for a Box, clipped to its
        bounds here) and return the batch, auto-resetting ended envs."""

    def send(self, actions: np.ndarray) -> None:
        """Start a step with ``actions`` and return at once where the backend steps in its own
        threads (ale-py); :meth:`recv` then waits for it. Here: kept for :meth:`recv`."""
        self._sent = actions

    def recv(self) -> StepBatch:
        """The step started by :meth:`send` (a backend without threads steps now)."""
        return self.step(self._sent)

    @abc.abstractmethod
    def ended_obs(self, ended: np.ndarray) -> np.ndarray:
        """[K, *obs_shape]: the last observations of the episodes that ended at the last step,
        for the K envs in ``np.flatnonzero(ended)`` (a [B] mask of envs whose ``terminated``
        or ``truncated`` it said), before their auto-reset: what one Gymnasium env's
        ``step`` returns at an episode's end (:class:`rltrain.envs.single.SingleEnv`)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the environments (threads, emulators); the object is unusable afterwards."""

    def __enter__(self) -> VectorEnv:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class EpisodeTracker:
    """Running raw return and length of each env's current (real) episode.

    Backends feed it the unclipped reward of every step and a mask of the envs whose real
    episode ended (game over or time limit, never a mere lost life); it hands back the finished
    episodes' score and length once, then starts counting the next episode from zero.
    """

    def __init__(self, num_envs: int) -> None:
        self._returns = np.zeros(num_envs, dtype=np.float64)
        self._lengths = np.zeros(num_envs, dtype=np.int64)

    def reset(self) -> None:
        """Forget all running episodes (after a full reset of the vector)."""
        self._returns[:] = 0.0
        self._lengths[:] = 0

    def update(
        self, raw_reward: np.ndarray, ended: np.ndarray
    ) -> tuple[list[float], list[int], list[int]]:
        """Add one step; return (returns, lengths, env indices) of the episodes that ``ended``
        at it."""
        self._returns += raw_reward
        self._lengths += 1
        if not ended.any():
            return [], [], []
        idx = np.flatnonzero(ended)
        returns = self._returns[idx].tolist()
        lengths = self._lengths[idx].tolist()
        self._returns[idx] = 0.0
        self._lengths[idx] = 0
        return returns, lengths, idx.tolist()
