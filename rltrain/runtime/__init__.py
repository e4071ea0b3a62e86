"""The runtimes: where a run's actors, learners, workers and shards run, and nowhere else.

A runtime places plain Python classes (tested in one process) as processes and calls them.
Each is a package of its own, registered by name (:mod:`rltrain.runtime.registry`) and held by
its callers as a :class:`~rltrain.runtime.contract.Runtime` (docs/architecture.md,
"Runtimes"):

* :mod:`~rltrain.runtime.process`: OS processes of this machine, a forkserver and shared
  memory (``runtime.backend: process``, what ``auto`` picks on one machine).
* :mod:`~rltrain.runtime.ray`: Ray processes, on one machine or a cluster (``ray``, what
  ``auto`` picks with ``--address``); the one package that imports Ray.
* :mod:`~rltrain.runtime.local`: threads of the one ``rltrain`` process (``local``).

Beside them, what every runtime shares: :mod:`~rltrain.runtime.contract` (the names each
has, as Protocols), :mod:`~rltrain.runtime.config`, :mod:`~rltrain.runtime.context` (a run's
processes), :mod:`~rltrain.runtime.fault_policy` (what a lost or revived process means),
:mod:`~rltrain.runtime.guard` (restoring every shard when one is lost) and
:mod:`~rltrain.runtime.titles` (process titles). Importing this package imports neither
torch nor Ray.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from rltrain.runtime.registry import (
    RuntimeEntry,
    load_runtime,
    register_runtime,
    runtime_names,
    unregister_runtime,
)

if TYPE_CHECKING:
    from rltrain.runtime.config import RuntimeConfig
    from rltrain.runtime.contract import Runtime


def backend(cfg: RuntimeConfig) -> Runtime:
    """The runtime whose names run a run's processes: the registered one that
    :func:`~rltrain.runtime.config.chosen_backend` picks, imported now."""
    from rltrain.runtime.config import chosen_backend

    module: Runtime = load_runtime(chosen_backend(cfg)[0])
    return module


def release() -> None:
    """What the interpreter's exit does for the runtimes' processes, for a command that ends
    with ``os._exit`` (:func:`rltrain.cli.entry`): Ray shut down where it was started, and
    multiprocessing's exit finalizers run. Among them is the removal of the ``/tmp/pymp-*``
    directory that holds the forkserver's socket: skipped, every command would leave one
    behind in /tmp."""
    if "ray" in sys.modules:  # a command that failed half-way may leave it up
        from rltrain.runtime.ray.startup import shutdown

        shutdown()
    util = sys.modules.get("multiprocessing.util")
    if util is not None:
        util._run_finalizers()  # what multiprocessing's atexit hook runs last


__all__ = [
    "RuntimeEntry",
    "backend",
    "load_runtime",
    "register_runtime",
    "release",
    "runtime_names",
    "unregister_runtime",
]
