"""Users' own environments: the modules that register them, make() arguments and wrappers.

``imports`` (a run's top-level key) names modules to import before an env is made; such a
module registers its envs with ``gymnasium.register`` (as a package's ``__init__`` usually
does). :func:`make_env` imports them first, and every process that steps an env calls it,
so each actor on each node imports them itself, not only the driver. Every failure here is
one line naming what was wrong (an :class:`~rltrain.envs.base.EnvError`).
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import os
import pickle
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeGuard

import cloudpickle
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

from rltrain.envs.base import EnvError
from rltrain.envs.checks import where
from rltrain.envs.config import EnvConfig
from rltrain.failure import first_line

Wrapper = Callable[[gymnasium.Env], gymnasium.Env]


def _import(name: str, what: str) -> Any:
    """Import ``name`` with the current directory on the path (as ``python -m`` has it)."""
    if "/" in name or os.sep in name or (name.endswith(".py") and os.path.isfile(name)):
        folder, module = os.path.split(name.removesuffix(".py"))
        there = f", with {folder} on PYTHONPATH" if folder.strip("./") else ""
        raise EnvError(
            f"{what}: {name!r} is a file's path; name its module instead ({module!r}{there})"
        )
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.append(os.getcwd())
    try:
        return importlib.import_module(name)
    except Exception as e:  # noqa: BLE001 - any failure of the user's module is reported
        where = ""
        if isinstance(e, ModuleNotFoundError) and e.name == name.split(".")[0]:  # not found
            where = (  # (a run trained in another folder: `rltrain eval` from elsewhere)
                f"; modules are looked up from the current folder ({os.getcwd()}) and "
                "PYTHONPATH: run from the folder that holds it, or add that folder to PYTHONPATH"
            )
        raise EnvError(f"{what}: cannot import module {name!r}: {first_line(e)}{where}") from None


def import_env_modules(names: Sequence[str], key: str = "imports") -> None:
    """Import each module of ``imports`` (once per process); ``key``: what its errors name."""
    for name in names:
        if name not in sys.modules:
            _import(name, key)


def ship_registration(cfg: EnvConfig) -> EnvConfig:
    """``cfg`` carrying its id's registration in this process, for the actor processes that
    never ran the code that made it: a script's or a notebook's ``gymnasium.register`` call
    runs in the driver only (a forkserver child or a Ray worker does not run ``__main__``).
    Pickled with cloudpickle (as SB3's SubprocVecEnv and Ray send env factories), so an env
    class defined in ``__main__`` travels by value. Unchanged when the id is not registered
    here or its entry point cannot be pickled: the actors then import ``imports`` and name
    the module to list there if the id is still unknown."""
    spec = gymnasium.registry.get(cfg.id)
    if spec is None:
        return cfg
    try:
        blob = cloudpickle.dumps(spec)
    except Exception:  # noqa: BLE001 - a closure over a lock, a file: not shipped
        return cfg
    return dataclasses.replace(cfg, registration=blob)


def load_env_code(cfg: EnvConfig) -> None:
    """Import ``cfg``'s ``imports`` (they may register its id), then register the id as the
    process that started the run had it (:func:`ship_registration`) if this process still
    does not know it."""
    import_env_modules(cfg.imports)
    if cfg.registration is not None and cfg.id not in gymnasium.registry:
        spec = pickle.loads(cfg.registration)  # noqa: S301 - the run's own driver wrote it
        gymnasium.registry[cfg.id] = spec


def import_listed(data: Mapping[str, Any]) -> None:
    """Import a config's ``imports`` (a list of module names) before its keys are checked: a
    module there may register an algorithm, an update rule or a runtime (rltrain.rl.algos,
    rltrain.ps.rules, rltrain.runtime) that the config names (a config's ``before_check``)."""
    imports = data.get("imports")
    if isinstance(imports, list | tuple) and all(isinstance(m, str) for m in imports):
        import_env_modules(imports)


WRAPPER_FORM = "module:Class or module:Class(name=value, ...)"
EXAMPLE = "gymnasium.wrappers:TimeLimit(max_episode_steps=100)"


def wrapper_arguments(ref: str) -> tuple[str, dict[str, Any]]:
    """``module:Class(name=value, ...)`` of ``env.wrappers`` as (``module:Class``, keyword
    arguments): the arguments are Python literals (numbers, strings, True/False/None, lists,
    tuples, dicts), read with :func:`ast.literal_eval`; no parentheses, no arguments."""
    head, paren, _ = ref.partition("(")
    if not paren:
        return ref.strip(), {}
    bad = f"env.wrappers: {ref!r} is not {WRAPPER_FORM} (e.g. {EXAMPLE})"
    try:
        call = ast.parse("_" + ref[len(head) :].strip(), mode="eval").body
    except SyntaxError:
        raise EnvError(bad) from None
    if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name):
        raise EnvError(bad)
    if call.args or any(k.arg is None for k in call.keywords):
        raise EnvError(f"env.wrappers: {ref!r}: give the arguments by name (e.g. {EXAMPLE})")
    kwargs: dict[str, Any] = {}
    for k in call.keywords:
        assert k.arg is not None  # **mapping refused above
        try:
            kwargs[k.arg] = ast.literal_eval(k.value)
        except (ValueError, TypeError, SyntaxError):
            raise EnvError(
                f"env.wrappers: {ref!r}: {k.arg}={ast.unparse(k.value)} is not a Python literal "
                "(a number, 'text', True, False, None, or a list, tuple or dict of them)"
            ) from None
    return head.strip(), kwargs


class BoundWrapper:
    """A wrapper of ``env.wrappers`` with the keyword arguments written after it: env ->
    ``Class(env, **kwargs)``, named as written (``RescaleAction(min_action=-1, ...)``)."""

    def __init__(self, wrapper: Wrapper, kwargs: Mapping[str, Any]) -> None:
        self.wrapper, self.kwargs = wrapper, dict(kwargs)
        args = ", ".join(f"{k}={v!r}" for k, v in self.kwargs.items())
        self.__name__ = f"{getattr(wrapper, '__name__', 'wrapper')}({args})"

    def __call__(self, env: gymnasium.Env) -> gymnasium.Env:
        return self.wrapper(env, **self.kwargs)


def check_wrappers_travel(wrappers: Sequence[str], backend: str) -> None:
    """A wrapper of the script's ``__main__`` exists in this process alone: processes import
    ``env.wrappers`` by name (explore108: it failed after the start-up, as the run's fault)."""
    mine = [w for w in wrappers if w.split(":", 1)[0] == "__main__"]
    if mine and backend != "local":
        raise EnvError(
            f"env.wrappers: {mine[0]!r} is defined in the script, which the {backend} runtime's "
            "processes do not import: define it in a module listed in imports, or run with "
            "runtime.backend=local"
        )


def load_wrapper(ref: str) -> Wrapper:
    """``module:Class`` (or ``module:function``) of ``env.wrappers`` as a callable env -> env;
    ``module:Class(name=value, ...)`` with keyword arguments (:func:`wrapper_arguments`)."""
    name, kwargs = wrapper_arguments(ref)
    module, sep, attr = name.partition(":")
    if not (sep and module and attr):
        raise EnvError(
            f"env.wrappers: {ref!r} is not module:Class (e.g. gymnasium.wrappers:ClipAction, "
            f"{EXAMPLE})"
        )
    obj: Any = _import(module, "env.wrappers")
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise EnvError(f"env.wrappers: module {module!r} has no {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise EnvError(f"env.wrappers: {name!r} is a {type(obj).__name__}, not a wrapper class")
    return BoundWrapper(obj, kwargs) if kwargs else obj


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
    """Whether :func:`make_one` stacks ``space``'s images: [C, H, W] uint8 of one (gray) or
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


def quiet_mujoco(env_id: str) -> None:
    """MuJoCo's warnings once per process, on stderr: by default MuJoCo prints each every time
    (Gymnasium's v5 models warn of a deprecated 'settotalmass' as each env is built: 17 lines
    for 16 envs) and appends it to MUJOCO_LOG.TXT in the working folder."""
    entry = getattr(gymnasium.registry.get(env_id), "entry_point", "")
    if not isinstance(entry, str) or "mujoco" not in entry:
        return
    import mujoco

    if getattr(mujoco.get_mju_user_warning(), "rltrain", False):
        return
    said: set[str] = set()

    def once(message: str) -> None:
        if message not in said:
            said.add(message)
            print(f"rltrain: MuJoCo: {message.strip()} (said once)", file=sys.stderr)

    once.rltrain = True  # type: ignore[attr-defined]
    mujoco.set_mju_user_warning(once)


def make_one(
    env_id: str, kwargs: Mapping[str, Any], wrappers: Sequence[Wrapper], frame_stack: int = 1
) -> gymnasium.Env:
    """``gymnasium.make(env_id, **kwargs)`` with ``wrappers`` applied in order, then
    :class:`FlatObservation` if the observations are not a Box but gymnasium can flatten them,
    a vector of one for a scalar Box, or :class:`ChannelsFirst` if they are an [H, W, C]
    image, or a channel axis for an [H, W] gray image (after the user's wrappers: they see the
    env's own observations, and may make a Box); a gray or RGB image is then stacked
    ``frame_stack`` deep (:func:`stack_frames`)."""
    quiet_mujoco(env_id)
    env = gymnasium.make(env_id, **kwargs)
    for wrap in wrappers:
        try:
            env = wrap(env)
        except Exception as e:  # noqa: BLE001 - the user's wrapper or its arguments
            name = getattr(wrap, "__name__", repr(wrap))
            bare = isinstance(e, TypeError) and not isinstance(wrap, BoundWrapper)
            hint = "; give its arguments as module:Class(name=value, ...)" if bare else ""
            why = f"{first_line(e)}{hint}"
            raise EnvError(f"env.wrappers: {name} failed on {env_id}: {why}") from None
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
    """The observation space :func:`make_one` flattened, if it did."""
    return env.flattened_from if isinstance(env, FlatObservation) else None


def transposed(env: gymnasium.Env) -> bool:
    """Whether :func:`make_one` moved the image's channels first."""
    while isinstance(env, ReshapeObservation | FrameStackObservation):
        env = env.env
    return isinstance(env, ChannelsFirst)


def stacked(env: gymnasium.Env) -> int:
    """How many images :func:`make_one` stacked into each observation (1: none)."""
    if isinstance(env, ReshapeObservation) and isinstance(env.env, FrameStackObservation):
        return int(env.env.stack_size)
    return 1


def make_failed(env_id: str, kwargs: Mapping[str, Any], e: Exception) -> EnvError:
    """The one-line error of an env that gymnasium (or a wrapper) could not make; an EnvError
    (a wrapper's, from :func:`make_one`) as it is."""
    if isinstance(e, EnvError):
        return e
    given = f" with env.kwargs {dict(kwargs)}" if kwargs else ""
    # gymnasium re-raises a TypeError of the constructor with this said again after it
    why = first_line(e).split(" was raised from the environment creator for ")[0]
    extra = EXTRAS.get(getattr(e, "name", None) or "") if isinstance(e, ImportError) else None
    if extra and "pip install" not in why:  # (gymnasium's Box2D envs say it; MuJoCo's did not)
        why += f'; install it with: pip install "gymnasium[{extra}]"'
    # the line of the user's own code that raised (explore96: a constructor's raise said
    # none, and the caller's `from None` leaves its frames out of failure.log)
    return EnvError(f"env {env_id!r} could not be made{given}: {why}{where(e, own_only=True)}")


EXTRAS = {"mujoco": "mujoco", "Box2D": "box2d", "pygame": "classic-control"}
"""A module an env needs -> gymnasium's extra that installs it (a ModuleNotFoundError's name)."""
