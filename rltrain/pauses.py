"""Injected pauses (``faults.events``' ``pause``): SIGSTOP a process now and SIGCONT it later,
and continue every paused process on any exit path (the end of a run, a second Ctrl-C)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from dataclasses import dataclass

# Processes stopped by an injected pause, pid -> what continues them. The timer runs apart
# from the driver's loop: a driver waiting on a paused shard must not be what keeps it paused.
# Every exit path (the end of a run, a second Ctrl-C) continues them all.
_STOPPED: dict[int, _Pause] = {}
_STOPPED_LOCK = threading.Lock()


@dataclass
class _Pause:
    timer: threading.Timer
    backstop: subprocess.Popen[bytes] | None  # continues the process if we are gone by then


def pause(pid: int, seconds: float) -> None:
    """SIGSTOP ``pid`` now and SIGCONT it after ``seconds``. Noted before it stops, so that a
    second Ctrl-C in between (:func:`resume_all`) continues it."""
    timer = threading.Timer(seconds, _resume, args=(pid,))
    timer.daemon = True
    with _STOPPED_LOCK:
        _STOPPED[pid] = _Pause(timer, _backstop(pid, seconds))
    try:
        os.kill(pid, signal.SIGSTOP)
    except OSError:  # gone already
        with _STOPPED_LOCK:
            stopped = _STOPPED.pop(pid, None)
        _continue(pid, stopped)
        raise
    timer.start()


def _backstop(pid: int, seconds: float) -> subprocess.Popen[bytes] | None:
    """A process of its own that continues ``pid`` a second after the pause should have
    ended, in case this process is gone by then (SIGKILLed, or the OOM killer): a stopped
    child cannot see that the trainer ended (its ``watch_trainer`` thread is stopped with it)
    and would stay stopped for good. Its own session, so that :func:`_continue` ends its
    ``sleep`` with it."""
    script = f"sleep {seconds + 1:.3f}; kill -CONT {pid}"
    with contextlib.suppress(OSError):  # no sh here: the timer alone continues it
        quiet = subprocess.DEVNULL
        return subprocess.Popen(
            ["sh", "-c", script], stdin=quiet, stdout=quiet, stderr=quiet, start_new_session=True
        )
    return None


def _resume(pid: int) -> None:
    with _STOPPED_LOCK:
        stopped = _STOPPED.pop(pid, None)
    _continue(pid, stopped)


def _continue(pid: int, stopped: _Pause | None) -> None:
    if stopped is None:
        return
    stopped.timer.cancel()
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGCONT)
    if stopped.backstop is not None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(stopped.backstop.pid, signal.SIGKILL)
        stopped.backstop.wait()


def resume_all() -> None:
    """Continue every process an injected pause has stopped. Safe from a signal handler: it
    takes no lock (the handler may have interrupted the main thread inside :func:`pause`,
    holding it; one dict operation at a time is atomic), and a SIGCONT to a process that runs
    already does nothing."""
    for pid in list(_STOPPED):
        _continue(pid, _STOPPED.pop(pid, None))
