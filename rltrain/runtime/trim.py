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

Trimming takes back what is free at the time of the trim; it does not stop the next hour's
pieces from scattering. Those come from the arenas: glibc gives each thread that allocates
a heap of its own (up to eight a core), and a piece freed by one thread goes back to the
arena that handed it out. A learner's process runs 13 threads (the learn, the requests it
serves, the rollouts read from their slots, the pulls, the checkpoints): 14 arenas, each
holding its own free pieces, and over a quiet hour of Pong its memory rose 19.9% (the floor
some 6% an hour) with a trim every minute and Python's own allocations flat (session 83,
docs/faults.md). With two arenas a process (``MALLOC_ARENA_MAX=2``, the setting glibc's
manual gives for this) the same soak rose 3.4% in the learner, its floor flat, and no slower
(3.86k frames/s against 3.8k). So :func:`keep_trimmed` first caps the process's arenas at
:data:`ARENAS` (``mallopt(M_ARENA_MAX)``; a process started with ``MALLOC_ARENA_MAX`` set
keeps its own), before the threads of the run have allocated.

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
from typing import Any, cast

EVERY_S = 60.0
"""Seconds between two trims."""

ARENAS = 2
"""The arenas (heaps) that a process's threads share (glibc's ``M_ARENA_MAX``)."""

_M_ARENA_MAX = -8  # glibc's malloc.h

_started: set[int] = set()  # the process ids whose thread runs (a fork inherits the set)
_lock = threading.Lock()


def _glibc(name: str, *argtypes: Any) -> Any:
    """glibc's function ``name`` taking ``argtypes`` and returning an int, or None where the
    C library this interpreter runs on has none (macOS, musl)."""
    try:
        fn = getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError):  # not glibc
        return None
    fn.argtypes, fn.restype = list(argtypes), ctypes.c_int
    return fn


@functools.cache  # (once a process: a look-up by name ran ldconfig, 10 ms)
def malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim(pad)``, or None where the C library has none."""
    return cast(Callable[[int], int] | None, _glibc("malloc_trim", ctypes.c_size_t))


@functools.cache
def _mallopt() -> Callable[[int, int], int] | None:
    return cast(Callable[[int, int], int] | None, _glibc("mallopt", ctypes.c_int, ctypes.c_int))


def cap_arenas(n: int = ARENAS) -> bool:
    """Let this process's threads share ``n`` arenas from now on; False where there is no
    glibc, or where the environment set a cap at the start (``MALLOC_ARENA_MAX``, or
    ``GLIBC_TUNABLES``' ``glibc.malloc.arena_max``). Arenas made before stay, and glibc fixes
    its limit once nine exist: a Ray worker, whose threads allocated before the actor was
    placed in it, keeps those (set ``MALLOC_ARENA_MAX=2`` before ``ray start`` to cap them)."""
    fn = _mallopt()
    if fn is None or "MALLOC_ARENA_MAX" in os.environ:
        return False
    if "glibc.malloc.arena_max" in os.environ.get("GLIBC_TUNABLES", ""):
        return False
    return bool(fn(_M_ARENA_MAX, n))


def trim() -> bool:
    """Give every free page of this process's heaps back now; True when some were."""
    fn = malloc_trim()
    return bool(fn(0)) if fn is not None else False


def keep_trimmed(every_s: float = EVERY_S) -> bool:
    """Trim this process every ``every_s`` seconds from now on, on a daemon thread (one per
    process, however often it is called), its arenas capped first (:func:`cap_arenas`);
    False where there is nothing to call."""
    fn = malloc_trim()
    if fn is None:
        return False
    with _lock:
        if os.getpid() in _started:
            return True
        _started.add(os.getpid())
    cap_arenas()

    def loop() -> None:
        while True:
            time.sleep(every_s)
            fn(0)

    threading.Thread(target=loop, name="rltrain-trim", daemon=True).start()
    return True
