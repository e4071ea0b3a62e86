"""A worker's minibatches and the gradients summed into one push.

:class:`BatchPlan` knows every batch by its place alone (epoch, position), and
:class:`GradSum` is the one sum of gradients the worker's loops, the pipeline replicas and
``rltrain reapply`` all make, so that a reapplied update is the pushed one bit for bit.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import NamedTuple, Protocol

import torch

from rltrain.records import BatchId, GradUpdate


class PlanSpec(Protocol):
    """What a plan reads of a worker's spec (:class:`~rltrain.supervised.worker.WorkerSpec`)."""

    @property
    def batch_size(self) -> int: ...
    @property
    def steps_per_epoch(self) -> int: ...  # 0 = every full batch of the shard
    @property
    def max_epochs(self) -> int: ...  # 0 = no epoch limit
    @property
    def seed(self) -> int: ...


class Batch(NamedTuple):
    """One minibatch of a worker's plan: where it is (``epoch``, ``position``) and its data."""

    epoch: int
    position: int
    x: torch.Tensor  # [B, ...]
    y: torch.Tensor  # [B]


class BatchPlan:
    """A worker's minibatches over its shard: epoch e in the order of a permutation seeded by
    seed * 100_003 + e, so that a batch is known by its place alone (``rltrain reapply``
    recomputes it), and every worker takes the same number of steps per epoch (barrier rules
    line up)."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, spec: PlanSpec) -> None:
        self.x, self.y, self.spec = x, y, spec
        self._order = (-1, torch.empty(0, dtype=torch.int64))  # (epoch, its permutation)

    def batches(self, skip: int, deadline: Callable[[], float]) -> Iterator[Batch]:
        """From the ``skip``-th batch on, until the epochs run out or ``deadline()`` passes
        (read before each batch: a worker can be stopped from another thread)."""
        n, bs = len(self.y), self.spec.batch_size
        steps = min(n // bs, self.spec.steps_per_epoch or n // bs)
        if steps == 0:  # a shard smaller than a batch (refused at start; never spin here)
            return
        epoch, first = divmod(skip, steps)
        while self.spec.max_epochs == 0 or epoch < self.spec.max_epochs:
            for i in range(first, steps):
                if time.time() >= deadline():
                    return
                yield Batch(epoch, i, *self.batch(epoch, i))
            epoch, first = epoch + 1, 0

    def batch(self, epoch: int, position: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Batch ``position`` of ``epoch``: ([B, ...] inputs, [B] targets)."""
        if self._order[0] != epoch:
            g = torch.Generator().manual_seed(self.spec.seed * 100_003 + epoch)
            self._order = (epoch, torch.randperm(len(self.y), generator=g))
        bs = self.spec.batch_size
        idx = self._order[1][position * bs : (position + 1) * bs]
        return self.x[idx], self.y[idx]


class GradSum:
    """The gradients summed into one push (Downpour's n_push) and the batches behind them.

    The worker's loops and ``rltrain reapply`` both go through it, so that a reapplied update
    is the same float operations in the same order as the pushed one, bit for bit.
    """

    def __init__(self) -> None:
        self.values: torch.Tensor | None = None  # [P]
        self.samples = 0
        self.batches: list[BatchId] = []

    def add(self, grad: torch.Tensor, samples: int, batch: BatchId) -> None:
        self.values = grad if self.values is None else self.values.add_(grad)
        self.samples += samples
        self.batches.append(batch)

    @property
    def oldest(self) -> int:
        """The oldest parameter version a gradient of the sum was computed from: the update's
        (a pull between two pushes, n_fetch < n_push, left older gradients in the sum; the
        newest version under-reported staleness: 0.17 where the batches' mean was 0.83)."""
        return min(b.version for b in self.batches)

    def to_update(self, worker_id: int, version: int, loss: float, restore: int = 0) -> GradUpdate:
        """The mean gradient, as an update computed from ``version`` of restore epoch
        ``restore`` (divides in place)."""
        assert self.values is not None, "no gradient to push"
        mean = self.values.div_(len(self.batches))
        losses, batches = {"loss": loss}, tuple(self.batches)
        return GradUpdate(worker_id, version, mean, self.samples, losses, None, batches, restore)
