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
MAX_WORKERS = 1024  # slots of the "inside a step" flags, one per worker id


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
        # worker i is inside a step while _stepping[i] (a snapshot waits for none to be); per
        # worker, so that the driver can clear the flag of a worker that died mid-step
        self._stepping = torch.zeros(MAX_WORKERS, dtype=torch.bool).share_memory_()
        self._lock = mp.get_context("spawn").Lock()
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
        return int(self._counters[_VERSION])

    def push(self, update: GradUpdate) -> PushResult:
        version = self.version
        reason = check_update(update.values, self.numel, update.version, version)
        with self._lock:
            self._counters[_SAMPLES] += update.num_samples
            if reason:
                self._counters[_REJECTED] += 1
                return PushResult("rejected", version, 0, reason)
            slot = update.worker_id % MAX_WORKERS
            self._stepping[slot] = True  # a snapshot waits for a moment with no step
        staleness = version - update.version
        opt = self.optimizer()
        self._param.grad = update.values.to(torch.float32)
        try:
            opt.step()  # lock-free, on the shared parameters and shared optimizer state
        except BaseException:
            with self._lock:
                self._stepping[slot] = False
            raise
        finally:
            self._param.grad = None
        with self._lock:  # the step's end and its version in one: a snapshot sees both or neither
            self._stepping[slot] = False
            self._counters[_VERSION] += 1
            self._counters[_APPLIED] += 1
            self._counters[_STALE_SUM] += staleness
            self._counters[_HIST + min(staleness, STALENESS_BINS - 1)] += 1
            return PushResult("applied", int(self._counters[_VERSION]), staleness)

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
            with self._lock:
                busy = bool(self._stepping.any())
                version = int(self._counters[_VERSION])
            if busy:
                time.sleep(0.0002)
                continue
            values = self._param.detach().clone()
            with self._lock:
                if not self._stepping.any() and int(self._counters[_VERSION]) == version:
                    return Params(version, values)
        return None

    def worker_lost(self, worker_id: int) -> None:
        """A worker process died, perhaps inside a step: it is no longer writing."""
        with self._lock:
            self._stepping[worker_id % MAX_WORKERS] = False

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
