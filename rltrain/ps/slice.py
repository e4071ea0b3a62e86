"""A parameter slice and what each push does to it: the update rule's decisions, lock-free.

:class:`~rltrain.ps.shard.ParameterShard` holds one under its lock and adds what serving it
takes (barrier waits, fences, restores' generations); tests drive the decisions here without
threads. Not thread-safe: a shard calls it under its lock.
"""

from __future__ import annotations

import dataclasses

import torch

from rltrain.normalize import NormStats, merge_all
from rltrain.ps.barrier import BarrierRound
from rltrain.ps.config import OptimizerConfig, ServerConfig, corrected_optimizer
from rltrain.ps.counters import ShardCounters
from rltrain.ps.optim import (
    cpu_copy,
    load_optimizer_state,
    make_optimizer,
    skips_on_device,
    step_unless_nonfinite,
)
from rltrain.records import GradUpdate, Params, PushResult, check_update


class ParameterSlice:
    """A slice of the flat parameters with a ``torch.optim`` optimizer, versioned.

    The update rule (:mod:`rltrain.ps.rules`, named by ``server.rule``) says what a push does:
    an on-arrival rule (``async``) applies each update at once, at the rule's learning-rate
    factor for its staleness (server version minus the update's version), or drops it; a
    barrier rule (``sync``/``soft_sync``) averages the first N/K updates of the current
    version into one step and drops later ones (TensorFlow's SyncReplicasOptimizer), and one
    that pushes parameters (``average``) replaces the parameters with their mean.
    """

    def __init__(
        self,
        init: torch.Tensor,
        optimizer: OptimizerConfig,
        server: ServerConfig,
        num_workers: int,
        record: bool,
        device: torch.device,
    ) -> None:
        self.server = server
        self.update_rule = server.update_rule
        self.numel = int(init.numel())
        values = init.detach().reshape(-1).to(device, torch.float32, copy=True)
        self.param = torch.nn.Parameter(values)
        optimizer = corrected_optimizer(optimizer, server, num_workers)
        self.opt = make_optimizer([self.param], optimizer)
        self._base_lr = [g["lr"] for g in self.opt.param_groups]
        self.lr_factor = 1.0  # a learning-rate schedule's value, set by the driver
        self.norm: NormStats | None = None  # merged normalisation statistics (shard 0)
        # a barrier round's statistics, published with the step that ends it: a pull at version
        # v returns those of v whenever it comes (not those of a peer waiting at the barrier)
        self._norm_pending: NormStats | None = None
        self.round = BarrierRound(server, num_workers)  # a barrier rule's updates of a version
        self.restore_epoch = 0  # restores from a restore point (the guard numbers them)
        self.version = 0
        self.counts = ShardCounters()
        self.counts.log = [] if record else None
        # unread verdicts: where the optimizer skips_on_device, the rule steps on arrival, and
        # no push log is kept (a logged push is reapplied as it was logged)
        self._skips = skips_on_device(self.opt) and not (self.update_rule.barrier or record)

    def params(self, values: torch.Tensor) -> Params:
        """``values`` (these parameters, copied or viewed) at this version."""
        return Params(self.version, values, self.norm, self.restore_epoch)

    def all_norm(self) -> NormStats | None:
        """The published statistics with the current barrier round's."""
        return merge_all([self.norm, self._norm_pending])

    # --- checkpoints -----------------------------------------------------------------------

    def state(self) -> dict:
        """A checkpoint of this slice, on the CPU."""
        return {
            "param": self.param.detach().to("cpu", copy=True),
            # a snapshot on the CPU: torch's state_dict shares its tensors with the live
            # optimizer (and a checkpoint must load where there is no GPU)
            "optimizer": cpu_copy(self.opt.state_dict()),
            "version": self.version,
            "norm": norm.state() if (norm := self.all_norm()) is not None else {},
            "lr_factor": self.lr_factor,
            **self.counts.state(),
        }

    def load(self, state: dict, restore_epoch: int | None) -> None:
        """Load :meth:`state`'s output; ``restore_epoch`` as in the shard's load_state_dict."""
        self.param.data.copy_(state["param"].reshape(-1))
        load_optimizer_state(self.opt, state["optimizer"])  # torch moves it to our device
        self.version = int(state["version"])
        self.counts.load(state)
        norm = state.get("norm")
        self.norm = NormStats.from_state(norm) if norm else None
        self._norm_pending = None
        self.lr_factor = float(state.get("lr_factor", 1.0))
        self.round.clear()
        if restore_epoch is not None:
            self.restore_epoch = restore_epoch

    # --- rules -----------------------------------------------------------------------------

    def decide(self, update: GradUpdate) -> PushResult:
        """What the rule does with ``update``."""
        self.counts.count_samples(update.worker_id, update.num_samples)
        verdict = self._unread_verdict(update)
        finite = True if verdict is not None else update.finite  # else read in the check
        reason = check_update(update.values, self.numel, update.version, self.version, finite)
        if not reason and update.norm is not None and not update.norm.is_finite():
            reason = "non-finite normalisation statistics"
        if reason:
            return self.reject(reason)
        if update.restore_epoch < self.restore_epoch:
            return self._drop_older(update)
        if update.norm is not None:  # what the actors saw counts even if the step is dropped
            if self.update_rule.barrier:  # published with the round's step
                self._norm_pending = merge_all([self._norm_pending, update.norm])
            else:
                self.norm = merge_all([self.norm, update.norm])
        staleness = self.version - update.version
        if self.update_rule.barrier:
            return self._push_barrier(update, staleness)
        return self._push_on_arrival(update, staleness, verdict)

    def _unread_verdict(self, update: GradUpdate) -> torch.Tensor | None:
        """The sender's verdict where this shard steps without reading it, else None."""
        v = update.finite
        if isinstance(v, torch.Tensor) and self._skips and v.device == self.param.device:
            return v
        return None

    def follow(self, update: GradUpdate, decided: PushResult) -> PushResult:
        """Do what shard 0 decided for this update (see the shard's push)."""
        if update.restore_epoch < self.restore_epoch:  # shard 0 decided before its restore
            return self._drop_older(update)  # and we after ours
        if decided.status == "rejected":
            return self.reject(decided.reason)
        if decided.status == "dropped":
            return self._drop(update, decided.reason, decided.staleness)
        if not self.update_rule.barrier:  # shard 0's factor (the rule is not run again here)
            self._step(update.values, decided.lr_scale)
            self.counts.count_applied(decided.staleness, 1)
            return dataclasses.replace(decided, version=self.version)
        # a barrier: step once shard 0's count is here (its last update may come here first)
        self.round.add(update.worker_id, update.values)
        if decided.status == "applied":
            self.round.step_at = decided.count
        if self.round.due:
            self.finish_barrier()
        return PushResult(decided.status, self.version, 0, count=decided.count)

    def _push_on_arrival(
        self, update: GradUpdate, staleness: int, verdict: torch.Tensor | None = None
    ) -> PushResult:
        reason = self.update_rule.checked_drop(self.server, staleness)
        if reason:
            return self._drop(update, reason, staleness)
        scale = self.update_rule.checked_scale(self.server, staleness)
        self._step(update.values, scale, verdict)
        if verdict is None:
            self.counts.count_applied(staleness, 1)
            return PushResult("applied", self.version, staleness, lr_scale=scale)
        self.counts.count_unread(verdict, staleness)
        return PushResult("applied", self.version, staleness, deferred=True, lr_scale=scale)

    def _push_barrier(self, update: GradUpdate, staleness: int) -> PushResult:
        # a restarted (or warm-start) worker is back, even if this first push comes late:
        # otherwise a fast peer could step past it every time
        self.round.rejoin(update.worker_id)
        if staleness > 0:  # for a version stepped already (a backup worker's)
            return self._drop(update, f"late update for version {update.version}", staleness)
        if update.worker_id in self.round.workers:  # N distinct workers make a step: one
            # worker twice is not two. It pushed again as its wait timed out: it waits again
            why = f"second update from worker {update.worker_id} for this version"
            return dataclasses.replace(self._drop(update, why, 0), waits=True)
        self.round.add(update.worker_id, update.values)
        if not self.round.full:
            return PushResult("accumulated", self.version, 0, waits=True)
        count = self.finish_barrier()
        return PushResult("applied", self.version, 0, count=count)

    def finish_barrier(self) -> int:
        """One step from the mean of this version's accumulated updates; returns their count."""
        mean, count = self.round.take()
        if self.update_rule.pushes_parameters:  # parameter averaging: the mean is the step
            self.param.data.copy_(mean)
            self.version += 1
        else:
            self._step(mean, 1.0)
        self.norm, self._norm_pending = self.all_norm(), None
        self.counts.count_applied(0, count)
        return count

    def _step(
        self, grad: torch.Tensor, lr_scale: float, finite: torch.Tensor | None = None
    ) -> None:
        """One optimizer step; a False ``finite`` (unread) makes it a no-op on the device."""
        self.param.grad = grad.to(torch.float32).reshape(-1)
        for g, lr in zip(self.opt.param_groups, self._base_lr, strict=True):
            g["lr"] = lr * self.lr_factor * lr_scale
        step_unless_nonfinite(self.opt, finite)
        self.param.grad = None
        self.version += 1

    def _drop(self, update: GradUpdate, reason: str, staleness: int) -> PushResult:
        self.counts.count_dropped(update.worker_id)
        return PushResult("dropped", self.version, staleness, reason)

    def _drop_older(self, update: GradUpdate) -> PushResult:
        why = f"computed before the restore (epoch {update.restore_epoch})"
        return self._drop(update, why, 0)

    def reject(self, reason: str) -> PushResult:
        """Count ``reason`` as a rejected update's."""
        self.counts.count_rejected(reason)
        return PushResult("rejected", self.version, 0, reason)
