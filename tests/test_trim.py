"""Every process of a run hands its freed memory back to the system (rltrain.runtime.trim)."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from rltrain.runtime import process, trim

needs_glibc = pytest.mark.skipif(trim.malloc_trim() is None, reason="malloc_trim is glibc's")


def rss_kb() -> int:
    status = Path("/proc/self/status").read_text()
    return int(next(ln.split()[1] for ln in status.splitlines() if ln.startswith("VmRSS")))


@needs_glibc
def test_trim_gives_back_the_free_pages_that_glibc_keeps() -> None:
    """Blocks freed between live ones stay in the heap (glibc gives back only its top) until
    a trim: the fragmentation of a learner's passes, made on purpose."""
    libc = ctypes.CDLL(None)
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    size, n = 64 * 1024, 2_000  # under the mmap threshold: in the heap, 125 MB in all
    blocks = [libc.malloc(size) for _ in range(n)]
    for b in blocks:
        ctypes.memset(b, 1, size)  # touched: resident
    kept = blocks[9::10]  # every tenth stays live, the top of the heap among them
    for b in set(blocks) - set(kept):
        libc.free(b)
    try:
        before = rss_kb()
        assert trim.trim()
        released_mb = (before - rss_kb()) / 1024
        assert released_mb > 60, f"{released_mb:.0f} MB given back of the 110 MB freed"
    finally:
        for b in kept:
            libc.free(b)


def trim_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name == "rltrain-trim"]


@needs_glibc
def test_one_trimming_thread_per_process_however_often_it_is_asked() -> None:
    # (in a process of its own: the thread lasts as long as its process, and the tests'
    # process checks that a run leaves no rltrain thread behind)
    code = (
        "import threading; from rltrain.runtime import trim\n"
        "assert trim.keep_trimmed() and trim.keep_trimmed()\n"
        "print([t.name for t in threading.enumerate() if t.name == 'rltrain-trim'])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['rltrain-trim']"


class Threads:
    def trimming(self) -> list[str]:
        return trim_threads()


@needs_glibc
def test_a_process_of_the_runtime_keeps_itself_trimmed() -> None:
    r = process.Remote(Threads, role="actor", index=0)
    try:
        assert r.call("trimming").result(timeout=60) == ["rltrain-trim"]
    finally:
        r.kill()
        process.shutdown()


HEAPS = """
import ctypes, os, re, sys, tempfile, threading
from rltrain.runtime import trim
if sys.argv[1] == "capped":
    assert trim.keep_trimmed()
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
libc.fopen.restype, libc.fopen.argtypes = ctypes.c_void_p, [ctypes.c_char_p, ctypes.c_char_p]
libc.malloc_info.argtypes, libc.fclose.argtypes = [ctypes.c_int, ctypes.c_void_p], [ctypes.c_void_p]
all_in, done = threading.Barrier(7), threading.Event()
def allocate():
    block = libc.malloc(1000)  # the thread's first allocation: glibc picks its arena
    all_in.wait()
    done.wait()
    libc.free(block)
threads = [threading.Thread(target=allocate) for _ in range(6)]
for t in threads:
    t.start()
all_in.wait()  # six threads alive, each holding a block
path = os.path.join(tempfile.mkdtemp(), "info.xml")
f = libc.fopen(path.encode(), b"w")
libc.malloc_info(0, f)
libc.fclose(f)
done.set()
for t in threads:
    t.join()
print(len(re.findall(r"<heap nr=", open(path).read())))
"""


def heaps(how: str, **env: str) -> int:
    mine = ("MALLOC_ARENA_MAX", "MALLOC_ARENA_TEST", "GLIBC_TUNABLES", "LD_PRELOAD")  # (a cap,
    environ = {k: v for k, v in os.environ.items() if k not in mine} | env  # another malloc)
    out = subprocess.run(
        [sys.executable, "-c", HEAPS, how], capture_output=True, text=True, check=True, env=environ
    )
    return int(out.stdout)


@needs_glibc
def test_a_kept_trimmed_process_shares_two_arenas_among_its_threads() -> None:
    """Six threads that allocate at once get a heap each (the main one's beside), which keeps
    their free pieces apart (a learner's 13 threads held 14 arenas and grew 19.9% an hour):
    capped, they share two (trim.ARENAS)."""
    assert heaps("plain") >= 6  # (the control: what the cap changes)
    assert heaps("capped") == trim.ARENAS


@needs_glibc
def test_a_cap_set_by_the_user_is_kept() -> None:
    assert heaps("capped", MALLOC_ARENA_MAX="4") == 4
    assert heaps("capped", GLIBC_TUNABLES="glibc.malloc.arena_max=3") == 3
