"""What a parameter-server shard counts: updates applied, dropped and rejected, staleness,
bytes, the verdicts it stepped with unread, and its push log. A plain class; the shard
holds its lock."""

from __future__ import annotations

import torch

from rltrain.records import STALENESS_BINS, GradUpdate, PushRecord, PushResult, ServerStats

UNREAD_LIMIT = 1024  # steps taken with unread verdicts before the counters read them


class ShardCounters:
    """A shard's counters (:class:`~rltrain.records.ServerStats` at a version)."""

    def __init__(self) -> None:
        self.applied = self.dropped = self.rejected = self.samples = 0
        self.samples_by: dict[int, int] = {}  # per worker id
        self.dropped_by: dict[int, int] = {}  # per worker id (a straggler's, soft_sync's)
        self.staleness_sum = 0
        self.hist = [0] * STALENESS_BINS
        self.last_reject = ""
        self.bytes_pushed = self.bytes_pulled = 0
        self.zero_steps = 0  # rejected on the device: steps of zero that the version counts
        # steps taken with the sender's finiteness verdict unread (GradUpdate.finite a
        # tensor): (verdict, staleness), counted as applied until settle() reads them at once
        self._unread: list[tuple[torch.Tensor, int]] = []
        self.log: list[PushRecord] | None = None  # every push, in order (server.record)

    def note(self, u: GradUpdate, r: PushResult) -> None:
        """Log a push and what the rule did with it, where a log is kept."""
        if self.log is not None:
            self.log.append(PushRecord(u.worker_id, u.version, r.staleness, r.status, u.batches))

    def count_samples(self, worker_id: int, n: int) -> None:
        self.samples += n
        self.samples_by[worker_id] = self.samples_by.get(worker_id, 0) + n

    def count_dropped(self, worker_id: int) -> None:
        self.dropped += 1
        self.dropped_by[worker_id] = self.dropped_by.get(worker_id, 0) + 1

    def count_applied(self, staleness: int, n: int) -> None:
        self.applied += n
        self.staleness_sum += staleness * n
        self.hist[min(staleness, STALENESS_BINS - 1)] += n

    def count_unread(self, verdict: torch.Tensor, staleness: int) -> None:
        """An update applied with its verdict unread: counted as applied until read."""
        self.count_applied(staleness, 1)
        self._unread.append((verdict, staleness))
        if len(self._unread) >= UNREAD_LIMIT:
            self.settle()

    def count_rejected(self, reason: str) -> None:
        self.rejected += 1
        self.last_reject = reason

    def settle(self) -> None:
        """Read the unread verdicts, all in one transfer: a non-finite update, whose step was a
        step of zero, moves from applied to rejected."""
        if not self._unread:
            return
        finite = torch.stack([v for v, _ in self._unread]).tolist()
        for ok, (_, staleness) in zip(finite, self._unread, strict=True):
            if not ok:
                self.count_applied(staleness, -1)
                self.count_rejected("non-finite values (NaN or inf)")
                self.zero_steps += 1
        self._unread.clear()

    def stats(self, version: int) -> ServerStats:
        self.settle()
        return ServerStats(
            version=version,
            applied=self.applied,
            dropped=self.dropped,
            rejected=self.rejected,
            samples=self.samples,
            staleness_sum=self.staleness_sum,
            staleness_hist=tuple(self.hist),
            last_reject=self.last_reject,
            bytes_pushed=self.bytes_pushed,
            bytes_pulled=self.bytes_pulled,
            zero_steps=self.zero_steps,
            samples_by=dict(self.samples_by),
            dropped_by=dict(self.dropped_by),
        )

    def state(self) -> dict:
        """The checkpoint's entries (a shard's state_dict holds them beside its own)."""
        self.settle()
        return {
            "counters": [self.applied, self.dropped, self.rejected, self.samples],
            "staleness": [self.staleness_sum, *self.hist],
            "bytes": [self.bytes_pushed, self.bytes_pulled],
            "zero_steps": self.zero_steps,
            "samples_by": dict(self.samples_by),
            "dropped_by": dict(self.dropped_by),
        }

    def load(self, state: dict) -> None:
        """From :meth:`state`'s entries (older checkpoints lack bytes, zero_steps, samples_by,
        dropped_by)."""
        self.applied, self.dropped, self.rejected, self.samples = map(int, state["counters"])
        self.staleness_sum, *hist = map(int, state["staleness"])
        self.hist = list(hist)
        self.bytes_pushed, self.bytes_pulled = map(int, state.get("bytes", (0, 0)))
        self.zero_steps = int(state.get("zero_steps", 0))
        self.samples_by = {int(k): int(v) for k, v in state.get("samples_by", {}).items()}
        self.dropped_by = {int(k): int(v) for k, v in state.get("dropped_by", {}).items()}
        self._unread.clear()  # their counts are the restored state's now
