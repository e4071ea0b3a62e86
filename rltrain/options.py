"""What ``rltrain options`` prints: every config key with its type, default and docstring.

A field's docstring is the string literal right after it in its dataclass, read with
:mod:`ast`; a field whose ``spec`` has choices shows them as its type, one with bounds or
``auto`` shows them after it (``float in [0, 1]``, ``int >= 0 | auto``), read from the same
``spec`` the config checker enforces.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import shutil
import sys
import textwrap
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, cast

from rltrain.config import BOUNDS, choices_of, field_default
from rltrain.config_keys import closest, keys_named
from rltrain.errors import ConfigError

Row = tuple[str, str, str, str]
"""One key of the manual: (key, type, default, doc)."""


def field_docs(cls: type) -> dict[str, str]:
    """The attribute docstrings of a dataclass: the string literal right after each field."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError):
        return {}
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs: dict[str, str] = {}
    for node, nxt in zip(body, body[1:], strict=False):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(nxt, ast.Expr)
            and isinstance(nxt.value, ast.Constant)
            and isinstance(nxt.value.value, str)
        ):
            docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs


def describe(
    cls: type, prefix: str = "", defaults: Any = None, command: str | None = None
) -> list[Row]:
    """Rows of (key, type, default, doc) for every field of a config class, recursively;
    with ``command``, not the keys only the other command reads (metadata ``only``).

    Defaults are read from the fields (``cls()`` may refuse its own defaults, e.g. a config
    that needs one stop criterion set); a section's default instance, such as a specific
    optimizer of one command, gives the defaults of its keys.
    """
    rows: list[Row] = []
    docs = field_docs(cls)
    hints = typing.get_type_hints(cls)
    holder = getattr(cls, "SECTIONS", "")
    for f in dataclasses.fields(cls):
        if f.name == holder:  # a registry's sections, each a top-level one
            for name, section in cast(Any, cls).extra_sections().items():
                rows.extend(describe(section, f"{prefix}{name}.", None, command))
            continue
        if f.metadata.get("derived") or f.metadata.get("only") not in (None, command):
            continue
        tp = hints[f.name]
        default = field_default(f) if defaults is None else getattr(defaults, f.name)
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            rows.extend(describe(tp, prefix + f.name + ".", default, command))
            continue
        item = typing.get_args(tp)[0] if typing.get_origin(tp) is tuple else None
        if isinstance(item, type) and dataclasses.is_dataclass(item):  # a list of sections
            rows.extend(describe(item, prefix + f.name + "[].", None, command))  # then the list
        rows.append((prefix + f.name, kind_of(tp, f.metadata), repr(default), docs.get(f.name, "")))
    return rows


def kind_of(tp: Any, meta: Mapping[str, Any]) -> str:
    """The type column of a key: its choices, else its type with the bounds and ``auto`` of
    its ``spec`` (explore101: the checker refused algo.gamma=1.5 that no manual line bounded,
    and listed actors as an int, which also takes auto)."""
    choices = choices_of(meta)
    if choices:
        return " | ".join(map(str, choices))
    return _type_name(tp, bounds_of(meta)) + (" | auto" if meta.get("auto") else "")


def bounds_of(meta: Mapping[str, Any]) -> str:
    """`` in [0, 1)``, `` >= 1`` or ``""``: a ``spec``'s bounds, each of the checker's
    (:data:`rltrain.config.BOUNDS`) that it sets; one lower and one upper, an interval."""
    given = [(name, word, meta[name]) for name, _ok, word in BOUNDS if meta.get(name) is not None]
    lower = [g for g in given if g[1].startswith(">")]
    upper = [g for g in given if g[1].startswith("<")]
    if len(lower) == len(upper) == 1:
        (lo, _, low), (hi, _, high) = lower[0], upper[0]
        opens, closes = "[" if lo == "ge" else "(", "]" if hi == "le" else ")"
        return f" in {opens}{_number(low)}, {_number(high)}{closes}"
    return "".join(f" {word} {_number(value)}" for _name, word, value in given)


def _number(value: Any) -> str:
    """A bound as written in a config: 1 for 1.0, 1e-08 for 1e-8."""
    whole = isinstance(value, float) and value.is_integer() and abs(value) < 1e15
    return str(int(value)) if whole else str(value)


def _type_name(tp: Any, bounds: str = "") -> str:
    """``tp``'s name in the manual, ``bounds`` after its number (a list's: after its items'):
    ``float > 0 | null``, ``list[float in (0, 1]]``."""
    args = typing.get_args(tp)
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a, bounds) for a in args)
    if typing.get_origin(tp) is tuple:
        return f"list[{_type_name(args[0], bounds)}]"
    if typing.get_origin(tp) is dict:
        return "mapping"
    return "null" if tp is type(None) else getattr(tp, "__name__", str(tp)) + bounds


def select(rows: list[Row], key: str | None, command: str, others: Sequence[Row] = ()) -> list[Row]:
    """The rows of ``key``: that key, or every key of a section or prefix (``ppo``: ppo.*;
    ``faults.events``: its items' keys too). A key none matches is a ConfigError naming the
    closest keys, else the top-level ones (explore101: `rltrain options train algo.gamma`
    was refused, and finding one key needed grep -A1)."""
    if not key:
        return rows
    chosen = [r for r in rows if r[0] == key or r[0].startswith((f"{key}.", f"{key}[]"))]
    if chosen:
        return chosen
    other = "bench" if command == "train" else "train"  # ``others``: that command's rows
    if any(r[0] == key or r[0].startswith(f"{key}.") for r in others):  # (review 85)
        raise ConfigError(f"{key}: a key of rltrain {other} only (rltrain options {other} {key})")
    keys = [r[0] for r in rows]
    close = keys_named(keys, key.rsplit(".", 1)[-1])  # gamma, or stop.gamma: algo.gamma
    close = close or closest(key, _sections(keys) + keys, n=3)  # (alg: algo)
    if close:
        hint = f"did you mean {', '.join(close)}?"
    else:
        tops = dict.fromkeys(k.split(".")[0].removesuffix("[]") for k in keys)
        hint = f"top-level keys and sections: {', '.join(tops)}"
    raise ConfigError(f"{key!r}: no key or section of rltrain {command}'s config; {hint}")


def _sections(keys: list[str]) -> list[str]:
    """The sections ``keys`` lie in (env, faults), but those that are keys themselves (a list
    of sections: faults.events)."""
    parts = [k.replace("[]", "").split(".") for k in keys]
    above = dict.fromkeys(".".join(p[:i]) for p in parts for i in range(1, len(p)))
    return [s for s in above if s not in keys]


def terminal_columns() -> int | None:
    """The width of the terminal that stdout writes to; None where it is a pipe or a file."""
    return shutil.get_terminal_size().columns if sys.stdout.isatty() else None


def manual(rows: list[Row], columns: int | None = None) -> list[str]:
    """The lines of the manual: each key with its type and default, its doc below, indented
    under the type. ``columns``: a terminal's width, to which the docs are wrapped under that
    indent (explore101: 700-character lines wrapped to the margin); None (piped) keeps one
    line per doc, for grep."""
    width = max((len(r[0]) for r in rows), default=0)
    indent = " " * (width + 2)
    lines: list[str] = []
    wrap = None if columns is None else max(columns, len(indent) + 40)  # (narrow: past it)
    for key, kind, default, doc in rows:
        lines.append(f"{key:<{width}}  {kind}  (default {default})")
        if doc and wrap is None:
            lines.append(indent + doc)
        elif doc and wrap is not None:
            lines += textwrap.wrap(doc, wrap, initial_indent=indent, subsequent_indent=indent)
    return lines
