"""A run's policy as a plain callable (:func:`rltrain.load_policy`): the env's own
observations in, the env's actions out."""

from __future__ import annotations

from typing import Any, cast

import gymnasium
import numpy as np
import torch

from rltrain.api_args import choice_arg
from rltrain.envs import ActionSpace
from rltrain.envs.gym_vector import to_env_actions
from rltrain.rl.played_policy import Policy


class LoadedPolicy:
    """A run's policy as a plain callable: ``policy(obs) -> action`` for one observation, or
    ``policy(batch)`` for a batch ([B, *obs_shape] -> [B] or [B, n]). The run's observation
    normalisation is inside the network. Discrete actions come back as ints, continuous ones
    as float32 arrays clipped to the env's bounds. Atari observations are the agent's view
    (the uint8 [4, 84, 84] frame stack of the run's protocol). Envs whose observations the run
    flattened (Discrete, Tuple, Dict, ...) take their own observations, one or a list of them,
    or the flattened vectors; envs whose [H, W, C] images it moved channels first take either
    layout, and those it stacked (``env.frame_stack``) the stack, [k C, H, W] oldest first."""

    def __init__(
        self,
        policy: Policy,
        obs_shape: tuple[int, ...],
        actions: ActionSpace,
        flattened_from: gymnasium.Space | None = None,
        transposed: bool = False,
        stacked: int = 1,
        obs_dtype: str | None = None,
    ) -> None:
        self.policy = policy
        self.obs_dtype = obs_dtype  # uint8 frames: scaled by the network, never by the caller
        self.stacked = stacked
        self.obs_shape = obs_shape
        self.actions = actions
        self.flattened_from = flattened_from
        self.transposed = transposed
        self.generator = torch.Generator().manual_seed(0)

    def _flat(self, obs: Any) -> Any:
        """The env's own observation (or a list of them) as what the network takes: flattened,
        or an image [.., H, W, C] moved to [.., C, H, W]."""
        space = self.flattened_from
        if self.transposed:
            x = np.asarray(obs)
            c, h, w = self.obs_shape
            return np.moveaxis(x, -1, -3) if x.shape[-3:] == (h, w, c) else x
        if space is None:
            return obs
        if space.contains(obs) or isinstance(obs, dict):  # (a float64 part: not "contained")
            try:
                return gymnasium.spaces.flatten(space, obs)
            except (KeyError, TypeError, ValueError, IndexError) as e:
                raise ValueError(f"observation does not fit the env's {space}: {e!r}") from None
        if isinstance(obs, list | tuple) and obs and all(space.contains(o) for o in obs):
            # a flattenable space (FlatObservation's) flattens to an array
            return np.stack([cast(np.ndarray, gymnasium.spaces.flatten(space, o)) for o in obs])
        return obs  # already flattened

    def __call__(self, obs: Any, deterministic: bool = False) -> Any:
        """Sampled actions as in training (``deterministic``: the most likely one, or the
        Gaussian's mean; DQN runs: epsilon-greedy with dqn.eval_epsilon, or greedy)."""
        deterministic = choice_arg(deterministic, "deterministic", (True, False))  # ("no": True)
        x = np.asarray(self._flat(obs), dtype=np.float32 if self.flattened_from else None)
        if self.obs_shape == (1,) and x.ndim <= 1 and x.shape != (1,):  # a scalar Box's own
            x = x.reshape(-1, 1) if x.ndim else x.reshape(1)  # (make_one: a vector of one)
        single = x.shape == self.obs_shape
        if not single and x.shape[1:] != self.obs_shape:
            what = (
                f"the last {self.stacked} images stacked on channels, " if self.stacked > 1 else ""
            )
            raise ValueError(
                f"observation of shape {x.shape}; this policy takes {what}{self.obs_shape} "
                f"or a batch [B, {', '.join(map(str, self.obs_shape))}]"
            )
        if self.obs_dtype == "uint8" and x.dtype != np.uint8:  # [0, 1] or [0, 255]: unknowable
            raise ValueError(
                f"observation of dtype {x.dtype}; this policy takes the env's uint8 frames "
                "(0-255, as rltrain.make_env gives them), which it scales itself"
            )
        if x.dtype.kind == "f" and not np.isfinite(x).all():  # the logits would be NaN
            raise ValueError("observation holds NaN or inf; the policy takes finite values")
        batch = x[None] if single else x
        acts = self.policy.act(batch, self.generator, deterministic)
        acts = to_env_actions(acts, self.actions)
        if not single:
            return acts
        return acts[0] if self.actions.vector else int(acts[0])


def scales_frames(model: torch.nn.Module) -> bool:
    """Whether ``model`` scales uint8 frames itself (a CNN torso divides them by 255): its
    callers must then give uint8, as float frames are not scaled (nor known to be)."""
    from rltrain.rl.algos.torsos import CNNTorso

    return any(isinstance(m, CNNTorso) for m in model.modules())
