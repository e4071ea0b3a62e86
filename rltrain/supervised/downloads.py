"""How :mod:`rltrain.supervised.datasets` downloads: a copy that says how far it has come,
an MD5 of a file, and one download at a time into a folder."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

PROGRESS_S = 5.0
"""Seconds between a download's progress lines (explore100: CIFAR-10's 163 MB said nothing
for minutes after its "downloading" line)."""


def copy_saying(source: BinaryIO, out: BinaryIO, total: int, name: str) -> None:
    """Copy ``source`` into ``out`` a MB at a time, a line on stderr every
    :data:`PROGRESS_S`: ``name: 41.0 of 162.6 MB (25%)`` (``total``: 0 where unknown)."""
    done, said = 0, time.monotonic()
    while chunk := source.read(1 << 20):
        out.write(chunk)
        done += len(chunk)
        if time.monotonic() - said >= PROGRESS_S:
            said = time.monotonic()
            of = f" of {total / 2**20:.1f} MB ({100 * done / total:.0f}%)" if total else " MB"
            print(f"  {name}: {done / 2**20:.1f}{of}", file=sys.stderr, flush=True)


def md5_of(path: Path) -> str:
    """Hex MD5 of a file, read in chunks."""
    digest = hashlib.md5(usedforsecurity=False)
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


@contextlib.contextmanager
def one_at_a_time(folder: Path) -> Iterator[None]:
    """Hold ``folder`` for one download at a time: a cluster node's workers each load the
    data, and each downloaded the whole archive at once (explore100); the others wait, then
    find the files there. A lock on the folder itself leaves no file behind."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # (the lock goes with it)
