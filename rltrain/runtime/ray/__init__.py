"""The Ray runtime (``runtime.backend: ray``, what ``auto`` picks with ``--address``): the one
package that imports Ray; plain classes become Ray processes here and nowhere else.

Everything a Ray process runs is a plain Python class tested in one process
(:class:`~rltrain.ps.shard.ParameterShard`, the workers, the actors and learners); this
package only starts Ray, places those classes, calls them and collects their results
(docs/architecture.md, "Runtimes"):

* :mod:`~rltrain.runtime.ray.startup`: starting or joining Ray, the CPUs and GPUs it reports.
* :mod:`~rltrain.runtime.ray.head`: whether the cluster's head still answers (a run whose
  head is gone stops in seconds, not after Ray's minute).
* :mod:`~rltrain.runtime.ray.wire`: the server and replay shards as Ray processes, tensors as
  numpy, the parameter fan-out.
* :mod:`~rltrain.runtime.ray.sandblaster`: Sandblaster L-BFGS's shards and workers.
* :mod:`~rltrain.runtime.ray.stages`: a replica's pipeline stages (model parallelism).
* :mod:`~rltrain.runtime.ray.remote`: placement of one process (:class:`Remote`) and signals
  to it.
* :mod:`~rltrain.runtime.ray.pool`: the calls in flight, one per process.
* :mod:`~rltrain.runtime.ray.errors`: Ray's errors as rltrain's one-line ones.

With what every runtime shares: :mod:`~rltrain.runtime.fault_policy` (what a failed or
revived process means to the driver) and :mod:`~rltrain.runtime.guard` (restoring every shard
when one is lost).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Names are loaded on first use (PEP 562): `rltrain train` starts Ray before it imports torch
# (its worker processes import torch meanwhile), and a run on another runtime never imports
# Ray, so importing this package imports neither.
_HOMES = {
    "rltrain.runtime.ray.errors": ("RayStartError", "failed", "result"),
    "rltrain.runtime.guard": ("ServerGuard",),
    "rltrain.runtime.fault_policy": ("respond",),
    "rltrain.runtime.ray.pool": ("Done", "Pool", "get", "kill", "wait_all", "wait_any"),
    "rltrain.runtime.ray.remote": ("Remote", "Semaphore", "inject", "placement_note", "wait_up"),
    "rltrain.runtime.ray.sandblaster": ("RayExecutor", "RayStore", "start_store"),
    "rltrain.runtime.ray.stages": ("RayStages", "stage_lead", "stage_link", "stages_of"),
    "rltrain.runtime.ray.startup": (
        "check_address",
        "cluster_cpus",
        "cluster_here",
        "cluster_gpus",
        "fit_cpus",
        "free_cpus",
        "start",
        "job_record",
        "shutdown",
    ),
    "rltrain.runtime.ray.wire": (
        "RayReplay",
        "RayServer",
        "server_processes",
        "start_replay",
        "start_server",
    ),
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOME_OF])


def __getattr__(name: str) -> Any:
    module = _HOME_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once
    return value


if TYPE_CHECKING:
    from rltrain.runtime.fault_policy import respond
    from rltrain.runtime.guard import ServerGuard
    from rltrain.runtime.ray.errors import RayStartError, failed, result
    from rltrain.runtime.ray.pool import Done, Pool, get, kill, wait_all, wait_any
    from rltrain.runtime.ray.remote import Remote, inject, placement_note, wait_up
    from rltrain.runtime.ray.sandblaster import RayExecutor, RayStore, start_store
    from rltrain.runtime.ray.stages import RayStages, stage_lead, stage_link, stages_of
    from rltrain.runtime.ray.startup import (
        check_address,
        cluster_cpus,
        cluster_gpus,
        fit_cpus,
        free_cpus,
        job_record,
        shutdown,
        start,
    )
    from rltrain.runtime.ray.wire import (
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
