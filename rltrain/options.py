"""What ``rltrain options`` prints: every config key with its type, default and docstring.

A field's docstring is the string literal right after it in its dataclass, read with
:mod:`ast`; a field whose ``spec`` has choices shows them as its type.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
import types
import typing
from typing import Any, cast

from rltrain.config import choices_of, field_default


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
) -> list[tuple[str, str, str, str]]:
    """Rows of (key, type, default, doc) for every field of a config class, recursively;
    with ``command``, not the keys only the other command reads (metadata ``only``).

    Defaults are read from the fields (``cls()`` may refuse its own defaults, e.g. a config
    that needs one stop criterion set); a section's default instance, such as a specific
    optimizer of one command, gives the defaults of its keys.
    """
    rows: list[tuple[str, str, str, str]] = []
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
        choices = choices_of(f.metadata)
        kind = " | ".join(map(str, choices)) if choices else _type_name(tp)
        rows.append((prefix + f.name, kind, repr(default), docs.get(f.name, "")))
    return rows


def _type_name(tp: Any) -> str:
    args = typing.get_args(tp)
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in args)
    if typing.get_origin(tp) is tuple:
        return f"list[{_type_name(args[0])}]"
    if typing.get_origin(tp) is dict:
        return "mapping"
    return "null" if tp is type(None) else getattr(tp, "__name__", str(tp))
