"""One parameter-server shard: a :class:`~rltrain.ps.slice.ParameterSlice` served.

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
from rltrain.ps.compression import Compressed, decompress, wire_bytes
from rltrain.ps.config import OptimizerConfig, ServerConfig
from rltrain.ps.slice import ParameterSlice
from rltrain.records import GradUpdate, Params, PushRecord, PushResult, ServerStats


class ParameterShard:
    """A :class:`~rltrain.ps.slice.ParameterSlice` (the values, the optimizer and what the
    update rule does with each push) behind a lock, with what serving it takes: barrier waits,
    fences and restores.
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
        self.device = torch.device(device)
        init = torch.zeros(init) if isinstance(init, int) else init
        self._slice = ParameterSlice(init, optimizer, server, num_workers, record, self.device)
        self.numel = self._slice.numel
        self._fenced = False
        self._generation = 0  # bumped by every restore: barrier waiters wake and re-pull
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)

    @property
    def version(self) -> int:
        """The count of steps taken (a restore sets it back to the checkpoint's)."""
        return self._slice.version

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
            s = self._slice
            s.counts.bytes_pushed += wire_bytes(update.values)
            if isinstance(update.values, Compressed):  # server.compression
                update = dataclasses.replace(update, values=decompress(update.values), finite=False)
            if update.values.device != self.device:  # from an actor's or another device's
                update = dataclasses.replace(update, values=update.values.to(self.device))
            before = s.version
            result = s.decide(update) if decided is None else s.follow(update, decided)
            s.counts.note(update, result)  # under the lock: the order of the steps
            self._wake_if_stepped(before)
            return result

    def push_log(self) -> list[PushRecord]:
        """Every push so far, in arrival order (empty unless constructed with ``record``)."""
        with self._lock:
            return list(self._slice.counts.log or ())

    def pull(self, newer_than: int | None = None) -> Params | None:
        """This shard's parameters, or None when ``newer_than`` is its version: the caller
        holds them already, and nothing travels."""
        with self._lock:
            self._check_fence()
            if newer_than is not None and self.version == newer_than:
                return None
            self._slice.counts.bytes_pulled += 4 * self.numel
            return self._slice.params(self._slice.param.detach().clone())

    def live_values(self) -> torch.Tensor:
        """The parameters' own buffer [numel], stepped in place: a learner beside this shard
        views it, and its pulls copy nothing (:meth:`exchange` ``live``)."""
        return self._slice.param.detach()

    def set_lr_factor(self, factor: float) -> None:
        """Scale the base learning rate (a schedule); staleness scaling still applies on top."""
        with self._lock:
            self._slice.lr_factor = float(factor)

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
                return result, self._slice.params(self._slice.param.detach())
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
            s, before = self._slice, self._slice.version
            if s.counts.log is not None:  # (rltrain reapply leaves it where the run did)
                s.counts.log.append(PushRecord(worker_id, before, 0, "left", ()))
            s.round.leave(worker_id)
            if step_at is None:
                due = s.round.full
            elif step_at:
                s.round.step_at = step_at
                due = s.round.due
            else:
                due = False
            count = s.finish_barrier() if due else 0
            self._wake_if_stepped(before)
            return count

    def join(self, worker_id: int) -> None:
        """A worker added mid-run (elastic): barriers count it from its first push (its
        process may take seconds to start; until then no barrier waits for it)."""
        with self._changed:
            self._slice.round.join(worker_id)  # told again (a restore): counted once

    @property
    def num_workers(self) -> int:
        """N as a barrier counts it: the constructor's, plus the workers joined since."""
        return self._slice.round.num_workers

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
            self._slice.counts.samples += num_samples
            return self._slice.reject(reason)

    def stats(self) -> ServerStats:
        """The counters, at this version."""
        with self._lock:
            return self._slice.counts.stats(self.version)

    # --- checkpoints -----------------------------------------------------------------------

    def state_dict(self) -> dict:
        """A checkpoint of this shard, on the CPU."""
        with self._lock:
            self._check_fence()  # a restarted shard's initial values are no checkpoint
            return self._slice.state()

    def set_values(self, values: torch.Tensor) -> None:
        """The initial parameters, before any push (see the constructor's ``init``)."""
        with self._lock:
            if values.numel() != self.numel:
                raise ValueError(f"shard {self.shard_id}: {values.numel()} values for {self.numel}")
            self._slice.param.data.copy_(values.reshape(-1))  # from any device

    def load_state_dict(self, state: dict, restore_epoch: int | None = None) -> None:
        """Load a checkpoint's or a restore point's state; ``restore_epoch``: the restore's
        number, from which updates of parameters read before it are dropped (None: keep it)."""
        with self._changed:
            if state["param"].numel() != self.numel:
                raise ValueError(
                    f"shard {self.shard_id}: checkpoint has {state['param'].numel()} values, "
                    f"expected {self.numel}"
                )
            self._slice.load(state, restore_epoch)
            self._fenced = False
            self._generation += 1
            self._changed.notify_all()

    def _wake_if_stepped(self, before: int) -> None:
        """Wake the barrier's waiters when the version moved from ``before`` (lock held)."""
        if self._slice.version != before:
            self._changed.notify_all()
