"""Hogwild!: one model in shared memory, updated lock-free by every worker process.

Recht et al. (2011); the setting of A3C's original implementation (Mnih et al. 2016): the
parameters *and* the optimizer state live in shared memory and each worker process runs the
``torch.optim`` step on them directly, without a lock. There is no server actor. The
bookkeeping takes no lock either: each worker counts in a row of its own of a shared table
(steps begun and ended, samples, staleness), the figures are the rows' sums, and a worker
killed at any moment leaves nothing held (a cross-process lock held by a SIGKILLed worker
would stop every other worker and the driver for good).

The object is handed to processes of the process runtime's forkserver, whose pickling (torch's
reductions) keeps the tensors in shared memory; each process builds its own optimizer over the
shared tensors.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from rltrain.ps.config import OptimizerConfig
from rltrain.ps.optim import make_optimizer, materialize_state
from rltrain.records import (
    STALENESS_BINS,
    GradUpdate,
    Params,
    PushResult,
    ServerStats,
    check_update,
)

# the columns of a worker's row: steps begun, rejected pushes, samples, the staleness sum, and
# the staleness histogram's bins, whose sum is the row's steps applied: one increment ends a
# step and counts it, so a worker killed at any moment has counted each step once or not at all
_BEGUN, _REJECTED, _SAMPLES, _STALE_SUM, _HIST = 0, 1, 2, 3, 4
MAX_WORKERS = 1024  # rows: worker id modulo this (one pushing process per row)


class HogwildServer:
    """The :class:`~rltrain.ps.server.Server` contract over shared memory (``async`` rule)."""

    def __init__(self, init: torch.Tensor, optimizer: OptimizerConfig) -> None:
        self.numel = int(init.numel())
        self.optimizer_cfg = optimizer
        self._param = torch.nn.Parameter(init.detach().reshape(-1).clone().float())
        self._param.data.share_memory_()
        opt = make_optimizer([self._param], optimizer)
        materialize_state(opt)
        self._state = dict(opt.state[self._param])
        for v in self._state.values():
            if isinstance(v, torch.Tensor):
                v.share_memory_()
        # worker i writes row i alone; a step is running while some row has begun > ended
        rows = torch.zeros(MAX_WORKERS, _HIST + STALENESS_BINS, dtype=torch.int64)
        self._rows = rows.share_memory_()
        self._opt: torch.optim.Optimizer | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_opt"] = None  # each process builds its own optimizer over the shared tensors
        return state

    def optimizer(self) -> torch.optim.Optimizer:
        """This process's optimizer over the shared tensors, built on first use. Building the
        first torch optimizer of a process takes ~1 s (lazy imports): a worker calls this
        before its clock starts."""
        if self._opt is None:
            self._opt = make_optimizer([self._param], self.optimizer_cfg)
            self._opt.state[self._param] = self._state
        return self._opt

    @property
    def version(self) -> int:
        """Steps applied by all workers (each step ends with its row's count)."""
        return int(self._rows[:, _HIST:].sum())

    def push(self, update: GradUpdate) -> PushResult:
        """Apply one update, lock-free. One process pushes under each worker id."""
        version = self.version
        reason = check_update(update.values, self.numel, update.version, version, update.finite)
        row = self._rows[update.worker_id % MAX_WORKERS]
        row[_SAMPLES] += update.num_samples
        if reason:
            row[_REJECTED] += 1
            return PushResult("rejected", version, 0, reason)
        staleness = version - update.version
        opt = self.optimizer()
        row[_BEGUN] += 1  # a snapshot waits for a moment with no step running
        self._param.grad = update.values.to(torch.float32)
        try:
            opt.step()  # lock-free, on the shared parameters and shared optimizer state
        except BaseException:
            row[_BEGUN] -= 1
            raise
        finally:
            self._param.grad = None
        row[_HIST + min(staleness, STALENESS_BINS - 1)] += 1  # the step's end and its count
        row[_STALE_SUM] += staleness
        return PushResult("applied", self.version, staleness)

    def pull(self, have: Params | None = None) -> Params:
        """A copy of the shared model as workers read it: lock-free, so a step running
        meanwhile may be half in it (Hogwild's reads; ``have`` is not needed here)."""
        return Params(self.version, self._param.detach().clone())

    def snapshot(self, wait_s: float = 0.5) -> Params | None:
        """A consistent copy of the model, for evaluation: taken while no worker was inside a
        step (a seqlock: no step running before the copy, none began or ended during it), so
        it is the model of exactly one version. Workers never wait for it; it retries, for at
        most ``wait_s`` seconds: None then (a worker that died inside a step still counts as
        stepping until :meth:`worker_lost` says otherwise)."""
        end = time.monotonic() + wait_s
        while time.monotonic() < end:
            begun = int(self._rows[:, _BEGUN].sum())
            version = self.version  # ended: read after begun, so ended <= begun
            if begun != version:  # a step is running
                time.sleep(0.0002)
                continue
            values = self._param.detach().clone()
            if int(self._rows[:, _BEGUN].sum()) == begun:  # none began during the copy
                return Params(version, values)
        return None

    def worker_lost(self, worker_id: int) -> None:
        """A worker process died, perhaps inside a step: it is no longer writing (its step, if
        any, is not counted as applied). Call before its replacement starts pushing."""
        row = self._rows[worker_id % MAX_WORKERS]
        row[_BEGUN] = row[_HIST:].sum()

    def exchange(
        self, update: GradUpdate, wait_version: int = 0, timeout: float = 0.0
    ) -> tuple[PushResult, Params]:
        result = self.push(update)
        if wait_version > 0:
            self.wait_for_version(wait_version, timeout)
        return result, self.pull()

    def exchange_begin(
        self, update: GradUpdate, wait_version: int = 0, timeout: float = 0.0
    ) -> Callable[[], tuple[PushResult, Params]]:
        out = self.exchange(update, wait_version, timeout)  # shared memory: nothing to overlap
        return lambda: out

    def wait_for_version(self, version: int, timeout: float) -> bool:
        end = time.monotonic() + timeout
        while self.version < version:
            if time.monotonic() >= end:
                return False
            time.sleep(0.001)
        return True

    def stats(self) -> ServerStats:
        c = self._rows.sum(dim=0).tolist()
        applied = sum(c[_HIST:])
        return ServerStats(
            version=applied,
            applied=applied,
            dropped=0,
            rejected=c[_REJECTED],
            samples=c[_SAMPLES],
            staleness_sum=c[_STALE_SUM],
            staleness_hist=tuple(c[_HIST:]),
        )
