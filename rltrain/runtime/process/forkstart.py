"""The process runtime's forkserver, started before the command imports torch.

Torch-free on purpose: ``rltrain train`` starts the forkserver first thing
(:func:`rltrain.launch.run_train`), so that its imports of :data:`PRELOAD` (torch, the envs
and the algorithms, the bulk of a start) run beside the command's own, on another core,
instead of after them. (``torch.multiprocessing``'s context is this one: it re-exports
multiprocessing's; importing it registers the tensor reductions, which every sender of
tensors does.)
"""

from __future__ import annotations

import multiprocessing
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
        forkserver.ensure_running()
        _context = ctx
    return _context
