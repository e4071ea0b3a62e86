"""Filming one evaluation episode (``rltrain eval --video``): a frame per agent step, of the
game's screen or of what the agent sees (:mod:`rltrain.rl.evaluate` says what each shows)."""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import numpy as np

from rltrain.envs.adapt import channels_last_shape
from rltrain.envs.screen import RecordingEnv
from rltrain.video import VideoFormat, open_video

VideoView = Literal["game", "agent"]


def record_episode(
    env: RecordingEnv,
    act: Callable[[np.ndarray], Any],
    view: VideoView,
    out: Path,
    max_steps: int,
    video_format: VideoFormat = "mp4",
    on_step: Callable[[int], None] | None = None,
) -> tuple[Path, float | None, int, str]:
    """Play one episode with ``act(obs) -> action``, writing a frame per agent step: (video
    path, raw score, length, what the video leaves out or why it is a GIF); no score when the
    episode did not end in ``max_steps``. ``on_step(steps)`` after each step."""
    obs = env.reset()
    total, steps, done = 0.0, 0, False
    with open_video(out, env.fps, video_format) as writer:
        writer.add(env.screen() if view == "game" else frame_of(obs, env.channels))
        while not done and steps < max_steps:
            obs, reward, done = env.step(act(obs))
            total += reward
            steps += 1
            writer.add(env.screen() if view == "game" else frame_of(obs, env.channels))
            if on_step is not None:
                on_step(steps)
    return writer.path, total if done else None, steps, writer.note


def draft_of(stem: Path) -> Path:
    """Where the video ``stem`` is filmed (``.<name>.draft.mp4``): it takes its own name
    (:func:`publish`) once its evaluation has succeeded, so that a failed one (episodes that
    never ended, an env's error, Ctrl-C) leaves the last good video as it was."""
    return stem.with_name(f".{stem.name}.draft")


def publish(draft: Path, tag: str = "") -> Path:
    """The draft video under its own name, replacing an older one: its path now. ``tag``
    ("-cut": an episode that did not end in --max-steps) goes before the extension, so
    that the last good video stays."""
    final = draft.with_name(draft.name.removeprefix(".").replace(".draft", tag, 1))
    os.replace(draft, final)
    return final


def frame_of(obs: np.ndarray, channels: int = 1) -> np.ndarray:
    """An image to show for one observation: the newest image of a stack [k C, H, W] of
    ``channels`` C each (Atari's gray frame, an RGB image as it is; [H, W, C] and values in
    [0, 1] too; of a stack [k, H, W, C], the last), else a plot of the values (explore118:
    a float image was filmed black, 4 axes and a flattened Dict as bars ffmpeg refused)."""
    while obs.ndim > 3:  # a user's stack of images: the newest
        obs = obs[-1]
    if obs.ndim == 3:
        chw = np.moveaxis(obs, -1, 0) if channels_last_shape(obs.shape) else obs
        newest = as_pixels(chw[-max(channels, 1) :])
        return np.moveaxis(newest[:3], 0, -1) if len(newest) >= 3 else newest[0]  # not alpha
    v = np.clip(obs.astype(np.float32).reshape(-1), -3, 3)
    if len(v) > MAX_BARS:  # a square of gray cells, -3 black to 3 white, row by row
        side = math.ceil(math.sqrt(len(v)))
        cells = np.zeros(side * side, np.float32)
        cells[: len(v)] = v
        return ((cells.reshape(side, side) + 3) / 6 * 255).astype(np.uint8)
    # vector observations: a bar chart of the values, so that a video still shows the state
    bar = 16
    height, width = 64, bar * len(v)
    img = np.full((height, width), 255, np.uint8)
    for i, x in enumerate(v):
        top = int(height / 2 - x / 3 * (height / 2 - 2))
        lo, hi = sorted((top, height // 2))
        img[lo : hi + 1, bar * i + 3 : bar * i + 13] = 40
    return img


MAX_BARS = 128
"""Values of a vector observation drawn as bars (16 pixels each); more as a square of cells."""


def as_pixels(images: np.ndarray) -> np.ndarray:
    """uint8 pixels of images: as they are, or floats in [0, 1] scaled to 0-255."""
    if images.dtype == np.uint8:
        return images
    x = images.astype(np.float32)
    scale = 255.0 if x.size and float(np.nanmax(x)) <= 1.0 else 1.0
    return np.clip(np.nan_to_num(x * scale), 0, 255).astype(np.uint8)
