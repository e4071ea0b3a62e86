"""A barrier rule's round on one shard: the updates of the current version, and whom it waits for.

Under a barrier rule (sync, soft_sync, average) a shard sums the updates of a version until
the rule's count is in (N, or K of N, of the workers still there), then steps once with their
mean. :class:`BarrierRound` keeps that sum and the membership behind the count: workers that
left (lost, or not yet started) and workers added mid-run. Not thread-safe: the shard calls
it with its lock held.
"""

from __future__ import annotations

import torch

from rltrain.ps.config import ServerConfig


class BarrierRound:
    """The running sum of one version's updates, and the count a step needs."""

    def __init__(self, server: ServerConfig, num_workers: int) -> None:
        self.server = server
        self.num_workers = num_workers
        self.absent: set[int] = set()  # workers that left (lost); a push rejoins
        self.joined: set[int] = set()  # workers added mid-run (join is idempotent)
        self.needed = server.update_rule.checked_count(server, num_workers)
        self.sum: torch.Tensor | None = None
        self.count = 0
        self.workers: set[int] = set()  # who pushed for this version
        self.step_at = 0  # a following shard: step once this many updates are in

    # --- membership ------------------------------------------------------------------------

    def leave(self, worker_id: int) -> None:
        self.absent.add(worker_id)
        self._recount()

    def join(self, worker_id: int) -> bool:
        """A worker added mid-run, absent until its first push; False if told already."""
        if worker_id in self.joined:
            return False
        self.joined.add(worker_id)
        self.num_workers += 1
        self.leave(worker_id)
        return True

    def rejoin(self, worker_id: int) -> None:
        """A push from an absent worker (restarted, or joining late) counts it again."""
        if worker_id in self.absent:
            self.absent.discard(worker_id)
            self._recount()

    def _recount(self) -> None:
        live = self.num_workers - len(self.absent)
        self.needed = self.server.update_rule.checked_count(self.server, self.num_workers, live)

    # --- the sum ---------------------------------------------------------------------------

    def add(self, worker_id: int, values: torch.Tensor) -> None:
        self.workers.add(worker_id)
        values = values.to(torch.float32)
        self.sum = values.clone() if self.sum is None else self.sum.add_(values)
        self.count += 1

    @property
    def full(self) -> bool:
        """The rule's count of updates is in."""
        return self.count > 0 and self.count >= self.needed

    @property
    def due(self) -> bool:
        """A following shard has shard 0's count of updates (``step_at``)."""
        return bool(self.step_at) and self.count >= self.step_at

    def take(self) -> tuple[torch.Tensor, int]:
        """(mean of the sum, how many updates it averages); the round starts over."""
        assert self.sum is not None
        mean, count = self.sum.div_(self.count), self.count
        self.clear()
        return mean, count

    def clear(self) -> None:
        """Forget this version's updates (a restore; membership stays)."""
        self.sum, self.count, self.step_at = None, 0, 0
        self.workers.clear()
