"""Whether the Ray cluster's head still answers: a run whose head is gone stops in seconds.

Every process of a run on Ray hangs from the head's GCS (Ray's global control store). When
the head stops (``ray stop``, its machine lost), the run's calls fail as if each process had
died (``ActorUnavailableError``: "Ray restarts it", which it never will), the shard guard
waits two minutes for shards to come back, calls that read Ray's tables (``ray.nodes()``)
block, and after a minute Ray's core worker ends the driver itself ("Failed to connect to
GCS within 60 seconds"), with no checkpoint and no summary.json.

A thread connects to the head's port once a second (a TCP connect, which a GCS that is up
accepts at once and one that is gone refuses, or lets time out where its machine is gone);
a lost call, and the Ray runtime's waits, ask it first: :class:`ClusterLost` once the head
has not answered for :data:`PATIENCE_S` seconds, and the run ends through its own fault path
(summary.json, the processes released) well within Ray's minute.
"""

from __future__ import annotations

import functools
import socket
import threading
import time
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from rltrain.faults import ClusterLost

PATIENCE_S = 5.0
"""How long the head may not answer before the run takes the cluster for lost: above a
network hiccup, well under Ray's own minute (``gcs_rpc_server_reconnect_timeout_s``)."""

EVERY_S = 1.0
"""How often the thread connects to the head."""

FAILS = 2
"""Connects that failed in a row before a silent head is taken for lost."""


class HeadWatch:
    """Connects to the head's ``host:port`` every ``every`` seconds, in a thread of its own;
    :meth:`check` raises :class:`ClusterLost` once none has answered for ``patience`` s."""

    def __init__(
        self,
        host: str,
        port: int,
        patience: float = PATIENCE_S,
        every: float = EVERY_S,
        local: bool = False,
    ) -> None:
        """``local``: the head is this run's own Ray instance (said so when it is lost)."""
        self.host, self.port, self.patience, self.every = host, port, patience, every
        self.local = local
        self.ended = ""  # why the session ended, where Ray said so itself (guarded)
        self.last_ok = time.monotonic()
        self.error = ""  # why the last connect failed ("" when it answered)
        self.failed = 0  # connects refused or timed out since the last that answered
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def start(self) -> HeadWatch:
        self._thread = threading.Thread(target=self._run, name="rltrain-head", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.probe()

    def probe(self) -> bool:
        """One connect to the head; True if it answered."""
        try:
            with socket.create_connection((self.host, self.port), timeout=self.every):
                pass
        except OSError as e:
            with self._lock:  # (the thread and a caller's check may probe at once)
                self.error = e.strerror or str(e) or type(e).__name__
                self.failed += 1
            return False
        with self._lock:
            self.last_ok, self.error, self.failed = time.monotonic(), "", 0
        return True

    def lost(self) -> str:
        """Why the cluster is lost ("" while its head answers, or has not been silent long):
        silent for the patience, asked and not answered at least :data:`FAILS` times in a
        row, the last of them now. A silence without failed connects is the thread's, not
        the head's (a loaded machine left it unscheduled for seconds: explore109 ended two
        healthy runs as "no answer"); the connect made here settles it."""
        if self.ended:
            return self.ended
        silent = time.monotonic() - self.last_ok
        if silent < self.patience:
            return ""
        if self.probe() or self.failed < FAILS:  # one connect now: the failures may be old
            return ""  # (a hiccup, then a thread left unscheduled: review88)
        silent = time.monotonic() - self.last_ok
        said = f"has not answered for {silent:.0f}s ({self.error or 'no answer'})"
        if self.local:
            return (
                f"lost the run's Ray instance: its GCS server at {self.host}:{self.port} {said}, "
                "and Ray ends its processes with it (killed, by `ray stop` or for memory?)"
            )
        return (
            f"lost the Ray cluster: its head at {self.host}:{self.port} {said}, and the run's "
            "processes on the cluster went with it (a `ray stop` on the head, or its machine lost)"
        )

    def check(self) -> None:
        """:class:`ClusterLost` once the head is lost: cheap while the thread saw it answer
        within the patience (it reads what the thread saw); past it, one connect (up to
        ``every`` seconds)."""
        why = self.lost()
        if why:
            raise ClusterLost(why)

    def confirm(self) -> None:
        """After a call failed as if its process died: return at once if the head answers;
        else wait for it (up to the patience) and raise :class:`ClusterLost` if it does not
        come back, so the loss is told as the cluster's, not as a process Ray restarts."""
        while not self.probe():
            self.check()
            self._stop.wait(0.25)


_watch: HeadWatch | None = None
P = ParamSpec("P")
R = TypeVar("R")


def watch(address: str, local: bool = False) -> None:
    """Watch the head at ``address`` (HOST:PORT) for this process's Ray session (``local``:
    its own instance); only where it answers now: a path to the head this process cannot
    connect to (Ray may reach it by another) must never fail a healthy run."""
    global _watch
    unwatch()
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if host and port.isdigit():
        watched = HeadWatch(host.strip("[]"), int(port), local=local)
        if watched.probe():
            _watch = watched.start()


def unwatch() -> None:
    global _watch
    if _watch is not None:
        _watch.stop()
    _watch = None


def watched() -> bool:
    """Whether this process watches a head (the driver does; Ray's worker processes do not)."""
    return _watch is not None


def gone() -> bool:
    """Whether the watched head is lost: nothing of the run is left on the cluster to ask or
    stop (and a Ray Client session, disconnected, would start a new Ray on the next call)."""
    return _watch is not None and bool(_watch.lost())


def check() -> None:
    """:class:`ClusterLost` once the head has stopped answering (nothing while unwatched)."""
    if _watch is not None:
        _watch.check()


def confirm() -> None:
    """After a lost call: :class:`ClusterLost` if it was the head that went (see
    :meth:`HeadWatch.confirm`); nothing while unwatched."""
    if _watch is not None:
        _watch.confirm()


def guarded(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn`` (a wait or get of Ray's) with a ``ConnectionError`` taken for the cluster's loss
    where a head is watched: a Ray Client session (ray://) whose server is gone raises it
    ("Client is shutting down") once its own reconnect grace (30 s) has passed."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except ConnectionError as e:
            if _watch is None:
                raise
            why = str(e).rstrip(".")  # ("Client is shutting down.")
            _watch.ended = _watch.ended or (
                f"lost the Ray cluster: the connection to its head at {_watch.host}:"
                f"{_watch.port} ended ({why}), and the run's processes on the cluster went with it"
            )
            raise ClusterLost(_watch.ended) from None

    return wrapper
