"""The run context: what a run's plans share with the session that drives them.

``rltrain train`` and ``rltrain bench`` both start a runtime, a server with its guard and
processes of several roles, then hand the driver loop a plan. What the plans and the session
both need (the processes by role, the guard, the fault counters, the progress line) lives
here, once, instead of in the trainer's or the bench's attributes.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rltrain.driver import Done
from rltrain.faults import FaultAction, FaultCounters, PusherRule, RunFailed
from rltrain.records import Verdict
from rltrain.runtime.contract import Guard, RemoteProcess, Runtime

Say = Callable[[str], None]
END_GRACE_S = 3.0
"""How long the processes of an ended session have to close their objects before they are
killed."""


@dataclass
class RunContext:
    """One session's processes and fault handling, on whichever runtime runs them."""

    runtime: Runtime
    faults: FaultCounters
    say: Say
    """Prints a note above the progress line."""
    server: Any = None
    guard: Guard | None = None
    procs: dict[str, list[RemoteProcess]] = field(default_factory=dict)
    """The live processes by role ("actor", "learner", "worker", "shard", "replay")."""
    hung: set[int] = field(default_factory=set)
    """id() of the processes the hang watch killed (their loss is not a crash of theirs)."""
    restorable: bool = False
    """The shards hold the run's state (its checkpoint's, on a resume) and the guard keeps it:
    from here a stop writes a final checkpoint, and a signal's line says so (review 85: three
    tests of "the server is up" disagreed, and a Ctrl-C told "no checkpoint" wrote one)."""

    def shard_guard(self) -> Guard:
        """The server's guard, which every session sets as it starts the server."""
        assert self.guard is not None, "the guard starts with the server"
        return self.guard

    def add(self, role: str, remotes: list[RemoteProcess]) -> list[RemoteProcess]:
        self.procs[role] = remotes
        return remotes

    def everyone(self) -> list[RemoteProcess]:
        return [r for remotes in self.procs.values() for r in remotes]

    def all_up(self) -> bool:
        """Whether every process has started (checked without waiting)."""
        return all(r.is_up() for r in self.everyone())

    def respond(self, done: Done, rule: PusherRule, on_worker_loss: str) -> Verdict:
        """Count and report a lost or revived process (``rule``: the update rule it pushes
        under; ASYNC for one that does not push): "work", "wait" or "gone" for good."""
        if done.revived:  # back: a later loss of it is its own
            self.hung.discard(id(done.remote))
        return self.runtime.respond(
            done, rule, on_worker_loss, self.server, self.guard, self.faults, self.say
        )

    def forget(self, remote: RemoteProcess, error: BaseException | None = None) -> None:
        """A process gone for good leaves ``procs``; a role left with none fails the run,
        saying what the last one died of (``error``: an env's error in its constructor, say)."""
        left = [x for x in self.procs.get(remote.role, []) if x is not remote]
        self.procs[remote.role] = left
        if not left:
            why = f": the last one, {error}" if error is not None and str(error) else ""
            if id(remote) in self.hung:  # (its error says only that it died of a SIGKILL)
                why = f": the last one, {remote.role} {remote.index}, killed as hung"
                why += " (faults.hang_timeout_s)"
            raise RunFailed(f"every {remote.role} died and none will restart{why}")

    def inject(self, action: FaultAction) -> None:
        """Carry out one of ``faults.events`` (kill or pause a process)."""
        self.runtime.inject(action, self.procs, self.faults, self.say)

    def kill_all(self, grace: float = END_GRACE_S) -> None:
        """Stop every process for good (the end of the session, or a bug's way out):
        :func:`end_then_kill`."""
        end_then_kill(self.everyone(), grace)


def end_then_kill(remotes: list[RemoteProcess], grace: float = END_GRACE_S) -> None:
    """Those idle are asked to end first, each closing its object (an actor's envs: a user's
    env may flush in close()); then every one is killed, those still up after ``grace``
    seconds and those busy in a call (or not up) at once."""
    try:
        for r in remotes:
            with contextlib.suppress(Exception):  # (a Ray already going down)
                r.end()
        deadline = time.monotonic() + grace
        for r in remotes:
            with contextlib.suppress(Exception):
                r.ended(max(0.0, deadline - time.monotonic()))
    finally:  # (a Ctrl-C in the wait: every process still goes)
        for r in remotes:
            with contextlib.suppress(Exception):
                r.kill()
