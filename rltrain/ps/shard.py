"""One parameter-server shard: a slice of the flat parameters, its optimizer and update rule.

A plain, thread-safe Python class. The Ray runtime wraps it as a threaded Ray process
(``rltrain.runtime.ray``); tests drive it in one process. A shard beside a GPU learner lives on
that GPU (``device``): its parameters, optimizer state and barrier sums stay there, so the
learner's push is a device-side optimizer step and its pull a device-side copy; updates from
elsewhere are moved there on arrival, and checkpoints hold CPU tensors.
"""

from __future__ import annotations

import dataclasses
import threading

import torch

from rltrain.faults import ShardFenced
from rltrain.normalize import NormStats, merge_all
from rltrain.ps.barrier import BarrierRound
from rltrain.ps.compression import Compressed, decompress, wire_bytes
from rltrain.ps.config import OptimizerConfig, ServerConfig, corrected_optimizer
from rltrain.ps.counters import ShardCounters
from rltrain.ps.optim import (
    cpu_copy,
    load_optimizer_state,
    make_optimizer,
    skips_on_device,
    step_unless_nonfinite,
)
from rltrain.records import GradUpdate, Params, PushRecord, PushResult, ServerStats, check_update


class ParameterShard:
    """A slice of the parameters with a ``torch.optim`` optimizer, versioned.

    The update rule (:mod:`rltrain.ps.rules`, named by ``server.rule``) says what a push does:
    an on-arrival rule (``async``) applies each update at once, at the rule's learning-rate
    factor for its staleness (server version minus the update's version), or drops it; a
    barrier rule (``sync``/``soft_sync``) averages the first N/K updates of the current
    version into one step and drops later ones (TensorFlow's SyncReplicasOptimizer), and one
    that pushes parameters (``average``) replaces the parameters with their mean.
    """

    def __init__(
        self,
        init: torch.Tensor | int,
        optimizer: OptimizerConfig,
        server: ServerConfig,
        num_workers: int,
        shard_id: int = 0,
        record: bool = False,
        device: str | torch.device = "cpu",
    ) -> None:
        """``init``: the slice's initial values, or its size (zeros until :meth:`set_values`:
        a Ray process gets small constructor arguments, which a restart can replay).
        ``record``: log every push (:meth:`push_log`; ``server.record``). ``device``: where
        the parameters and the optimizer's state live (a co-located GPU learner's)."""
        self.shard_id = shard_id
        self.server = server
        self.update_rule = server.update_rule
        self.device = torch.device(device)
        init = torch.zeros(init) if isinstance(init, int) else init
        self.numel = int(init.numel())
        values = init.detach().reshape(-1).to(self.device, torch.float32, copy=True)
        self._param = torch.nn.Parameter(values)
        optimizer = corrected_optimizer(optimizer, server, num_workers)
        self._opt = make_optimizer([self._param], optimizer)
        self._base_lr = [g["lr"] for g in self._opt.param_groups]
        self._lr_factor = 1.0  # a learning-rate schedule's value, set by the driver
        self._norm: NormStats | None = None  # merged normalisation statistics (shard 0)
        # a barrier round's statistics, published with the step that ends it: a pull at version
        # v returns those of v whenever it comes (not those of a peer waiting at the barrier)
        self._norm_pending: NormStats | None = None
        self._round = BarrierRound(server, num_workers)  # a barrier rule's updates of a version
        self._fenced = False
        self._generation = 0  # bumped by every restore: barrier waiters wake and re-pull
        self._restore_epoch = 0  # restores from a restore point (the guard numbers them): see push
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self.version = 0
        self._counts = ShardCounters()
        self._counts.log = [] if record else None
        # unread verdicts: where the optimizer skips_on_device, the rule steps on arrival, and
        # no push log is kept (a logged push is reapplied as it was logged)
        self._skips = skips_on_device(self._opt) and not (self.update_rule.barrier or record)

    # --- the worker-facing contract -------------------------------------------------------

    def push(self, update: GradUpdate, decided: PushResult | None = None) -> PushResult:
        """Offer one update; returns what the rule did with it.

        ``decided``: what shard 0 did with this update's slice there. A sharded server with a
        rule that decides (``sync``, ``soft_sync``, or ``async`` with a staleness policy) lets
        shard 0 decide each update once and the other shards follow, so that an update is
        applied on every shard or on none, at one scale, and no shard's version drifts from
        the others (their own versions and arrival orders could decide otherwise).
        """
        with self._lock:
            self._check_fence()
            self._counts.bytes_pushed += wire_bytes(update.values)
            if isinstance(update.values, Compressed):  # server.compression
                update = dataclasses.replace(update, values=decompress(update.values), finite=False)
            if update.values.device != self.device:  # from an actor's or another device's
                update = dataclasses.replace(update, values=update.values.to(self.device))
            result = self._decide(update) if decided is None else self._follow(update, decided)
            self._counts.note(update, result)  # under the lock: the order of the steps
            return result

    def push_log(self) -> list[PushRecord]:
        """Every push so far, in arrival order (empty unless constructed with ``record``)."""
        with self._lock:
            return list(self._counts.log or ())

    def pull(self, newer_than: int | None = None) -> Params | None:
        """This shard's parameters, or None when ``newer_than`` is its version: the caller
        holds them already, and nothing travels."""
        with self._lock:
            self._check_fence()
            if newer_than is not None and self.version == newer_than:
                return None
            self._counts.bytes_pulled += 4 * self.numel
            return self._params(self._param.detach().clone())

    def _params(self, values: torch.Tensor) -> Params:
        return Params(self.version, values, self._norm, self._restore_epoch)

    def live_values(self) -> torch.Tensor:
        """The parameters' own buffer [numel], stepped in place: a learner beside this shard
        views it, and its pulls copy nothing (:meth:`exchange` ``live``)."""
        return self._param.detach()

    def set_lr_factor(self, factor: float) -> None:
        """Scale the base learning rate (a schedule); staleness scaling still applies on top."""
        with self._lock:
            self._lr_factor = float(factor)

    def exchange(
        self,
        update: GradUpdate | None,
        wait_version: int,
        timeout: float,
        decided: PushResult | None = None,
        live: bool = False,
    ) -> tuple[PushResult, Params]:
        """Push, wait until the shard reaches ``wait_version`` (0: no wait), then pull.

        ``decided`` as in :meth:`push`; with ``update`` None the update was pushed here
        already (shard 0 deciding): only the wait and the pull remain.
        """
        with self._lock:
            generation = self._generation  # a restore after this push ends the wait too
        if update is None:
            assert decided is not None
            result = decided
        else:
            result = self.push(update, decided)
        # a refused update (rejected, or dropped as late) waits for nothing: the worker pulls
        # and goes on (e.g. it holds a version newer than a restored shard's); one of a round
        # still open waits for it, even when it came again after its wait timed out
        if wait_version > 0 and (result.status in ("applied", "accumulated") or result.waits):
            self.wait_for_version(wait_version, timeout, generation)
        if live:  # the caller views the buffer (live_values): nothing to copy
            with self._lock:
                return result, self._params(self._param.detach())
        params = ParameterShard.pull(self)  # this class's: a transport may change its own
        assert params is not None
        return result, params

    def wait_for_version(self, version: int, timeout: float, generation: int | None = None) -> bool:
        """Block until the shard reaches ``version`` (a barrier), at most ``timeout`` seconds.

        A restore (which may move the version back) also ends the wait: the waiter pulls the
        restored parameters and goes on from there.
        """
        with self._changed:
            gen = self._generation if generation is None else generation
            return self._changed.wait_for(
                lambda: self.version >= version or self._generation != gen, timeout=timeout
            )

    # --- faults ----------------------------------------------------------------------------

    def leave(self, worker_id: int, step_at: int | None = None) -> int:
        """A worker is gone: barriers stop waiting for it until it pushes again. Returns the
        count of updates a barrier step it completed averaged (0: none). ``step_at``: a
        following shard steps at shard 0's count, not on its own (see :meth:`push`)."""
        with self._changed:
            self._round.leave(worker_id)
            if step_at is not None:
                if step_at:
                    self._round.step_at = step_at
                    return self._finish_barrier() if self._round.due else 0
                return 0
            return self._finish_barrier() if self._round.full else 0

    def join(self, worker_id: int) -> None:
        """A worker added mid-run (elastic): barriers count it from its first push (its
        process may take seconds to start; until then no barrier waits for it)."""
        with self._changed:
            self._round.join(worker_id)  # told again (a restore): counted once

    @property
    def num_workers(self) -> int:
        """N as a barrier counts it: the constructor's, plus the workers joined since."""
        return self._round.num_workers

    def fence(self) -> None:
        """Refuse pushes and pulls until :meth:`load_state_dict` (a restarted shard)."""
        with self._lock:
            self._fenced = True

    def health(self) -> tuple[int, bool]:
        """(version, fenced): cheap, for the driver's watch."""
        with self._lock:
            return self.version, self._fenced

    def _check_fence(self) -> None:
        if self._fenced:
            raise ShardFenced(f"server shard {self.shard_id} restarted and awaits its restore")

    def reject(self, reason: str, num_samples: int = 0) -> PushResult:
        """Count an update that the client found invalid before splitting it into shards."""
        with self._lock:
            self._counts.samples += num_samples
            return self._reject(reason)

    def stats(self) -> ServerStats:
        with self._lock:
            return self._counts.stats(self.version)

    # --- checkpoints -----------------------------------------------------------------------

    def state_dict(self) -> dict:
        with self._lock:
            self._check_fence()  # a restarted shard's initial values are no checkpoint
            return {
                "param": self._param.detach().to("cpu", copy=True),
                # a snapshot on the CPU: torch's state_dict shares its tensors with the live
                # optimizer (and a checkpoint must load where there is no GPU)
                "optimizer": cpu_copy(self._opt.state_dict()),
                "version": self.version,
                "norm": norm.state() if (norm := self._all_norm()) is not None else {},
                "lr_factor": self._lr_factor,
                **self._counts.state(),
            }

    def set_values(self, values: torch.Tensor) -> None:
        """The initial parameters, before any push (see the constructor's ``init``)."""
        with self._lock:
            if values.numel() != self.numel:
                raise ValueError(f"shard {self.shard_id}: {values.numel()} values for {self.numel}")
            self._param.data.copy_(values.reshape(-1))  # from any device

    def load_state_dict(self, state: dict, restore_epoch: int | None = None) -> None:
        """Load a checkpoint's or a restore point's state; ``restore_epoch``: the restore's
        number, from which updates of parameters read before it are dropped (None: keep it)."""
        with self._changed:
            if state["param"].numel() != self.numel:
                raise ValueError(
                    f"shard {self.shard_id}: checkpoint has {state['param'].numel()} values, "
                    f"expected {self.numel}"
                )
            self._param.data.copy_(state["param"].reshape(-1))
            load_optimizer_state(self._opt, state["optimizer"])  # torch moves it to our device
            self.version = int(state["version"])
            self._counts.load(state)
            norm = state.get("norm")
            self._norm = NormStats.from_state(norm) if norm else None
            self._norm_pending = None
            self._lr_factor = float(state.get("lr_factor", 1.0))
            self._round.clear()
            self._fenced = False
            self._generation += 1
            if restore_epoch is not None:
                self._restore_epoch = restore_epoch
            self._changed.notify_all()

    # --- rules (called with the lock held) -------------------------------------------------

    def _decide(self, update: GradUpdate) -> PushResult:
        """What the rule does with ``update`` (:meth:`push`, lock held)."""
        self._counts.count_samples(update.worker_id, update.num_samples)
        verdict = self._unread_verdict(update)
        finite = True if verdict is not None else update.finite  # else read in the check
        reason = check_update(update.values, self.numel, update.version, self.version, finite)
        if not reason and update.norm is not None and not update.norm.is_finite():
            reason = "non-finite normalisation statistics"
        if reason:
            return self._reject(reason)
        if update.restore_epoch < self._restore_epoch:
            return self._drop_older(update)
        if update.norm is not None:  # what the actors saw counts even if the step is dropped
            if self.update_rule.barrier:  # published with the round's step
                self._norm_pending = merge_all([self._norm_pending, update.norm])
            else:
                self._norm = merge_all([self._norm, update.norm])
        staleness = self.version - update.version
        if self.update_rule.barrier:
            return self._push_barrier(update, staleness)
        return self._push_on_arrival(update, staleness, verdict)

    def _unread_verdict(self, update: GradUpdate) -> torch.Tensor | None:
        """The sender's verdict where this shard steps without reading it, else None."""
        v = update.finite
        if isinstance(v, torch.Tensor) and self._skips and v.device == self._param.device:
            return v
        return None

    def _follow(self, update: GradUpdate, decided: PushResult) -> PushResult:
        """Do what shard 0 decided for this update (see :meth:`push`)."""
        if update.restore_epoch < self._restore_epoch:  # shard 0 decided before its restore
            return self._drop_older(update)  # and we after ours
        if decided.status == "rejected":
            return self._reject(decided.reason)
        if decided.status == "dropped":
            return self._drop(decided.reason, decided.staleness)
        if not self.update_rule.barrier:  # shard 0's factor (the rule is not run again here)
            self._step(update.values, decided.lr_scale)
            self._count_applied(decided.staleness, 1)
            return dataclasses.replace(decided, version=self.version)
        # a barrier: step once shard 0's count is here (its last update may come here first)
        self._round.add(update.worker_id, update.values)
        if decided.status == "applied":
            self._round.step_at = decided.count
        if self._round.due:
            self._finish_barrier()
        return PushResult(decided.status, self.version, 0, count=decided.count)

    def _push_on_arrival(
        self, update: GradUpdate, staleness: int, verdict: torch.Tensor | None = None
    ) -> PushResult:
        reason = self.update_rule.drop_reason(self.server, staleness)
        if reason:
            return self._drop(reason, staleness)
        scale = self.update_rule.checked_scale(self.server, staleness)
        self._step(update.values, scale, verdict)
        if verdict is None:
            self._count_applied(staleness, 1)
            return PushResult("applied", self.version, staleness, lr_scale=scale)
        self._counts.count_unread(verdict, staleness)
        self._changed.notify_all()  # as _count_applied
        return PushResult("applied", self.version, staleness, deferred=True, lr_scale=scale)

    def _push_barrier(self, update: GradUpdate, staleness: int) -> PushResult:
        # a restarted (or warm-start) worker is back, even if this first push comes late:
        # otherwise a fast peer could step past it every time
        self._round.rejoin(update.worker_id)
        if staleness > 0:  # for a version stepped already (a backup worker's)
            return self._drop(f"late update for version {update.version}", staleness)
        if update.worker_id in self._round.workers:  # N distinct workers make a step: one
            # worker twice is not two. It pushed again as its wait timed out: it waits again
            why = f"second update from worker {update.worker_id} for this version"
            return dataclasses.replace(self._drop(why, 0), waits=True)
        self._round.add(update.worker_id, update.values)
        if not self._round.full:
            return PushResult("accumulated", self.version, 0, waits=True)
        count = self._finish_barrier()
        return PushResult("applied", self.version, 0, count=count)

    def _finish_barrier(self) -> int:
        """One step from the mean of this version's accumulated updates; returns their count."""
        mean, count = self._round.take()
        if self.update_rule.pushes_parameters:  # parameter averaging: the mean is the step
            self._param.data.copy_(mean)
            self.version += 1
        else:
            self._step(mean, 1.0)
        self._norm, self._norm_pending = self._all_norm(), None
        self._count_applied(0, count)
        return count

    def _all_norm(self) -> NormStats | None:
        """The published statistics with the current barrier round's."""
        return merge_all([self._norm, self._norm_pending])

    def _step(
        self, grad: torch.Tensor, lr_scale: float, finite: torch.Tensor | None = None
    ) -> None:
        """One optimizer step; a False ``finite`` (unread) makes it a no-op on the device."""
        self._param.grad = grad.to(torch.float32).reshape(-1)
        for g, lr in zip(self._opt.param_groups, self._base_lr, strict=True):
            g["lr"] = lr * self._lr_factor * lr_scale
        step_unless_nonfinite(self._opt, finite)
        self._param.grad = None
        self.version += 1

    def _count_applied(self, staleness: int, n: int) -> None:
        self._counts.count_applied(staleness, n)
        self._changed.notify_all()

    def _drop(self, reason: str, staleness: int) -> PushResult:
        self._counts.dropped += 1
        return PushResult("dropped", self.version, staleness, reason)

    def _drop_older(self, update: GradUpdate) -> PushResult:
        return self._drop(f"computed before the restore (epoch {update.restore_epoch})", 0)

    def _reject(self, reason: str) -> PushResult:
        self._counts.count_rejected(reason)
        return PushResult("rejected", self.version, 0, reason)
