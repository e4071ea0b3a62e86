"""The checks of the Python API's own arguments (``episodes=``, ``video=``, ``checkpoint=``,
a typo of ``run_dir=``), each a one-line :class:`~rltrain.config.ConfigError` naming the
argument as the command line's checks name its flags."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import numpy as np

from rltrain.config import ConfigError
from rltrain.config_keys import closest


def arg_typo(keys: Iterable[str], args: tuple[str, ...]) -> None:
    """Refuse a key of ``**overrides`` that is a typo of the function's own ``args``
    (``train(resum=...)``), which would otherwise read as an unknown config key."""
    for key in keys:
        if near := closest(key, list(args)):
            raise ConfigError(f"{key}=: not an argument or a config key; did you mean {near[0]}=?")


def path_arg(value: Any, arg: str) -> str:
    """A path argument as a str; anything else is a one-line error naming ``arg``."""
    if isinstance(value, str | os.PathLike):
        return str(os.fspath(value))
    raise ConfigError(f"{arg}={value!r}: expected a path (a str or a pathlib.Path)")


def whole_arg(value: Any, arg: str, rule: Any) -> int | None:
    """``episodes=`` or ``seed=`` checked by the rule ``rltrain eval`` checks its flag with."""
    try:
        return None if value is None else rule.check(value)
    except ValueError as e:
        raise ConfigError(f"{arg}={value!r}: {e}") from None


def choice_arg(value: Any, arg: str, allowed: tuple[Any, ...]) -> Any:
    """``value`` if it is one of ``allowed`` (True, False, None or strings), else one line."""
    if isinstance(value, np.bool_):
        value = bool(value)
    if any(value is a or (isinstance(a, str) and value == a) for a in allowed):
        return value
    names = [f'"{a}"' if isinstance(a, str) else repr(a) for a in allowed]
    raise ConfigError(f"{arg}={value!r}: allowed are {', '.join(names[:-1])} or {names[-1]}")


def checkpoint_arg(value: Any) -> str:
    """``checkpoint=`` (``latest``, ``best`` or a path) as a str, else one line."""
    if isinstance(value, str | os.PathLike):
        return str(os.fspath(value))
    raise ConfigError(f'checkpoint={value!r}: expected "latest", "best" or a checkpoint\'s path')
