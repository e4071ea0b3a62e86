"""Every key a config class takes, by its dotted path: where a key that its section lacks does
live (``--set algo.lr``: optimizer.lr). Apart from :mod:`rltrain.config`, which imports it, so
that the hint costs no import cycle."""

from __future__ import annotations

import dataclasses
import difflib
import typing
from typing import Any


def key_paths(cls: type, prefix: str = "") -> list[str]:
    """The dotted path of every key of ``cls`` (a config dataclass), its sections' keys and a
    registry's sections (``cls.SECTIONS``) included, derived keys left out."""
    hints = typing.get_type_hints(cls)
    holder = getattr(cls, "SECTIONS", "")
    paths: list[str] = []
    for f in dataclasses.fields(cls):
        if f.name == holder:
            for name, section in typing.cast(Any, cls).extra_sections().items():
                paths += key_paths(section, f"{prefix}{name}.")
        elif f.init and not f.metadata.get("derived"):
            tp = hints[f.name]
            inner = isinstance(tp, type) and dataclasses.is_dataclass(tp)
            paths += key_paths(tp, f"{prefix}{f.name}.") if inner else [prefix + f.name]
    return paths


def homes_hint(cls: type, key: str) -> str:
    """``; did you mean optimizer.lr?`` for a ``key`` that lives elsewhere in ``cls``, or ""."""
    homes = [p for p in key_paths(cls) if p.rsplit(".", 1)[-1] == key][:3]
    homes = [h if "." in h else f"{h} (a top-level key)" for h in homes]
    return f"; did you mean {' or '.join(homes)}?" if homes else ""


def unknown_key(path: str, key: str, allowed: list[str]) -> str:
    """The error for ``key`` (at dotted ``path``) where its section allows ``allowed``."""
    same_case = [a for a in allowed if a.lower() == key.lower()]  # keys are lower case
    close = same_case or difflib.get_close_matches(key, allowed, n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    return f"unknown config key '{path}'{hint} (allowed here: {', '.join(sorted(allowed))})"
