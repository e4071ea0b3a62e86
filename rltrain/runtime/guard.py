"""The shard guard: watch the server's shards and restore them all when one is lost.

Imports neither Ray nor multiprocessing: the server it watches says how to ask its shards
(:class:`Watched`: Ray's shards, :class:`rltrain.runtime.ray.wire.RayServer`; the process
runtime's shards in their learner's process, :class:`rltrain.runtime.process.HostedServer`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from rltrain.faults import PeerLost, ProcessLost, RestorePoint, RunFailed

Health = list[tuple[int, bool] | None]  # per shard (version, fenced); None: down


class Watched(Protocol):
    """What the guard asks of a server whose shards can be lost apart from the trainer."""

    def health(self) -> Health:
        """Blocking; raises :class:`RunFailed` for a shard that will not restart."""

    def ask_health(self) -> Any:
        """Send health requests; a handle for :meth:`answered`."""

    def answered(self, asked: Any) -> Health | None:
        """The health asked for, once every shard has answered (None before)."""

    def join_shard(self, index: int, worker_id: int) -> None:
        """Tell shard ``index`` alone that a worker joined."""

    def leave(self, worker_id: int) -> None: ...
    def join(self, worker_id: int) -> None: ...
    def load_state_dicts(
        self, states: Sequence[dict], restore_epoch: int | None = None
    ) -> None: ...


class ServerGuard:
    """Watches the server's shards; when one is lost, restores every shard from the latest
    restore point and counts the updates lost (DistBelief's recovery: a lost shard costs the
    work since the last checkpoint, never the run).

    All shards go back, not only the lost one: barrier rules and staleness need every shard
    at the same version. Shards are polled without blocking the driver: a health request is
    sent, and read on a later :meth:`poll` once it has answered.
    """

    POLL_S = 0.25  # the lost-update count is exact to within this many seconds of updates
    RESTART_TIMEOUT_S = 120.0

    def __init__(self, server: Watched, counters: Any, say: Callable[[str], None]) -> None:
        self.server, self.counters, self.say = server, counters, say
        self.point: RestorePoint | None = None
        self.last_seen = 0  # the highest version any shard reported
        self.left: set[int] = set()  # workers that left the barriers (they rejoin by pushing)
        self.joined: list[int] = []  # workers added mid-run (elastic): N grew by one each
        self._asked: Any = None  # health requests in flight (the server's handle)
        self._next = 0.0
        self.restore_epoch = 0  # restores so far: each starts a new one on every shard
        self.restored_from: RestorePoint | None = None  # the last restore's point

    def leave(self, worker_id: int) -> None:
        """Tell every shard a worker is gone, and remember it: a restarted shard is told again."""
        self.left.add(worker_id)
        try:
            self.server.leave(worker_id)
        except (ProcessLost, PeerLost):
            self.check()  # a shard is down too: the restore tells it

    def back(self, worker_id: int) -> None:
        """A worker that left came back (restarted): a restore no longer tells the shards it
        left. Its first push rejoins it on every shard; told again after a restore, each
        shard's barrier would step once without it (review88b)."""
        self.left.discard(worker_id)

    def join(self, worker_id: int) -> None:
        """A worker added mid-run: every shard counts it, and a restarted shard (built with
        the first N) is told again."""
        self.joined.append(worker_id)
        try:
            self.server.join(worker_id)
        except (ProcessLost, PeerLost):
            self.check()  # a shard is down too: the restore tells it

    def remember(self, point: RestorePoint) -> None:
        self.point = point
        self.last_seen = max(self.last_seen, point.version)

    def poll(self) -> bool:
        """Cheap: read answered health requests, send new ones; True if it restored."""
        if self._asked is not None:
            health = self.server.answered(self._asked)
            if health is None:
                return False  # a shard is busy (or paused): ask again later
            self._asked = None
            if self._observe(health):
                return self.restore()
        if time.time() >= self._next:
            self._asked = self.server.ask_health()
            self._next = time.time() + self.POLL_S
        return False

    def check(self) -> bool:
        """Blocking check (after a call failed because of a peer); True if it restored."""
        self._asked = None
        return self.restore() if self._observe(self.server.health()) else False

    def _observe(self, health: Sequence[tuple[int, bool] | None]) -> bool:
        """Record versions; True when a shard is down or fenced."""
        bad = False
        for h in health:
            if h is None or h[1]:
                bad = True
            elif h[0] >= 0:
                self.last_seen = max(self.last_seen, h[0])
        return bad

    def restore(self) -> bool:
        self._asked = None
        if self.point is None:
            raise RunFailed("a server shard was lost before any restore point existed")
        deadline = time.time() + self.RESTART_TIMEOUT_S
        while True:  # the runtime restarts dead shards; wait until every one answers
            health = self.server.health()
            if all(h is not None and h[0] >= 0 for h in health):
                break
            if time.time() >= deadline:
                down = [i for i, h in enumerate(health) if h is None]
                raise RunFailed(
                    f"server shard(s) {down} did not come back within {self.RESTART_TIMEOUT_S:.0f}s"
                )
            time.sleep(0.2)
        lost_shards = [i for i, h in enumerate(health) if h is not None and h[1]]
        if not lost_shards:
            return False  # a peer other than a shard was lost, or a false alarm
        seen = max([self.last_seen, *(h[0] for h in health if h is not None and not h[1])])
        lost = max(0, seen - self.point.version)
        for i in lost_shards:  # a restarted shard knows nothing of who joined (N is not state)
            for worker in self.joined:  # (told before it is unfenced, so it never steps short)
                self.server.join_shard(i, worker)
        # a new restore epoch: a push of parameters read before this restore is dropped by every
        # shard, whether it reaches one before its load (overwritten) or after (refused)
        self.restore_epoch += 1
        self.server.load_state_dicts(self.point.states, self.restore_epoch)
        self.restored_from = self.point
        for worker in self.left:  # nor of who left
            self.server.leave(worker)
        self.counters.shard_restores += len(lost_shards)
        self.counters.lost_updates += lost
        self.last_seen = self.point.version
        age = time.monotonic() - self.point.at  # (a learner's shards die with it: explore93)
        self.say(
            f"server shard(s) {lost_shards} lost; every shard restored from {self.point.label} "
            f"(version {self.point.version:,}, {age:.0f} s old); {lost:,} updates lost (last "
            f"version seen {seen:,})"
        )
        return True
