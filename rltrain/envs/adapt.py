"""What rltrain puts between an env (with the user's wrappers) and the policy, so that any
Box, any space gymnasium can flatten, and any image trains as it comes: a flat float vector
for discrete, Tuple and Dict spaces (:class:`FlatObservation`), channels first and a frame
stack for images, wide unsigned integers as signed ones. :func:`adapt` applies them in that
order; :class:`RawObservation` keeps what the env returned before them, so that a wrong
observation is named in the env's own terms (its shape, its Dict's key), not in theirs.
"""

from __future__ import annotations

from typing import Any, SupportsFloat, TypeGuard

import gymnasium
import numpy as np
from gymnasium.spaces import (
    Box,
    Dict,
    Discrete,
    MultiBinary,
    MultiDiscrete,
    Space,
    Tuple,
    flatten,
    flatten_space,
)
from gymnasium.wrappers import DtypeObservation, FrameStackObservation, ReshapeObservation


def adapt(env: gymnasium.Env, frame_stack: int = 1) -> gymnasium.Env:
    """``env`` (the user's, wrapped by their wrappers) as the policy takes it:
    :class:`FlatObservation` if its observations are not a Box but gymnasium can flatten
    them, a vector of one for a scalar Box, or :class:`ChannelsFirst` if they are an [H, W, C]
    image, or a channel axis for an [H, W] gray image; a gray or RGB image then stacked
    ``frame_stack`` deep (:func:`stack_frames`). Where any of these applies, the env's own
    observations are kept by a :class:`RawObservation` beneath them."""
    outer = _adapted(RawObservation(env), frame_stack)
    return env if isinstance(outer, RawObservation) else outer


def _adapted(env: gymnasium.Env, frame_stack: int) -> gymnasium.Env:
    if not isinstance(env.observation_space, Box) and flattens(env.observation_space):
        env = FlatObservation(env)
    elif env.observation_space.shape == ():  # a scalar Box: a vector of one (the MLP's input)
        env = ReshapeObservation(env, (1,))
    elif channels_last(env.observation_space):
        env = ChannelsFirst(env)
    elif gray_image(env.observation_space):  # one channel: the CNN and the stack take it
        env = ReshapeObservation(env, (1, *env.observation_space.shape))
    wide = WIDE_UNSIGNED.get(getattr(env.observation_space, "dtype", None))
    if wide is not None:  # (torch shares no uint16/32/64 tensor between processes)
        env = DtypeObservation(env, wide)
    if frame_stack > 1 and stackable(env.observation_space):
        env = stack_frames(env, frame_stack)
    return env


CALLING = object()
""":attr:`RawObservation.last` while the env's own reset or step runs."""


class RawObservation(gymnasium.Wrapper, gymnasium.utils.RecordConstructorArgs):
    """The env's last observation as it returned it (``last``), before :func:`adapt`'s
    wrappers: one reference kept per call. A wrong shape otherwise fails inside them, in
    their terms (gymnasium's frame stack: "all input arrays must have the same shape"; a Dict
    key's in the flattened vector's length); :func:`raw_mismatch` reads it after a failure.
    ``last`` is :data:`CALLING` while the env's own call runs (so one that raises leaves
    that), None before its first."""

    def __init__(self, env: gymnasium.Env) -> None:
        gymnasium.utils.RecordConstructorArgs.__init__(self)
        gymnasium.Wrapper.__init__(self, env)
        self.last: Any = None

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        self.last = CALLING
        out = self.env.reset(seed=seed, options=options)
        self.last = out[0] if isinstance(out, tuple) and out else None
        return out

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        self.last = CALLING  # (while the env steps: one that raises returned nothing)
        out = self.env.step(action)
        self.last = out[0] if isinstance(out, tuple) and out else None
        return out


def raw_of(env: gymnasium.Env) -> RawObservation | None:
    """The :class:`RawObservation` in ``env``'s chain of wrappers (None: none)."""
    while isinstance(env, gymnasium.Wrapper):
        if isinstance(env, RawObservation):
            return env
        env = env.env
    return None


def raw_mismatch(space: Space, obs: Any, path: str = "") -> str | None:
    """How ``obs`` fails ``space``'s shape, in the env's own terms (``observation['pos'] of
    shape (3,); its observation_space['pos'] is Box(2,)``), or None where it fits (or is
    not an array: gymnasium's own error says more). Dicts and Tuples by their parts."""
    if isinstance(space, Dict | Tuple):
        parts = space.spaces if isinstance(space, Dict) else dict(enumerate(space.spaces))
        keys = list(parts)
        for key, sub in parts.items():
            try:
                part = obs[key]
            except (KeyError, IndexError, TypeError):
                kind = f"Dict of {keys}" if isinstance(space, Dict) else f"Tuple of {len(keys)}"
                return (
                    f"observation{path} without [{key!r}]; its observation_space{path} is a {kind}"
                )
            found = raw_mismatch(sub, part, f"{path}[{key!r}]")
            if found:
                return found
        return None
    if not isinstance(space, Box):
        return None
    try:
        got = tuple(np.shape(obs))
    except ValueError:  # a ragged list: no shape at all
        return None
    if got == tuple(space.shape):
        return None
    return (
        f"observation{path} of shape {got}; its observation_space{path} is Box{tuple(space.shape)}"
    )


class FlatObservation(gymnasium.ObservationWrapper, gymnasium.utils.RecordConstructorArgs):
    """A Discrete, MultiDiscrete, MultiBinary, Tuple or Dict observation as one float32 vector
    (gymnasium's ``flatten``: discrete parts one-hot), as SB3 preprocesses them, so that
    FrozenLake or Blackjack train with the MLP as they are. One wrapper that takes only the
    env, so ``gymnasium.make(env.spec)`` rebuilds it."""

    def __init__(self, env: gymnasium.Env) -> None:
        gymnasium.utils.RecordConstructorArgs.__init__(self)
        gymnasium.ObservationWrapper.__init__(self, env)
        self.flattened_from = env.observation_space
        flat = flatten_space(env.observation_space)
        assert isinstance(flat, Box)  # what flattens() said
        with np.errstate(over="ignore"):  # (float64 bounds past float32's: inf, as they mean)
            low, high = flat.low.astype(np.float32), flat.high.astype(np.float32)
        # cast here: a float64 bound (a float32 Box beside a Discrete flattens to float64)
        # cast by Box warns of lost precision on every run
        self.observation_space = Box(low, high, flat.shape, np.float32)

    def observation(self, observation: Any) -> np.ndarray:
        return np.asarray(flatten(self.flattened_from, observation), dtype=np.float32)


class ChannelsFirst(gymnasium.ObservationWrapper, gymnasium.utils.RecordConstructorArgs):
    """An image observation [H, W, C] (gymnasium's layout: CarRacing, MiniGrid's RGB views) as
    [C, H, W], the layout torch's convolutions and the Atari stacks use (SB3's
    VecTransposeImage). Takes only the env, so ``gymnasium.make(env.spec)`` rebuilds it."""

    def __init__(self, env: gymnasium.Env) -> None:
        gymnasium.utils.RecordConstructorArgs.__init__(self)
        gymnasium.ObservationWrapper.__init__(self, env)
        space = env.observation_space
        assert isinstance(space, Box)
        t = (2, 0, 1)
        self.observation_space = Box(
            space.low.transpose(t), space.high.transpose(t), None, space.dtype
        )

    def observation(self, observation: Any) -> np.ndarray:
        return np.ascontiguousarray(np.moveaxis(observation, -1, 0))


def channels_last(space: Space) -> bool:
    """Whether ``space`` is an image with its channels last: a 3-D uint8 Box of at most 4
    channels (gray, RGB, RGBA) on a side of more than 4 pixels (as SB3's ``is_image_space``)."""
    return isinstance(space, Box) and space.dtype == np.uint8 and channels_last_shape(space.shape)


def channels_last_shape(shape: tuple[int, ...]) -> bool:
    """Whether observations of ``shape`` look like images [H, W, C] of at most 4 channels on a
    side of more than 4 pixels. rltrain moves those of uint8 first (:class:`ChannelsFirst`),
    so one still this way is not uint8."""
    return len(shape) == 3 and shape[-1] <= 4 < shape[0]


def gray_image(space: Space) -> TypeGuard[Box]:
    """Whether ``space`` is a gray image without a channel axis, [H, W] uint8 of more than 4
    pixels a side (GrayscaleObservation without keep_dim, AtariPreprocessing)."""
    return (
        isinstance(space, Box)
        and len(space.shape) == 2
        and space.dtype == np.uint8
        and min(space.shape) > 4
    )


def image(space: Space) -> TypeGuard[Box]:
    """Whether ``space`` is an image with its channels first, [C, H, W] uint8 (what
    :class:`ChannelsFirst` makes, or an env's own)."""
    return isinstance(space, Box) and len(space.shape) == 3 and space.dtype == np.uint8


def stackable(space: Space) -> bool:
    """Whether :func:`adapt` stacks ``space``'s images: [C, H, W] uint8 of one (gray) or
    three (RGB) channels. Other channel counts (an env's own stack of 4 gray frames, RGBA)
    are taken as they come, so that an env that stacks its frames is not stacked again."""
    return image(space) and space.shape[0] in (1, 3)


def stack_frames(env: gymnasium.Env, k: int) -> gymnasium.Env:
    """The last ``k`` images [C, H, W] of ``env`` as one [k C, H, W], oldest first: motion a
    single frame cannot show, as Atari's stack of 4 (Mnih et al. 2015). Gymnasium's
    FrameStackObservation (a reset repeats the first image) and ReshapeObservation."""
    shape = env.observation_space.shape
    assert shape is not None  # an image: stackable() said
    c, h, w = shape
    return ReshapeObservation(FrameStackObservation(env, k), (k * c, h, w))


WIDE_UNSIGNED = {
    np.dtype(np.uint16): np.dtype(np.int32),
    np.dtype(np.uint32): np.dtype(np.int64),
    np.dtype(np.uint64): np.dtype(np.float64),  # (the network takes float32 of each)
}
"""Unsigned observations wider than a byte, as what holds their values: torch has no
process-shared storage of them (the process runtime's actors failed with a traceback)."""


def _every_leaf(space: Space | None, leaves: tuple[type, ...]) -> bool:
    """Whether ``space`` is one of ``leaves``, or a Tuple or Dict (nested) of them only."""
    if isinstance(space, Tuple | Dict):
        parts = space.spaces.values() if isinstance(space, Dict) else space.spaces
        return all(_every_leaf(part, leaves) for part in parts)
    return isinstance(space, leaves)


def flattens(space: Space) -> bool:
    """Whether :class:`FlatObservation` takes ``space``: discrete spaces, and Tuples and Dicts
    of them and of Boxes (not Text, Graph or Sequence: no fixed-size vector)."""
    return _every_leaf(space, (Box, Discrete, MultiDiscrete, MultiBinary))


def one_hot(space: Space | None) -> bool:
    """Whether ``space`` flattens into one-hot and binary cells only (Discrete, MultiDiscrete,
    MultiBinary, and Tuples and Dicts of them), not also a Box's values."""
    return _every_leaf(space, (Discrete, MultiDiscrete, MultiBinary))


def flattened_from(env: gymnasium.Env) -> Space | None:
    """The observation space :func:`adapt` flattened, if it did."""
    return env.flattened_from if isinstance(env, FlatObservation) else None


def transposed(env: gymnasium.Env) -> bool:
    """Whether :func:`adapt` moved the image's channels first."""
    while isinstance(env, ReshapeObservation | FrameStackObservation):
        env = env.env
    return isinstance(env, ChannelsFirst)


def stacked(env: gymnasium.Env) -> int:
    """How many images :func:`adapt` stacked into each observation (1: none)."""
    if isinstance(env, ReshapeObservation) and isinstance(env.env, FrameStackObservation):
        return int(env.env.stack_size)
    return 1
