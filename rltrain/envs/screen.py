"""Recording envs: one game, observed as training observes it, that can show its screen.

``rltrain eval --video`` films one episode in a recording env. ale-py's C++
``AtariVectorEnv`` (training's Atari env, :mod:`rltrain.envs.atari`) cannot show its screen, so
:class:`AtariScreenEnv` steps a twin beside it, of the same seed and protocol but RGB frames
of the whole screen: the same game, step for step (tests/test_eval_video.py checks it with
sticky actions and random no-ops), whose frames are filmed. Other ids run in
``gymnasium.make(id, render_mode="rgb_array")`` (:class:`GymScreenEnv`). Either way the
filmed episode is the game the evaluation's first env plays at that seed.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import gymnasium
import numpy as np
from ale_py.vector_env import AtariVectorEnv
from gymnasium.envs.registration import load_env_creator
from gymnasium.vector import AutoresetMode

from rltrain.envs.adapt import image, stacked
from rltrain.envs.atari import AtariEnv, check_atari_id, is_atari, rom_name, vector_args
from rltrain.envs.base import ActionSpace, EnvError
from rltrain.envs.checks import check_finite, diagnose, non_finite
from rltrain.envs.config import EnvConfig
from rltrain.envs.gym_vector import action_space_of, check_spaces, to_env_actions
from rltrain.envs.user import Wrapper, load_env_code, load_wrapper, make_failed, make_one
from rltrain.envs.vector import unknown_id_message

ATARI_HZ = 60
"""Emulator frames per second of the (NTSC) Atari 2600."""
SCREEN = (210, 160)
"""The Atari 2600's screen (NTSC) as ALE gives it: height, width."""


class RecordingEnv(Protocol):
    obs_shape: tuple[int, ...]
    num_actions: int
    action_space: ActionSpace
    fps: float
    """Agent steps per second of real play."""
    channels: int
    """Channels of one image in an observation [k C, H, W] (1: Atari's gray frames; 3: an
    RGB image; 0: vector observations)."""

    def reset(self) -> np.ndarray:
        """The first observation [*obs_shape] of a new episode."""
        ...

    def step(self, action: int) -> tuple[np.ndarray, float, bool]:
        """(next observation, raw reward, whether the episode ended: game over or time limit)."""
        ...

    def screen(self) -> np.ndarray:
        """uint8 [H, W, 3]: the screen as a person sees it."""
        ...

    def close(self) -> None: ...


def make_recording_env(cfg: EnvConfig, seed: int, render: bool) -> RecordingEnv:
    """The recording env of ``cfg.id`` (``render``: its screen will be filmed)."""
    load_env_code(cfg)  # before the id is looked up
    if cfg.id not in gymnasium.registry:
        raise EnvError(unknown_id_message(cfg.id, cfg.imports))
    check_atari_id(cfg.id, cfg.wrappers)
    if is_atari(cfg.id, cfg.wrappers):
        return AtariScreenEnv(cfg, seed)
    wrappers = [load_wrapper(w) for w in cfg.wrappers]
    return GymScreenEnv(cfg.id, seed, render, cfg.kwargs, wrappers, cfg.frame_stack, cfg.action_map)


class AtariScreenEnv:
    """One Atari game as training plays it (:class:`rltrain.envs.atari.AtariEnv` of one env,
    evaluation settings), beside a twin that shows its screen: ale-py's C++ vector env gives
    the agent's frames but no screen, and a second one of the same seed and protocol but full
    RGB frames plays the very same game (its random no-ops and sticky actions are the same
    draws: the image settings draw nothing), step for step."""

    def __init__(self, cfg: EnvConfig, seed: int) -> None:
        self.env = AtariEnv(cfg, seed, 1, evaluation=True)
        height, width = SCREEN
        shown: dict[str, Any] = dict(img_height=height, img_width=width, grayscale=False)
        # NEXT_STEP: the step that ends the game returns its last screen, not the next game's
        shown |= dict(stack_num=1, maxpool=False, autoreset_mode=AutoresetMode.NEXT_STEP)
        args = {**vector_args(cfg, self.env.protocol), **shown}
        self.twin = AtariVectorEnv(rom_name(cfg.id), 1, **args)
        self.seed = seed
        self.obs_shape = self.env.obs_shape
        self.channels = 1
        self.num_actions = self.env.num_actions
        self.action_space = self.env.action_space
        self.fps = ATARI_HZ / cfg.frame_skip
        self._screen = np.zeros((height, width, 3), np.uint8)

    def reset(self) -> np.ndarray:
        self._screen = self.twin.reset(seed=self.seed)[0][0, -1]  # [210, 160, 3]
        return self.env.reset()[0]

    def step(self, action: int) -> tuple[np.ndarray, float, bool]:
        """``frame_skip`` frames of ``action`` in both (fewer if the game ends)."""
        actions = np.array([action], np.int64)
        self._screen = self.twin.step(actions)[0][0, -1]
        out = self.env.step(actions)
        return out.obs[0], float(out.reward[0]), bool(out.terminated[0] or out.truncated[0])

    def screen(self) -> np.ndarray:
        return self._screen

    def close(self) -> None:
        self.env.close()
        self.twin.close()


class GymScreenEnv:
    """One Gymnasium env, observed as training's ``GymVectorEnv`` observes it; its screen is
    ``env.render()`` (``render_mode="rgb_array"``)."""

    def __init__(
        self,
        env_id: str,
        seed: int,
        render: bool,
        kwargs: Mapping[str, Any] | None = None,
        wrappers: Sequence[Wrapper] = (),
        frame_stack: int = 1,
        action_map: str = "clip",
    ) -> None:
        self.env_id = env_id
        self._seed = seed
        if render:
            headless_rendering()  # before the env's module is imported (MuJoCo reads it then)
            modes = render_modes(env_id)
            if modes is not None and "rgb_array" not in modes:
                raise EnvError(
                    f"{env_id} cannot draw its screen (render modes: {', '.join(modes) or 'none'}"
                    "); use --video-view agent"
                )
        make_kwargs = {**(kwargs or {}), **({"render_mode": "rgb_array"} if render else {})}
        try:
            self.env = make_one(env_id, make_kwargs, wrappers, frame_stack)
        except Exception as e:  # noqa: BLE001 - the user's env, kwargs or wrapper
            raise make_failed(env_id, kwargs or {}, e) from None
        space = self.env.observation_space
        check_spaces(env_id, self.env.action_space, space)
        self.obs_shape = tuple(space.shape or ())
        self.obs_dtype = np.dtype(space.dtype)
        self.channels = self.obs_shape[0] // stacked(self.env) if image(space) else 0
        self.action_space = action_space_of(env_id, self.env.action_space, action_map)
        self.num_actions = self.action_space.n
        self.fps = float(self.env.metadata.get("render_fps") or 30)
        if render:  # draw once now: an env that cannot (a missing pygame) fails before play
            try:
                self.reset()
                self.screen()
            except BaseException:
                self.env.close()
                raise

    def reset(self) -> np.ndarray:
        """The first observation; what the user's env raises, or a wrong shape, is an
        EnvFailed (one line, as in training)."""
        try:
            obs, _ = self.env.reset(seed=self._seed)
        except Exception as e:  # noqa: BLE001 - the user's env (or a wrapper) failed
            raise diagnose(self.env_id, "reset()", e, None, self.obs_shape, [self.env]) from e
        return self._checked("reset()", obs)

    def step(self, action: Any) -> tuple[np.ndarray, float, bool]:
        act = to_env_actions(np.asarray(action)[None], self.action_space)[0]
        try:
            obs, reward, terminated, truncated, _ = self.env.step(act)
        except Exception as e:  # noqa: BLE001 - the user's env (or a wrapper) failed
            raise diagnose(self.env_id, "step()", e, None, self.obs_shape, [self.env]) from e
        reward = float(reward)
        if not np.isfinite(reward):
            raise non_finite(self.env_id, "step()", np.array([reward]), "reward")
        return self._checked("step()", obs), reward, bool(terminated or truncated)

    def _checked(self, call: str, obs: Any) -> np.ndarray:
        out = np.asarray(obs, self.obs_dtype)
        if out.shape != self.obs_shape:
            raise diagnose(self.env_id, call, None, [out], self.obs_shape, [self.env])
        if np.issubdtype(out.dtype, np.floating):
            check_finite(self.env_id, call, out[None])
        return out

    def screen(self) -> np.ndarray:
        why = f"{self.env_id} cannot draw its screen"
        try:
            frame = self.env.render()
        except Exception as e:  # noqa: BLE001 - the env's drawing: pygame, OpenGL (MuJoCo), ...
            raise EnvError(f"{why} ({_brief(e)}); or use --video-view agent") from None
        if not isinstance(frame, np.ndarray) or frame.ndim != 3 or frame.shape[2] != 3:
            raise EnvError(f"{why} (render() gave no RGB image); use --video-view agent")
        return frame.astype(np.uint8, copy=False)

    def close(self) -> None:
        self.env.close()


def headless_rendering() -> None:
    """Draw off-screen. Gymnasium's pygame envs render ``rgb_array`` frames on surfaces, but
    ``pygame.init()`` still opens SDL's video and audio drivers, and on a machine without a
    desktop session SDL's probing prints ``error: XDG_RUNTIME_DIR is invalid or not set in
    the environment.`` on stderr (and ALSA may complain of a missing sound card). Its dummy
    drivers need neither; SDL reads these as it initialises, so they are set before the env
    draws. MuJoCo's envs draw through OpenGL, by default with GLFW, which needs a display
    (without one: ``mujoco.FatalError: an OpenGL platform library has not been loaded``); on
    Linux without a display they draw through EGL (``MUJOCO_GL=egl``, MuJoCo's headless
    backend: a GPU's driver, or Mesa's in software). ``setdefault``: what the user chose is
    kept; nothing is silenced."""
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")  # pygame's import banner
    display = os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    if sys.platform.startswith("linux") and not display:
        os.environ.setdefault("MUJOCO_GL", "egl")


def render_modes(env_id: str) -> list[str] | None:
    """The render modes an id's env declares (its class's ``metadata``), as gymnasium.make
    reads them; None when its entry point is a function (its env's show once it is made)."""
    entry = gymnasium.spec(env_id).entry_point
    creator = load_env_creator(entry) if isinstance(entry, str) else entry
    metadata = getattr(creator, "metadata", None)
    return None if metadata is None else list(metadata.get("render_modes", []))


def _brief(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__
