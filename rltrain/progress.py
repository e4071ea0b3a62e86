"""A one-line live progress display (stderr); periodic plain lines when not on a terminal."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import TextIO


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


class Progress:
    """``update(fraction, text)`` redraws a bar on a TTY; elsewhere prints every ``every`` s."""

    def __init__(self, label: str, stream: TextIO | None = None, every: float = 10.0) -> None:
        self.label = label
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.every = every
        self._last = 0.0
        self._width = 0

    def update(self, fraction: float, text: str, force: bool = False) -> None:
        fraction = min(max(fraction, 0.0), 1.0)
        if self.tty:
            filled = int(fraction * 20)
            line = f"{self.label} [{'#' * filled}{'.' * (20 - filled)}] {fraction:4.0%} {text}"
            pad = max(0, self._width - len(line))
            self.stream.write("\r" + line + " " * pad)
            self._width = len(line)
            self.stream.flush()
        elif force or time.monotonic() - self._last >= self.every:
            self.stream.write(f"{self.label} {fraction:4.0%} {text}\n")
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
        if text:
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

    def update(self, fraction: float, text: Callable[[float], str]) -> None:
        """``text(seconds)``: the line after ``seconds`` since the start."""
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + self.every
        self._bar = self._bar or Progress(self.label)
        self._bar.update(fraction, text(now - self.start))

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
