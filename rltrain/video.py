"""Video files of ``rltrain eval --video``: H.264 mp4 through imageio-ffmpeg, else GIF.

imageio-ffmpeg ships its own ffmpeg binary (a dependency; ``IMAGEIO_FFMPEG_EXE`` points it at
another); when it cannot be imported, or has no binary for this platform, the video is a GIF
and :attr:`VideoWriter.note` says why. Frames go to a temporary name that is renamed when the
video is complete, so an interrupted episode leaves no half file.
"""

from __future__ import annotations

import abc
import math
import os
from collections.abc import Generator
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any, Literal

import numpy as np
from PIL import Image

from rltrain.errors import RLTrainError

VideoFormat = Literal["mp4", "gif"]


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
        """What the file leaves out of what it was given, or why it is not the format asked
        for ('' for nothing)."""

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


def open_video(stem: Path, fps: float, fmt: VideoFormat = "mp4") -> VideoWriter:
    """``<stem>.mp4`` (H.264) or, asked for or when imageio-ffmpeg is missing, ``<stem>.gif``."""
    if fmt == "mp4":
        encoder, why = mp4_encoder()
        if encoder is not None:
            return Mp4Writer(stem.with_name(f"{stem.name}.mp4"), fps, encoder)
    writer = GifWriter(stem.with_name(f"{stem.name}.gif"), fps)
    if fmt == "mp4":
        writer.note = f"{why}: wrote a GIF instead of an mp4 (pip install imageio-ffmpeg)"
    return writer


def mp4_encoder() -> tuple[ModuleType | None, str]:
    """(the imageio_ffmpeg module, '') when it can encode, else (None, why not)."""
    try:
        import imageio_ffmpeg
    except ImportError:
        return None, "imageio-ffmpeg is not installed"
    try:
        imageio_ffmpeg.get_ffmpeg_exe()
    except RuntimeError:
        return None, "imageio-ffmpeg found no ffmpeg binary (IMAGEIO_FFMPEG_EXE names one)"
    return imageio_ffmpeg, ""


class Mp4Writer(VideoWriter):
    """H.264 mp4 (yuv420p, as every player reads) through ``imageio_ffmpeg.write_frames``:
    raw rgb24 frames piped into its ffmpeg. yuv420p halves the colour resolution, so an odd
    height or width is padded by one edge pixel (not rescaled: macro_block_size=2)."""

    def __init__(self, path: Path, fps: float, encoder: ModuleType) -> None:
        super().__init__(path, fps)
        self._encoder = encoder
        self._gen: Generator[None, Any, None] | None = None
        self._shape: tuple[int, ...] = ()
        self._size = (0, 0)  # the first frame's height and width, before padding

    def add(self, frame: np.ndarray) -> None:
        rgb = frame if frame.ndim == 3 else np.repeat(frame[:, :, None], 3, axis=2)
        height, width = rgb.shape[:2]
        rgb = np.pad(rgb, ((0, height % 2), (0, width % 2), (0, 0)), mode="edge")
        if self._gen is None:
            self._start(rgb.shape)
            self._size = (height, width)
        elif rgb.shape != self._shape:  # (explore96: the padded sizes were said, and no way out)
            raise VideoError(
                f"render() gave a frame of {height}x{width} after frames of {self._size[0]}x"
                f"{self._size[1]}: an mp4's frames all have one size (a GIF fits them to the "
                "first's: video format gif)"
            )
        assert self._gen is not None
        try:
            self._gen.send(np.ascontiguousarray(rgb, np.uint8))
        except OSError as e:  # ffmpeg quit (write_frames raises IOError with its command)
            self._abort()
            said = (str(e).splitlines() or ["no message"])[0]
            raise VideoError(f"ffmpeg could not write {self.path}: {said}") from e

    def _start(self, shape: tuple[int, ...]) -> None:
        self._shape = shape
        height, width = shape[:2]
        self._gen = self._encoder.write_frames(
            str(self._tmp),
            (width, height),
            pix_fmt_in="rgb24",
            pix_fmt_out="yuv420p",
            fps=self.fps,
            macro_block_size=2,  # sizes are even already: no rescaling
            ffmpeg_log_level="error",
            output_params=["-f", "mp4"],  # the .part name has no suffix ffmpeg knows
        )
        self._gen.send(None)  # start ffmpeg

    def _finish(self) -> None:
        if self._gen is None:
            raise VideoError(f"no frames for {self.path}")
        self._gen.close()  # ffmpeg encodes what it holds and exits
        self._gen = None
        if not self._tmp.is_file() or self._tmp.stat().st_size == 0:
            raise VideoError(f"ffmpeg wrote no {self.path} (its messages are above)")

    def _abort(self) -> None:
        if self._gen is not None:
            self._gen.close()
            self._gen = None


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
            cut = f"the GIF holds the first {kept:,} of {self._given:,} frames (an mp4 holds all)"
            self.note = "; ".join(x for x in (self.note, cut) if x)
        first, *rest = self._frames
        first.save(
            self._tmp,
            format="GIF",
            save_all=True,
            append_images=rest,
            duration=gif_delays(len(self._frames), self._every / self.fps),
            loop=0,
        )

    def _abort(self) -> None:
        self._frames.clear()


def gif_delays(n: int, seconds: float) -> list[int]:
    """Milliseconds each of ``n`` frames of ``seconds`` each shows for: a GIF's delays are whole
    hundredths of a second, so each frame ends at its hundredth nearest the true time (30 frames/s:
    30, 30, 40, ...) and the whole plays at the game's speed (explore107: each rounded up played
    Pendulum 20% slow)."""
    ends = [round(100 * seconds * (i + 1)) for i in range(n)]
    return [10 * max(1, b - a) for a, b in zip([0, *ends], ends, strict=False)]
