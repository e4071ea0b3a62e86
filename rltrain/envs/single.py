"""A run's environment as one Gymnasium env, made as the run made it (``rltrain.make_env``).

A policy loaded from a run (``rltrain.load_policy``) acts on what the run's actors saw: for
Atari the protocol's uint8 [4, 84, 84] frame stack, for an image env its stacked,
channels-first images, for a Dict or Tuple space the flattened vector. :class:`SingleEnv`
gives those observations from a plain Gymnasium loop, because it *is* the run's env: the
vector an actor or ``rltrain eval`` steps (:func:`rltrain.envs.make_env`), with one env, in
evaluation mode (raw scores, a lost life not an episode's end). The same seed therefore
plays the same game as ``rltrain eval`` with one episode.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any, cast

import gymnasium
import numpy as np

from rltrain.envs.atari import is_atari
from rltrain.envs.base import ActionSpace, EnvError, VectorEnv
from rltrain.envs.config import EnvConfig
from rltrain.envs.gym_vector import GymVectorEnv
from rltrain.envs.vector import make_env
from rltrain.errors import ConfigError

RENDER_MODES = ("human", "rgb_array")


def gym_action_space(space: ActionSpace) -> gymnasium.Space:
    """The Gymnasium space of an :class:`ActionSpace` (Discrete, MultiDiscrete, or the Box it
    clips to)."""
    if space.binary:
        return gymnasium.spaces.MultiBinary(space.n)
    if space.multi:
        dtype = np.dtype(space.dtype)
        starts = np.asarray(space.starts or (0,) * space.n, dtype)
        return gymnasium.spaces.MultiDiscrete(np.asarray(space.nvec, dtype), dtype, start=starts)
    if not space.continuous:
        return gymnasium.spaces.Discrete(space.n, start=space.start)
    dtype = np.dtype(space.dtype)
    low = np.array(space.low or [-np.inf] * space.n, dtype=dtype)
    high = np.array(space.high or [np.inf] * space.n, dtype=dtype)
    return gymnasium.spaces.Box(low, high, dtype=dtype)


def dtype_range(dtype: np.dtype) -> tuple[Any, Any]:
    """The bounds of a Box of ``dtype`` that holds anything: an integer's range (images:
    uint8 0..255), False..True, or -inf..inf (a Box of ints or bools cannot take inf)."""
    if dtype.kind in "iu":
        return np.iinfo(dtype).min, np.iinfo(dtype).max
    return (False, True) if dtype.kind == "b" else (-np.inf, np.inf)


class SingleEnv(gymnasium.Env):
    """One env of a run's kind, with the run's wrappers and protocol, as a Gymnasium env.

    ``observation_space``: what the policy takes (uint8 images in [0, 255], or float32
    vectors). The reward is the raw score. As any Gymnasium env, ``step`` returns an episode's
    last observation where it ends (``terminated`` or ``truncated``) and the caller resets
    (explore102: the run's vector env had already begun the next episode, and its first
    observation came back instead); a ``step`` without that reset plays on in the episode the
    env began by itself. ``reset(seed=s)`` starts a fresh one, seeded as ``rltrain eval
    --seed s`` seeds its first env, and each ``reset()`` after it another game, drawn from
    ``s`` (the first: from the constructor's ``seed``), as a Gymnasium env's RNG goes on
    after its first seeded reset."""

    metadata: dict[str, Any] = {"render_modes": list(RENDER_MODES)}

    def __init__(self, cfg: EnvConfig, seed: int = 0, render_mode: str | None = None) -> None:
        """``render_mode``: the env's own (gymnasium.make's), "human" or "rgb_array"."""
        if render_mode is not None:
            if render_mode not in RENDER_MODES:
                raise ConfigError(f"render_mode={render_mode!r}: allowed are human, rgb_array")
            if is_atari(cfg.id, cfg.wrappers):  # ale-py's C++ vector env has no screen
                raise EnvError(
                    f"render_mode: {cfg.id}'s vector env draws no screen; rltrain eval RUN "
                    "--video films the game"
                )
            cfg = dataclasses.replace(cfg, kwargs={**cfg.kwargs, "render_mode": render_mode})
        self.render_mode = render_mode
        self._vec: VectorEnv = make_env(cfg, seed=seed, num_envs=1, evaluation=True)
        self._seed = seed
        self._games: np.random.Generator | None = None  # the seeds of unseeded resets
        shape, dtype = self._vec.obs_shape, np.dtype(self._vec.obs_dtype)
        # a Gymnasium env's own bounds (CartPole's, not -inf..inf: explore102), else the dtype's
        own = self._vec.obs_space
        self.observation_space = (  # (a copy: seeding it leaves the vector's as it was)
            copy.deepcopy(own)
            if own is not None
            else gymnasium.spaces.Box(*dtype_range(dtype), shape, dtype)
        )
        self.action_space = gym_action_space(self._vec.action_space)
        self.protocol = self._vec.protocol

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        # a seed's game, then on each unseeded reset another drawn from it (explore102: each
        # replayed the first game, and a loop of four scored [315, 315, 315, 315])
        if seed is not None or self._games is None:
            game = self._seed if seed is None else seed
            self._games = np.random.default_rng(game)
        else:
            game = int(self._games.integers(2**31))
        obs = self._vec.reset(seed=game)
        return obs[0], {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        space = self._vec.action_space
        # the env's units (its Box or Discrete start, load_policy's): the vector maps them;
        # float64, as from_env reads them (float32 took a float64 Box's 1e298 to inf: explore97)
        dtype = np.float64 if space.continuous else np.int64
        step = self._vec.step(space.from_env(np.asarray([self._checked(action)], dtype)))
        info: dict[str, Any] = {}
        if step.episode_returns:  # the game's score and length, as the run logs them
            info["episode"] = {"r": step.episode_returns[0], "l": step.episode_lengths[0]}
        terminated, truncated = bool(step.terminated[0]), bool(step.truncated[0])
        obs = step.obs[0]
        if terminated or truncated:  # the episode's own last, not the next one's first
            obs = self._vec.ended_obs(np.array([True]))[0]
        return obs, float(step.reward[0]), terminated, truncated, info

    def _checked(self, action: Any) -> np.ndarray:
        """``action`` as an array, or a ValueError naming what is wrong with it: numpy would
        broadcast a Box action of another shape over the Box, and a NaN reached the env,
        whose next observations were NaN until a reset (explore113). A Box action out of its
        bounds is clipped to them, as in training."""
        space, a = self.action_space, np.asarray(action)
        if not isinstance(space, gymnasium.spaces.Box):
            if not space.contains(a):  # (a Discrete index as a 0-d array, as Gymnasium's)
                raise ValueError(f"action {action!r}: not in this env's {space}")
            return a
        if a.shape != space.shape:
            raise ValueError(f"action of shape {a.shape}: this env takes {space.shape} ({space})")
        if a.dtype.kind not in "fiub":
            raise ValueError(f"action of dtype {a.dtype}: this env takes numbers ({space})")
        if not np.isfinite(a.astype(np.float64)).all():
            raise ValueError(f"action {a.tolist()}: holds NaN or inf ({space})")
        return a

    def render(self) -> Any:
        """The env's frame (``render_mode="rgb_array"``); "human" draws as it steps."""
        if self.render_mode is None:
            raise ValueError("render(): make the env with render_mode='rgb_array' or 'human'")
        return cast(GymVectorEnv, self._vec).render()

    @property
    def unwrapped(self) -> gymnasium.Env:
        """The user's own env under the run's wrappers (a Gymnasium id's; it was this one, so
        ``env.unwrapped.state`` read nothing); this one for Atari, whose C++ vector env has
        no Gymnasium env inside."""
        envs = getattr(getattr(self._vec, "_env", None), "envs", None)
        return envs[0].unwrapped if envs else self

    def close(self) -> None:
        self._vec.close()
