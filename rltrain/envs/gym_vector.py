"""Gymnasium ids as a :class:`VectorEnv`: ``gymnasium.vector.SyncVectorEnv`` in SAME_STEP mode.

Gymnasium's own SAME_STEP autoreset already gives the semantics actors need (the returned obs
of an ended env is its next episode's first obs; the final obs sits in ``info``), so this
adapter only checks the spaces, converts dtypes and counts episode returns and lengths.
Rewards are passed through unclipped: reward clipping is part of the Atari protocol only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import gymnasium
import numpy as np
from gymnasium.spaces import Box, Discrete, MultiBinary, MultiDiscrete
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from rltrain.envs.adapt import flattened_from, stacked, transposed
from rltrain.envs.base import ActionSpace, EnvError, EpisodeTracker, StepBatch, VectorEnv
from rltrain.envs.checks import check_finite, diagnose, float32_rewards
from rltrain.envs.user import Wrapper, make_failed, make_one
from rltrain.faults import EnvFailed


def action_space_of(env_id: str, space: gymnasium.Space, mapping: str = "clip") -> ActionSpace:
    """Discrete(n), MultiDiscrete or MultiBinary (1-D: a categorical per sub-action), or a
    1-D Box (continuous actions, reaching the env by ``mapping``: ``env.action_map``);
    anything else is a one-line EnvError."""
    if isinstance(space, Discrete):  # the policy picks 0..n-1; the env takes start..
        return ActionSpace(int(space.n), start=int(space.start))
    if isinstance(space, MultiBinary) and len(space.shape) == 1:
        n = int(space.shape[0])
        return ActionSpace(n, nvec=(2,) * n, dtype=str(space.dtype), binary=True)
    if isinstance(space, MultiDiscrete) and len(space.shape) == 1:
        nvec = tuple(int(k) for k in space.nvec)
        starts = tuple(int(k) for k in space.start)
        kept = starts if any(starts) else ()
        return ActionSpace(len(nvec), nvec=nvec, starts=kept, dtype=str(space.dtype))
    if isinstance(space, Box) and len(space.shape) == 1 and np.issubdtype(space.dtype, np.floating):
        low, high = (
            tuple(space.low.astype(float).tolist()),
            tuple(space.high.astype(float).tolist()),
        )
        return ActionSpace(int(space.shape[0]), True, low, high, mapping, str(space.dtype))
    what, hint = type(space).__name__, ""
    if isinstance(space, Box | MultiDiscrete | MultiBinary):
        what = f"{what} of shape {tuple(space.shape)}, {space.dtype},"
        # (an ActionWrapper whose action_space is the flat or float one, in env.wrappers)
        hint = (
            "; an action wrapper in env.wrappers can present it as one (a flat space "
            "reshaped, or a float Box rounded to the env's integers)"
        )
    raise EnvError(
        f"env '{env_id}' has a {what} action space; supported: Discrete, 1-D MultiDiscrete "
        f"or MultiBinary, or a 1-D float Box{hint}"
    )


def check_spaces(env_id: str, action_space: gymnasium.Space, obs_space: gymnasium.Space) -> None:
    """Raise EnvError unless actions are Discrete or a 1-D Box and observations a Box."""
    action_space_of(env_id, action_space)
    if not isinstance(obs_space, Box):  # (make_one flattens every space that can be)
        raise EnvError(
            f"env '{env_id}' has a {type(obs_space).__name__} observation space; supported: "
            "Box (arrays), or spaces gymnasium can flatten (Discrete, MultiDiscrete, "
            "MultiBinary, and Tuple or Dict of them and of Boxes: one float vector)"
        )


def to_env_actions(actions: np.ndarray, space: ActionSpace) -> np.ndarray:
    """What the env steps: int64 indices (plus the Discrete's start), or the sampled reals
    mapped into the Box (:meth:`ActionSpace.to_env`; the learner keeps the sample: its
    log-probability is the policy's)."""
    return space.to_env(actions)


def final_observations(obs: np.ndarray, ended: np.ndarray, info: dict) -> np.ndarray:
    """[K, *obs_shape]: the final observations of the ``ended`` envs (a [B] mask: the truncated
    ones, for the learners; gymnasium's SAME_STEP autoreset keeps every ended env's in
    ``info["final_obs"]``, an object array with None elsewhere)."""
    idx = np.flatnonzero(ended)
    if len(idx) == 0:
        return np.empty((0, *obs.shape[1:]), dtype=obs.dtype)
    final = info["final_obs"]
    return np.stack([np.asarray(final[i], dtype=obs.dtype) for i in idx])


class GymVectorEnv(VectorEnv):
    """``num_envs`` copies of a registered Gymnasium env, stepped in this process."""

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        seed: int,
        kwargs: Mapping[str, Any] | None = None,
        wrappers: Sequence[Wrapper] = (),
        frame_stack: int = 1,
        action_map: str = "clip",
    ) -> None:
        """``kwargs``: of ``gymnasium.make``; ``wrappers``: applied to each env in order;
        ``frame_stack``: images stacked into each observation (vectors are left alone);
        ``action_map``: how a Box's samples reach the env (:meth:`ActionSpace.to_env`)."""
        self._seed = seed
        self.env_id = env_id
        kwargs = dict(kwargs or {})
        try:
            self._env = SyncVectorEnv(
                [partial(make_one, env_id, kwargs, wrappers, frame_stack) for _ in range(num_envs)],
                autoreset_mode=AutoresetMode.SAME_STEP,
            )
        except EnvError:
            raise
        except Exception as e:  # noqa: BLE001 - the user's env, kwargs or wrapper
            raise make_failed(env_id, kwargs, e) from None
        try:
            check_spaces(env_id, self._env.single_action_space, self._env.single_observation_space)
        except EnvError:
            self._env.close()
            raise
        obs_space = self._env.single_observation_space
        assert isinstance(obs_space, Box)
        self.obs_space = obs_space  # (its bounds: one env's, rltrain.make_env's)
        self._last: tuple[np.ndarray, dict] | None = None  # the last step's obs and info
        self.num_envs = num_envs
        self.obs_shape = tuple(obs_space.shape)
        self.obs_dtype = np.dtype(obs_space.dtype)
        floats = np.issubdtype(self.obs_dtype, np.floating)  # NaN and inf can occur
        size = num_envs * int(np.prod(self.obs_shape)) if floats else 0
        self._zeros = np.zeros(size, self.obs_dtype)  # for check_finite's dot product
        self._floats = size > 0
        self.action_space = action_space_of(env_id, self._env.single_action_space, action_map)
        self.num_actions = self.action_space.n
        self._episodes = EpisodeTracker(num_envs)
        spec = gymnasium.spec(env_id)
        self.protocol = {
            "id": env_id,
            "backend": "gymnasium.vector.SyncVectorEnv",
            "gymnasium_version": gymnasium.__version__,
            "num_envs": num_envs,
            "seed": seed,
            "autoreset": "same_step",
            "max_episode_steps": kwargs.get("max_episode_steps", spec.max_episode_steps),
            "clip_rewards": False,
            "episodic_life": False,
            "num_actions": self.num_actions,
            "action_space": self.action_space.describe(),
            **({"action_map": action_map} if self.action_space.continuous else {}),
            **({"kwargs": kwargs} if kwargs else {}),
            "wrappers": [getattr(w, "__name__", str(w)) for w in wrappers],
        }
        self.flattened_from = flattened_from(self._env.envs[0])
        if self.flattened_from is not None:
            self.protocol["observations_flattened_from"] = str(self.flattened_from)
        first = self._env.envs[0]
        self.transposed = transposed(first)
        self.stacked = stacked(first)
        layout = ["[H, W, C] image moved to [C, H, W]"] if self.transposed else []
        if self.stacked > 1:
            layout.append(f"the last {self.stacked} images stacked on channels: {self.obs_shape}")
        if layout:
            self.protocol["observations"] = "; ".join(layout)

    def reset(self, seed: int | None = None) -> np.ndarray:
        """Reset every env; env i is seeded ``seed + i`` (gymnasium's own convention).

        What the user's env raises, or a wrong or non-finite observation, is an EnvFailed."""
        try:
            obs, _ = self._env.reset(seed=self._seed if seed is None else seed)
        except EnvFailed:
            raise
        except Exception as e:  # noqa: BLE001 - the user's env (or a wrapper) failed
            raise self._failed("reset()", e) from e
        if self._floats:
            check_finite(self.env_id, "reset()", obs, self._zeros)
        self._episodes.reset()
        self._last = None
        return obs

    def step(self, actions: np.ndarray) -> StepBatch:
        """One step of every env; ended envs are already reset (SAME_STEP).

        What the user's env raises, or a wrong or non-finite observation or reward, is an
        EnvFailed (one vectorised check of the batch the policy acts on next: floats only)."""
        try:  # (an overflow in gymnasium's cast to the space's dtype: check_finite's inf)
            with np.errstate(over="ignore"):
                obs, reward, terminated, truncated, info = self._env.step(
                    to_env_actions(actions, self.action_space)
                )
            final_obs = final_observations(obs, truncated, info)
            self._last = (obs, info)
        except EnvFailed:
            raise
        except Exception as e:  # noqa: BLE001 - the user's env (or a wrapper) failed
            raise self._failed("step()", e) from e
        if self._floats:
            check_finite(self.env_id, "step()", obs, self._zeros)
        reward = float32_rewards(self.env_id, reward)  # [B]
        if len(final_obs):  # a time limit's last observations (they bootstrap the value)
            self._check_final(final_obs)
        returns, lengths, ended_in = self._episodes.update(reward, terminated | truncated)
        return StepBatch(
            obs=obs,
            reward=reward,
            terminated=terminated,
            truncated=truncated,
            final_obs=final_obs,
            episode_returns=returns,
            episode_lengths=lengths,
            episode_envs=ended_in,
        )

    def _check_final(self, final_obs: np.ndarray) -> None:
        """The last observations of truncated episodes skip gymnasium's concatenation."""
        if final_obs.shape[1:] != self.obs_shape:
            raise diagnose(self.env_id, "step()", None, list(final_obs), self.obs_shape)
        if self._floats:
            check_finite(self.env_id, "step()", final_obs)

    def ended_obs(self, ended: np.ndarray) -> np.ndarray:
        """[K, *obs_shape]: the ended episodes' last observations, from the last step's info,
        checked as a truncated one's are (shape, NaN: review 86 got a terminal [nan nan nan])."""
        if self._last is None:
            raise RuntimeError("ended_obs: no step since the envs were made or reset")
        obs, info = self._last
        final = final_observations(obs, ended, info)
        if len(final):
            self._check_final(final)
        return final

    def _failed(self, call: str, e: Exception) -> EnvFailed:
        """What to raise for ``e`` from the vector's ``call`` (inside its ``except``)."""
        returned = getattr(self._env, "_env_obs", None)  # each sub-env's, as gymnasium keeps them
        return diagnose(self.env_id, call, e, returned, self.obs_shape, self._env.envs)

    def render(self) -> Any:
        """The first sub-env's ``render()`` (its ``render_mode``: ``rltrain.make_env``'s)."""
        return self._env.envs[0].render()

    def close(self) -> None:
        """Close every sub-env."""
        self._env.close()
