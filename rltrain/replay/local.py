"""Replay shards as objects of this process: the in-process twin of the Ray replay (the thread
and process runtimes' replay, and the tests')."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from rltrain.replay.block import SampledBatch, TransitionBlock
from rltrain.replay.memory import ReplayMemory


class LocalReplay:
    """Replay shards in this process. ReplayMemory locks its own state, so actors (threads, or
    the threads that serve actor processes) and learner threads may add and sample at once,
    as in a threaded Ray replay process."""

    handles: tuple[()] = ()  # no processes to stop at the end

    def __init__(self, memories: Sequence[ReplayMemory]) -> None:
        self.memories = list(memories)

    def add(self, shard: int, block: TransitionBlock) -> None:
        self.memories[shard].add(block)

    def sample(self, shard: int, batch_size: int, batches: int = 1) -> SampledBatch:
        return self.memories[shard].sample(batch_size, batches)

    def update_priorities(self, shard: int, indices: np.ndarray, priorities: np.ndarray) -> None:
        self.memories[shard].update_priorities(indices, priorities)

    def sizes(self) -> list[int]:
        return [len(m) for m in self.memories]

    def actor_ids(self) -> list[str]:
        return []  # no process to lose

    def nbytes(self) -> int:
        return sum(m.nbytes for m in self.memories)
