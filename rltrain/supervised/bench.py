"""`rltrain bench`: train the same problem with each update rule and compare.

For every mode the driver starts the workers (Ray actors, Hogwild processes, or the plain
baseline loop in this process), snapshots the parameters every ``eval.every_seconds`` while they
train, and evaluates the snapshots once the mode has ended (see :class:`EvalConfig` for why).
"""

from __future__ import annotations

import contextlib
import dataclasses
import queue
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.multiprocessing as mp
from torch.nn.utils import parameters_to_vector

from rltrain.faults import (
    FaultCounters,
    FaultSchedule,
    PeerLost,
    ProcessLost,
    RestorePoint,
    RunFailed,
    resume_all,
)
from rltrain.progress import Progress
from rltrain.ps.config import ServerConfig
from rltrain.ps.hogwild import HogwildServer
from rltrain.ps.server import Server
from rltrain.records import Params, ServerStats
from rltrain.supervised.config import BenchConfig
from rltrain.supervised.datasets import ShardSource, SplitDataset
from rltrain.supervised.worker import SupervisedWorker, WorkerReport, WorkerSpec, make_model


@dataclass(frozen=True)
class Snapshot:
    """The parameters at ``t`` seconds into training, with the server's counters then."""

    t: float
    params: torch.Tensor
    stats: ServerStats


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


def mode_rule(mode: str, server: ServerConfig) -> ServerConfig:
    """The server rule a bench mode runs."""
    if mode in ("sync", "soft_sync", "average"):
        return dataclasses.replace(server, rule=mode)
    if mode in ("async", "hogwild"):
        staleness = server.staleness if mode == "async" else "none"
        return dataclasses.replace(server, rule="async", staleness=staleness)
    if mode == "async_scale":
        return dataclasses.replace(server, rule="async", staleness="scale")
    if mode == "async_drop":
        return dataclasses.replace(server, rule="async", staleness="drop")
    return dataclasses.replace(server, rule="async")  # baseline: unused


def worker_specs(cfg: BenchConfig, mode: str, data: SplitDataset, workers: int) -> list[WorkerSpec]:
    rule = mode_rule(mode, cfg.server)
    epochs = cfg.budget.epochs
    return [
        WorkerSpec(
            worker_id=i,
            rule=rule,
            optimizer=cfg.optimizer,
            model=cfg.model,
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
        )
        for i in range(workers)
    ]


def shards(cfg: BenchConfig, workers: int) -> list[ShardSource]:
    """Each worker loads its own disjoint shard of the training set."""
    d = cfg.data
    return [
        ShardSource(d.dataset, d.root, d.download, workers, i, cfg.seed) for i in range(workers)
    ]


def initial_params(cfg: BenchConfig, data: SplitDataset) -> torch.Tensor:
    spec = worker_specs(cfg, "baseline", data, 1)[0]
    x = data.train.images
    model = make_model(dataclasses.replace(spec, seed=cfg.seed), x.shape[1], x.shape[-1])
    return parameters_to_vector(model.parameters()).detach().clone()


class Snapshotter:
    """Takes a snapshot whenever ``every`` seconds have passed; drives the progress line."""

    def __init__(self, server: Server, every: float, budget_s: float, progress: Progress) -> None:
        self.server, self.every, self.budget_s, self.progress = server, every, budget_s, progress
        self.snaps: list[Snapshot] = []
        self.t0 = time.time()
        self.next = self.t0

    def due_in(self) -> float:
        return max(0.0, self.next - time.time())

    def take(self) -> None:
        now = time.time()
        p = self.server.pull()
        st = self.server.stats()
        self.snaps.append(Snapshot(now, p.values, dataclasses.replace(st, version=p.version)))
        self.next = now + self.every
        elapsed = now - self.t0
        frac = elapsed / self.budget_s if self.budget_s else 0.0
        rate = st.samples / elapsed if elapsed > 0 else 0.0
        self.progress.update(
            frac,
            f"{elapsed:5.0f}s  samples {st.samples:,}  {rate:,.0f}/s  version {p.version:,}  "
            f"staleness {st.mean_staleness:.2f}  dropped {st.dropped}  rejected {st.rejected}",
        )


def finish_trace(
    mode: str,
    begin: float,
    snapper: Snapshotter,
    reports: list[WorkerReport],
    faults: FaultCounters | None = None,
    t0: float | None = None,
) -> ModeTrace:
    """Align times on the first worker step (or ``t0``); the time before it is start-up."""
    t0 = t0 if t0 is not None else min(r.start_time for r in reports)
    t_end = max(r.end_time for r in reports)
    snaps = tuple(dataclasses.replace(s, t=max(0.0, s.t - t0)) for s in snapper.snaps)
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
    return ModeTrace(mode, len(reports), t0 - begin, t_end - t0, snaps, aligned, faults)


# ---------------------------------------------------------------------------------------------
# The three ways a mode runs


def run_ray_mode(cfg: BenchConfig, mode: str, data: SplitDataset, progress: Progress) -> ModeTrace:
    """Workers and server shards as Ray actors (sync, soft_sync, async*, average).

    Faults: a worker whose process dies is restarted by Ray and given the rest of the mode;
    a lost server shard is restored, with every other shard, from the last snapshot's state
    (a bench keeps its restore points in memory: it writes no checkpoints).
    """
    from rltrain import runtime  # Ray stays at the edge: imported only when used

    begin = time.time()
    specs = worker_specs(cfg, mode, data, cfg.workers)
    rule = specs[0].rule.rule
    restarts = cfg.faults.max_restarts
    server = runtime.start_server(
        initial_params(cfg, data), cfg.optimizer, specs[0].rule, cfg.workers, cfg.runtime, restarts
    )
    workers = [
        runtime.Remote(
            SupervisedWorker,
            s,
            d,
            role="worker",
            index=s.worker_id,
            num_cpus=cfg.runtime.worker_cpus,
            max_restarts=restarts,
        )
        for s, d in zip(specs, shards(cfg, cfg.workers), strict=True)
    ]
    faults = FaultCounters()
    guard = runtime.ServerGuard(server, faults, progress.note)
    guard.remember(RestorePoint(0, server.state_dicts(), "the initial parameters"))
    procs = {"worker": workers, "shard": server.shards}
    try:
        for w in workers:  # constructors (data loading) are start-up, not training time
            w.pid()
        t0 = time.time()
        deadline = t0 + cfg.budget.max_seconds if cfg.budget.max_seconds else None
        schedule = FaultSchedule(cfg.faults.events, t0)
        pool = runtime.Pool()
        for w in workers:
            pool.submit(w, "run", server, t0, deadline)
        snapper = Snapshotter(server, cfg.eval.every_seconds, cfg.budget.max_seconds, progress)
        reports: dict[int, WorkerReport] = {}
        while pool.calls or (pool and (deadline is None or time.time() < deadline)):
            wait = min(snapper.due_in(), schedule.next_in(), guard.POLL_S)
            for d in pool.wait(wait):
                if d.error is None and not d.revived:
                    reports[d.remote.index] = d.value
                    continue
                verdict = runtime.respond(
                    d, rule, cfg.faults.on_worker_loss, server, guard, faults, progress.note
                )
                if verdict == "work":
                    pool.submit(d.remote, "run", server, t0, deadline)
            for action in schedule.due():
                runtime.inject(action, procs, faults, progress.note)
            if snapper.due_in() == 0:
                _snapshot(snapper, server, guard, restarts != 0)
            guard.poll()
        resume_all()
        _snapshot(snapper, server, guard, restarts != 0)
    finally:
        resume_all()  # never leave a process stopped by an injected pause
        for w in workers:
            w.kill()
        server.kill()
    if not reports:
        raise RunFailed(f"{mode}: every worker was lost; no results")
    return finish_trace(mode, begin, snapper, list(reports.values()), faults, t0)


def _snapshot(snapper: Snapshotter, server: Any, guard: Any, restorable: bool) -> None:
    """A snapshot for evaluation, whose server state is also the restore point (only taken
    when shards can restart: a shard that cannot is never restored)."""
    try:
        snapper.take()
        if not restorable:
            return
        states = server.state_dicts()
        v = int(states[0]["version"])
        guard.remember(RestorePoint(v, states, f"the snapshot at version {v}"))
    except (ProcessLost, PeerLost):  # a shard is down: restore it, snapshot next time
        guard.check()


def _hogwild_main(
    spec: WorkerSpec,
    data: ShardSource,
    server: HogwildServer,
    out: mp.Queue,
    deadline: float | None = None,
) -> None:
    out.put(SupervisedWorker(spec, data).run(server, deadline=deadline))


def run_hogwild_mode(cfg: BenchConfig, data: SplitDataset, progress: Progress) -> ModeTrace:
    """Worker processes updating one shared-memory model lock-free (torch.multiprocessing).

    A worker process that dies is started again (up to ``faults.max_restarts`` times) and
    picks up the shared model as it is: Hogwild has no server state to lose.
    """
    begin = time.time()
    ctx = mp.get_context("spawn")
    server = HogwildServer(initial_params(cfg, data), cfg.optimizer)
    specs = worker_specs(cfg, "hogwild", data, cfg.workers)
    sources = shards(cfg, cfg.workers)
    out: mp.Queue = ctx.Queue()
    faults = FaultCounters()

    def spawn(i: int, deadline: float | None = None) -> Any:
        args = (specs[i], sources[i], server, out, deadline)
        p = ctx.Process(target=_hogwild_main, args=args, daemon=True)
        p.start()
        return p

    procs = [spawn(i) for i in range(cfg.workers)]
    snapper = Snapshotter(server, cfg.eval.every_seconds, cfg.budget.max_seconds, progress)
    # a restarted worker only gets the rest of the mode's time
    deadline = snapper.t0 + cfg.budget.max_seconds if cfg.budget.max_seconds else None
    reports: dict[int, WorkerReport] = {}
    try:
        while len(reports) < len(procs):
            with contextlib.suppress(queue.Empty):  # empty: time for a snapshot
                r = out.get(timeout=max(0.05, min(1.0, snapper.due_in())))
                reports[r.worker_id] = r
            for i, p in enumerate(procs):
                if i in reports or p.is_alive() or not out.empty():
                    continue
                limit = cfg.faults.max_restarts
                if 0 <= limit <= faults.worker_restarts:
                    raise RunFailed(
                        f"hogwild worker {i} died (exit code {p.exitcode}) and "
                        f"faults.max_restarts={limit} is spent"
                    )
                faults.restart("worker")
                progress.note(f"worker {i} died (exit code {p.exitcode}); starting it again")
                procs[i] = spawn(i, deadline)
            if snapper.due_in() == 0:
                snapper.take()
        snapper.take()
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.terminate()
    return finish_trace("hogwild", begin, snapper, list(reports.values()), faults)


class _LiveModel:
    """The baseline's stand-in for a server, so the same Snapshotter watches its model."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.version = 0
        self.samples = 0

    def pull(self) -> Params:
        return Params(self.version, parameters_to_vector(self.model.parameters()).detach().clone())

    def stats(self) -> ServerStats:
        return ServerStats(self.version, self.version, 0, 0, self.samples, 0)


def run_baseline(cfg: BenchConfig, data: SplitDataset, progress: Progress) -> ModeTrace:
    """A plain single-process PyTorch loop over the whole training set: the reference."""
    begin = time.time()
    threads = cfg.baseline_threads or cfg.runtime.threads_per_worker
    saved_threads = torch.get_num_threads()
    spec = dataclasses.replace(worker_specs(cfg, "baseline", data, 1)[0], threads=threads)
    worker = SupervisedWorker(spec, data.train)
    torch.nn.utils.vector_to_parameters(initial_params(cfg, data), worker.model.parameters())
    live = _LiveModel(worker.model)
    snapper = Snapshotter(live, cfg.eval.every_seconds, cfg.budget.max_seconds, progress)  # type: ignore[arg-type]

    def on_step() -> None:
        live.version += 1
        live.samples = worker.samples
        if snapper.due_in() == 0:
            snapper.take()

    snapper.take()
    try:
        report = worker.run_standalone(on_step)
        snapper.take()
    finally:
        torch.set_num_threads(saved_threads)
    return finish_trace("baseline", begin, snapper, [report])


def run_mode(cfg: BenchConfig, mode: str, data: SplitDataset, progress: Progress) -> ModeTrace:
    if mode == "baseline":
        return run_baseline(cfg, data, progress)
    if mode == "hogwild":
        return run_hogwild_mode(cfg, data, progress)
    return run_ray_mode(cfg, mode, data, progress)
