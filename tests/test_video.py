"""rltrain.video: an H.264 mp4 through imageio-ffmpeg that ffmpeg reads back, even-sized for
yuv420p; a GIF when asked for or when imageio-ffmpeg cannot be imported; no half files."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from rltrain.video import GifWriter, Mp4Writer, open_video


def is_mp4(path: Path) -> bool:
    """An ISO base media file: it opens with an ``ftyp`` box (size, b"ftyp", brand)."""
    head = path.read_bytes()[:12]
    return head[4:8] == b"ftyp" and head[8:12] in (b"isom", b"mp42", b"iso2", b"avc1")


def test_mp4_of_synthetic_frames_is_a_real_mp4_of_even_size(tmp_path: Path) -> None:
    """Odd-sized gray frames at 12.5 fps: an H.264 mp4 ffmpeg reads back, padded to even."""
    imageio_ffmpeg = pytest.importorskip("imageio_ffmpeg")
    frames = [np.full((21, 33), 10 * i, np.uint8) for i in range(10)]
    with open_video(tmp_path / "clip", 12.5) as writer:
        assert isinstance(writer, Mp4Writer)
        for frame in frames:
            writer.add(frame)
    video = tmp_path / "clip.mp4"
    assert writer.path == video and writer.note == "" and is_mp4(video)
    assert imageio_ffmpeg.count_frames_and_secs(str(video)) == (10, pytest.approx(0.8))
    meta = next(imageio_ffmpeg.read_frames(str(video)))
    assert meta["size"] == (34, 22) and meta["codec"].startswith("h264")
    assert not list(tmp_path.glob(".*.part"))


def test_gif_when_asked_for_or_without_imageio_ffmpeg(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    frames = [np.full((6, 8, 3), 30 * i, np.uint8) for i in range(4)]
    with open_video(tmp_path / "asked", 15, "gif") as writer:
        for frame in frames:
            writer.add(frame)
    assert isinstance(writer, GifWriter) and writer.note == ""
    assert Image.open(tmp_path / "asked.gif").n_frames == 4
    monkeypatch.setitem(sys.modules, "imageio_ffmpeg", None)  # import fails
    with open_video(tmp_path / "fallback", 15) as writer:
        for frame in frames:
            writer.add(frame)
    assert writer.path == tmp_path / "fallback.gif" and not (tmp_path / "fallback.mp4").exists()
    assert writer.note.startswith("imageio-ffmpeg is not installed: wrote a GIF")
    assert Image.open(tmp_path / "fallback.gif").n_frames == 4


def test_an_interrupted_mp4_leaves_no_file(tmp_path: Path) -> None:
    pytest.importorskip("imageio_ffmpeg")
    with pytest.raises(KeyboardInterrupt), open_video(tmp_path / "cut", 15) as writer:
        writer.add(np.zeros((8, 8), np.uint8))
        raise KeyboardInterrupt
    assert not list(tmp_path.iterdir())
