"""Config of the runtime: where Ray runs and how many CPUs/threads each process takes."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from rltrain.config import spec
from rltrain.runtime.registry import runtime_names


def backends() -> tuple[str, ...]:
    """``runtime.backend``'s values: auto and the registered runtimes."""
    return ("auto", *runtime_names())


@dataclass(frozen=True)
class RuntimeConfig:
    """Ray and process placement (docs/architecture.md, "Runtimes")."""

    backend: str = field(default="auto", metadata=spec(choices=backends))
    """auto: process on one machine, ray with an address (--address). process: actors and
    workers are OS processes of this machine (a forkserver; tensors through shared memory);
    the one learner of impala/appo is a process that holds the server's shards, several
    learners (and dqn's) are threads of the trainer beside its shards; restarts and
    faults.events as on Ray. ray: every actor, learner and shard is a Ray process (a local Ray,
    or a cluster with --address). local (`rltrain train` only): threads of the one `rltrain`
    process: no processes at all, for debugging with breakpoints (Sample Factory's serial
    mode); Python runs one thread at a time, so it uses about one core; no fault injection
    or restarts. Or the name of a runtime registered with
    rltrain.runtime.register_runtime, in a module of imports."""
    address: str | None = None
    """Ray cluster to join: null runs on this machine (the process runtime under backend auto,
    a local Ray instance under backend ray); 'auto' joins the cluster started on this machine
    with `ray start`; 'HEAD_IP:6379' joins the cluster whose head is there (as `ray start
    --address`); 'ray://host:10001' joins a remote one through Ray Client. --address sets it
    (and then auto means Ray)."""
    num_cpus: int = field(default=0, metadata=spec(ge=0))
    """CPUs of this machine the run sizes itself to (actors: auto) and, on a local Ray, Ray
    may schedule on; 0 = all cores (never raised to what the processes ask: more processes
    than CPUs share them). With --address the cluster's CPUs count instead."""
    threads_per_worker: int = field(default=1, metadata=spec(ge=1))
    """torch threads in each worker/actor process; keep N processes x threads <= cores."""
    learner_threads: int = field(default=0, metadata={**spec(ge=0), "only": "train"})
    """torch threads of each learner process (impala, appo, dqn); 0 = threads_per_worker. A
    learner's forward + backward passes outweigh an actor's inference several times over, so
    on a small machine it pays to give the learner the cores the actors leave idle."""
    worker_cpus: float = field(default=1.0, metadata=spec(gt=0))
    """CPUs Ray reserves for each worker, actor or learner."""
    server_cpus: float = field(default=0.0, metadata=spec(ge=0))
    """CPUs Ray reserves for each parameter-server shard (0: shards are light; they share)."""
    inference: str = field(
        default="auto", metadata={**spec(choices=("auto", "actor", "server")), "only": "train"}
    )
    """impala, appo: where the actors' policy runs. actor: each actor acts with its own copy on
    its CPU. server: one policy worker (a process of its own; a thread on the local runtime),
    on the learners' device, acts for every actor, their observations batched into one
    forward pass (IMPALA's dynamic batching) through shared slots; needs runtime.backend
    process or local. auto: server where the learners are on a GPU and it may be used, else
    actor."""
    dashboard: bool = False
    """Start Ray's dashboard (bound to 127.0.0.1). Off by default: nothing listens publicly."""


def chosen_backend(cfg: RuntimeConfig) -> tuple[str, str]:
    """The runtime a run uses and why: ``auto`` is ``ray`` with an address (a cluster to
    join), else ``process`` (one machine: no Ray to start, every core used)."""
    if cfg.backend != "auto":
        return cfg.backend, f"runtime.backend={cfg.backend}"
    if cfg.address:
        return "ray", f"runtime.backend=auto with address {cfg.address}: a Ray cluster"
    # Ray's own way to name a cluster, which `--address auto` reads: said, not followed
    named = os.environ.get("RAY_ADDRESS", "").strip()
    unused = f" (RAY_ADDRESS={named}: --address auto joins it)" if named else ""
    return "process", f"runtime.backend=auto without --address: one machine{unused}"
