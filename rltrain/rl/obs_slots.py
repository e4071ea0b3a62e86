"""The run's shared observation buffers: rollouts built where the frames already are (issue 36).

Where the learner is a process beside the actors (the process runtime), each rollout in
flight has a slot of shared memory, allocated once. The actor lent a slot writes each
observation into it as its envs return it; a policy worker (``runtime.inference: server``)
reads each step's there to act on it, and the learner reads the rollout there: a frame is
copied once, from the emulator into shared memory. Atari's stacks are written as their
newest frame only (:mod:`rltrain.rl.frames`): a Pong rollout's slot holds 7.7 MB of frames
instead of 29.4 MB of stacks, and a GPU learner copies a quarter of the bytes to its device.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch

from rltrain.rl.frames import blank_older, restack
from rltrain.rl.rollout import Rollout


class ObsSlots:
    """Shared buffers for the observations of the rollouts in flight, allocated once.

    Without slots a Pong rollout's 29 MB of frames were stacked by the actor, copied into a
    message's shared memory, copied out by the trainer, and (the learner a process of its
    own) copied in and out again. The trainer lends each slot to one actor's collect call,
    then to the learn call of its rollout, and takes it back once the learner is done
    (:class:`rltrain.rl.run.plans.ActorLearnerPlan`). The buffers cross to the processes as
    their constructors' arguments (torch's shared memory), as :class:`rltrain.rl.inference.
    ActSlots` do; Ray's actors and learners keep their rollouts whole.

    With ``frame_stack`` k > 1 (Atari's stacks, ``obs_shape`` [k, *frame]) a slot holds
    frames [T+k, B, *frame] and ``blank`` [T+1, B], the blank older frames of each stack
    (:func:`rltrain.rl.frames.blank_older`); else the observations whole, [T+1, B, *obs].
    """

    def __init__(
        self,
        slots: int,
        steps: int,
        envs: int,
        obs_shape: tuple[int, ...],
        dtype: torch.dtype,
        frame_stack: int = 1,
    ) -> None:
        """``slots`` rollouts of ``steps`` acting steps (T) of ``envs`` envs."""
        k = frame_stack
        if k > 1 and (len(obs_shape) < 2 or obs_shape[0] != k):
            raise ValueError(f"obs_shape={obs_shape} is no stack of frame_stack={k} frames")
        self.frame_stack, self.obs_shape, self.envs = k, tuple(obs_shape), envs
        self.frame_shape = self.obs_shape[1:] if k > 1 else self.obs_shape
        self.length = steps + k  # frames (or observations: k = 1) a slot holds per env
        self.obs = torch.empty(slots, self.length, envs, *self.frame_shape, dtype=dtype)
        self.obs.share_memory_()
        # [slots, T+1, B] uint8: the blank older frames of each stack (none: k = 1)
        self.blank = torch.zeros(slots, steps + 1, envs if k > 1 else 0, dtype=torch.uint8)
        self.blank.share_memory_()
        self.frame_size = math.prod(self.frame_shape)  # elements of one frame
        # a step's stacked rows in the flat buffer (rows): the next env's frame, the next
        # step's frame of the same env, then a frame's own elements
        self._stack_strides = (self.frame_size, envs * self.frame_size, *self.obs.stride()[3:])

    def __len__(self) -> int:
        return len(self.obs)

    @property
    def nbytes(self) -> int:
        return self.obs.numel() * self.obs.element_size() + self.blank.numel()

    def columns(self, slot: int, lo: int, hi: int) -> Columns:
        """Envs ``lo`` to ``hi`` of slot ``slot``: where one env group writes its frames."""
        blank = self.blank[slot, :, lo:hi] if self.frame_stack > 1 else None
        return Columns(self.obs[slot, :, lo:hi], blank, self.frame_stack)

    def attach(self, r: Rollout) -> Rollout:
        """``r`` with its observations, a view of its slot (no copy); itself when whole."""
        if r.obs_slot is None:
            return r
        frames = self.obs[r.obs_slot]
        if self.frame_stack == 1:
            return dataclasses.replace(r, obs=frames)
        blank = self.blank[r.obs_slot]
        young = bool(blank.numpy().any())  # (read here, on the host: no device sync later)
        return dataclasses.replace(
            r, obs=frames, frame_stack=self.frame_stack, blank=blank if young else None
        )

    def rows(self, at: int, n: int) -> torch.Tensor:  # [n, *obs]
        """The ``n`` observations of one env group's step that start at element ``at`` of the
        buffer (:meth:`Columns.at`), read where the actor wrote them: a view, or a copy with
        a new game's blank frames zeroed."""
        flat = self.obs.view(-1)
        if self.frame_stack == 1:
            return flat[at : at + n * self.frame_size].view(n, *self.obs_shape)
        shape = (n, self.frame_stack, *self.frame_shape)
        stacks = flat.as_strided(shape, self._stack_strides, at)
        row, b = divmod(at // self.frame_size, self.envs)
        slot, t = divmod(row, self.length)
        blank = self.blank[slot, t, b : b + n]
        return blank_older(stacks, blank) if blank.numpy().any() else stacks


class Columns:
    """One env group's columns of an observation slot, which its actor fills step by step:
    the rollout's first observations whole, then each step's (its newest frame alone when
    they are stacks), and each stack's blank older frames."""

    def __init__(self, obs: torch.Tensor, blank: torch.Tensor | None, frame_stack: int) -> None:
        """``obs`` [T+k, B_g, *frame] (or [T+1, B_g, *obs]), ``blank`` [T+1, B_g] uint8."""
        self.obs, self.blank, self.k = obs, blank, frame_stack
        # blank older frames of each env's newest stack, past the rollout's first (written
        # whole, blanks and all)
        self._blank = np.zeros(obs.shape[1], dtype=np.uint8)

    def first(self, obs: torch.Tensor) -> None:
        """The rollout's first observations [B_g, *obs], whole."""
        if self.k == 1:
            self.obs[0].copy_(obs)
            return
        self.obs[: self.k].copy_(obs.transpose(0, 1))  # [k, B_g, *frame], oldest first
        self._blank[:] = 0
        assert self.blank is not None
        self.blank[0] = 0

    def write(self, t: int, obs: torch.Tensor, restarted: list[int]) -> None:
        """Step ``t``'s observations [B_g, *obs] (t >= 1); ``restarted``: the envs whose game
        ended at this step, whose stack begins again with k-1 blank frames."""
        if self.k == 1:
            self.obs[t].copy_(obs)
            return
        self.obs[t + self.k - 1].copy_(obs[:, -1])  # the frame's one copy: into shared memory
        np.subtract(self._blank, 1, out=self._blank, where=self._blank > 0)
        self._blank[restarted] = self.k - 1
        assert self.blank is not None
        self.blank[t] = torch.from_numpy(self._blank)

    def at(self, t: int) -> int:
        """Where step ``t``'s rows start in the slots' buffer (:meth:`ObsSlots.rows`)."""
        return int(self.obs[t].storage_offset())

    def observations(self) -> torch.Tensor:  # [T+1, B_g, *obs]
        """Every step's observations, restacked (a view unless a stack has blank frames)."""
        if self.k == 1:
            return self.obs
        assert self.blank is not None
        stacks = restack(self.obs, self.k)
        return blank_older(stacks, self.blank) if bool(self.blank.any()) else stacks
