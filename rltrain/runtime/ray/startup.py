"""Starting Ray (local, or joining a cluster) and what it reports: CPUs, GPUs, placement."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import ray
from ray import cloudpickle

import rltrain.runtime.ray.head as head
from rltrain import extensions
from rltrain.extensions import installed
from rltrain.runtime.config import RuntimeConfig
from rltrain.runtime.ray.errors import RayStartError
from rltrain.runtime.ray.reach import (
    _why,
    check_client_port,
    check_head,
    check_reachable,
)
from rltrain.runtime.ray.tokens import token_note, undo_auth

AUTH_DEFAULT_NOTE = "Token authentication is enabled for this Ray cluster"


class _OwnInstanceAuthNote(logging.Filter):
    """Drops Ray's warning that token authentication is on (Ray 2.5x turns it on, and warns,
    at every ``ray.init()`` that starts a local instance): rltrain's local instance is the
    run's own, on the loopback address, described in the run's first lines, and the user has
    nothing to do about it. Installed on Ray's logger for this process; every other record
    passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(AUTH_DEFAULT_NOTE)


logging.getLogger("ray._private.authentication.authentication_token_setup").addFilter(
    _OwnInstanceAuthNote()
)

CLIENT_SIGTERM_NOTE = "SIGTERM handler is not set because current thread is not the main thread"


class _ClientServerSigtermNote(logging.Filter):
    """Drops the warning of a ``ray://`` run's first line: Ray Client's server calls
    ``ray.init`` for the run in a thread of its own, which warns that it could not set its
    SIGTERM handler, and streams the warning to the client. It concerns that server's thread,
    not this process (which handles SIGTERM: a final checkpoint first)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return CLIENT_SIGTERM_NOTE not in record.getMessage()


logging.getLogger("ray.util.client.logsclient").addFilter(_ClientServerSigtermNote())

PRELOAD = "rltrain.runtime.ray.wire"
"""What Ray's worker processes import as they start, before any class is placed on them
(torch, numpy and the parameter server)."""


def user_code(modules: Sequence[str]) -> list[ModuleType]:
    """The top-level packages of ``modules`` (imports and env.wrappers' modules, already
    imported here) that are not installed in site-packages: Ray ships them to every worker on
    every node (``runtime_env.py_modules``), so a module in the current directory imports
    there as it does in the driver."""
    out: list[ModuleType] = []
    for name in modules:
        top = sys.modules.get(name.split(".")[0])
        where = getattr(top, "__file__", None) or next(iter(getattr(top, "__path__", [])), None)
        if top is None or where is None or top in out:
            continue
        if not installed(where):
            out.append(top)
    return out


def pickle_by_value(objects: Iterable[Any]) -> list[str]:
    """The modules that define ``objects`` (their classes, or themselves for functions) and
    would not import on another machine: neither installed in site-packages nor part of
    rltrain. Ray's cloudpickle is told to pickle their contents by value; returns their
    names."""
    names: list[str] = []
    for obj in objects:
        name = getattr(obj, "__module__", None) or type(obj).__module__
        module = sys.modules.get(name)
        where = getattr(module, "__file__", None)
        if module is None or name == "__main__" or name in names or where is None:
            continue  # __main__ is pickled by value already
        if name.split(".")[0] == "rltrain" or installed(where):
            continue
        cloudpickle.register_pickle_by_value(module)
        names.append(name)
    return names


def start(cfg: RuntimeConfig, ship: Sequence[str] = ()) -> str:
    """Start a local Ray instance, or join the cluster at ``cfg.address``; returns a description.

    A local instance starts one worker process per CPU while the driver is still connecting,
    and each imports :data:`PRELOAD` (torch, numpy, the parameter server) right away: the first
    actors created (the server shards) then start without waiting for torch to import.
    ``ship``: the user's modules every worker must import (see :func:`user_code`). The
    algorithms and update rules registered in this process are registered in every worker
    as it starts (:mod:`rltrain.extensions`).
    """
    global _started_here, _ours
    if ray.is_initialized():
        return "ray (already running: the caller's, left running at the end)"
    kwargs: dict[str, Any] = dict(
        include_dashboard=cfg.dashboard,
        dashboard_host="127.0.0.1",
        logging_level=logging.WARNING,
        log_to_driver=True,
    )
    runtime_env: dict[str, Any] = {}
    code = user_code(ship)
    if code:
        runtime_env["py_modules"] = code
    extended = extensions.snapshot()
    if extended:  # the user's algorithms and rules, registered in every worker process
        pickle_by_value(extensions.parts(extended))
        runtime_env["worker_process_setup_hook"] = extensions.setup_hook(extended)
    if runtime_env:
        kwargs["runtime_env"] = runtime_env
    if cfg.address:
        check_reachable(cfg.address)
        here = cluster_here()[0] if cfg.address == "auto" else None
        token = token_note(cfg.address, here)  # (before ray.init, which sets RAY_AUTH_MODE)
        try:
            ray.init(address=cfg.address, **kwargs)
        except (ConnectionError, RuntimeError, ValueError) as e:
            undo_auth()
            first = said(e)
            raise RayStartError(
                f"cannot join the Ray cluster at --address {cfg.address}: {first}"
                f"{_why(first, cfg.address)}"
            ) from None
        _started_here, _ours = False, True  # (only once joined: a Ray the caller starts
        r = job_record()  # after a failed join is theirs, and shutdown leaves it running)
        _watch_head(cfg.address)
        cpus, nodes = r["cpus"], r["nodes"]
        size = f"{cpus:g} CPU{'s' * (cpus != 1)} on {nodes} node{'s' * (nodes != 1)}"
        local = "; runtime.dashboard is for a local Ray: a cluster's is its head's" * cfg.dashboard
        if cfg.num_cpus:
            local += f"; runtime.num_cpus={cfg.num_cpus} is for a local Ray: a cluster has its "
            local += "nodes'"
        where = cfg.address if cfg.address != "auto" else f"auto = {r['address']}"
        return f"ray cluster at {where} ({size}; job {r['job_id']}{local}{token})"
    cpus = cfg.num_cpus or os.cpu_count() or 1  # never raised to what processes ask for
    note = _not_joined()
    # Local workers import rltrain from this interpreter's environment; keep Ray quiet and local.
    os.environ.setdefault("RAY_DEDUP_LOGS", "1")
    # Workers import torch (the preload below) before Ray places a class on them and sets its
    # OMP_NUM_THREADS: torch would then use every core. Ray's processes inherit one thread, as
    # Ray gives a 1-CPU process (actors and learners set their own); the driver's is unchanged.
    added = "OMP_NUM_THREADS" not in os.environ
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    try:
        ray.init(
            # its own instance, even where RAY_ADDRESS is set or `ray start` ran on this
            # machine (Ray would join that cluster, and refuse num_cpus): --address joins one
            address="local",
            num_cpus=cpus,  # GPUs: Ray's own detection (NVML, CUDA_VISIBLE_DEVICES)
            # a local instance advertises the loopback address (Ray versions that bind their
            # RPC servers to the node address then listen on localhost only)
            _node_ip_address="127.0.0.1",
            _system_config={
                # Parameters and gradients of a few MB travel inline with the call instead of
                # through the shared object store, which saves the store's put and get on
                # every push and pull.
                "max_direct_call_object_size": 8 * 1024 * 1024,
                "preload_python_modules": [PRELOAD],
                # Ray lowers its workers' priority (nice 15) under the driver's; here the
                # workers are the run and the driver only orchestrates, and at nice 15 any
                # other busy process on the machine takes nearly all of the CPU from them
                # (a 2-core box with two busy processes beside a run: Ray's workers still
                # importing torch 25 s in, where the process runtime's start in seconds)
                "worker_niceness": 0,
            },
            **kwargs,
        )
    except BaseException:  # a Ctrl-C inside ray.init: the node it has started goes too (its
        with contextlib.suppress(Exception):  # dashboard and runtime-env agents outlived the
            ray.shutdown()  # command, re-parented to init, and ignore SIGTERM)
        raise
    finally:
        if added:
            del os.environ["OMP_NUM_THREADS"]
    _started_here = _ours = True
    _watch_head("")
    return f"local ray ({cpus} CPUs{note})"


def _watch_head(address: str) -> None:
    """Watch the head this process joined (:mod:`~rltrain.runtime.ray.head`) at the address
    it was given (a Ray Client session: its server), else (``auto``, a local Ray) at the
    GCS address Ray reports."""
    if address and address != "auto":
        head.watch(address)
    else:
        head.watch(str(ray.get_runtime_context().gcs_address or ""), local=not address)


_started_here = False  # start started a local instance (rather than joining a cluster)
_ours = False  # start started or joined the Ray this process is connected to


def cluster_here() -> tuple[str | None, str]:
    """The address ``--address auto`` means, as ``ray.init(address="auto")`` resolves it, and
    where it was found: RAY_ADDRESS, else the file ``ray start`` writes; or None and what was
    looked at."""
    env = os.environ.get("RAY_ADDRESS", "").strip()
    if env and env != "auto":
        return env, "RAY_ADDRESS"
    # Ray's temp dir: $RAY_TMPDIR, else $TMPDIR on Linux, else /tmp (ray._common.utils)
    if "RAY_TMPDIR" in os.environ:
        tmp = os.environ["RAY_TMPDIR"]
    elif sys.platform.startswith("linux") and "TMPDIR" in os.environ:
        tmp = os.environ["TMPDIR"]
    else:
        tmp = "/tmp"
    file = Path(tmp) / "ray" / "ray_current_cluster"
    try:
        found = file.read_text().strip()
    except (OSError, UnicodeDecodeError):
        found = ""
    if found:
        return found, str(file)
    return None, f"RAY_ADDRESS is unset and {file} does not exist"


def _not_joined() -> str:
    """A note for a local start while a cluster that ``--address auto`` would join is up."""
    address, source = cluster_here()
    if address is None:
        return ""
    try:
        check_reachable(address, timeout=1.0)
    except RayStartError:
        return ""  # (a stale file or address: nothing to join)
    return f"; a Ray cluster runs at {address}, {source}: --address auto joins it"


def said(e: BaseException) -> str:
    """An exception's first line, and the next one where the first only leads to it (Ray
    Client's "Initialization failure from server:")."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    if not lines:
        return type(e).__name__
    return f"{lines[0]} {lines[1]}" if lines[0].endswith(":") and len(lines) > 1 else lines[0]


def check_address(address: str) -> None:
    """Public: a one-line :class:`RayStartError` when nothing listens at ``address``, or a
    head that refuses this process's token (or no head) does."""
    check_reachable(address)
    if address.startswith("ray://"):
        check_client_port(address)  # (a head's own port given as the client's)
    else:
        check_head(address)


def shutdown() -> None:
    """Stop the Ray instance :func:`start` started (or leave the cluster it joined); a Ray
    the caller had started already (``ray.init`` in a notebook) is theirs, and goes on."""
    global _ours
    undo_auth()
    head.unwatch()
    if ray.is_initialized() and _ours:
        ray.shutdown()
    _ours = False


def cluster_cpus() -> float:
    """CPUs the Ray cluster (local or joined) can schedule."""
    head.check()  # (the head's tables: a call blocks where the head is gone)
    return float(ray.cluster_resources().get("CPU", 0.0))


def free_cpus() -> float:
    """CPUs no process reserves now (Ray's view; it lags a release by a moment)."""
    head.check()
    return float(ray.available_resources().get("CPU", 0.0))


def cluster_gpus() -> float:
    """GPUs the Ray cluster (local or joined) can schedule. For a local instance, only those
    this machine's torch can use too: Ray counts GPUs through NVML, which a CPU-only torch
    build cannot drive (its learners would reserve a GPU and compute on the CPU)."""
    head.check()
    gpus = float(ray.cluster_resources().get("GPU", 0.0))
    if _started_here:
        import torch

        gpus = min(gpus, float(torch.cuda.device_count()))
    return gpus


def node_cpus() -> list[float]:
    """CPUs of each live node of the Ray cluster (one entry on a local Ray)."""
    head.check()
    return [
        float(n["Resources"].get("CPU", 0.0))
        for n in ray.nodes()
        if n.get("Alive") and n["Resources"].get("CPU", 0.0) > 0
    ]


def job_record() -> dict[str, Any]:
    """What summary.json keeps of the Ray side: the job's id (as Ray's own tables name it), the
    head's address where a cluster was joined (``auto`` resolved), the live nodes and their
    CPUs."""
    head.check()
    context = ray.get_runtime_context()
    joined = {} if _started_here else {"address": str(context.gcs_address or "")}  # (resolved)
    return {
        "backend": "ray",  # (as the process and local runtimes' records say theirs)
        "job_id": context.get_job_id(),
        **joined,
        "nodes": len([n for n in ray.nodes() if n.get("Alive")]),
        "cpus": cluster_cpus(),
    }


def packs(sizes: Sequence[float], nodes: Sequence[float]) -> bool:
    """Whether processes of these CPU ``sizes`` fit on nodes of these CPU counts (first fit,
    largest first): Ray places each process whole on one node."""
    free = sorted(nodes, reverse=True)
    for size in sorted(sizes, reverse=True):
        i = next((i for i, c in enumerate(free) if c >= size - 1e-6), None)
        if i is None:
            return False
        free[i] -= size
    return True


def fit_cpus(
    cfg: RuntimeConfig, workers: float, shards: int, nodes: Sequence[float] | None = None
) -> RuntimeConfig:
    """``cfg`` with the CPUs each worker (``workers`` of them, in units of worker_cpus) and
    each shard reserves scaled down, when needed, to what the cluster has: more processes than
    cores then each get a share of the cores instead of Ray being told of cores it lacks.

    The share also fits node by node (``nodes``: their CPUs, default Ray's): three 1-CPU
    processes on two 1-CPU nodes take 0.5 CPU each, where a share of the total (2/3) would
    leave one of them waiting for a node forever.
    """
    nodes = node_cpus() if nodes is None else nodes
    need = workers * cfg.worker_cpus + shards * cfg.server_cpus
    if need <= 0 or not nodes:
        return cfg

    def share(cpus: float, f: float) -> float:
        # Ray keeps 4 decimals and rounds half up: round down, so that what packs here packs
        # there (3 x 0.6667 would not fit 2 CPUs)
        return math.floor(cpus * f * 10_000) / 10_000

    def sizes(f: float) -> list[float]:
        whole = int(workers)
        w = share(cfg.worker_cpus, f)
        part = [w] * whole + [share(cfg.worker_cpus * (workers - whole), f)]
        return [s for s in part if s > 0] + [share(cfg.server_cpus, f)] * shards

    f = min(1.0, sum(nodes) / need)
    if not packs(sizes(f), nodes):
        lo, hi = 0.0, f  # the largest share that packs: a few dozen halvings
        for _ in range(40):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if packs(sizes(mid), nodes) else (lo, mid)
        f = lo
    if f >= 1.0:
        return cfg
    return dataclasses.replace(
        cfg, worker_cpus=share(cfg.worker_cpus, f), server_cpus=share(cfg.server_cpus, f)
    )
