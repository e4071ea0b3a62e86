"""A one-line live progress display (stderr); periodic plain lines when not on a terminal."""

from __future__ import annotations

import contextlib
import contextvars
import errno
import os
import select
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any, TextIO


def process_start_time() -> float:
    """When this process started (``time.time()`` scale), read from /proc: the command's start,
    interpreter start-up and imports included. Where there is no /proc: now."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # clock ticks after boot
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return time.time()
    return time.time() - max(0.0, uptime - ticks / os.sysconf("SC_CLK_TCK"))


_quiet: contextvars.ContextVar[bool] = contextvars.ContextVar("rltrain_quiet", default=False)
"""silenced(): the command's own lines off in this thread (a ContextVar, not a swapped
sys.stdout: review 86 found that hid other threads' prints and the user's env's)."""


@contextlib.contextmanager
def silenced(on: bool = True) -> Iterator[None]:
    """A command's own lines off, in the calling thread, for a caller that wants none (the
    API's ``quiet=True``): what it says through :func:`say` and :class:`Progress`'s live and
    closing lines. Its notes (:func:`say` with ``note``, :meth:`Progress.note`: a fault, a
    restore, a setting that changes nothing) go to stderr, as warnings and errors do."""
    token = _quiet.set(on or _quiet.get())
    try:
        yield
    finally:
        _quiet.reset(token)


def quiet() -> bool:
    """Whether the calling thread's command is :func:`silenced`."""
    return _quiet.get()


def say(text: str = "", note: bool = False) -> None:
    """One of a command's own lines, on stdout; under :func:`silenced` nothing, or where it
    is a ``note`` (something the user should act on), the line on stderr."""
    if not _quiet.get():
        print(text)
    elif note:
        print(text, file=sys.stderr)


class Progress:
    """``update(fraction, text)`` redraws a bar on a TTY; elsewhere prints every ``every`` s."""

    def __init__(self, label: str, stream: TextIO | None = None, every: float = 10.0) -> None:
        self.label = label
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.every = every
        self._last = 0.0
        self._width = 0

    def update(self, fraction: float | None, text: str, force: bool = False) -> None:
        """``fraction`` None: no bar and no percentage (work whose length is not known, as
        one game's: a bar at 0% until its end says nothing)."""
        if _quiet.get():
            return
        if fraction is None:
            line = f"{self.label} {text}"
        else:
            fraction = min(max(fraction, 0.0), 1.0)
            bar = f"[{'#' * int(fraction * 20)}{'.' * (20 - int(fraction * 20))}] "
            line = f"{self.label} {bar if self.tty else ''}{fraction:4.0%} {text}"
        if self.tty:
            pad = max(0, self._width - len(line))
            self.stream.write("\r" + line + " " * pad)
            self._width = len(line)
            self.stream.flush()
        elif force or time.monotonic() - self._last >= self.every:
            self.stream.write(f"{line}\n")
            self.stream.flush()
            self._last = time.monotonic()

    def note(self, text: str) -> None:
        """A line that stays (an event: a fault, a restore), printed above the live bar."""
        if self.tty and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self._width = 0
        self.stream.write(f"{self.label} {text}\n")
        self.stream.flush()

    def close(self, text: str = "") -> None:
        if self.tty:
            self.stream.write("\r" + " " * self._width + "\r")
        if text and not _quiet.get():
            self.stream.write(f"{self.label} {text}\n")
        self.stream.flush()


class Paced:
    """A :class:`Progress` for a hot loop, cheap to call every step: nothing is shown for the
    first ``quiet`` seconds (a short job prints nothing), then at most one redraw per
    ``every`` seconds; ``text`` is built only for the redraws."""

    def __init__(self, label: str, quiet: float = 2.0, every: float = 0.5) -> None:
        self.label, self.every = label, every
        self.start = time.monotonic()
        self._next = self.start + quiet
        self._bar: Progress | None = None

    def update(self, fraction: float | None, text: Callable[[float], str]) -> None:
        """``text(seconds)``: the line after ``seconds`` since the start; ``fraction`` as
        :meth:`Progress.update`'s."""
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + self.every
        self._bar = self._bar or Progress(self.label)
        self._bar.update(fraction, text(now - self.start))

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


class Unfailing:
    """A stream a long command (train, bench) prints to, whose failure does not stop it: a
    reader that went away (``| head``, a closed terminal's pipe) or a full disk under a log
    would otherwise end a run in its first print, before its first checkpoint. The stream's
    descriptor then points at /dev/null (its buffer drains there) and one line on stderr
    says so; TensorBoard, the checkpoints and summary.json are written as ever."""

    def __init__(self, stream: TextIO, name: str) -> None:
        self.stream, self.name = stream, name
        self.lost: str | None = None  # why it failed, once it has

    def write(self, text: str) -> int:
        if self.lost is None:
            try:
                return self.stream.write(text)
            except OSError as e:
                self._lose(e)
        return len(text)

    def flush(self) -> None:
        if self.lost is None:
            try:
                self.stream.flush()
            except OSError as e:
                self._lose(e)

    def _lose(self, error: OSError) -> None:
        self.lost = error.strerror or type(error).__name__
        with contextlib.suppress(OSError, ValueError, AttributeError):  # (a file-less one)
            os.dup2(os.open(os.devnull, os.O_WRONLY), self.stream.fileno())
        with contextlib.suppress(OSError, ValueError):
            self.stream.flush()  # what it held goes to /dev/null
        if self.name != "stderr":
            with contextlib.suppress(OSError, ValueError):
                print(
                    f"rltrain: {self.name} failed ({self.lost}); the run goes on without its "
                    "lines: TensorBoard, the checkpoints and summary.json hold its figures",
                    file=sys.stderr,
                    flush=True,
                )

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding, ...
        return getattr(self.stream, name)


@contextlib.contextmanager
def unfailing_output() -> Iterator[None]:
    """stdout and stderr as :class:`Unfailing` streams inside the block."""
    saved = sys.stdout, sys.stderr
    sys.stdout = Unfailing(sys.stdout, "stdout")
    sys.stderr = Unfailing(sys.stderr, "stderr")
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


def stdout_failed(error: OSError) -> bool:
    """Whether ``error`` is stdout's: its reader gone (its end of the pipe polls POLLERR) or
    its disk full (a full disk's error without a file name: stdout's, or another file's
    write, which ends a short command all the same). Then its descriptor points at
    /dev/null: what is left goes nowhere."""
    if isinstance(error, BrokenPipeError):
        poll = select.poll()
        with contextlib.suppress(OSError, ValueError):
            poll.register(sys.stdout.fileno(), select.POLLOUT)
        if not any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poll.poll(0)):
            return False
    elif error.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EIO) or error.filename:
        return False
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return True
