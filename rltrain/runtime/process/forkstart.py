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
import signal
import threading
from collections.abc import Iterator
from multiprocessing import forkserver
from typing import Any

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
        with _sigint_ignored():
            forkserver.ensure_running()
        _context = ctx
    return _context


@contextlib.contextmanager
def _sigint_ignored() -> Iterator[None]:
    """Start the forkserver with Ctrl-C ignored, as its children are (``child.main``): a
    terminal's Ctrl-C reaches the whole process group, and the forkserver ignores SIGINT only
    once its preloads are imported (multiprocessing's ``forkserver.main``), so a Ctrl-C in the
    first seconds printed a traceback from inside torch's import. Python leaves an ignored
    SIGINT ignored across the exec; the trainer stops the forkserver itself."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:  # (None: a handler set from C, which Python cannot put back: the default then)
        signal.signal(signal.SIGINT, signal.SIG_DFL if saved is None else saved)
