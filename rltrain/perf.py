"""Where a process's wall time goes: named phases, reported as shares (``perf/time/*``).

Every actor, learner and worker keeps one :class:`PhaseTimer`. Its calls time their phases
(env step, policy inference, learner forward/backward, exchanges with the server, ...) and the
gap between two calls counts as ``wait`` (for the driver to hand it work: a full rollout queue,
a busy learner). Each call's result carries the seconds since the previous result, keyed
``role/phase``; the driver sums them per role and TensorBoard shows each phase's share.
"""

from __future__ import annotations

import collections
import contextlib
import time
from collections.abc import Iterator, Mapping

from rltrain.records import Role

PHASES = {
    "env": "waiting for the environments' step (ale-py's threads, or stepping Gymnasium envs)",
    "inference": "the acting policy's forward pass, action sampling and sending actions",
    "collate": "turning steps into a rollout, stacking a learner batch, loading parameters",
    "learn": "the learner's forward and backward passes, targets and gradient clipping",
    "exchange": "a push and the parameters it returns (a barrier's wait included)",
    "pull": "fetching the latest parameters from the server",
    "sample": "dqn: drawing a replay batch",
    "wait": "between calls: waiting for the driver to hand out work",
}


class PhaseTimer:
    """Seconds per phase since the last :meth:`take`; plain Python, one per process."""

    def __init__(self, role: Role) -> None:
        self.role = role
        self._seconds: dict[str, float] = {}
        self._mark = time.perf_counter()  # the end of the last call (or the start)
        self._in_call = False

    def begin(self) -> None:
        """A call starts: the time since the last one ended was a wait."""
        now = time.perf_counter()
        if not self._in_call:
            self.add("wait", now - self._mark)
            self._mark = now
        self._in_call = True

    def add(self, phase: str, seconds: float) -> None:
        self._seconds[phase] = self._seconds.get(phase, 0.0) + seconds

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        t = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - t)

    def take(self) -> dict[str, float]:
        """The call ends: its phases (and the wait before it), keyed ``role/phase``."""
        self._mark = time.perf_counter()
        self._in_call = False
        out = {f"{self.role}/{k}": v for k, v in self._seconds.items()}
        self._seconds = {}
        return out


def merge(into: dict[str, float], more: Mapping[str, float]) -> dict[str, float]:
    """Sum ``more``'s seconds into ``into`` (in place) and return it."""
    for k, v in more.items():
        into[k] = into.get(k, 0.0) + v
    return into


def shares(seconds: Mapping[str, float]) -> dict[str, float]:
    """Each ``role/phase``'s share of its role's total time (the processes of a role summed)."""
    totals: dict[str, float] = {}
    for key, v in seconds.items():
        role = key.split("/", 1)[0]
        totals[role] = totals.get(role, 0.0) + v
    return {
        k: v / totals[k.split("/", 1)[0]]
        for k, v in seconds.items()
        if totals[k.split("/", 1)[0]] > 0
    }


def biggest(seconds: Mapping[str, float]) -> str:
    """The largest phase of each role, for the live line: ``learner learn 81%, actor wait 55%``."""
    top: dict[str, tuple[str, float]] = {}
    for key, share in shares(seconds).items():
        role, phase = key.split("/", 1)
        if role not in top or share > top[role][1]:
            top[role] = (phase, share)
    return ", ".join(f"{r} {p} {s:.0%}" for r, (p, s) in sorted(top.items()))


class RateWindow:
    """A running total's rate per second over the last ``seconds`` of wall time (fewer at
    the start): counts that arrive in bursts (a rollout's steps at once) give a steady rate
    at every log point, and a 0 only when nothing arrived for the whole window."""

    def __init__(self, seconds: float, total: float = 0.0, now: float | None = None) -> None:
        self.seconds = seconds
        t = time.time() if now is None else now
        self._start = t
        self._points: collections.deque[tuple[float, float]] = collections.deque([(t, total)])

    def add(self, total: float, now: float | None = None) -> None:
        """The running total now (it only grows)."""
        self._points.append((time.time() if now is None else now, total))

    def rate(self, now: float | None = None) -> float:
        """(the total now - the total ``seconds`` ago) / the window's length."""
        t = time.time() if now is None else now
        begin = t - self.seconds
        # keep the newest point at or before the window's start: the total there
        while len(self._points) > 1 and self._points[1][0] <= begin:
            self._points.popleft()
        span = t - max(begin, self._start)
        if span <= 0:
            return 0.0
        return (self._points[-1][1] - self._points[0][1]) / span
