"""Bench mode ``allreduce``: synchronous data parallelism without a parameter server.

Every worker keeps a full replica and its own optimizer; after each minibatch the workers
average their gradients with ``torch.distributed``'s all-reduce over gloo and all take the same
step, so the replicas stay identical. This is DDP's and Horovod's way (Sergeev & Del Balso
2018), the "MPI versus parameter server" alternative to the ``sync`` rule, which sends the
same averaged step through a server instead. Like DDP it has no fault tolerance: a lost worker
stops the collective, and the mode fails after ``server.barrier_timeout_s``.
"""

from __future__ import annotations

import datetime
import socket
import time

import torch
import torch.distributed as dist
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from rltrain.faults import FaultCounters, RunFailed
from rltrain.progress import Progress
from rltrain.records import ServerStats
from rltrain.supervised.config import BenchConfig
from rltrain.supervised.datasets import SplitDataset
from rltrain.supervised.modes import (
    MAX_SNAPSHOTS,
    ModeTrace,
    Snapshot,
    finish_trace,
    shards,
    thinned,
    worker_specs,
)
from rltrain.supervised.worker import SupervisedWorker, WorkerReport, flat_grad


def free_port() -> int:
    """A free TCP port on this host: the rendezvous of the process group, which rank 0
    serves (so it must be asked on rank 0's node)."""
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


class AllreduceWorker(SupervisedWorker):
    """A supervised worker whose gradients go to its peers, not to a server."""

    steps_locally = True

    def port(self) -> int:
        return free_port()

    def run_allreduce(
        self,
        rank: int,
        world: int,
        address: tuple[str, int],
        t0: float,
        deadline: float | None,
        every_s: float,
    ) -> tuple[WorkerReport, list[tuple[float, torch.Tensor, int]]]:
        """Train in lock step with ``world - 1`` peers; rank 0 also keeps a copy of the
        parameters every ``every_s`` seconds (the bench's snapshots)."""
        timeout = datetime.timedelta(seconds=self.spec.server.barrier_timeout_s)
        dist.init_process_group(
            "gloo",
            init_method=f"tcp://{address[0]}:{address[1]}",
            rank=rank,
            world_size=world,
            timeout=timeout,
        )
        try:
            # every replica starts from rank 0's parameters (DDP's broadcast at construction;
            # rank 0 is seeded as the server modes' initial parameters are)
            params = self._params()
            dist.broadcast(params, src=0)
            with torch.no_grad():
                vector_to_parameters(params, self.model.parameters())
            start = self._start(t0, deadline)
            snaps: list[tuple[float, torch.Tensor, int]] = []
            next_snap = start
            batches = self._batches()
            while True:
                batch = next(batches, None)
                # every replica must take the same steps: one that runs out (epochs, time)
                # stops all, or the others would wait in the next all-reduce forever
                done = torch.tensor([0.0 if batch is None else 1.0])
                dist.all_reduce(done, op=dist.ReduceOp.MIN)
                if rank == 0 and (done.item() == 0 or time.time() >= next_snap):
                    snaps.append((time.time(), self._params(), self.steps))
                    if len(snaps) >= MAX_SNAPSHOTS:
                        snaps, every_s = thinned(snaps), every_s * 2
                    next_snap = time.time() + every_s
                if done.item() == 0:
                    break
                assert batch is not None
                self._local_opt.zero_grad(set_to_none=True)
                self._backward(batch.x, batch.y)
                grad = flat_grad(self.model)
                dist.all_reduce(grad)  # the sum over the replicas
                grad.div_(world)
                self._set_grads(grad)
                self._local_opt.step()
                self.pushes += 1
        finally:
            dist.destroy_process_group()
        return self._report(start), snaps

    def _params(self) -> torch.Tensor:
        return parameters_to_vector(self.model.parameters()).detach().clone()

    def _set_grads(self, flat: torch.Tensor) -> None:
        grads = [torch.empty_like(p) for p in self.model.parameters()]
        vector_to_parameters(flat, grads)
        for p, g in zip(self.model.parameters(), grads, strict=True):
            p.grad = g


class _Snaps:
    """The shape of a Snapshotter that :func:`finish_trace` reads."""

    def __init__(self, snaps: list[Snapshot]) -> None:
        self.snaps = snaps


def run_allreduce_mode(cfg: BenchConfig, data: SplitDataset, progress: Progress) -> ModeTrace:
    """Workers as Ray processes in one gloo process group; no server."""
    from rltrain.runtime import ray as ray_runtime  # imported only when used

    begin = time.time()
    specs = worker_specs(cfg, "allreduce", data, cfg.workers)
    workers = [
        ray_runtime.Remote(
            AllreduceWorker,
            s,
            d,
            role="worker",
            index=s.worker_id,
            num_cpus=cfg.runtime.worker_cpus,
        )
        for s, d in zip(specs, shards(cfg, cfg.workers), strict=True)
    ]
    try:
        for w in workers:  # constructors (data loading) are start-up, not training time
            w.pid()
        # rank 0's node serves the rendezvous, at the address Ray's nodes reach each other by
        address = (workers[0].node_ip(), ray_runtime.result(workers[0].call("port")))
        t0 = time.time()
        budget = cfg.budget.max_seconds
        deadline = t0 + budget if budget else None
        progress.update(0.0, f"{cfg.workers} workers in one gloo group at {address[0]}")
        calls = [
            w.call("run_allreduce", i, cfg.workers, address, t0, deadline, cfg.eval.every_seconds)
            for i, w in enumerate(workers)
        ]
        try:
            out = [ray_runtime.result(c) for c in calls]
        except Exception as e:  # a lost peer: the collective fails (or times out) everywhere
            why = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise RunFailed(f"allreduce: {why} (all-reduce has no fault tolerance)") from None
    finally:
        for w in workers:
            w.kill()
    reports = [r for r, _ in out]
    start = min(r.start_time for r in reports)
    snaps = [
        Snapshot(t, params, ServerStats(steps, steps * cfg.workers, 0, 0, _samples(reports, t), 0))
        for t, params, steps in out[0][1]
    ]
    return finish_trace("allreduce", begin, _Snaps(snaps), reports, FaultCounters(), start)  # type: ignore[arg-type]


def _samples(reports: list[WorkerReport], t: float) -> int:
    return sum(max((n for when, n, _ in r.log if when <= t), default=0) for r in reports)
