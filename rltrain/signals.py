"""Ctrl-C, SIGTERM and SIGHUP: the first stops a run gracefully, the second at once.

The first SIGINT, SIGTERM or SIGHUP (the terminal or ssh session closed; not under ``nohup``,
which ignores it) raises ``KeyboardInterrupt`` in the main thread; the trainer
catches it, writes a final checkpoint and ``summary.json`` (``stopped_by: interrupt``) and
shuts Ray down. A second one, while that is under way, exits immediately with code 130.

``ray.init`` installs its own SIGTERM handler (it exits without cleaning up), so
:func:`install` is called again after Ray has started.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType

from rltrain.pauses import resume_all

EXIT_INTERRUPTED = 130
FINAL_CHECKPOINT = "stopping after a final checkpoint"
IN_START_UP = "stopping: the run is still starting, so there is no new checkpoint to write"
BENCH_RESULTS = "stopping; the modes that finished keep their results"  # a bench: no checkpoint
STOPPING = "stopping"  # eval, plot, reapply: nothing to keep
FINAL_EVALUATION = "the final checkpoint is written: stopping without the final evaluation"
_received = 0
_stopping = FINAL_CHECKPOINT  # what the first signal starts (graceful's ``stopping``)
_deferring = 0  # depth of deferred() blocks in the main thread
_deferred = False  # the first signal came inside one: raise as the block ends
_on_quit: list[Callable[[], None]] = []  # on_quit's hooks
_checkpointed = False  # the command's run has a checkpoint (checkpointed)
STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""The signals that stop a command: a terminal's Ctrl-C, a scheduler's SIGTERM (Slurm's
``scancel``, systemd's stop), a closed terminal's SIGHUP (which killed a run at once, with no
final checkpoint)."""


def _say(line: str) -> None:
    with contextlib.suppress(OSError):  # (a closed terminal: EIO)
        os.write(2, line.encode())


def _handler(signum: int, frame: FrameType | None) -> None:
    global _received, _deferred
    _received += 1
    if _received == 1:
        name = signal.Signals(signum).name
        # (a scheduler's SIGTERM or a closed terminal's SIGHUP has no Ctrl-C to press)
        again = f"a second {name} or Ctrl-C:"
        again = "press Ctrl-C again to" if signum == signal.SIGINT else again
        _say(f"\nrltrain: {name}: {_stopping} ({again} quit at once)\n")
        if _deferring:
            _deferred = True
            return
        raise KeyboardInterrupt
    # (what the graceful stop had written by now stays: it may have written all of it)
    kept = _stopping in (FINAL_CHECKPOINT, FINAL_EVALUATION, IN_START_UP)
    left = "; --resume takes its newest checkpoint" if kept else ""
    left = left if _checkpointed else ""  # (none yet: nothing to resume from)
    _say(f"rltrain: stopped at once, before the graceful stop finished{left}\n")
    resume_all()  # processes paused by an injected fault must not outlive us stopped
    for hook in _on_quit:
        with contextlib.suppress(Exception):
            hook()
    os._exit(EXIT_INTERRUPTED)


def on_quit(hook: Callable[[], None]) -> None:
    """Run ``hook`` (quick, no locks) when a second signal quits at once, skipping the exit's
    finalizers: the process runtime removes its forkserver's socket so."""
    if hook not in _on_quit:
        _on_quit.append(hook)


def install() -> None:
    """Route :data:`STOPS` through the two-stage handler (main thread only); a SIGHUP that
    is ignored (``nohup``) stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in STOPS:
        if sig != signal.SIGHUP or signal.getsignal(sig) != signal.SIG_IGN:
            signal.signal(sig, _handler)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Hold the first signal's ``KeyboardInterrupt`` until the block ends: a message half
    written to a child's pipe (a rollout's, then its slots' descriptors) would leave the
    child reading out of step, and the graceful stop's calls to it (the learner process's
    final checkpoint) would fail. Signals reach the main thread only; elsewhere a no-op.
    A second signal still stops at once."""
    global _deferring, _deferred
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _deferring += 1
    try:
        yield
    finally:
        _deferring -= 1
        if not _deferring and _deferred:
            _deferred = False
            raise KeyboardInterrupt


def checkpointed() -> None:
    """The run has a checkpoint (written, or resumed from): a quit at once names --resume
    (it did where none existed: a cluster lost before the first)."""
    global _checkpointed
    _checkpointed = True


def stopping_now(stopping: str) -> None:
    """What a first signal from now on says the command does (a run whose final checkpoint
    is written: it skips the final evaluation, :data:`FINAL_EVALUATION`)."""
    global _stopping
    _stopping = stopping


def interrupted() -> bool:
    """Whether a signal came during this command (its :func:`graceful` block): a run that
    met its stop and was interrupted in its final evaluation exits 130 all the same."""
    return _received > 0


def pending() -> bool:
    """Whether a first signal came inside a :func:`deferred` block (it raises as it ends):
    work there may cut itself short."""
    return _deferred


@contextlib.contextmanager
def graceful(stopping: str = FINAL_CHECKPOINT) -> Iterator[None]:
    """Install the handler for one command; restore the previous handlers afterwards.
    ``stopping``: what the first signal's line says the command does now."""
    global _received, _stopping, _deferred, _checkpointed
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {sig: signal.getsignal(sig) for sig in STOPS}
    _received, _stopping, _deferred, _checkpointed = 0, stopping, False, False
    install()
    try:
        yield
    finally:
        _stopping = FINAL_CHECKPOINT
        for sig, handler in saved.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def interrupts_held() -> Iterator[None]:
    """Hold Ctrl-C (SIGINT) until the block ends, then raise it: a KeyboardInterrupt inside
    an import leaves the module half-built in ``sys.modules``, and every later call in that
    interpreter (a notebook's kernel) fails on it (explore119: torch's "bad call flags"
    SystemError, a missing torch._utils at the final checkpoint, a segfault). Outside a
    command's :func:`graceful` handler, which :func:`deferred` needs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: got.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if got:
        raise KeyboardInterrupt
