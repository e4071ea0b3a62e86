"""The one package that imports Ray: plain classes become Ray processes here and nowhere else.

Everything a Ray process runs is a plain Python class tested in one process
(:class:`~rltrain.ps.shard.ParameterShard`, the workers, the actors and learners); this
package only starts Ray, places those classes, calls them and collects their results
(docs/architecture.md, "Where Ray is"):

* :mod:`~rltrain.runtime.startup`: starting or joining Ray, the CPUs and GPUs it reports.
* :mod:`~rltrain.runtime.wire`: the server and replay shards as Ray processes, tensors as numpy,
  the parameter fan-out.
* :mod:`~rltrain.runtime.sandblaster`: Sandblaster L-BFGS's shards and workers.
* :mod:`~rltrain.runtime.stages`: a replica's pipeline stages (model parallelism).
* :mod:`~rltrain.runtime.remote`: placement of one process (:class:`Remote`) and signals to it.
* :mod:`~rltrain.runtime.pool`: the calls in flight, one per process.
* :mod:`~rltrain.runtime.policy`: what a failed or revived process means to the driver.
* :mod:`~rltrain.runtime.guard`: restoring every shard when one is lost.
* :mod:`~rltrain.runtime.errors`: Ray's errors as rltrain's one-line ones.
* :mod:`~rltrain.runtime.process`: the same names without Ray, every actor and worker an
  OS process of this machine (``runtime.backend: process``, what ``auto`` picks on one
  machine; :func:`backend` picks), with :mod:`~rltrain.runtime.child` (a child's side) and
  :mod:`~rltrain.runtime.shm` (tensors through shared memory).
* :mod:`~rltrain.runtime.local`: the same names, every process a thread
  (``runtime.backend: local``).
* :mod:`~rltrain.runtime.contract`: the names every runtime has, as Protocols.
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any

# Names are loaded on first use (PEP 562): `rltrain train` starts Ray before it imports torch
# (its worker processes import torch meanwhile), and the local backend never imports Ray, so
# importing this package imports neither.
_HOMES = {
    "errors": ("RayStartError", "failed", "result"),
    "guard": ("ServerGuard",),
    "policy": ("respond",),
    "pool": ("Done", "Pool", "get", "kill", "wait_all", "wait_any"),
    "remote": ("Remote", "Semaphore", "inject", "placement_note", "wait_up"),
    "sandblaster": ("RayExecutor", "RayStore", "start_store"),
    "stages": ("RayStages", "stage_lead", "stage_link", "stages_of"),
    "startup": (
        "check_address",
        "cluster_cpus",
        "cluster_gpus",
        "fit_cpus",
        "free_cpus",
        "start",
        "job_record",
        "shutdown",
    ),
    "wire": ("RayReplay", "RayServer", "server_processes", "start_replay", "start_server"),
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}


def backend(cfg: RuntimeConfig) -> Any:
    """The module whose names run a run's processes (:func:`chosen_backend` picks): this
    package (Ray processes), :mod:`rltrain.runtime.process` (processes of this machine) or
    :mod:`rltrain.runtime.local` (threads of this process)."""
    from rltrain.runtime.config import chosen_backend

    name, _ = chosen_backend(cfg)
    if name in ("local", "process"):
        return importlib.import_module(f"{__name__}.{name}")
    return sys.modules[__name__]


def release() -> None:
    """What the interpreter's exit does for this package's processes, for a command that ends
    with ``os._exit`` (:func:`rltrain.cli.entry`): Ray shut down where it was started, and
    multiprocessing's exit finalizers run. Among them is the removal of the ``/tmp/pymp-*``
    directory that holds the forkserver's socket: skipped, one was left behind by every
    command (42 after a day of runs, issue 36)."""
    if "ray" in sys.modules:  # a command that failed half-way may leave it up
        from rltrain.runtime.startup import shutdown

        shutdown()
    util = sys.modules.get("multiprocessing.util")
    if util is not None:
        util._run_finalizers()  # what multiprocessing's atexit hook runs last


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOME_OF])


def __getattr__(name: str) -> Any:
    module = _HOME_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # once
    return value


if TYPE_CHECKING:
    from rltrain.runtime.config import RuntimeConfig
    from rltrain.runtime.errors import RayStartError, failed, result
    from rltrain.runtime.guard import ServerGuard
    from rltrain.runtime.policy import respond
    from rltrain.runtime.pool import Done, Pool, get, kill, wait_all, wait_any
    from rltrain.runtime.remote import Remote, inject, placement_note, wait_up
    from rltrain.runtime.sandblaster import RayExecutor, RayStore, start_store
    from rltrain.runtime.stages import RayStages, stage_lead, stage_link, stages_of
    from rltrain.runtime.startup import (
        check_address,
        cluster_cpus,
        cluster_gpus,
        fit_cpus,
        free_cpus,
        job_record,
        shutdown,
        start,
    )
    from rltrain.runtime.wire import (
        RayReplay,
        RayServer,
        server_processes,
        start_replay,
        start_server,
    )

__all__ = [
    "Done",
    "Pool",
    "RayExecutor",
    "RayReplay",
    "RayServer",
    "RayStages",
    "stage_lead",
    "stage_link",
    "stages_of",
    "RayStore",
    "Remote",
    "RayStartError",
    "ServerGuard",
    "backend",
    "check_address",
    "cluster_cpus",
    "cluster_gpus",
    "failed",
    "fit_cpus",
    "free_cpus",
    "get",
    "start",
    "inject",
    "kill",
    "placement_note",
    "job_record",
    "respond",
    "result",
    "shutdown",
    "start_replay",
    "start_server",
    "server_processes",
    "start_store",
    "wait_all",
    "wait_any",
    "wait_up",
]
