"""The bench modes that run without Ray: the plain single-process baseline loop, and Hogwild
(worker processes on one shared-memory model)."""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from multiprocessing import connection
from multiprocessing.connection import Connection
from typing import Any

import torch
from torch.nn.utils import parameters_to_vector

from rltrain.faults import FaultCounters, RunFailed
from rltrain.progress import Progress
from rltrain.ps.config import corrected_optimizer
from rltrain.ps.hogwild import HogwildServer
from rltrain.records import Params, ServerStats
from rltrain.runtime.process import forkstart
from rltrain.runtime.process.child import watch_trainer
from rltrain.runtime.process.forkserver import no_main
from rltrain.supervised.config import BenchConfig
from rltrain.supervised.datasets import SplitDataset
from rltrain.supervised.modes import (
    ModeTrace,
    Snapshotter,
    finish_trace,
    initial_params,
    shards,
    worker_specs,
)
from rltrain.supervised.sharding import ShardSource
from rltrain.supervised.worker import SupervisedWorker, WorkerReport, WorkerSpec


class StartGate:
    """Hogwild's workers train from one moment to one deadline: each says it is built and
    waits; the mode opens the gate once every one has (explore106: each worker's budget ran
    from its own start, and starts staggered by seconds under load gave the mode 1.1-4.4x
    the time of the server modes). Shared memory, no lock: a worker SIGKILLed while it waited
    at an Event left the Condition beneath it waiting for that worker's wake-up, and
    ``go.set()`` hung the mode."""

    def __init__(self, ctx: Any, workers: int) -> None:
        self.ready = ctx.Array("b", workers, lock=False)
        self.start = ctx.Value("d", 0.0, lock=False)  # 0: wait; then the deadline, or -1: none

    def arrive(self, i: int) -> float | None:
        """Worker ``i`` is built: wait for the gate; the deadline (None: none)."""
        self.ready[i] = 1
        while (at := self.start.value) == 0:
            time.sleep(0.01)
        return at if at > 0 else None

    def expect(self, i: int) -> None:
        """Worker ``i`` is (re)started: a gate still shut waits for it again (review87)."""
        self.ready[i] = 0

    def open_when_ready(self, budget: float | None) -> None:
        """Open the gate once every worker is at it, with ``budget`` seconds from now (one
        8-byte store: the deadline and the go); a worker restarted later gets the time left."""
        if not self.start.value and all(self.ready):
            self.start.value = time.time() + budget if budget else -1.0


def _hogwild_main(
    spec: WorkerSpec,
    data: ShardSource,
    server: HogwildServer,
    out: Connection,
    trainer: tuple[int, str | None],
    gate: tuple[StartGate, int],
) -> None:
    # a trainer that ends without stopping us (SIGKILL; an interrupt's kill comes first)
    threading.Thread(target=watch_trainer, args=trainer, name="rltrain-watch", daemon=True).start()
    worker = SupervisedWorker(spec, data)
    server.optimizer()  # start-up, not training time
    start, i = gate
    out.send(worker.run(server, deadline=start.arrive(i)))
    out.close()


def run_hogwild_mode(cfg: BenchConfig, data: SplitDataset, progress: Progress) -> ModeTrace:
    """Worker processes updating one shared-memory model lock-free (torch.multiprocessing).

    A worker process that dies is started again (up to ``faults.max_restarts`` times) and
    picks up the shared model as it is: Hogwild has no server state to lose.
    """
    begin = time.time()
    # the process runtime's forkserver, which has imported torch and the workers: a spawned
    # interpreter imports them anew, seconds per worker and mode
    ctx = forkstart.context()
    specs = worker_specs(cfg, "hogwild", data, cfg.workers)
    optimizer = corrected_optimizer(cfg.optimizer, specs[0].server, cfg.workers)
    server = HogwildServer(initial_params(cfg, data), optimizer)
    sources = shards(cfg, cfg.workers)
    # each worker's report on a pipe of its own: a worker SIGKILLed while its put to a shared
    # Queue held the queue's write lock kept it, and every other report waited for it (the
    # workers never exited: /tmp/pc/qtest.py)
    pipes: dict[int, Connection] = {}
    ended: set[int] = set()  # the workers whose pipe ended with no report
    faults = FaultCounters()

    trainer = (os.getpid(), forkstart.socket_path())
    gate = StartGate(ctx, cfg.workers)

    def spawn(i: int) -> Any:
        gate.expect(i)
        reader, writer = ctx.Pipe(duplex=False)
        pipes[i] = reader
        ended.discard(i)
        args = (specs[i], sources[i], server, writer, trainer, (gate, i))
        p = ctx.Process(target=_hogwild_main, args=args, daemon=True)
        with no_main():  # a user's script without a __main__ guard must not run again
            p.start()
        writer.close()  # (the child's end)
        return p

    snapper = Snapshotter(
        server, cfg.eval.every_seconds, cfg.budget.max_seconds, progress, server.snapshot
    )
    snapper.take()  # w0, before any worker runs
    training = False  # a first step has been seen
    procs = [spawn(i) for i in range(cfg.workers)]
    reports: dict[int, WorkerReport] = {}
    finished = False
    try:
        while len(reports) < len(procs):
            gate.open_when_ready(cfg.budget.max_seconds)
            wait = min(1.0, snapper.due_in()) if training else 0.0  # (the first step: soon)
            # each worker's pipe until it ends, and its exit (review90b: a pipe at its end
            # before the worker's exit was seen made every wait return at once)
            waiting = [c for i, c in pipes.items() if i not in reports and i not in ended]
            waiting += [p.sentinel for i, p in enumerate(procs) if i not in reports]
            connection.wait(waiting, timeout=max(0.05, wait))  # none: time for a snapshot
            for i, p in enumerate(procs):
                if i in reports:
                    continue
                alive = p.is_alive()  # (before the read: a report sent before the exit is read)
                try:  # (a worker stopped while it sends holds this read: one message, rare)
                    if pipes[i].poll():
                        reports[i] = pipes[i].recv()
                except EOFError:  # it ended without a report
                    ended.add(i)
                if i in reports or alive:
                    continue
                limit = cfg.faults.max_restarts
                if 0 <= limit <= faults.worker_restarts:
                    raise RunFailed(
                        f"hogwild worker {i} died (exit code {p.exitcode}) and "
                        f"faults.max_restarts={limit} is spent"
                    )
                faults.restart("worker")
                server.worker_lost(specs[i].worker_id)
                progress.note(f"worker {i} died (exit code {p.exitcode}); starting it again")
                procs[i] = spawn(i)
            if not training and server.stats().version > 0:  # the first step: the grid
                training, snapper.t0 = True, time.time()  # starts here, as every mode's times
                snapper.next = snapper.t0 + snapper.every  # do (from the forks, seconds
                # before, the snapshots fell off it: the first at 2.37 s of every 3)
            if training and snapper.due_in() == 0:
                snapper.take()
        snapper.take()
        finished = True
    finally:  # an interrupt or a failure: at once. (SIGKILL: the forkserver's children
        for p in procs:  # ignore Ctrl-C and SIGTERM, and a join took 10 s each, then left them)
            if finished:
                p.join(timeout=10)
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
    # times from the first step: the first worker's, or when the grid saw it if that worker's
    # report died with it (a killed one: its restart's start is later)
    starts = [r.start_time for r in reports.values()] + [snapper.t0] * training
    return finish_trace("hogwild", begin, snapper, list(reports.values()), faults, min(starts))


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
    # never slowed (faults.events' slow on worker 0): the reference the modes are compared to
    spec = worker_specs(cfg, "baseline", data, 1)[0]
    spec = dataclasses.replace(spec, threads=threads, faults=())
    worker = SupervisedWorker(spec, data.train, standalone=True)
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
