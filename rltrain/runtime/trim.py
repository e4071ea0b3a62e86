"""Hand the memory a process has freed back to the system, once a minute (glibc's
``malloc_trim``).

glibc keeps what a process frees for its next allocations, and gives back only the free
space at the top of each heap by itself. A learner's pass allocates and frees about 150 MB
of tensors (the minibatch, the activations, their gradients) in many sizes, several threads
allocate beside it (each in a heap of its own), and the free pieces left between live ones
are kept: over an hour of Pong the learner's process held about 4% more each half hour, all
of it free (session 81: ``malloc_trim`` run in the live process, through gdb, gave back 149 MB
of its 830 MB at 8 minutes and 105 MB at 12, and its memory in use rose 677 to 712 MB in
between). ``malloc_trim(0)`` returns every free page of every heap (``madvise``); what the next
pass needs comes back as fresh pages, one page fault each: a Pong learn after a trim took 62 ms
more than one without (1.35 s against 1.29 s, 77k page faults against 30k; 190 MB given back
a trim), so once a minute it costs the learner about 0.1% of its time.

The ``rltrain`` command's process (the trainer: :func:`rltrain.cli.entry`) calls
:func:`keep_trimmed`, as each process the runtimes start does (a process-runtime child, a
Ray actor); not the Python of a notebook that calls :func:`rltrain.train` (its thread would
outlive the run), nor a bench's short-lived hogwild workers. Elsewhere than glibc (macOS,
musl) nothing happens.
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading
import time
from collections.abc import Callable

EVERY_S = 60.0
"""Seconds between two trims."""

_started: set[int] = set()  # the process ids whose thread runs (a fork inherits the set)
_lock = threading.Lock()


@functools.cache  # (once a process: a look-up by name ran ldconfig, 10 ms)
def malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim(pad)``, or None where the C library has none."""
    try:
        fn = ctypes.CDLL(None).malloc_trim  # the C library this interpreter runs on
    except (OSError, AttributeError):  # not glibc
        return None
    fn.argtypes, fn.restype = [ctypes.c_size_t], ctypes.c_int
    return fn


def trim() -> bool:
    """Give every free page of this process's heaps back now; True when some were."""
    fn = malloc_trim()
    return bool(fn(0)) if fn is not None else False


def keep_trimmed(every_s: float = EVERY_S) -> bool:
    """Trim this process every ``every_s`` seconds from now on, on a daemon thread (one per
    process, however often it is called); False where there is nothing to call."""
    fn = malloc_trim()
    if fn is None:
        return False
    with _lock:
        if os.getpid() in _started:
            return True
        _started.add(os.getpid())

    def loop() -> None:
        while True:
            time.sleep(every_s)
            fn(0)

    threading.Thread(target=loop, name="rltrain-trim", daemon=True).start()
    return True
