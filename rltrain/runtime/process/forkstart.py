"""The process runtime's forkserver, started before the command imports torch.

Torch-free on purpose: ``rltrain train`` starts the forkserver first thing
(:func:`rltrain.launch.run_train`), so that its imports of :data:`PRELOAD` (torch, the envs
and the algorithms, the bulk of a start) run beside the command's own, on another core,
instead of after them. (``torch.multiprocessing``'s context is this one: it re-exports
multiprocessing's; importing it registers the tensor reductions, which every sender of
tensors does.)
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import threading
import weakref
from collections.abc import Iterator
from multiprocessing import connection, forkserver, popen_forkserver, util
from multiprocessing import context as mp_context
from typing import Any

from rltrain import signals

PRELOAD = [
    "rltrain.runtime.process.child",
    "rltrain.rl.actor",
    "rltrain.rl.worker",
    "rltrain.rl.gorila",
    "rltrain.rl.run.periodic",
    "rltrain.supervised.worker",
]
"""What the forkserver imports before it forks: every child starts with them imported."""

_context: Any = None


def context() -> Any:
    """The forkserver context, started at most once per process."""
    global _context
    if _context is None:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD)
        with _stops_ignored():
            forkserver.ensure_running()
        _context = ctx
        signals.on_quit(remove_socket)  # a second Ctrl-C skips the finalizers that would
    return _context


class _Popen(popen_forkserver.Popen):
    """multiprocessing's forkserver Popen, with an exit code that two threads may ask for.
    Its ``poll`` reads the code from the sentinel once; a second thread already waiting on
    the sentinel (a reader thread's join beside the trainer's) then reads the pipe's end and
    records 255 for a child that exited 0 (``poll``'s "the forkserver got killed" branch)."""

    def __init__(self, process_obj: Any) -> None:
        self._reading = threading.Lock()
        super().__init__(process_obj)

    def poll(self, flag: int = os.WNOHANG) -> int | None:
        if self.returncode is None and flag != os.WNOHANG:  # (a join without a timeout)
            connection.wait([self.sentinel])  # (unlocked: it must not hold up the others)
        with self._reading:
            return super().poll(os.WNOHANG)


class Process(mp_context.ForkServerProcess):
    """A process of the forkserver (:func:`context` starts it first): one whose exit code
    every thread reads alike (:class:`_Popen`)."""

    @staticmethod
    def _Popen(process_obj: Any) -> _Popen:  # noqa: N802 - multiprocessing's name
        return _Popen(process_obj)


_semaphores: weakref.WeakSet[Any] = weakref.WeakSet()  # those made here and not yet freed


def Semaphore(value: int = 0) -> Any:  # noqa: N802 - a factory, named as the class it makes
    """A semaphore of the forkserver's context: a child takes it as a constructor argument
    (a POSIX semaphore; no pipe, no pickle when it is used)."""
    semaphore = context().Semaphore(value)
    _semaphores.add(semaphore)
    signals.on_quit(unlink_semaphores)
    return semaphore


def unlink_semaphores() -> None:
    """Unlink the named semaphores this process made, and tell the resource tracker: what
    their finalizers do at exit, for a second Ctrl-C's exit that skips them (the tracker then
    unlinked them itself and warned of "leaked semaphore objects", explore93)."""
    names = {getattr(getattr(s, "_semlock", None), "name", None) for s in list(_semaphores)}
    args = {(name,) for name in names if name}  # (SemLock._cleanup's)
    registry = getattr(util, "_finalizer_registry", {})  # (each runs once, then is gone)
    for finalizer in list(registry.values()):
        if getattr(finalizer, "_args", None) in args:
            with contextlib.suppress(Exception):  # (unlinked already)
                finalizer()  # SemLock._cleanup: sem_unlink, and the tracker told


def socket_path() -> str | None:
    """The forkserver's socket, in this process's ``pymp-*`` directory (None: not started)."""
    return getattr(forkserver._forkserver, "_forkserver_address", None)


def remove_socket(path: str | None = None) -> None:
    """Remove the forkserver's socket ``path`` (default: this process's), then its directory
    if nothing else is in it: what multiprocessing's finalizers do at exit, for an exit that
    skips them. Only the socket: the directory may be a parent process's (multiprocessing
    hands its ``tempdir`` down), holding sockets of its own."""
    path = path or socket_path()
    if path:
        with contextlib.suppress(OSError):
            os.unlink(path)
        with contextlib.suppress(OSError):  # not empty, or gone
            os.rmdir(os.path.dirname(path))


@contextlib.contextmanager
def _stops_ignored() -> Iterator[None]:
    """Start the forkserver with Ctrl-C, SIGTERM and SIGHUP ignored, as its children are
    (``child.main``): a terminal's Ctrl-C, and a scheduler's SIGTERM, reach the whole process
    group. The forkserver ignores SIGINT only once its preloads are imported
    (multiprocessing's ``forkserver.main``), so a Ctrl-C in the first seconds printed a
    traceback from inside torch's import; and a SIGTERM killed it, so a child that died in the
    trainer's graceful stop could not be started again. Python leaves an ignored signal
    ignored across the exec, and the forkserver's children start with it ignored; the
    forkserver ends when the trainer does (its ``alive`` pipe)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    stops = signals.STOPS  # (SIGHUP stays ignored there: the trainer stops its children)
    saved = {sig: signal.signal(sig, signal.SIG_IGN) for sig in stops}
    try:
        yield
    finally:  # (None: a handler set from C, which Python cannot put back: the default then)
        for sig, handler in saved.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
