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
from typing import Any

import cloudpickle
import gymnasium

from rltrain.envs.adapt import adapt
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
            # (each process says it: one that only an actor's envs raise, an unstable
            # simulation's, is not lost; explore113 took "said once" for the whole run)
            print(f"rltrain: MuJoCo: {message.strip()} (once per process)", file=sys.stderr)

    once.rltrain = True  # type: ignore[attr-defined]
    mujoco.set_mju_user_warning(once)


def make_one(
    env_id: str, kwargs: Mapping[str, Any], wrappers: Sequence[Wrapper], frame_stack: int = 1
) -> gymnasium.Env:
    """``gymnasium.make(env_id, **kwargs)`` with ``wrappers`` applied in order, then
    rltrain's own adapters (:func:`~rltrain.envs.adapt.adapt`: a flat vector, channels first,
    a stack of ``frame_stack`` images), after the user's wrappers: they see the env's own
    observations, and may make a Box."""
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
    return adapt(env, frame_stack)


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
