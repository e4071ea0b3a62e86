"""What every mode of `rltrain bench` shares: the workers' specs and data shards, the initial
parameters, the snapshots taken while a mode trains, and the trace a mode leaves."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import torch
from torch.nn.utils import parameters_to_vector

from rltrain.faults import FaultCounters
from rltrain.progress import Progress
from rltrain.ps.config import ServerConfig
from rltrain.ps.rules import ASYNC, rule_names
from rltrain.ps.server import Server
from rltrain.records import Params, PushRecord, ServerStats
from rltrain.supervised.config import BenchConfig
from rltrain.supervised.datasets import SplitDataset
from rltrain.supervised.mode_keys import PIPELINED
from rltrain.supervised.sharding import ShardSource
from rltrain.supervised.splits import VectorDataset
from rltrain.supervised.worker import WorkerReport, WorkerSpec, make_model


@dataclass(frozen=True)
class Snapshot:
    """The parameters at ``t`` seconds into training, with the server's counters then."""

    t: float
    params: torch.Tensor
    stats: ServerStats


@dataclass(frozen=True)
class ModeRecord:
    """What ``server.record`` keeps of a mode for ``rltrain reapply``: the shard's log of the
    pushes, in arrival order, and the parameters the mode ended with."""

    log: tuple[PushRecord, ...]
    final: torch.Tensor  # [P]
    start: dict | None = None
    """The shard's state the log starts from, when the shard was restored (the restore
    point's: a restarted shard logs from its restore on); None: the initial parameters."""


@dataclass(frozen=True)
class ModeTrace:
    """Everything a mode produced; evaluated and reported by :mod:`rltrain.supervised.report`."""

    mode: str
    workers: int
    startup_s: float  # from the mode's start until the first worker step
    train_s: float
    snapshots: tuple[Snapshot, ...]
    reports: tuple[WorkerReport, ...]
    faults: FaultCounters = dataclasses.field(default_factory=FaultCounters)
    record: ModeRecord | None = None  # server.record (modes with a server, but average)


ASYNC_VARIANTS = {"async_scale": "scale", "async_drop": "drop", "hogwild": "none"}
"""Modes that run the async rule with a staleness policy of their own (hogwild: none, its
workers bypass the server)."""


def mode_server(mode: str, server: ServerConfig) -> ServerConfig:
    """The server settings a bench mode runs: a mode named after a registered rule runs that
    rule (with ``server.staleness``), an async variant async with its staleness policy."""
    if mode in rule_names():
        return dataclasses.replace(server, rule=mode)
    if mode in ASYNC_VARIANTS:  # (hogwild's exchange is a write to shared memory: nothing to
        # overlap, and a pipelined one made each gradient a version stale, one worker alone)
        pipeline = server.pipeline and mode in PIPELINED
        return dataclasses.replace(
            server, rule=ASYNC.name, staleness=ASYNC_VARIANTS[mode], pipeline=pipeline
        )
    return dataclasses.replace(server, rule=ASYNC.name)  # baseline, sandblaster...: unused


def worker_specs(cfg: BenchConfig, mode: str, data: SplitDataset, workers: int) -> list[WorkerSpec]:
    server = mode_server(mode, cfg.server)
    epochs = cfg.budget.epochs
    return [
        WorkerSpec(
            worker_id=i,
            server=server,
            optimizer=cfg.optimizer,
            model=cfg.model.name,
            num_classes=data.num_classes,
            mean=data.mean,
            std=data.std,
            batch_size=cfg.batch_size,
            max_epochs=epochs,
            max_seconds=cfg.budget.max_seconds,
            seed=cfg.seed + i,
            threads=cfg.runtime.threads_per_worker,
            faults=cfg.faults.events,
            # shards differ by at most one sample: the smallest sets the steps per epoch
            steps_per_epoch=(len(data.train) // workers) // cfg.batch_size,
            objective=data.objective,
            l2=data.l2,
            update=server.update_rule,
        )
        for i in range(workers)
    ]


def shards(cfg: BenchConfig, workers: int) -> list[ShardSource]:
    """Each worker loads its own disjoint shard of the training set."""
    d = cfg.data
    return [ShardSource(d, workers, i, cfg.seed) for i in range(workers)]


def input_shape(data: SplitDataset) -> tuple[int, ...]:
    """One example's shape as the model sees it: [C, H, W] or [D]."""
    ds = data.train
    return tuple(ds.x.shape[1:] if isinstance(ds, VectorDataset) else ds.images.shape[1:])


def initial_params(cfg: BenchConfig, data: SplitDataset) -> torch.Tensor:
    spec = worker_specs(cfg, "baseline", data, 1)[0]
    model = make_model(dataclasses.replace(spec, seed=cfg.seed), input_shape(data))
    return parameters_to_vector(model.parameters()).detach().clone()


MAX_SNAPSHOTS = 256
"""Snapshots a mode keeps at most: at this many, every other one goes and the interval
doubles (:func:`thinned`). A tiny ``eval.every_seconds`` took 750 snapshots in 2 s (1.1 GB)
and an evaluation of them that had not ended after 699 s."""

T = TypeVar("T")


def thinned(snaps: list[T]) -> list[T]:
    """Every other snapshot, the first (the initial parameters) and the newest kept."""
    return [s for i, s in enumerate(snaps) if i == 0 or (len(snaps) - 1 - i) % 2 == 0]


class Snapshotter:
    """Takes a snapshot whenever ``every`` seconds have passed (at most :data:`MAX_SNAPSHOTS`
    kept: then half of them, at twice the interval); drives the progress line."""

    def __init__(
        self,
        server: Server,
        every: float,
        budget_s: float,
        progress: Progress,
        read: Callable[[], Params | None] | None = None,
    ) -> None:
        """``read``: how to copy the parameters (default ``server.pull``; Hogwild's consistent
        ``snapshot``, which a lock-free pull is not; None from it: try again shortly)."""
        self.server, self.every, self.budget_s, self.progress = server, every, budget_s, progress
        self.read = read or server.pull
        self.snaps: list[Snapshot] = []
        self.t0 = time.time()
        self.next = self.t0
        self.ended = False  # the line at the budget's end has been said

    def due_in(self) -> float:
        return max(0.0, self.next - time.time())

    def take(self) -> None:
        now = time.time()
        p = self.read()
        if p is None:  # no consistent copy now (a worker died mid-step?): soon again
            self.next = now + 0.05
            return
        st = self.server.stats()
        self.snaps.append(Snapshot(now, p.values, dataclasses.replace(st, version=p.version)))
        if len(self.snaps) >= MAX_SNAPSHOTS:
            self.snaps, self.every = thinned(self.snaps), self.every * 2
            self.progress.note(f"{MAX_SNAPSHOTS} snapshots: half kept, one every {self.every:g}s")
        self.next = now + self.every
        elapsed = now - self.t0
        frac = elapsed / self.budget_s if self.budget_s else 0.0
        rate = st.samples / elapsed if elapsed > 0 else 0.0
        ended, self.ended = frac >= 1 and not self.ended, self.ended or frac >= 1
        text = (
            f"{elapsed:5.0f}s  samples {st.samples:,}  {rate:,.0f}/s  version {p.version:,}  "
            f"staleness {st.mean_staleness:.2f}  dropped {st.dropped}  rejected {st.rejected}"
        )
        if ended:  # explore100: read as the result, whose figures count the steps in flight
            text = f"budget reached: {text.strip()}; the result, with the steps in flight, follows"
        # the budget's end is said (a log's lines are seconds apart)
        self.progress.update(frac, text, force=ended)


def finish_trace(
    mode: str,
    begin: float,
    snapper: Snapshotter,
    reports: list[WorkerReport],
    faults: FaultCounters | None = None,
    t0: float | None = None,
    workers: int | None = None,
) -> ModeTrace:
    """Align times on the first worker step (or ``t0``); the time before it is start-up.
    ``workers``: how many worked, where fewer reports came back (sandblaster's coordinator
    reports for all of them)."""
    t0 = t0 if t0 is not None else min(r.start_time for r in reports)
    t_end = max(r.end_time for r in reports)
    # the parameters are w0's until t0: of the snapshots before it (Hogwild's taken while
    # its workers are built), the last one stands for them, at 0
    start = [s for s in snapper.snaps if s.t <= t0][-1:]
    kept = start + [s for s in snapper.snaps if s.t > t0]
    snaps = tuple(dataclasses.replace(s, t=max(0.0, s.t - t0)) for s in kept)
    aligned = tuple(
        dataclasses.replace(
            r,
            start_time=r.start_time - t0,
            end_time=r.end_time - t0,
            log=tuple((t - t0, n, loss) for t, n, loss in r.log),
        )
        for r in reports
    )
    faults = faults or FaultCounters()
    n = workers or len(reports)
    return ModeTrace(mode, n, t0 - begin, t_end - t0, snaps, aligned, faults)
