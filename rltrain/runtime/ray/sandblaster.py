"""Sandblaster's shards and workers as Ray processes (:mod:`rltrain.supervised.sandblaster`).

This layer does not import the supervised bench above it: the bench hands in the worker
class to place (its ``SandblasterWorker``), and portions and their results pass through as
the bench's own objects."""

from __future__ import annotations

from typing import Any

import torch

from rltrain.ps.lbfgs import LbfgsShard, split_sizes
from rltrain.runtime.ray.errors import result
from rltrain.runtime.ray.pool import wait_any
from rltrain.runtime.ray.remote import Remote


class RayStore:
    """The :class:`~rltrain.ps.lbfgs.VectorStore` over shard processes. It holds only actor
    handles, so the coordinator and every worker can each hold a copy."""

    def __init__(self, handles: list[Any], sizes: list[int]) -> None:
        self.handles, self.sizes = handles, sizes

    def each(self, method: str, *args: Any) -> list[Any]:
        return [result(r) for r in [getattr(h, method).remote(*args) for h in self.handles]]

    def pull(self) -> torch.Tensor:
        return torch.cat([torch.as_tensor(v) for v in self.each("values")])

    def accumulate(self, round_id: int, portion: int, grad: torch.Tensor) -> None:
        pieces = torch.split(grad, self.sizes)
        refs = [
            h.accumulate.remote(round_id, portion, p.numpy())
            for h, p in zip(self.handles, pieces, strict=True)
        ]
        for r in refs:  # the gradient is in before the coordinator hears of the portion
            result(r)


def start_store(init: torch.Tensor, shards: int, cpus: float) -> tuple[RayStore, list[Remote]]:
    """One :class:`LbfgsShard` process per shard, holding ``init`` split by size."""
    sizes = split_sizes(init.numel(), shards)
    procs = [
        Remote(LbfgsShard, n, role="shard", index=i, num_cpus=cpus) for i, n in enumerate(sizes)
    ]
    for proc, piece in zip(procs, torch.split(init.reshape(-1), sizes), strict=True):
        result(proc.call("set_values", piece.clone()))
    return RayStore([p.handle for p in procs], sizes), procs


class RayExecutor:
    """:class:`~rltrain.supervised.sandblaster.Executor` over worker processes."""

    def __init__(
        self, worker_cls: type, specs: list[Any], sources: list[Any], store: RayStore, cpus: float
    ) -> None:
        """One ``worker_cls(spec, source, store)`` process per spec (the bench's
        ``SandblasterWorker``), each reserving ``cpus``."""
        self.procs = [
            Remote(worker_cls, s, d, store, role="worker", index=i, num_cpus=cpus)
            for i, (s, d) in enumerate(zip(specs, sources, strict=True))
        ]
        self.workers = len(self.procs)

    def start(self, t0: float) -> None:
        """Wait for every worker to be up (data loaded), then start their fault clocks."""
        for r in [p.call("start", t0) for p in self.procs]:
            result(r)

    def submit(self, worker: int, portion: Any) -> Any:
        """Start ``worker``'s ``compute(portion)``; returns its handle."""
        return self.procs[worker].call("compute", portion)

    def wait(self, handles: list[Any], timeout: float) -> list[tuple[Any, Any]]:
        """(handle, the worker's result) of the calls done within ``timeout`` seconds."""
        return [(h, result(h, ready=True)) for h in wait_any(handles, timeout)]

    def kill(self) -> None:
        for p in self.procs:
            p.kill()
