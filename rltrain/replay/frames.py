"""A ring of single frames linked into per-episode chains, from which stacks are rebuilt.

An Atari observation is a stack of the last 4 frames (Mnih et al. 2015) and consecutive
observations share 3 of them, so storing each frame once takes a quarter of the memory of
storing stacks (an eighth of storing obs and next_obs). Every frame gets a global id (gid,
0, 1, 2, ... in write order) and lives at ring position gid % capacity until overwritten. Each
frame records the gid of the frame before it in its episode (``prev``, -1 when it is the
episode's first: the stack is padded with blank, all-zero frames before it) and of the frame
after it (``succ``), so a stack is rebuilt by following ``prev`` and the transitions that
depend on a frame about to be overwritten are found by following ``succ``.

The final observation of an episode cut by its time limit is s_t shifted by one frame, so it
is stored as one more frame whose ``prev`` is s_t's newest: a branch off the chain (the chain
itself goes on to the next episode's frames, or ends). No transition's s_t ends at a branch
frame, and the transitions whose s_{t+k} does (up to n with n-step returns) are dropped when
their s_t's frames go, which are older.

With a stack of 1 a "frame" is a whole observation (vector envs): still stored once per step.
"""

from __future__ import annotations

import numpy as np

BLANK = -1
"""Chain entry of a blank (all-zero) frame before an episode's first frame."""
LOST = -2
"""Chain entry of a frame that was overwritten: the stack cannot be rebuilt."""


class FrameStore:
    """``capacity`` frames of ``frame_shape`` and their episode links, preallocated."""

    def __init__(
        self, capacity: int, frame_shape: tuple[int, ...], dtype: np.dtype, stack: int
    ) -> None:
        self.capacity = capacity
        self.stack = stack
        self.frames = np.empty((capacity, *frame_shape), dtype=dtype)
        self.frames.fill(0)  # touch every page now: a shard too big fails at construction
        self.prev = np.full(capacity, BLANK, dtype=np.int64)
        self.succ = np.full(capacity, BLANK, dtype=np.int64)
        self.owner = np.full(capacity, -1, dtype=np.int64)
        """Handle of the stored transition whose state s_t has this frame as newest, or -1."""
        self.written = 0
        """Frames written so far: the next frame's gid."""

    @property
    def nbytes(self) -> int:
        """Bytes of the preallocated arrays."""
        return sum(a.nbytes for a in (self.frames, self.prev, self.succ, self.owner))

    def oldest(self, more: int = 0) -> int:
        """Gid of the oldest frame still stored after ``more`` further frames are written."""
        return max(0, self.written + more - self.capacity)

    def alive(self, gids: np.ndarray, more: int = 0) -> np.ndarray:
        """Which gids are stored (and will still be after ``more`` further frames)."""
        return (gids >= self.oldest(more)) & (gids < self.written)

    def chains(self, newest: np.ndarray) -> np.ndarray:
        """[N, stack] gids of the stacks ending at ``newest``, oldest first.

        BLANK where the stack is padded before an episode's first frame, LOST where a frame
        (or the link to it) was overwritten.
        """
        out = np.empty((newest.shape[0], self.stack), dtype=np.int64)
        gid = np.asarray(newest, dtype=np.int64).copy()
        for k in range(self.stack - 1, -1, -1):
            out[:, k] = gid
            if k == 0:
                break
            ok = self.alive(gid)
            older = np.where(gid == BLANK, BLANK, LOST)
            older[ok] = self.prev[gid[ok] % self.capacity]
            gid = older
        return out

    def complete(self, chains: np.ndarray, more: int = 0) -> np.ndarray:
        """[N] True where every frame of a chain is stored (and survives ``more`` writes)."""
        return np.all((chains == BLANK) | self.alive(chains, more), axis=1)

    def gather(self, chains: np.ndarray) -> np.ndarray:
        """[N, stack, *frame_shape] stacks of complete ``chains`` (zeros for BLANK)."""
        real = chains >= 0
        out = self.frames[np.where(real, chains, 0) % self.capacity]
        out[~real] = 0
        return out

    def dependents(self, more: int) -> np.ndarray:
        """Handles of transitions whose stacks use a frame that ``more`` writes will overwrite.

        A frame is in the stacks ending at it and at its next ``stack - 1`` successors; the
        transition whose s_t ends there is the frame's owner. (s_{t+k} of that transition,
        k >= 1 with n-step returns, ends k frames later: each of its frames is one of s_t's or
        newer, so it outlives s_t's.)
        """
        gid = np.arange(self.oldest(), self.oldest(more), dtype=np.int64)
        found = []
        for _ in range(self.stack):
            if gid.size == 0:
                break
            pos = gid % self.capacity
            found.append(self.owner[pos])
            gid = self.succ[pos]
            gid = gid[gid >= 0]
        handles = np.concatenate(found) if found else np.empty(0, dtype=np.int64)
        return handles[handles >= 0]

    def write(self, frames: np.ndarray, prev: np.ndarray, branch: bool = False) -> np.ndarray:
        """Append frames (at most ``capacity``) with their ``prev`` links; returns their gids.

        ``prev`` may name frames of the same call (written earlier in it) and must otherwise
        name stored frames; the caller has already dropped the transitions that depended on
        the frames being overwritten (:meth:`dependents`). With ``branch`` the frames are side
        branches that end a chain (the final frame of a time-limit cut): ``prev`` does not
        learn them as its successor, so the chain's own continuation stays its ``succ``.
        """
        n = frames.shape[0]
        gids = self.written + np.arange(n, dtype=np.int64)
        pos = gids % self.capacity
        self.frames[pos] = frames
        self.prev[pos] = prev
        self.succ[pos] = BLANK
        self.owner[pos] = -1
        self.written += n
        if branch:
            return gids
        linked = (prev >= 0) & self.alive(prev)
        self.succ[prev[linked] % self.capacity] = gids[linked]
        return gids


def new_chains(
    stacks: np.ndarray, rows: np.ndarray, stack: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The frames of the observations ``stacks[rows]`` (a mask), as fresh chains to write.

    Returns (frames [R, *frame_shape], prev [R] as offsets into them or -1, and per row of
    ``stacks`` the offset of its newest frame, -1 outside ``rows``). Leading all-zero frames
    of a stack are taken as blank padding (an episode's start) and not stored: the rebuilt
    stack is the same bytes either way.
    """
    frame_shape = stacks.shape[2:] if stack > 1 else stacks.shape[1:]
    frames: list[np.ndarray] = []
    prev: list[int] = []
    newest = np.full(stacks.shape[0], -1, dtype=np.int64)
    for b in np.flatnonzero(rows):
        obs = stacks[b].reshape(stack, *frame_shape)
        real = obs.reshape(stack, -1).any(axis=1)
        start = int(np.argmax(real)) if real.any() else stack - 1
        for k in range(start, stack):
            prev.append(len(frames) - 1 if k > start else BLANK)
            frames.append(obs[k])
        newest[b] = len(frames) - 1
    if not frames:
        return np.empty((0, *frame_shape), stacks.dtype), np.empty(0, np.int64), newest
    return np.stack(frames), np.array(prev, dtype=np.int64), newest
