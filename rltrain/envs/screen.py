"""Recording envs: one game, observed as training observes it, that can show its screen.

``rltrain eval --video`` films one episode in a recording env. ale-py's C++
``AtariVectorEnv`` (training's Atari env, :mod:`rltrain.envs.atari`) cannot show its screen, so
:class:`AtariScreenEnv` runs one ``ALEInterface`` with the vector env's pipeline in numpy:
FIRE at reset then up to ``noop_max - 1`` no-ops, frame skip with a max over the last two
frames, grayscale, OpenCV's INTER_AREA resize (reproduced bit for bit by :class:`AreaResize`),
a zero-filled stack at reset, sticky actions in the emulator, truncation after
``max_episode_frames`` frames; tests/test_eval_video.py checks it against ``AtariVectorEnv``
observation for observation. (Gymnasium's AtariPreprocessing needs OpenCV, which rltrain does
not depend on, and orders the no-ops and FIRE differently.) Other ids run in
``gymnasium.make(id, render_mode="rgb_array")`` (:class:`GymScreenEnv`).
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import ale_py
import gymnasium
import numpy as np
from ale_py import roms
from gymnasium.envs.registration import load_env_creator

from rltrain.envs.atari import check_atari_id, is_atari, rom_name, sticky_actions
from rltrain.envs.base import ActionSpace, EnvError
from rltrain.envs.checks import check_finite, diagnose, non_finite
from rltrain.envs.config import EnvConfig
from rltrain.envs.gym_vector import action_space_of, check_spaces, to_env_actions
from rltrain.envs.user import (
    Wrapper,
    image,
    import_env_modules,
    load_wrapper,
    make_failed,
    make_one,
    stacked,
)
from rltrain.envs.vector import unknown_id_message

ATARI_HZ = 60
"""Emulator frames per second of the (NTSC) Atari 2600."""


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
    import_env_modules(cfg.imports)
    if cfg.id not in gymnasium.registry:
        raise EnvError(unknown_id_message(cfg.id, cfg.imports))
    check_atari_id(cfg.id, cfg.wrappers)
    if is_atari(cfg.id, cfg.wrappers):
        return AtariScreenEnv(cfg, seed)
    wrappers = [load_wrapper(w) for w in cfg.wrappers]
    return GymScreenEnv(cfg.id, seed, render, cfg.kwargs, wrappers, cfg.frame_stack, cfg.action_map)


@dataclass(frozen=True)
class AreaResize:
    """OpenCV's ``cv2.resize(..., interpolation=cv2.INTER_AREA)`` for shrinking uint8 images,
    in numpy and bit for bit: the same fractional-coverage taps (``computeResizeAreaTab``),
    float32 sums in the same order (rows first), rounding half to even."""

    rows: tuple[np.ndarray, np.ndarray]
    cols: tuple[np.ndarray, np.ndarray]

    @classmethod
    def of(cls, src: tuple[int, int], dst: tuple[int, int]) -> AreaResize:
        return cls(area_taps(src[0], dst[0]), area_taps(src[1], dst[1]))

    def __call__(self, img: np.ndarray) -> np.ndarray:
        (ri, rw), (ci, cw) = self.rows, self.cols
        src = img.astype(np.float32)
        across = np.zeros((img.shape[0], ci.shape[0]), np.float32)  # [H_in, W_out]
        for k in range(ci.shape[1]):
            across += src[:, ci[:, k]] * cw[:, k]
        out = rw[:, 0, None] * across[ri[:, 0]]  # [H_out, W_out]
        for k in range(1, ri.shape[1]):
            out += rw[:, k, None] * across[ri[:, k]]
        return np.rint(out).astype(np.uint8)


def area_taps(n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray]:
    """(source index, weight) of each output pixel, [n_out, K] each, zero weights padding:
    the covered fraction of every source pixel under the output pixel, over its width."""
    if n_out > n_in:
        raise EnvError(f"area resize shrinks only: {n_in} -> {n_out} pixels")
    scale = n_in / n_out
    taps: list[list[tuple[int, float]]] = []
    for d in range(n_out):
        f1 = d * scale
        f2 = f1 + scale
        cell = min(scale, n_in - f1)
        s2 = min(math.floor(f2), n_in - 1)
        s1 = min(math.ceil(f1), s2)
        row = [(s1 - 1, (s1 - f1) / cell)] if s1 - f1 > 1e-3 else []
        row += [(s, 1.0 / cell) for s in range(s1, s2)]
        if f2 - s2 > 1e-3:
            row.append((s2, min(f2 - s2, 1.0, cell) / cell))
        taps.append(row)
    k = max(len(row) for row in taps)
    index = np.zeros((n_out, k), np.int64)
    weight = np.zeros((n_out, k), np.float32)
    for d, row in enumerate(taps):
        index[d, : len(row)] = [s for s, _ in row]
        weight[d, : len(row)] = [w for _, w in row]
    return index, weight


class AtariScreenEnv:
    """One Atari game with the observation protocol of training's C++ ``AtariVectorEnv``
    (ale-py's ``PreprocessedEnv``, evaluation settings), whose RGB screen can be filmed."""

    def __init__(self, cfg: EnvConfig, seed: int) -> None:
        ale_seed, noop_seed = np.random.SeedSequence(seed).generate_state(2)
        self.cfg = cfg
        # (a static setting: before the constructor, which prints ALE's banner otherwise)
        ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)
        self.ale = ale_py.ALEInterface()
        self.ale.setFloat("repeat_action_probability", sticky_actions(cfg))
        self.ale.setInt("random_seed", int(ale_seed) & 0x7FFFFFFF)
        rom = roms.get_rom_path(rom_name(cfg.id))
        assert rom is not None  # ale-py registers its ALE/ ids for the ROMs it ships
        self.ale.loadROM(rom)
        full = cfg.full_action_space  # as AtariVectorEnv(full_action_space=...)
        self.actions = self.ale.getLegalActionSet() if full else self.ale.getMinimalActionSet()
        self.fire = ale_py.Action.FIRE in self.actions  # AtariVectorEnv(use_fire_reset=True)
        self.rng = np.random.default_rng(noop_seed)
        height, width = self.ale.getScreenDims()
        size = cfg.image_size
        if size > min(height, width):
            raise EnvError(f"env.image_size={size}: the recording env shrinks frames only")
        self.resize = AreaResize.of((height, width), (size, size))
        self.obs_shape: tuple[int, ...] = (cfg.frame_stack, size, size)
        self.channels = 1
        self.num_actions = len(self.actions)
        self.action_space = ActionSpace(self.num_actions)
        self.fps = ATARI_HZ / cfg.frame_skip
        self._raw = np.zeros((2, height, width), np.uint8)  # the last two frames of a step
        self._stack = np.zeros(self.obs_shape, np.uint8)
        self._frames = 0

    def reset(self) -> np.ndarray:
        self.ale.reset_game()
        if self.fire:
            self.ale.act(ale_py.Action.FIRE)
        noops = int(self.rng.integers(0, max(1, self.cfg.noop_max))) - int(self.fire)
        for _ in range(noops):
            self.ale.act(ale_py.Action.NOOP)
            if self.ale.game_over():
                self.ale.reset_game()
        self._raw[0] = self.ale.getScreenGrayscale()
        self._raw[1] = 0
        self._stack[:] = 0
        self._frames = 0
        self._push()
        return self._stack.copy()

    def step(self, action: int) -> tuple[np.ndarray, float, bool]:
        """``frame_skip`` frames of ``action`` (fewer if the episode ends); the observation's
        newest frame is the max of the step's last two frames."""
        reward, over, cut = 0.0, False, False
        for k in range(self.cfg.frame_skip, 0, -1):
            reward += self.ale.act(self.actions[action])
            self._frames += 1
            over = self.ale.game_over(with_truncation=False)
            cut = self._frames >= self.cfg.max_episode_frames
            if over or cut:
                break
            if k <= 2:
                self._raw[k - 1] = self.ale.getScreenGrayscale()
        self._push()
        return self._stack.copy(), float(reward), over or cut

    def _push(self) -> None:
        self._raw[0] = np.maximum(self._raw[0], self._raw[1])  # kept, as the C++ env does
        self._stack[:-1] = self._stack[1:]
        self._stack[-1] = self.resize(self._raw[0])

    def screen(self) -> np.ndarray:
        return self.ale.getScreenRGB()

    def close(self) -> None:
        pass


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
            raise diagnose(self.env_id, "reset()", e, None, self.obs_shape) from e
        return self._checked("reset()", obs)

    def step(self, action: Any) -> tuple[np.ndarray, float, bool]:
        act = to_env_actions(np.asarray(action)[None], self.action_space)[0]
        try:
            obs, reward, terminated, truncated, _ = self.env.step(act)
        except Exception as e:  # noqa: BLE001 - the user's env (or a wrapper) failed
            raise diagnose(self.env_id, "step()", e, None, self.obs_shape) from e
        reward = float(reward)
        if not np.isfinite(reward):
            raise non_finite(self.env_id, "step()", np.array([reward]), "reward")
        return self._checked("step()", obs), reward, bool(terminated or truncated)

    def _checked(self, call: str, obs: Any) -> np.ndarray:
        out = np.asarray(obs, self.obs_dtype)
        if out.shape != self.obs_shape:
            raise diagnose(self.env_id, call, None, [out], self.obs_shape)
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
