"""Processes that say what they are: ``ps`` and ``top`` show ``rltrain: actor 3``.

A GPU box runs a trainer and a dozen or more children that all started as the same Python
command line; named, a slow or leaking one can be told apart. ``setproctitle``
rewrites the command line that ``ps`` shows (and the name ``top`` shows); where it is not
installed, the kernel's 15-character name is set instead (``rl actor 3``), which ``top``
and ``ps -e`` show. The thread runtime's roles are threads: each names its thread so
(``top -H``, ``ps -L``). Ray titles its processes after the class placed on them, so
the Ray runtime places a subclass of that name (``ray::rltrain: actor 3``; ``ray.remote``).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
from pathlib import Path

PR_SET_NAME = 15  # prctl(2): the calling thread's name, 15 characters and a NUL


def title_of(role: str, index: int) -> str:
    """What a process of ``role`` number ``index`` is called."""
    return f"rltrain: {role} {index}"


def short_title(role: str, index: int) -> str:
    """The same within the kernel's 15 characters."""
    return f"rl {role} {index}"[:15]


def set_title(role: str, index: int) -> None:
    """Name this process for ``ps`` and ``top``."""
    try:
        import setproctitle
    except ImportError:
        with contextlib.suppress(OSError):  # not Linux, or /proc not mounted
            Path("/proc/self/comm").write_text(short_title(role, index))
        return
    setproctitle.setproctitle(title_of(role, index))


def set_thread_name(role: str, index: int) -> None:
    """Name the calling thread (Linux; elsewhere nothing happens)."""
    with contextlib.suppress(OSError, AttributeError, TypeError):
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        libc.prctl(PR_SET_NAME, short_title(role, index).encode(), 0, 0, 0)
