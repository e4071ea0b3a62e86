"""Hung processes: a call that does not return is taken for a hang and its process killed, so
that the runtime restarts it as after a crash.

A process can stop without dying: SIGSTOP (a debugger, a stray ``kill -STOP``), a deadlock,
a syscall stuck on a dead network file system. Nothing fails then: an a3c run waits at its stop
for the stopped worker's call, a barrier waits for its gradient, and an appo run's trainer waits
for the learner process that holds the shards. The watch turns such a hang into the fault the
runtimes already recover from (DistBelief's and Gorila's answer to a lost machine: restart it
and carry on): a process whose call has run ``faults.hang_timeout_s``, and 10 times as long as
any call of its role has taken, is killed. A process's first call (its start-up: imports, envs,
a compile) is timed only once a start-up of its role has been seen to end, against 10 times
the longest: a restarted actor whose env hangs in its first rollout is killed too.

The watch runs in a thread of its own: the trainer's thread may be the one that waits (for
the shards' statistics, in the stopped learner's process).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rltrain.faults import FaultAction, FaultEvent

SLOWER = 10.0  # a call this many times the longest of its role's is a hang, not a slow call
NEVER = ("policy",)  # the policy worker's one call serves the whole run: timed by its beats
EVERY_S = 1.0
GAP_S = 10.0  # a look this late means the watch (the trainer's process) was itself stopped
PING_S = 5.0  # a shard that does not run a no-op call in this long is hung (< GAP_S)


@dataclass(frozen=True)
class Beats:
    """A heartbeat for ``role``, whose one call lasts the run (the policy worker's serve):
    ``count()`` moves while it is alive, and ``waits(remote)`` says whether another
    process's call waits on it (an actor's unanswered request)."""

    role: str
    count: Callable[[], int]
    waits: Callable[[Any], bool]


class HangWatch:
    """Watches the calls in flight of ``calls`` (a pool's ``calls``: future -> (remote, ...))
    from a daemon thread; kills the process of a call that has run too long (see the module).

    One process at a time, the one whose call has waited longest, and the others' clocks
    start again: where one hung process holds up the rest (the actors wait for a stopped
    learner), only it is killed. No clock runs while a process starts (being restarted, or
    in its first call: imports, a compile), since the others may wait for it at a barrier,
    but a stopped process's (state T) and its own once its role's start-up has a known
    length; a thread (the thread runtime) is said once, not killed."""

    def __init__(
        self,
        calls: dict[Any, Any],
        limit_s: float | None,
        say: Callable[[str], None],
        counters: Any,
        restarting: Callable[[], list[Any]] = list,
        shards: Callable[[], list[Any]] = list,
        answered: set[int] | None = None,
        hung: set[int] | None = None,
    ) -> None:
        self.calls, self.limit_s, self.say, self.counters = calls, limit_s, say, counters
        self.restarting = restarting  # the pool's processes being restarted
        self.shards = shards  # the server's shard processes (Ray's): asked before a caller
        self.since: dict[Any, tuple[float, Any]] = {}  # future -> (when first seen, remote)
        self.clock: dict[Any, float] = {}  # future -> when its hang clock (re)started
        self.first: set[Any] = set()  # futures that are their process's first call
        self.longest: dict[str, float] = {}  # role -> the longest call of it seen to end
        self.start_up: dict[str, float] = {}  # role -> the longest first call of it seen to end
        # id() of remotes whose process has ended a call: the pool's (it sees every call end,
        # the watch only those that outlast a look), kept up to date by both
        self.answered: set[int] = set() if answered is None else answered
        self.hung: set[int] = set() if hung is None else hung  # id() of those killed (ctx's)
        self.killed: set[Any] = set()  # futures whose process the watch killed
        self.said: set[int] = set()  # threads said to hang (once each)
        self.beats: Beats | None = None  # see :meth:`beating`
        self.seen: dict[Any, int] = {}  # future -> the beat count last seen (the beating role)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def beating(self, beats: Beats) -> None:
        """Time ``beats.role``'s call by its heartbeat: its clock starts again whenever the
        count moves (the first move ends its start-up), and the clock of a call that waits on
        it does not run, so that a worker that stops beating is killed, not its callers."""
        self.beats = beats

    def start(self) -> None:
        if self.limit_s is not None and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="rltrain-hangs", daemon=True)
            self._thread.start()

    def close(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(EVERY_S):
            now = time.monotonic()
            try:
                if now - last > GAP_S:
                    self.skip(now - last - EVERY_S)
                self.check(now)
            except Exception as e:  # noqa: BLE001 - a safety net must never end the run
                self.say(f"the hang watch stopped: {type(e).__name__}: {e}")
                return
            last = now

    def skip(self, seconds: float) -> None:
        """The watch itself was held ``seconds`` (Ctrl-Z stopped the whole process group, a
        paused VM): so was everything it times, and no clock counts that time (after a
        Ctrl-Z of a minute, ``fg`` had the oldest call killed)."""
        for ref in self.clock:
            self.clock[ref] += seconds
        self.since = {ref: (t + seconds, r) for ref, (t, r) in self.since.items()}

    def check(self, now: float) -> str | None:
        """One look (the thread's, every second); returns the process killed, if any."""
        calls = dict(self.calls)  # (one C call: the driver's thread may change the dict)
        for ref in [r for r in self.since if r not in calls]:  # ended, or failed
            started, remote = self.since.pop(ref)
            self.clock.pop(ref, None)
            if ref not in self.killed:
                took, role = now - started, remote.role
                if ref not in self.first:  # (a start-up's time is no call's time)
                    self.longest[role] = max(self.longest.get(role, 0.0), took)
                else:
                    self.start_up[role] = max(self.start_up.get(role, 0.0), took)
                self.answered.add(id(remote))
            self.killed.discard(ref)
            self.first.discard(ref)
            self.seen.pop(ref, None)
        back = self.restarting()
        for remote in back:  # its next call is a new process's first
            self.answered.discard(id(remote))
        timed, starting = [], bool(back)
        beats = self.beats
        count = beats.count() if beats is not None else 0
        for ref, entry in calls.items():
            remote = entry[0]
            beating = beats is not None and remote.role == beats.role
            if ref not in self.since:
                self.since[ref], self.clock[ref] = (now, remote), now
                if id(remote) not in self.answered:
                    self.first.add(ref)
                if beating:
                    self.seen[ref] = count
            if (remote.role in NEVER and not beating) or ref in self.killed:
                continue
            if beating and count != self.seen[ref]:  # alive (and past its start-up)
                self.seen[ref], self.clock[ref] = count, now
                self.answered.add(id(remote))
            elif beats is not None and beats.waits(remote):  # waits on the beating worker
                self.clock[ref] = now
            starting |= id(remote) not in self.answered or not remote.is_up()
            timed.append((self.clock[ref], ref, remote))
        if self.limit_s is None:
            return None
        if starting:  # the others may wait for it (a barrier): no clock runs while a process
            for _, ref, remote in timed:  # starts, but a stopped process's (SIGSTOP in the
                if not stopped(remote) and not self._timed_start(remote):  # start-up: the
                    self.clock[ref] = now  # policy worker's before its first beat), nor one
            timed = [(self.clock[ref], ref, remote) for _, ref, remote in timed]  # of known length
        over = [t for t in timed if now - t[0] >= self._limit(t[2])]
        if not over:
            return None
        # a process stopped by a signal first: a call waiting for it at a barrier is as old;
        # and once its call is past faults.hang_timeout_s, before its role's 10x has passed (a
        # SIGSTOPped learner that holds the shards had an actor waiting on it killed first)
        held = [t for t in timed if now - t[0] >= self.limit_s and stopped(t[2])]
        started, ref, remote = min(held or over, key=lambda t: (not stopped(t[2]), t[0]))
        for _, other, _ in timed:  # they may have waited for it: their clocks start again
            if other is not ref:
                self.clock[other] = now
        if not stopped(remote):  # a call waiting on a hung shard: the shard, not the caller
            shard = self._silent_shard()
            if shard is not None:
                self.clock[ref] = now
                why = f"{remote.role} {remote.index}'s call has run {now - started:.0f}s"
                return self._kill_shard(shard, f"{why} and shard {shard.index}")
        name, longest = f"{remote.role} {remote.index}", self.longest.get(remote.role, 0.0)
        setting = f"faults.hang_timeout_s={self.limit_s:g}"
        if self._timed_start(remote) and not stopped(remote):
            why = f"{name}'s first call (its start-up) has run {now - started:.0f}s"
            known = f"{SLOWER:g}x the longest {remote.role} start-up: "
            known += f"{self.start_up[remote.role]:.1f}s"
            return self._kill(ref, remote, f"{why} ({setting}, {known})")
        if id(remote) not in self.answered:  # a stopped process is timed in any start-up
            why = f"{name} has been stopped (SIGSTOP?) {now - started:.0f}s in its start-up"
            return self._kill(ref, remote, f"{why} ({setting})")
        if ref in self.seen:  # the beating worker
            why = f"{name}'s heartbeat stopped {now - started:.0f}s ago"
            return self._kill(ref, remote, f"{why} ({setting})")
        limit = f"{setting}, {SLOWER:g}x its longest: {longest:.1f}s" if longest else setting
        return self._kill(ref, remote, f"{name}'s call has run {now - started:.0f}s ({limit})")

    def _silent_shard(self) -> Any:
        """The first shard process that does not answer a no-op call in :data:`PING_S`."""
        for shard in self.shards():
            answers = getattr(shard, "answers", None)
            if answers is not None and shard.is_up() and not answers(PING_S):
                return shard
        return None

    def _kill_shard(self, shard: Any, why: str) -> str:
        """Kill a hung shard: its callers' calls fail, and the server guard restores it (from
        the latest checkpoint) as after a crash."""
        event = FaultEvent(action="kill", target="shard", index=shard.index)
        try:
            done = shard.signal(FaultAction("kill", event))
        except (OSError, RuntimeError) as e:
            done = f"could not kill shard {shard.index}: {e}"
        self.say(
            f"{why} does not answer ({PING_S:g}s): the shard is taken for hung and killed "
            f"({done}); it is restored as after a crash"
        )
        self.counters.hung += 1
        return f"shard {shard.index}"

    def is_hung_thread(self, remote: Any) -> bool:
        """Whether ``remote`` is a thread (the thread runtime) whose call was taken for hung."""
        return id(remote) in self.said

    def _timed_start(self, remote: Any) -> bool:
        """Whether ``remote`` is in a start-up that is timed: its first call, in a process
        that is up, of a role whose start-up has been seen to end before (a restart)."""
        return id(remote) not in self.answered and remote.is_up() and remote.role in self.start_up

    def _limit(self, remote: Any) -> float:
        known = self.start_up if self._timed_start(remote) else self.longest
        return max(self.limit_s or 0.0, SLOWER * known.get(remote.role, 0.0))

    def _kill(self, ref: Any, remote: Any, why: str) -> str | None:
        name = f"{remote.role} {remote.index}"
        if not hasattr(remote, "signal"):  # a thread of the trainer's process
            if id(remote) not in self.said:
                self.said.add(id(remote))
                self.counters.hung += 1
                self.say(
                    f"{why}: taken for hung; a thread cannot be killed: the run goes on "
                    "without it, and its stop does not wait for it"
                )
            return None
        event = FaultEvent(action="kill", target=remote.role, index=remote.index)
        try:
            done = remote.signal(FaultAction("kill", event))
        except (OSError, RuntimeError) as e:  # gone meanwhile (its loss is on its way)
            done = f"could not kill {name}: {e}"
        self.say(f"{why}: taken for hung and killed ({done}); it restarts as after a crash")
        self.counters.hung += 1
        self.killed.add(ref)
        self.hung.add(id(remote))
        self.answered.discard(id(remote))  # its next process's first call is its start-up
        return name


def stopped(remote: Any) -> bool:
    """Whether a child process of this machine's process runtime is stopped (SIGSTOP, a
    debugger: state T in /proc); False where that cannot be read (Ray, threads, not Linux),
    and without waiting for a process not up yet (a Ray process waiting for CPUs held the
    watch in ``pid()`` for as long, and raised when the stop killed it unstarted)."""
    if not remote.is_up() or remote.node() is not None or not hasattr(remote, "signal"):
        return False
    try:
        stat = Path(f"/proc/{remote.pid()}/stat").read_text()
    except (OSError, ValueError):
        return False
    return stat.rpartition(")")[2].split()[:1] == ["T"]  # (the name may hold spaces)
