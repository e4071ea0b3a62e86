"""Config of the runtime: where Ray runs and how many CPUs/threads each process takes."""

from __future__ import annotations

from dataclasses import dataclass, field

from rltrain.config import spec


@dataclass(frozen=True)
class RuntimeConfig:
    """Ray and process placement (DESIGN.md, "Runtime: Ray at the edge")."""

    address: str | None = None
    """Ray cluster to join: null starts a local Ray instance; 'auto' joins the cluster started
    on this machine with `ray start`; 'ray://host:10001' joins a remote one. --address sets it."""
    num_cpus: int = field(default=0, metadata=spec(ge=0))
    """Local Ray only: CPUs Ray may schedule on; 0 = all cores (raised to what the actors ask)."""
    threads_per_worker: int = field(default=1, metadata=spec(ge=1))
    """torch threads in each worker/actor process; keep N processes x threads <= cores."""
    worker_cpus: float = field(default=1.0, metadata=spec(gt=0))
    """CPUs Ray reserves for each worker, actor or learner."""
    server_cpus: float = field(default=0.0, metadata=spec(ge=0))
    """CPUs Ray reserves for each parameter-server shard (0: shards are light; they share)."""
    dashboard: bool = False
    """Start Ray's dashboard (bound to 127.0.0.1). Off by default: nothing listens publicly."""
