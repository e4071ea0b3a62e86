"""Video files of ``rltrain eval --video``: mp4 through ffmpeg when it is on PATH, else GIF.

Frames go to a temporary name that is renamed when the video is complete, so an interrupted
episode leaves no half file.
"""

from __future__ import annotations

import abc
import math
import os
import shutil
import subprocess
import tempfile
from contextlib import suppress
from pathlib import Path
from types import TracebackType
from typing import IO

import numpy as np
from PIL import Image

from rltrain.errors import RLTrainError


class VideoError(RLTrainError):
    """A video that cannot be made: a failed encoder, frames of changing size."""


class VideoWriter(abc.ABC):
    """Frames in, one video file out; written to a temporary name and renamed when complete,
    so an interrupted episode leaves no half file."""

    def __init__(self, path: Path, fps: float) -> None:
        self.path = path
        self.fps = fps
        self._tmp = path.with_name(f".{path.name}.part")
        self.note = ""
        """What the file leaves out of what it was given ('' for nothing)."""

    @abc.abstractmethod
    def add(self, frame: np.ndarray) -> None:
        """One frame: uint8 [H, W] gray or [H, W, 3] RGB, the same size every time."""

    @abc.abstractmethod
    def _finish(self) -> None:
        """Write out ``self._tmp``."""

    @abc.abstractmethod
    def _abort(self) -> None:
        """Stop after an error; ``self._tmp`` is removed afterwards."""

    def __enter__(self) -> VideoWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if exc_type is None:
                self._finish()
                os.replace(self._tmp, self.path)
            else:
                self._abort()
        finally:
            self._tmp.unlink(missing_ok=True)


def open_video(stem: Path, fps: float) -> VideoWriter:
    """``<stem>.mp4`` when an ffmpeg with libx264 is on PATH, else ``<stem>.gif``."""
    ffmpeg = find_ffmpeg()
    if ffmpeg is not None:
        return Mp4Writer(stem.with_name(f"{stem.name}.mp4"), fps, ffmpeg)
    return GifWriter(stem.with_name(f"{stem.name}.gif"), fps)


def find_ffmpeg() -> str | None:
    """The ``ffmpeg`` on PATH if it can encode H.264 (libx264), else None."""
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        return None
    try:
        listed = subprocess.run(
            [ffmpeg, "-hide_banner", "-encoders"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return ffmpeg if "libx264" in listed.stdout else None


class Mp4Writer(VideoWriter):
    """H.264 mp4: raw rgb24 frames piped into ffmpeg, odd sizes padded by one edge pixel."""

    def __init__(self, path: Path, fps: float, ffmpeg: str) -> None:
        super().__init__(path, fps)
        self.ffmpeg = ffmpeg
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._shape: tuple[int, ...] = ()

    def add(self, frame: np.ndarray) -> None:
        rgb = frame if frame.ndim == 3 else np.repeat(frame[:, :, None], 3, axis=2)
        height, width = rgb.shape[:2]
        rgb = np.pad(rgb, ((0, height % 2), (0, width % 2), (0, 0)), mode="edge")
        if self._proc is None:
            self._start(rgb.shape)
        elif rgb.shape != self._shape:
            raise VideoError(f"frame of {rgb.shape} in a video of {self._shape}")
        assert self._proc is not None and self._proc.stdin is not None
        try:
            self._proc.stdin.write(np.ascontiguousarray(rgb, np.uint8).tobytes())
        except BrokenPipeError:
            self._fail()

    def _start(self, shape: tuple[int, ...]) -> None:
        self._shape = shape
        height, width = shape[:2]
        command = [
            self.ffmpeg, "-y", "-hide_banner", "-loglevel", "error",
            "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", f"{width}x{height}",
            "-r", f"{self.fps:g}", "-i", "-",
            "-an", "-vcodec", "libx264", "-pix_fmt", "yuv420p", "-f", "mp4", str(self._tmp),
        ]  # fmt: skip
        # a file, not a pipe: ffmpeg never blocks on its stderr; closed in _finish / _abort
        self._log = tempfile.TemporaryFile()  # noqa: SIM115
        self._proc = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=self._log
        )

    def _finish(self) -> None:
        if self._proc is None or self._proc.stdin is None:
            raise VideoError(f"no frames for {self.path}")
        with suppress(BrokenPipeError):
            self._proc.stdin.close()
        if self._proc.wait() != 0:
            self._fail()
        self._close_log()

    def _fail(self) -> None:
        said = b""
        if self._log is not None:
            self._log.seek(0)
            said = self._log.read()[-400:]
        self._abort()
        message = " ".join(said.decode(errors="replace").split()) or "no message"
        raise VideoError(f"ffmpeg could not write {self.path}: {message}")

    def _abort(self) -> None:
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.kill()
            self._proc.wait()
            if self._proc.stdin is not None:
                with suppress(BrokenPipeError):
                    self._proc.stdin.close()
        self._close_log()

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


class GifWriter(VideoWriter):
    """An animated GIF (Pillow, which matplotlib already brings); frames are kept as palette
    images (a byte a pixel; Atari screens have few colours, so the palette is exact) until
    the file is written, so at most :attr:`MAX_FRAMES` of them (336 MB of 210x160 screens).
    Above 50 fps every k-th frame is kept: browsers play a delay under 2/100 s as 1/10 s."""

    MAX_FRAMES = 10_000

    def __init__(self, path: Path, fps: float) -> None:
        super().__init__(path, fps)
        self._frames: list[Image.Image] = []
        self._every = max(1, math.ceil(fps / 50))
        self._given = 0

    def add(self, frame: np.ndarray) -> None:
        self._given += 1
        if (self._given - 1) % self._every or len(self._frames) >= self.MAX_FRAMES:
            return
        image = Image.fromarray(np.ascontiguousarray(frame, np.uint8))
        if image.mode == "RGB":
            image = image.convert("P", palette=Image.Palette.ADAPTIVE)
        self._frames.append(image)

    def _finish(self) -> None:
        if not self._frames:
            raise VideoError(f"no frames for {self.path}")
        kept = self._every * len(self._frames)
        if kept < self._given:
            self.note = (
                f"the GIF holds the first {kept:,} of {self._given:,} frames (mp4, with an "
                "ffmpeg that has libx264 on PATH, holds them all)"
            )
        first, *rest = self._frames
        first.save(
            self._tmp,
            format="GIF",
            save_all=True,
            append_images=rest,
            duration=10 * math.ceil(100 * self._every / self.fps),  # delays in 1/100 s
            loop=0,
        )

    def _abort(self) -> None:
        self._frames.clear()
