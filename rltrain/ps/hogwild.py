"""Hogwild!: one model in shared memory, updated lock-free by every worker process.

Recht et al. (2011); the setting of A3C's original implementation (Mnih et al. 2016): the
parameters *and* the optimizer state live in shared memory and each worker process runs the
``torch.optim`` step on them directly, without a lock. There is no server actor. Only the
bookkeeping counters take a lock, so that the figures we report are exact.

The object is handed to ``torch.multiprocessing`` processes (spawn), whose pickling keeps the
tensors in shared memory; each process builds its own optimizer over the shared tensors.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
import torch.multiprocessing as mp

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

# counter slots in the shared int64 tensor
_VERSION, _APPLIED, _REJECTED, _SAMPLES, _STALE_SUM, _HIST = 0, 1, 2, 3, 4, 5


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
        self._counters = torch.zeros(_HIST + STALENESS_BINS, dtype=torch.int64).share_memory_()
        self._lock = mp.get_context("spawn").Lock()
        self._opt: torch.optim.Optimizer | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_opt"] = None  # each process builds its own optimizer over the shared tensors
        return state

    def _optimizer(self) -> torch.optim.Optimizer:
        if self._opt is None:
            self._opt = make_optimizer([self._param], self.optimizer_cfg)
            self._opt.state[self._param] = self._state
        return self._opt

    @property
    def version(self) -> int:
        return int(self._counters[_VERSION])

    def push(self, update: GradUpdate) -> PushResult:
        version = self.version
        reason = check_update(update.values, self.numel, update.version, version)
        with self._lock:
            self._counters[_SAMPLES] += update.num_samples
            if reason:
                self._counters[_REJECTED] += 1
                return PushResult("rejected", version, 0, reason)
        staleness = version - update.version
        opt = self._optimizer()
        self._param.grad = update.values.to(torch.float32)
        opt.step()  # lock-free, on the shared parameters and shared optimizer state
        self._param.grad = None
        with self._lock:
            self._counters[_VERSION] += 1
            self._counters[_APPLIED] += 1
            self._counters[_STALE_SUM] += staleness
            self._counters[_HIST + min(staleness, STALENESS_BINS - 1)] += 1
            return PushResult("applied", int(self._counters[_VERSION]), staleness)

    def pull(self) -> Params:
        return Params(self.version, self._param.detach().clone())

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
        c = self._counters.tolist()
        return ServerStats(
            version=c[_VERSION],
            applied=c[_APPLIED],
            dropped=0,
            rejected=c[_REJECTED],
            samples=c[_SAMPLES],
            staleness_sum=c[_STALE_SUM],
            staleness_hist=tuple(c[_HIST:]),
        )
