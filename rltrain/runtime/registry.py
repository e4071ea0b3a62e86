"""The runtimes, in one registry: a runtime is a package whose names run a run's processes.

Each runtime satisfies :class:`rltrain.runtime.contract.Runtime` (``tests/test_runtime_contract.py``
checks every registered one). A runtime is registered by the name ``runtime.backend`` takes
and the module that holds its names, imported on first use: ``rltrain train`` starts Ray or
the forkserver before it imports torch, and a run on threads never imports Ray
(docs/architecture.md, "Runtimes"). Adding one is a package and a :func:`register_runtime`
call in a module of ``imports:``; the built-ins register below, as the update rules do
(:mod:`rltrain.ps.rules`).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType

from rltrain.config import ConfigError


@dataclass(frozen=True)
class RuntimeEntry:
    """One runtime: what ``runtime.backend`` calls it, where its names are, what it is."""

    name: str
    module: str
    """The module (a package) with the contract's names, imported by :func:`load_runtime`."""
    summary: str
    """One line for ``rltrain options`` and the docs."""


_RUNTIMES: dict[str, RuntimeEntry] = {}


def register_runtime(entry: RuntimeEntry) -> RuntimeEntry:
    """Make ``entry`` known by its name (``runtime.backend``); returns it. A name registered
    already is refused (ValueError), unless by an equal entry."""
    if not entry.name.isidentifier() or entry.name == "auto":
        raise ValueError(
            f"a runtime needs a name that is an identifier (not 'auto'), got {entry.name!r}"
        )
    held = _RUNTIMES.get(entry.name)
    if held is not None and held != entry:
        raise ValueError(f"runtime {entry.name!r} is registered already ({held.module})")
    _RUNTIMES[entry.name] = entry
    return entry


def unregister_runtime(name: str) -> None:
    """Forget a runtime registered with :func:`register_runtime` (a test's own; built-ins
    stay)."""
    if name in (e.name for e in BUILT_IN):
        raise ValueError(f"runtime {name!r} is built in")
    _RUNTIMES.pop(name, None)


def runtime_names() -> tuple[str, ...]:
    """The registered runtimes' names, built-in first, in registration order."""
    return tuple(_RUNTIMES)


def runtime_entry(name: str) -> RuntimeEntry:
    """The registered runtime called ``name`` (a one-line ConfigError naming the others if
    none)."""
    entry = _RUNTIMES.get(name)
    if entry is None:
        allowed = ", ".join(("auto", *_RUNTIMES))
        raise ConfigError(f"runtime.backend={name!r}: allowed values are {allowed}")
    return entry


def load_runtime(name: str) -> ModuleType:
    """The module of the runtime called ``name``, imported now if it was not."""
    return importlib.import_module(runtime_entry(name).module)


BUILT_IN: tuple[RuntimeEntry, ...] = (
    RuntimeEntry(
        "process",
        "rltrain.runtime.process",
        "OS processes of this machine: a forkserver, tensors through shared memory",
    ),
    RuntimeEntry(
        "ray", "rltrain.runtime.ray", "Ray processes: a local Ray, or a cluster (--address)"
    ),
    RuntimeEntry(
        "local", "rltrain.runtime.local", "threads of the one rltrain process (debugging)"
    ),
)
for _entry in BUILT_IN:
    register_runtime(_entry)
