"""Reading YAML config files: ``yaml.safe_load``'s rules, no key twice, one-line errors."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from rltrain.errors import ConfigError


class UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.safe_load``'s loader, except that a key written twice in one mapping is an error
    (PyYAML keeps the last one silently: a second ``env:`` section replaced the first); the
    keys a merge key (``<<: *base``) brings in may still be overridden."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self.checked: set[int] = set()

    def flatten_mapping(self, node: yaml.MappingNode) -> None:
        if id(node) not in self.checked:  # once, before merged keys join the node's own
            self.checked.add(id(node))
            lines: dict[Any, int] = {}
            for k, _ in node.value:
                if isinstance(k, yaml.ScalarNode) and k.tag != "tag:yaml.org,2002:merge":
                    key, line = self.construct_object(k), k.start_mark.line + 1
                    if key in lines:
                        why = f"duplicate key '{key}', first at line {lines[key]}; keep one"
                        raise yaml.constructor.ConstructorError(None, None, why, k.start_mark)
                    lines[key] = line
        super().flatten_mapping(node)


# YAML 1.2's floats: PyYAML (YAML 1.1) reads 1e3 and 5e0 (no dot) as strings, which reached a
# user's env through env.kwargs as "1e3"; the typed keys took them (config._NUMBER) already
UniqueKeyLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def read_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping as ``yaml.safe_load`` does (:class:`UniqueKeyLoader`: no key twice);
    a missing or malformed file is a ConfigError."""
    p = Path(path)
    if p.is_dir():
        inside = f": {p / 'config.yaml'}, the run's?" if (p / "config.yaml").is_file() else ""
        raise ConfigError(f"config file {p} is a folder; give a YAML file (see configs/){inside}")
    if not p.is_file():
        raise ConfigError(f"config file not found: {p}; give a YAML file (see configs/)")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{p}: not a YAML text file (not UTF-8); give a YAML config") from None
    except OSError as e:
        raise ConfigError(f"config file {p}: cannot read it ({e.strerror or e})") from None
    try:
        data = yaml.load(text, UniqueKeyLoader)  # safe_load's, no key twice
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        problem = " ".join(str(getattr(e, "problem", None) or "").split())
        why = f" ({problem})" if problem else ""
        raise ConfigError(f"{p}: not valid YAML{where}{why}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"{p}: expected a mapping of config keys (key: value lines) at the top level, "
            f"got a {type(data).__name__}"
        )
    return data


BASE_KEY = "base"
"""A config file's top-level key naming the file it builds on (a path relative to it)."""


def read_layered(
    path: str | Path, merge: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]
) -> dict[str, Any]:
    """A config file's keys, ``base: FILE`` resolved: FILE's keys (its own ``base`` first, and
    so on) with this file's merged over them by ``merge``, as ``--set`` merges over a file
    (Hydra's defaults list and the RL zoo's hyperparameter files layer configs the same way):
    ``pong_appo.yaml`` is ``atari_appo.yaml`` with Pong's id and stop. A FILE missing, not a
    string, or a chain that comes back to a file is a ConfigError naming the file."""
    layers = [data for _, data in config_chain(path)]
    out = layers.pop()
    while layers:
        out = merge(out, layers.pop())
    return out


def config_chain(path: str | Path) -> list[tuple[Path, dict[str, Any]]]:
    """Each file of a config's ``base:`` chain with its own keys (``base`` left out), the
    file itself first (:func:`read_layered` merges them)."""
    chain: list[Path] = []
    layers: list[tuple[Path, dict[str, Any]]] = []
    p = Path(path)
    while True:
        here = p.resolve()
        if here in chain:
            loop = " -> ".join(q.name for q in [*chain, here])
            raise ConfigError(f"{path}: base files go round in a loop ({loop}); remove one base")
        chain.append(here)
        data = read_yaml(p)
        base = data.pop(BASE_KEY, None)
        layers.append((p, data))
        if base is None:
            break
        if not isinstance(base, str) or not base.strip():
            raise ConfigError(
                f"{p}: base must be the path of the YAML config this one builds on, relative "
                f"to {p.parent}; got {base!r}"
            )
        under = p.parent / base
        if not under.is_file():
            raise ConfigError(f"{p}: base file not found: {under}; give a YAML config file")
        p = under
    return layers
