"""Every key a config class takes, by its dotted path: where a key that its section lacks does
live (``--set algo.lr``: optimizer.lr). Apart from :mod:`rltrain.config`, which imports it, so
that the hint costs no import cycle."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping, Sequence
from typing import Any


def key_paths(cls: type, prefix: str = "", command: str | None = None) -> list[str]:
    """The dotted path of every key of ``cls`` (a config dataclass), its sections' keys and a
    registry's sections (``cls.SECTIONS``) included, derived keys left out; with ``command``,
    only those it reads (:func:`read_by`)."""
    hints = typing.get_type_hints(cls)
    holder = getattr(cls, "SECTIONS", "")
    paths: list[str] = []
    for f in dataclasses.fields(cls):
        if f.name == holder:
            for name, section in typing.cast(Any, cls).extra_sections().items():
                paths += key_paths(section, f"{prefix}{name}.", command)
        elif f.init and not f.metadata.get("derived") and read_by(f, command):
            tp = hints[f.name]
            inner = isinstance(tp, type) and dataclasses.is_dataclass(tp)
            paths += key_paths(tp, f"{prefix}{f.name}.", command) if inner else [prefix + f.name]
    return paths


def type_at(cls: type | None, path: typing.Sequence[str]) -> Any:
    """The type of the key at ``path`` in config ``cls`` (None where no such key)."""
    tp: Any = cls
    for part in path:  # (a key below a plain value: None)
        tp = typing.get_type_hints(tp).get(part) if dataclasses.is_dataclass(tp) else None
    return tp


def mapping_keys(cls: type) -> tuple[str, ...]:
    """The dotted paths of the keys of ``cls`` that hold a mapping the user fills, typed
    ``dict[...]`` (``env.kwargs``), not a section."""
    return tuple(k for k in key_paths(cls) if typing.get_origin(type_at(cls, k.split("."))) is dict)


def check_command_keys(cfg: Any, command: str, prefix: str = "") -> None:
    """A ValueError naming the first key of ``cfg`` (a config) set away from its default that
    only the other command reads (field metadata ``only``: ``server.record`` is the bench's,
    ``runtime.inference`` train's): it would be ignored without a word."""
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            check_command_keys(value, command, f"{prefix}{f.name}.")
            continue
        only = f.metadata.get("only")
        if only in (None, command):
            continue
        default = f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
        if value != default:
            raise ValueError(
                f"{prefix}{f.name}={value}: read by `rltrain {only}` only; leave it out of a "
                f"`rltrain {command}` config"
            )


def read_by(f: dataclasses.Field, command: str | None) -> bool:
    """Whether ``command`` reads field ``f``: its metadata ``only`` names no other command
    (None: any command)."""
    return command is None or f.metadata.get("only") in (None, command)


def keys_named(paths: list[str], *names: str) -> list[str]:
    """The dotted ``paths`` whose last part is one of ``names`` (where a key of that name
    lives), the first three."""
    return [p for p in paths if p.rsplit(".", 1)[-1] in names][:3]


def homes_hint(cls: type, key: str, misspelt: bool = False) -> str:
    """``; did you mean optimizer.lr?`` for a ``key`` that lives elsewhere in ``cls``, or "";
    ``misspelt``: also a key of a name close to it (where its own section has none)."""
    paths = key_paths(cls, command=getattr(cls, "COMMAND", None))  # (none the other's)
    homes = keys_named(paths, key)
    if not homes and misspelt:  # (explore101: `windows` found no stop.window)
        near = closest(key, sorted({p.rsplit(".", 1)[-1] for p in paths if "." in p}), n=2)
        homes = keys_named(paths, *near)
    homes = [h if "." in h else f"{h} (a top-level key)" for h in homes]
    if homes:
        return f"; did you mean {' or '.join(homes)}?"
    command = getattr(cls, "COMMAND", None)
    other = keys_named([p for p in key_paths(cls) if p not in paths], key)
    other_command = {"train": "bench", "bench": "train"}.get(str(command), "the other command")
    return f"; {other[0]} is a key of rltrain {other_command} only" if other else ""


IMPORTS_HINT = "the module that registers it is named in the top-level key imports"
"""How a registry's entry of the user's own (an algorithm, an update rule) is loaded."""


def unknown_key(path: str, key: str, allowed: list[str], sections: bool = False) -> str:
    """The error for ``key`` (at dotted ``path``) where its section allows ``allowed``;
    ``sections``: a config that also takes the sections of registered algorithms (explore108:
    `vpg.*` whose module was not in imports read as a typo)."""
    close = closest(key, allowed, n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    said = f"unknown config key '{path}'{hint} (allowed here: {', '.join(sorted(allowed))})"
    own = f"; a section of an algorithm of yours exists once {IMPORTS_HINT}"
    return said + (own if sections and not close else "")


AS_SETTINGS = {
    "async_scale": "rltrain bench's name for server.rule=async with server.staleness=scale",
    "async_drop": "rltrain bench's name for server.rule=async with server.staleness=drop",
    **dict.fromkeys(
        ("baseline", "hogwild", "sandblaster", "allreduce"),
        "a mode of rltrain bench, not an update rule (no parameter server's rule runs it)",
    ),
}
"""Values that name a combination of settings elsewhere: the keys to set instead."""


def unknown_choice(key: str, value: Any, choices: Sequence[Any], registry: bool) -> str:
    """The error for a ``value`` not among ``choices``; ``registry``: choices a registry
    names (algorithms, update rules), to which the user's own module may add."""
    close = closest(str(value), [str(c) for c in choices])
    hint = f" (did you mean {close[0]}?)" if close else ""
    if str(value) in AS_SETTINGS:  # (explore111: a bench mode's name given as a rule)
        hint = f"; {value} is {AS_SETTINGS[str(value)]}"
    elif registry and not close:
        hint = f"; one of your own is allowed once {IMPORTS_HINT}"
    return f"{key}={value!r}: allowed values are {', '.join(map(str, choices))}{hint}"


def closest(word: str, allowed: list[str], n: int = 1) -> list[str]:
    """The ``allowed`` names a typo of ``word`` most likely meant: the same name in another
    case, else those within a few edits (``asink``: async, where difflib's ratio picked
    baseline), nearest first, else those ``word`` begins (``sandblast``: sandblaster)."""
    same_case = [a for a in allowed if a.lower() == word.lower()]
    if same_case:
        return same_case[:n]
    w = word.lower()
    limit = 1 if len(w) < 5 else 2 if len(w) < 8 else 3
    dist = {a: _edits(w, a.lower()) for a in allowed}
    near = sorted((a for a in allowed if dist[a] <= limit), key=lambda a: dist[a])
    starts = [a for a in allowed if len(w) >= 3 and a.lower().startswith(w) and a not in near]
    words = w.split("_")  # max_steps: max_env_steps, a word short (explore101)
    inside = [
        a
        for a in allowed
        if len(words) > 1 and a not in near + starts and _in_order(words, a.lower().split("_"))
    ]
    return (near + starts + inside)[:n]


def _in_order(words: list[str], among: list[str]) -> bool:
    """Whether ``words`` are among ``among`` in their order (others between them)."""
    it = iter(among)
    return all(any(w == a for a in it) for w in words)


def _edits(a: str, b: str) -> int:
    """Edits from ``a`` to ``b``: insertions, deletions, substitutions and swaps of two
    neighbours (the optimal string alignment distance)."""
    rows = [list(range(len(b) + 1))]
    for i, ca in enumerate(a, 1):
        row = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            row[j] = min(rows[-1][j] + 1, row[j - 1] + 1, rows[-1][j - 1] + (ca != cb))
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                row[j] = min(row[j], rows[-2][j - 2] + 1)
        rows.append(row)
    return rows[-1][-1]


def moved_keys(cls: type | None, data: Any) -> Any:
    """``data`` with the keys ``cls.MOVED`` names (old ``section.key`` -> new) in their new
    places, so that configs and checkpoints of an older rltrain still load."""
    moved = getattr(cls, "MOVED", None)
    if not moved or not isinstance(data, Mapping):
        return data
    data = dict(data)
    for old, new in moved.items():
        osec, okey = old.split(".")
        section = data.get(osec)
        if isinstance(section, Mapping) and okey in section:
            data[osec] = {k: v for k, v in section.items() if k != okey}
            nsec, _, nkey = new.rpartition(".")  # no section: a top-level key
            if not nsec:
                data.setdefault(nkey, section[okey])  # the new key, if given too, wins
            else:
                data[nsec] = {**(data.get(nsec) or {}), nkey: section[okey]}
    return data


def dotted(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"optimizer.lr": 0.001, ...}`` from a config's nested dict (:func:`nested`'s
    inverse)."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            out.update(dotted(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def flat_keys(tree: Any, prefix: str = "") -> dict[str, Any]:
    """A config's nested dict as dotted keys: ``{"server": {"rule": "async"}}`` as
    ``{"server.rule": "async"}`` (lists kept as values)."""
    if not isinstance(tree, dict):
        return {prefix: tree}
    out: dict[str, Any] = {}
    for key, value in tree.items():
        out.update(flat_keys(value, f"{prefix}.{key}" if prefix else str(key)))
    return out
