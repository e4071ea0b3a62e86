"""The user's extensions (algorithms, update rules) carried to every process of a run.

A registry (:mod:`rltrain.rl.algos`, :mod:`rltrain.ps.rules`) lives in the process that fills
it. The process and local runtimes keep the shards in the driver's process and fork their
children from it, so what the user registered is there; Ray's processes import rltrain
afresh, on every node. Each registry tells this module how to list what the user added and
how to add it again (:func:`track`); the Ray runtime takes a :func:`snapshot` when it starts
and every one of its worker processes :func:`restore` s it before it runs anything
(``runtime_env.worker_process_setup_hook``); the process runtime's children, forked from a
forkserver that started before the user's script registered anything, get it with their
constructor's arguments (:func:`packed`). The extensions travel pickled: by reference where
their module imports in the worker (installed, or shipped with ``imports``), by value
where it does not (a script's ``__main__``, a test file on Ray).
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import site
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rltrain.errors import UserError

_REGISTRIES: dict[str, tuple[Callable[[], list[Any]], Callable[[Any], None]]] = {}
_IMPORTED_BY: dict[tuple[str, str], str] = {}
"""(registry module, name) -> the module whose import registered it (:func:`note_importer`)."""


def track(module: str, added: Callable[[], list[Any]], add: Callable[[Any], None]) -> None:
    """Declare the registry of ``module``: ``added()`` lists what was registered beyond the
    built-ins, ``add(item)`` registers one item (if its name is not known yet)."""
    _REGISTRIES[module] = (added, add)


def snapshot() -> dict[str, list[Any]]:
    """What the user registered in this process, by registry module (empty: nothing)."""
    return {m: items for m, (added, _) in _REGISTRIES.items() if (items := added())}


def restore(snap: dict[str, list[Any]]) -> None:
    """Register ``snap``'s items in this process (a Ray worker's setup hook)."""
    for module, items in snap.items():
        importlib.import_module(module)  # its built-ins first, and its add function
        add = _REGISTRIES[module][1]
        for item in items:
            add(item)


def setup_hook(snap: dict[str, list[Any]]) -> Callable[[], None]:
    """A function that restores ``snap`` (a nested function: cloudpickle carries it by value,
    ``snap`` with it)."""

    def restore_extensions() -> None:
        restore(snap)

    return restore_extensions


def packed() -> bytes | None:
    """This process's :func:`snapshot` as bytes for a child process (None: nothing to carry).
    cloudpickle (a dependency of gymnasium's) carries what a script's ``__main__`` defined by
    value; the rest goes by reference to its module, which the child imports."""
    snap = snapshot()
    if not snap:
        return None
    import cloudpickle

    try:
        return cloudpickle.dumps(snap)
    except Exception as e:  # noqa: BLE001 - a lock, a file, a thread: the user's object
        raise unpicklable(snap, e) from None


def unpicklable(snap: dict[str, list[Any]], error: Exception) -> UserError:
    """The one line for a registration that cannot travel to the children (explore108: a rule
    holding a threading.Lock failed every process-runtime run, whatever rule it ran, as "an
    internal error"): which item, and the ways out."""
    import cloudpickle

    culprit = "a registered extension"
    for item in (i for items in snap.values() for i in items):
        try:
            cloudpickle.dumps(item)
        except Exception:  # noqa: BLE001 - the one that fails, named
            name = getattr(item, "name", None) or type(item).__name__
            culprit = f"{type(item).__name__} {name!r}"
            break
    why = " ".join(str(error).split()) or type(error).__name__
    return UserError(
        f"{culprit}, registered in this process, cannot be pickled for the process runtime's "
        f"children ({why}): build such state where it is used, not in __init__ (a registered "
        "rule or algorithm is copied to every process), or run with runtime.backend=local"
    )


def unpack(data: bytes) -> None:
    """Register in this process what :func:`packed` carried."""
    import pickle

    restore(pickle.loads(data))


def parts(snap: dict[str, list[Any]]) -> list[Any]:
    """The items of ``snap`` and, for dataclass items (an AlgoSpec), their callable fields
    (its targets): what could be defined in the user's modules."""
    out: list[Any] = []
    for items in snap.values():
        for item in items:
            out.append(item)
            if dataclasses.is_dataclass(item):
                out += [v for f in dataclasses.fields(item) if callable(v := getattr(item, f.name))]
    return out


def installed(path: str | Path) -> bool:
    """Whether ``path`` lies in site-packages (this interpreter's or the user's): a module
    there imports on every machine of a cluster set up alike, one elsewhere travels."""
    paths = sysconfig.get_paths()
    places = {Path(paths["purelib"]), Path(paths["platlib"])}
    places |= {Path(p) for p in (*site.getsitepackages(), site.getusersitepackages())}
    where = Path(path).resolve()
    return any(where.is_relative_to(p.resolve()) for p in places)


def note_importer(registry: str, name: str) -> None:
    """Keep which module's import is registering ``name`` in ``registry`` (a ``register_*``
    call at a module's top level, as ``examples/vpg.py``'s): the caller outside rltrain, if it
    is a module's top level. A call from a function (a test's fixture), rltrain's own (the
    built-ins) and a script's or a notebook's ``__main__``, which no other command can import,
    are not kept."""
    frame = sys._getframe(1)
    while frame is not None and _module(frame).split(".")[0] == "rltrain":
        frame = frame.f_back  # type: ignore[assignment]
    if frame is not None and frame.f_code.co_name == "<module>" and _module(frame) != "__main__":
        _IMPORTED_BY[registry, name] = _module(frame)


def _module(frame: Any) -> str:
    return str(frame.f_globals.get("__name__", ""))


def run_imports(cfg: Any) -> tuple[str, ...]:
    """A TrainConfig's ``imports`` and the modules whose import registered its algorithm and
    update rule: the run lists them in config.yaml, so that ``rltrain eval`` and ``--resume``
    of a run that a script trained (``import examples.vpg``, then ``rltrain.train``) know
    them too, and Ray ships them."""
    keys = (("rltrain.rl.algos", cfg.algo.name), ("rltrain.ps.rules", cfg.server.rule))
    found = (m for key in keys if (m := _IMPORTED_BY.get(key)))
    return tuple(dict.fromkeys([*cfg.imports, *(m for m in found if _importable(m))]))


def forget_importer(registry: str, name: str) -> None:
    """``name`` was unregistered: a later registration of it (from ``__main__``, a test's
    fixture) is not the module's that registered it first."""
    _IMPORTED_BY.pop((registry, name), None)


def _importable(name: str) -> bool:
    """Whether another process imports ``name`` as the module this one has: done importing
    (not one whose top level is training as it is imported: each child would train again),
    and found by its name at the same file (not one loaded from a path under another name)."""
    module = sys.modules.get(name)
    if module is None or getattr(module.__spec__, "_initializing", False):
        return False
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return False
    return spec is not None and spec.origin == getattr(module, "__file__", None)
