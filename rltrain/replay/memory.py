"""One replay-memory shard of Gorila DQN (Nair et al. 2015): FIFO storage, uniform or
prioritized sampling (Schaul et al. 2016), Atari stacks rebuilt from single frames.

Layout: a :class:`~rltrain.replay.frames.FrameStore` holds every observation frame once (one
newest frame per env step, Mnih et al. 2015 stacks rebuilt on sampling), and a transition ring
of ``capacity`` slots holds (gid of s_t's newest frame, gid of s_{t+k}'s, action, reward,
done, k: 1, or up to ``n_step``, :mod:`~rltrain.replay.nstep`). Every step is a transition:
done is ``terminated`` only, and a step cut by the time limit (truncated, not terminated) has
s_{t+1} = the episode's final observation, stored as one extra frame branching off s_t's
chain (see :mod:`~rltrain.replay.frames`), so double-DQN bootstraps from it. The frame ring
is a little larger than ``capacity`` because some frames are no transition's s_t (the latest
frame of each stream, those final frames, a stream's first stack) and a stack reaches a few
steps back. Should a frame be overwritten anyway (a
stream that paused for long, episodes much shorter than 32 steps that all hit their time
limit), the transitions using it are dropped before it is, so sampling only ever returns
stacks that can be rebuilt exactly.

A plain, thread-safe class: a Ray process wraps it; tests drive it in one process.
"""

from __future__ import annotations

import threading

import numpy as np

from rltrain.replay.block import ReplayError, SampledBatch, TransitionBlock
from rltrain.replay.checks import check_block, check_config
from rltrain.replay.frames import BLANK, FrameStore, new_chains
from rltrain.replay.nstep import n_step_windows
from rltrain.replay.sumtree import SumTree


def frame_capacity(capacity: int, frame_stack: int) -> int:
    """Frames stored for ``capacity`` transitions: ~3% more, plus room for a few stacks."""
    return capacity + capacity // 32 + 16 * frame_stack


class ReplayMemory:
    """A fixed-capacity FIFO replay memory over many actor streams (Gorila DQN shard).

    ``add`` stores a :class:`TransitionBlock` (evicting the oldest transitions), ``sample``
    draws a :class:`SampledBatch` uniformly or, with ``prioritized``, proportionally to
    p_i^alpha (Schaul et al. 2016) with importance weights of exponent ``beta`` (a public
    attribute: a learner may anneal it towards 1). ``update_priorities`` takes |TD errors|.
    All storage is allocated at construction.
    """

    def __init__(
        self,
        capacity: int,
        obs_shape: tuple[int, ...],
        obs_dtype: np.dtype | str,
        frame_stack: int = 1,
        prioritized: bool = False,
        alpha: float = 0.6,
        beta: float = 0.4,
        priority_eps: float = 1e-6,
        seed: int = 0,
        n_step: int = 1,
        gamma: float = 0.99,
    ) -> None:
        obs_shape = tuple(int(d) for d in obs_shape)
        check_config(capacity, obs_shape, frame_stack, alpha, beta, priority_eps)
        if n_step < 1 or not 0 <= gamma <= 1:
            raise ReplayError(f"n_step={n_step}, gamma={gamma}: need n_step >= 1, 0 <= gamma <= 1")
        self.n_step, self.gamma = int(n_step), float(gamma)
        self.capacity = int(capacity)
        self.obs_shape = obs_shape
        self.obs_dtype = np.dtype(obs_dtype)
        self.frame_stack = int(frame_stack)
        self.frame_shape = obs_shape[1:] if frame_stack > 1 else obs_shape
        self.prioritized = bool(prioritized)
        self.alpha, self.beta, self.priority_eps = float(alpha), float(beta), float(priority_eps)
        self.frame_capacity = frame_capacity(self.capacity, self.frame_stack)
        self._frames = FrameStore(
            self.frame_capacity, self.frame_shape, self.obs_dtype, self.frame_stack
        )
        self._obs = np.full(self.capacity, BLANK, dtype=np.int64)  # gid of s_t's newest frame
        self._next = np.full(self.capacity, BLANK, dtype=np.int64)  # gid of s_{t+k}'s
        self._actions = np.zeros(self.capacity, dtype=np.int64)
        self._rewards = np.zeros(self.capacity, dtype=np.float32)
        self._done = np.zeros(self.capacity, dtype=bool)
        self._steps = np.ones(self.capacity, dtype=np.int16)  # k of each n-step window
        self._valid = np.zeros(self.capacity, dtype=bool)
        self._tree = SumTree(self.capacity) if self.prioritized else None
        self._max_priority = 1.0
        self._streams: dict[int, np.ndarray] = {}  # stream -> [B] gid of its latest frame
        self._rng = np.random.default_rng(seed)
        self._size = self._added = self._sampled = self._restarts = self._cuts = 0
        self._lock = threading.Lock()

    # ------------------------------------------------------------------------------ adding

    def add(self, block: TransitionBlock) -> int:
        """Store a block; returns the transitions stored (one per step and env).

        Frames are written in this order: ``obs0``'s where the stream's stored frames do not
        rebuild it (first block, a gap, overwritten frames), the newest frame of obs[1..T],
        then the final frames of the cut steps, each linked to its s_t's newest frame.
        """
        check_block(block, self.obs_shape, self.frame_shape, self.obs_dtype, self.capacity)
        most = self._most_frames(block)
        if most > self.frame_capacity:
            raise ReplayError(
                f"a block of {block.num_envs} envs x {block.num_steps} steps "
                f"writes up to {most} frames, more than the {self.frame_capacity} stored"
            )
        with self._lock:
            steps, envs = block.num_steps, block.num_envs
            start = self._continued(block)
            self._restarts += int(np.sum(start < 0))
            restart, restart_prev, newest = new_chains(block.obs0, start < 0, self.frame_stack)
            finals = len(block.final_frames)
            self._drop(self._frames.dependents(len(restart) + steps * envs + finals))
            base = self._frames.written
            if len(restart):
                self._frames.write(restart, np.where(restart_prev >= 0, restart_prev + base, -1))
            gids = np.empty((steps + 1, envs), dtype=np.int64)
            gids[0] = np.where(start >= 0, start, newest + base)
            gids[1:] = (self._frames.written + np.arange(steps * envs)).reshape(steps, envs)
            prev = np.where(block.first, BLANK, gids[:-1])
            flat = block.frames.reshape(steps * envs, *self.frame_shape)
            self._frames.write(flat, prev.reshape(-1))
            cut = block.cut
            nexts = gids[1:].copy()  # [T, B] gid of s_{t+1}'s newest frame
            nexts[cut] = self._frames.write(block.final_frames, gids[:-1][cut], branch=True)
            self._streams[block.stream] = gids[-1].copy()
            self._cuts += len(block.final_frames)
            return self._store_transitions(block, gids[:-1], nexts)

    def _most_frames(self, block: TransitionBlock) -> int:
        """Frames an add of ``block`` may write: obs0's stacks, one per step, final frames."""
        return block.num_envs * (block.num_steps + self.frame_stack) + len(block.final_frames)

    def _continued(self, block: TransitionBlock) -> np.ndarray:
        """[B] gid of the stored frame that ends ``obs0``'s stack, or -1 where obs0 is new.

        A stream continues only where its latest stored stack survives this add (counting
        the most frames it can write) and equals ``obs0`` byte for byte.
        """
        envs = block.num_envs
        start = np.full(envs, -1, dtype=np.int64)
        latest = self._streams.get(block.stream)
        if latest is None or latest.shape != (envs,):
            return start
        chains = self._frames.chains(latest)
        ok = self._frames.complete(chains, self._most_frames(block))
        size = int(np.prod(self.obs_shape))
        stacks = self._frames.gather(chains[ok]).reshape(-1, size)
        ok[ok] = np.all(stacks == block.obs0[ok].reshape(-1, size), axis=1)
        start[ok] = latest[ok]
        return start

    def _store_transitions(
        self, block: TransitionBlock, state: np.ndarray, nexts: np.ndarray
    ) -> int:
        """Write the block's transitions ([T, B] gids of s_t and of s_{t+1}, each step's next
        state or its cut's final observation) into the ring at max
        priority, (t, b) row-major, each over its n-step window (:mod:`~rltrain.replay.nstep`:
        its reward sum, its last step's next state and end); returns their count. done =
        terminated: a time-limit cut bootstraps (Pardo et al. 2018)."""
        count = block.num_steps * block.num_envs
        ended = block.terminated | block.truncated
        rewards, last = n_step_windows(block.rewards, ended, self.n_step, self.gamma)
        envs = np.arange(block.num_envs)
        steps = last - np.arange(block.num_steps)[:, None] + 1  # [T, B] k
        handles = self._added + np.arange(count, dtype=np.int64)
        slots = handles % self.capacity
        self._size -= int(self._valid[slots].sum())  # evicted, oldest first (FIFO)
        state = state.reshape(-1)
        self._obs[slots] = state
        self._next[slots] = nexts[last, envs].reshape(-1)
        self._actions[slots] = block.actions.reshape(-1)
        self._rewards[slots] = rewards.reshape(-1)
        self._done[slots] = block.terminated[last, envs].reshape(-1)
        self._steps[slots] = steps.reshape(-1)
        self._valid[slots] = True
        self._frames.owner[state % self.frame_capacity] = handles
        if self._tree is not None:
            self._tree.set(slots, self._max_priority**self.alpha)
        self._size += count
        self._added += count
        return count

    def _drop(self, handles: np.ndarray) -> None:
        """Invalidate the (still stored) transitions ``handles``: their frames are going."""
        slots = np.unique(handles[self._live(handles)] % self.capacity)
        slots = slots[self._valid[slots]]
        self._valid[slots] = False
        self._size -= len(slots)
        if self._tree is not None:
            self._tree.set(slots, 0.0)

    def _live(self, handles: np.ndarray) -> np.ndarray:
        """Which handles still name their transition (not evicted since, not in the future)."""
        return (handles >= max(0, self._added - self.capacity)) & (handles < self._added)

    # ----------------------------------------------------------------------------- sampling

    def sample(self, batch_size: int, batches: int = 1) -> SampledBatch:
        """``batches`` minibatches of ``batch_size`` transitions each (with replacement),
        uniform or prioritised, one after the other (``SampledBatch.slice``).

        Each minibatch is drawn on its own, stratified over the whole memory, with importance
        weights normalised within it (as openai/baselines' PrioritizedReplayBuffer per call):
        one stratified draw cut into pieces would give each minibatch one contiguous
        1/batches of the priority mass.
        """
        if batch_size < 1 or batches < 1:
            raise ReplayError(f"batch_size={batch_size}, batches={batches}: need at least 1")
        with self._lock:
            if self._size == 0:
                raise ReplayError("cannot sample from an empty replay memory")
            draws = [self._draw(batch_size) for _ in range(batches)]
            slots = np.concatenate(draws)
            self._sampled += batch_size * batches
            return SampledBatch(
                obs=self._stacks(self._obs[slots]),
                actions=self._actions[slots],
                rewards=self._rewards[slots],
                next_obs=self._stacks(self._next[slots]),
                done=self._done[slots],
                steps=self._steps[slots].astype(np.int64),
                weights=np.concatenate([self._weights(d) for d in draws]),
                indices=self._handles(slots),
            )

    def _draw(self, n: int) -> np.ndarray:
        """Slots of valid transitions: from the sum-tree, or uniform (redrawing invalid ones)."""
        if self._tree is not None:
            return self._tree.sample(n, self._rng)
        filled = min(self._added, self.capacity)
        slots = self._rng.integers(0, filled, n)
        for _ in range(32):
            bad = ~self._valid[slots]
            if not bad.any():
                return slots
            slots[bad] = self._rng.integers(0, filled, int(bad.sum()))
        bad = ~self._valid[slots]
        slots[bad] = self._rng.choice(np.flatnonzero(self._valid), int(bad.sum()))
        return slots

    def _stacks(self, newest: np.ndarray) -> np.ndarray:
        """[N, *obs_shape] observations ending at the frames ``newest``."""
        stacks = self._frames.gather(self._frames.chains(newest))
        return stacks.reshape(len(newest), *self.obs_shape)

    def _weights(self, slots: np.ndarray) -> np.ndarray:
        """Importance weights (N P(i))^-beta / max_j w_j (Schaul et al. 2016, Sec. 3.4)."""
        if self._tree is None:
            return np.ones(len(slots), dtype=np.float32)
        weights = (self._size * self._tree.get(slots) / self._tree.total) ** -self.beta
        return (weights / weights.max()).astype(np.float32)

    def _handles(self, slots: np.ndarray) -> np.ndarray:
        """The handle (global add counter) of the transition each slot now holds."""
        last = self._added - 1
        return last - (last - slots) % self.capacity

    # --------------------------------------------------------------------------- priorities

    def update_priorities(self, indices: np.ndarray, priorities: np.ndarray) -> None:
        """Set p_i = |priority_i| + priority_eps (priority_i: the TD error of a sampled
        transition); handles of transitions evicted or dropped since are ignored. New
        transitions get the largest p seen so far. A no-op for uniform memories."""
        indices = np.asarray(indices, dtype=np.int64)
        priorities = np.asarray(priorities, dtype=np.float64)
        if indices.ndim != 1 or indices.shape != priorities.shape:
            raise ReplayError(
                f"indices {indices.shape} and priorities {priorities.shape} must be equal 1-D"
            )
        if not np.all(np.isfinite(priorities)):
            raise ReplayError("priorities must be finite (a NaN or inf TD error?)")
        if self._tree is None:
            return
        with self._lock:
            live = self._live(indices)
            slots = indices[live] % self.capacity
            keep = self._valid[slots]
            p = np.abs(priorities[live][keep]) + self.priority_eps
            if p.size:
                self._max_priority = max(self._max_priority, float(p.max()))
                self._tree.set(slots[keep], p**self.alpha)

    def probabilities(self, indices: np.ndarray) -> np.ndarray:
        """P(i) of drawing each handle in one draw (0 for stale handles); for tests, metrics."""
        indices = np.asarray(indices, dtype=np.int64)
        with self._lock:
            slots = indices % self.capacity
            ok = self._live(indices) & self._valid[slots]
            if self._tree is None:
                return np.where(ok, 1.0 / max(self._size, 1), 0.0)
            return np.where(ok, self._tree.get(slots) / max(self._tree.total, 1e-300), 0.0)

    # ------------------------------------------------------------------------------- sizes

    def __len__(self) -> int:
        """Transitions stored that can be sampled."""
        return self._size

    @property
    def nbytes(self) -> int:
        """Bytes of the storage arrays allocated at construction (constant)."""
        ring = (self._obs, self._next, self._actions, self._rewards, self._done, self._steps)
        tree = self._tree.nbytes if self._tree is not None else 0
        return self._frames.nbytes + sum(a.nbytes for a in ring) + self._valid.nbytes + tree

    def stats(self) -> dict[str, int]:
        """size, capacity, added (transitions ever stored), sampled (ever drawn), nbytes,
        restarts (env streams whose obs0 had to be stored: new streams or gaps), frames (ever
        written) and cuts (steps ever stored that a time-limit cut ended: their transitions
        bootstrap from its final observation, as do up to n - 1 before each with n-step)."""
        with self._lock:
            return {
                "size": self._size,
                "capacity": self.capacity,
                "added": self._added,
                "sampled": self._sampled,
                "nbytes": self.nbytes,
                "restarts": self._restarts,
                "frames": self._frames.written,
                "cuts": self._cuts,
            }
