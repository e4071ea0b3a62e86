"""Processes that say what they are: ``ps`` and ``top`` show ``rltrain: actor 3``.

A GPU box runs a trainer and a dozen or more children that all started as the same Python
command line; named, a slow or leaking one can be told apart (issue 36). ``setproctitle``
rewrites the command line that ``ps`` shows (and the name ``top`` shows); where it is not
installed, the kernel's 15-character process name is set instead, which ``top`` and
``ps -e`` show.
"""

from __future__ import annotations

import contextlib
from pathlib import Path


def set_title(title: str) -> None:
    """Name this process ``title`` (``rltrain: actor 3``) for ``ps`` and ``top``."""
    try:
        import setproctitle
    except ImportError:
        with contextlib.suppress(OSError):  # not Linux, or /proc not mounted
            Path("/proc/self/comm").write_text(title[:15])
        return
    setproctitle.setproctitle(title)


def title_of(role: str, index: int) -> str:
    """What a process of ``role`` number ``index`` is called."""
    return f"rltrain: {role} {index}"
