"""What travels to and from a replay shard: :class:`TransitionBlock` in, :class:`SampledBatch` out.

A block is T consecutive steps of the B environments of one actor. On the wire only the newest
frame of each new observation travels (Atari stacks of Mnih et al. 2015 share 3 of their 4
frames with the previous step), plus the block's first full observation once, so a shard can
rebuild every stack and check that the block continues the stream it already holds.

Truncation is not termination (Pardo et al. 2018): a step cut by the time limit is a real
transition whose s_{t+1} is the episode's final observation, which SAME-STEP autoreset has
already replaced by the next episode's first one. Those final observations travel as
``final_frames``: again only their newest frame, since a final stack continues s_t's.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from rltrain.errors import RLTrainError


class ReplayError(RLTrainError, ValueError):
    """A bad argument to the replay memory or its records; one-line message."""


def _check_steps(name: str, array: np.ndarray, shape: tuple[int, ...], kind: str) -> None:
    """One-line error unless ``array`` is [T, B] of dtype kind ``kind`` ('b', 'i' or 'f')."""
    if array.shape != shape:
        raise ReplayError(f"{name} has shape {array.shape}, expected {shape} ([T, B])")
    if array.dtype.kind not in kind:
        raise ReplayError(f"{name} has dtype {array.dtype}, expected kind {kind!r}")


@dataclass(frozen=True)
class TransitionBlock:
    """T consecutive steps of B environments of one actor, sent in one message.

    Memory-efficient on the wire: only the newest frame of each new observation travels;
    the full stack travels once per block for the block's first observation.
    """

    stream: int
    """Actor id; (stream, env index b) identifies a continuous env stream."""
    obs0: np.ndarray
    """[B, *obs_shape] full first observation of the block (the state before step 0)."""
    frames: np.ndarray
    """[T, B, *frame_shape] newest frame of obs[1..T] (frame_shape = obs_shape[1:] when
    frame_stack > 1, else obs_shape)."""
    first: np.ndarray
    """[T, B] bool: obs[t+1] starts a new episode (its stack begins with blank frames)."""
    actions: np.ndarray
    """[T, B] int64."""
    rewards: np.ndarray
    """[T, B] float32 training reward."""
    terminated: np.ndarray
    """[T, B] bool: step t reached a terminal state (no bootstrap)."""
    truncated: np.ndarray
    """[T, B] bool: step t hit the time limit; with SAME-STEP autoreset obs[t+1] is already the
    next episode's, so a truncated, non-terminated step (a cut) bootstraps from its final
    observation instead (``final_frames``)."""
    final_frames: np.ndarray
    """[K, *frame_shape] newest frame of the final observation of each cut step, in the order
    of ``np.argwhere(cut)`` ((t, b) row-major; K = cut.sum()); its older frames are those of
    obs[t] shifted by one, exactly as for any other next stack."""

    def __post_init__(self) -> None:
        if self.frames.ndim < 2 or self.obs0.ndim < 1:
            raise ReplayError("frames must be [T, B, *frame_shape] and obs0 [B, *obs_shape]")
        steps = self.frames.shape[:2]
        if steps[0] < 1 or self.obs0.shape[0] != steps[1]:
            raise ReplayError(
                f"frames {self.frames.shape} and obs0 {self.obs0.shape} disagree on B or T < 1"
            )
        if self.frames.shape[2:] not in (self.obs0.shape[1:], self.obs0.shape[2:]):
            raise ReplayError(
                f"frames {self.frames.shape} are neither whole observations nor the newest "
                f"frames of obs0 {self.obs0.shape}"
            )
        _check_steps("first", self.first, steps, "b")
        _check_steps("actions", self.actions, steps, "iu")
        _check_steps("rewards", self.rewards, steps, "f")
        _check_steps("terminated", self.terminated, steps, "b")
        _check_steps("truncated", self.truncated, steps, "b")
        cuts = int(self.cut.sum())
        if self.final_frames.shape != (cuts, *self.frames.shape[2:]):
            raise ReplayError(
                f"final_frames has shape {self.final_frames.shape}, expected "
                f"{(cuts, *self.frames.shape[2:])} (one frame per truncated, non-terminated step)"
            )
        if self.final_frames.dtype != self.frames.dtype:
            raise ReplayError(
                f"final_frames dtype {self.final_frames.dtype} differs from frames' "
                f"{self.frames.dtype}"
            )

    @property
    def cut(self) -> np.ndarray:
        """[T, B] bool: truncated and not terminated (bootstrap from the final observation)."""
        return self.truncated & ~self.terminated

    @property
    def num_steps(self) -> int:
        """T: consecutive steps of each environment."""
        return int(self.frames.shape[0])

    @property
    def num_envs(self) -> int:
        """B: environments of the actor."""
        return int(self.frames.shape[1])

    @property
    def nbytes(self) -> int:
        """Bytes of the block's arrays (what a message carries, less the envelope)."""
        arrays = (self.obs0, self.frames, self.first, self.actions, self.rewards)
        ends = (self.terminated, self.truncated, self.final_frames)
        return sum(a.nbytes for a in arrays) + sum(a.nbytes for a in ends)

    @staticmethod
    def from_steps(
        stream: int,
        obs: np.ndarray,
        actions: np.ndarray,
        rewards: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        frame_stack: int,
        final_obs: np.ndarray | None = None,
    ) -> TransitionBlock:
        """Build a block from what an actor holds: obs [T+1, B, *obs_shape] (obs[t+1] is the
        observation after step t, SAME-STEP autoreset), the [T, B] step arrays and
        ``final_obs`` [K, *obs_shape], the final observation of every truncated step in the
        order of ``np.argwhere(truncated)`` (the steps' ``StepBatch.final_obs`` concatenated;
        None: no step is truncated). Only the cut ones (not also terminated) are kept.

        ``first`` is ``terminated | truncated``, except that with frame stacks an ended step
        whose next stack simply continues the old one (a lost life with episodic_life: the game
        goes on) keeps its frames linked, so rebuilt stacks stay byte-identical. Stacks must
        either continue the previous one or start with blank (all-zero) frames; a final stack
        must continue the previous one.
        """
        obs = np.asarray(obs)
        if obs.ndim < 3 or obs.shape[0] < 2:
            raise ReplayError(f"obs must be [T+1, B, *obs_shape] with T >= 1, got {obs.shape}")
        if frame_stack < 1 or (frame_stack > 1 and (obs.ndim < 4 or obs.shape[2] != frame_stack)):
            raise ReplayError(f"obs {obs.shape} is no stack of frame_stack={frame_stack} frames")
        terminated = np.asarray(terminated, dtype=bool)
        truncated = np.asarray(truncated, dtype=bool)
        final = _final_frames(obs, terminated, truncated, final_obs, frame_stack)
        ended = terminated | truncated
        first = ended if frame_stack == 1 else _stack_starts(obs, ended)
        return TransitionBlock(
            stream=int(stream),
            obs0=np.array(obs[0]),
            frames=np.ascontiguousarray(obs[1:] if frame_stack == 1 else obs[1:, :, -1]),
            first=first,
            actions=np.asarray(actions, dtype=np.int64).copy(),
            rewards=np.asarray(rewards, dtype=np.float32).copy(),
            terminated=terminated.copy(),
            truncated=truncated.copy(),
            final_frames=final,
        )


def _final_frames(
    obs: np.ndarray,
    terminated: np.ndarray,
    truncated: np.ndarray,
    final_obs: np.ndarray | None,
    frame_stack: int,
) -> np.ndarray:
    """[K, *frame_shape] newest frames of the final observations of the cut steps."""
    steps = obs.shape[0] - 1, obs.shape[1]
    if terminated.shape != steps or truncated.shape != steps:
        raise ReplayError(
            f"terminated {terminated.shape} / truncated {truncated.shape}: "
            f"expected {steps} ([T, B])"
        )
    count = int(truncated.sum())
    if final_obs is None:
        final_obs = np.empty((0, *obs.shape[2:]), dtype=obs.dtype)
    final_obs = np.asarray(final_obs)
    if final_obs.shape != (count, *obs.shape[2:]):
        raise ReplayError(
            f"final_obs has shape {final_obs.shape}, expected {(count, *obs.shape[2:])} "
            "(the final observation of each truncated step)"
        )
    if final_obs.dtype != obs.dtype:
        raise ReplayError(f"final_obs dtype {final_obs.dtype} differs from obs' {obs.dtype}")
    keep = ~terminated[truncated]  # [count]: cuts, in argwhere(truncated) order
    final_obs = final_obs[keep]
    if frame_stack == 1:
        return np.ascontiguousarray(final_obs)
    cuts = np.argwhere(truncated)[keep]  # [K, 2] (t, b)
    before = obs[cuts[:, 0], cuts[:, 1]]  # [K, stack, ...]: s_t of each cut
    same = final_obs[:, :-1] == before[:, 1:]
    shifted = np.all(same, axis=tuple(range(1, same.ndim)))
    if not shifted.all():
        t, b = cuts[np.argmin(shifted)]
        raise ReplayError(f"final_obs of step ({t}, {b}) does not continue the stack of obs[{t}]")
    return np.ascontiguousarray(final_obs[:, -1])


def _stack_starts(obs: np.ndarray, ended: np.ndarray) -> np.ndarray:
    """[T, B] True where obs[t+1] is a fresh stack (blank older frames), not obs[t] shifted."""
    steps = obs.shape[0] - 1, obs.shape[1]
    if ended.shape != steps:
        raise ReplayError(f"terminated/truncated have shape {ended.shape}, expected {steps}")
    older = obs[1:, :, :-1].reshape(*steps, -1)
    shifted = np.all(older == obs[:-1, :, 1:].reshape(*steps, -1), axis=2)
    blank = ~np.any(older, axis=2)
    first = ended & ~shifted
    bad = (~ended & ~shifted) | (first & ~blank)
    if bad.any():
        t, b = np.argwhere(bad)[0]
        raise ReplayError(
            f"obs[{t + 1}, {b}] neither continues the stack of obs[{t}, {b}] nor starts a new "
            "one with blank (zero) frames"
        )
    return first


@dataclass(frozen=True)
class SampledBatch:
    """N transitions drawn from a replay memory, ready for a DQN loss."""

    obs: np.ndarray
    """[N, *obs_shape] rebuilt stacks (blank = zeros before an episode's first frame)."""
    actions: np.ndarray
    """[N] int64."""
    rewards: np.ndarray
    """[N] float32: r_t (sum_{i<k} gamma^i r_{t+i} with n-step returns)."""
    next_obs: np.ndarray
    """[N, *obs_shape]: s_{t+1} (s_{t+k} with n-step returns, ``steps``). For a time-limit cut
    it is the episode's final observation (bootstrap from it); for done transitions it is the
    observation the env returned after the step (with SAME-STEP autoreset: the next episode's
    first one): mask it by done."""
    done: np.ndarray
    """[N] bool: terminated (no bootstrap); never set by a time-limit truncation alone."""
    steps: np.ndarray
    """[N] int64 k: rewards is the discounted sum of k rewards and next_obs is s_{t+k}, so the
    bootstrap is discounted by gamma^k (1 unless the memory's n_step > 1)."""
    weights: np.ndarray
    """[N] float32 importance-sampling weights: 1 for uniform replay; (N P(i))^-beta / max_j w_j
    for prioritized replay (Schaul et al. 2016)."""
    indices: np.ndarray
    """[N] int64 handles for ``update_priorities``."""

    def __len__(self) -> int:
        return int(self.actions.shape[0])

    def slice(self, lo: int, hi: int) -> SampledBatch:
        """Rows lo..hi: a learner draws several batches in one call and uses them in turn."""
        return SampledBatch(*(getattr(self, f.name)[lo:hi] for f in dataclasses.fields(self)))
