"""Filming one evaluation episode (``rltrain eval --video``): a frame per agent step, of the
game's screen or of what the agent sees (:mod:`rltrain.rl.evaluate` says what each shows)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import numpy as np

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
    ``channels`` C each (Atari's gray frame, an RGB image as it is), else a plot."""
    if obs.ndim == 3:
        newest = obs[-max(channels, 1) :].astype(np.uint8)
        return np.moveaxis(newest[:3], 0, -1) if len(newest) >= 3 else newest[0]  # not alpha
    # vector observations: a bar chart of the values, so that a video still shows the state
    v = np.clip(obs.astype(np.float32).reshape(-1), -3, 3)
    height, width = 64, 16 * len(v)
    img = np.full((height, width), 255, np.uint8)
    for i, x in enumerate(v):
        top = int(height / 2 - x / 3 * (height / 2 - 2))
        lo, hi = sorted((top, height // 2))
        img[lo : hi + 1, 16 * i + 3 : 16 * i + 13] = 40
    return img
