"""Bench mode ``sandblaster``: Sandblaster L-BFGS (Dean et al. 2012, section 4.2).

A coordinator (the driver) runs L-BFGS through commands to the parameter shards
(:mod:`rltrain.ps.lbfgs`), which hold every vector. Each function evaluation is one large batch
cut into many small portions; the coordinator hands a portion to whichever worker is free (load
balancing: a fast worker simply takes more of them), and once most portions are done it hands
the outstanding ones out again to idle workers, the first result winning (backup tasks). Workers
read the parameters from the shards and add their portion's gradient there, so only portion
numbers, losses and sample counts pass through the coordinator.

Every class here is plain Python: :func:`rltrain.runtime.start_store` puts the shards, and
:class:`rltrain.runtime.RayExecutor` the workers, in Ray processes
(:func:`run_sandblaster_mode`); the tests run them as threads.
"""

from __future__ import annotations

import concurrent.futures as cf
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch.nn.utils import vector_to_parameters

from rltrain.progress import Progress
from rltrain.ps.lbfgs import G, LbfgsCoordinator, VectorStore, W
from rltrain.records import Params, ServerStats
from rltrain.supervised.config import BenchConfig, SandblasterConfig
from rltrain.supervised.datasets import ArrayDataset, SplitDataset
from rltrain.supervised.modes import (
    ModeTrace,
    Snapshotter,
    finish_trace,
    initial_params,
    worker_specs,
)
from rltrain.supervised.sharding import ShardSource
from rltrain.supervised.splits import VectorDataset
from rltrain.supervised.worker import (
    SupervisedWorker,
    WorkerReport,
    WorkerSpec,
    flat_grad,
    objective,
)


@dataclass(frozen=True)
class Portion:
    """Portion ``index`` of ``count`` of evaluation ``round``'s batch: the indices that a
    permutation seeded by ``batch_seed`` puts first (``batch_size`` of them; 0 = all, in order)."""

    round: int
    index: int
    count: int
    batch_seed: int
    batch_size: int


@dataclass(frozen=True)
class PortionResult:
    portion: Portion
    worker: int
    loss_sum: float  # the objective summed over the portion's samples
    samples: int


def portion_indices(p: Portion, n: int) -> torch.Tensor:
    """The dataset positions of portion ``p`` (every worker computes the same ones)."""
    if p.batch_size == 0 or p.batch_size >= n:
        order = torch.arange(n)
    else:
        g = torch.Generator().manual_seed(p.batch_seed)
        order = torch.randperm(n, generator=g)[: p.batch_size]
    return torch.tensor_split(order, p.count)[p.index]


class SandblasterWorker(SupervisedWorker):
    """Gradients of portions of the batch, added into the shards' accumulator (the supervised
    worker's data, model and objective; no server loop)."""

    def __init__(
        self,
        spec: WorkerSpec,
        data: ArrayDataset | VectorDataset | ShardSource,
        store: VectorStore,
    ) -> None:
        super().__init__(spec, data)
        self.store = store
        self._round = -1

    def start(self, t0: float) -> None:
        """Injected slowdowns count from ``t0``, the mode's start."""
        self._slow.start(t0)

    def compute(self, p: Portion) -> PortionResult:
        t = time.perf_counter()
        if p.round != self._round:  # a new point: read it from the shards once
            with torch.no_grad():
                vector_to_parameters(self.store.pull(), self.model.parameters())
            self._round = p.round
        idx = portion_indices(p, len(self.y))
        for q in self.model.parameters():
            q.grad = None
        # a sum over the portion (mean x count), so that the portions' gradients add up to
        # the batch's; the coordinator divides by the batch size
        loss = objective(self.spec, self.model, self.x[idx], self.y[idx]) * len(idx)
        loss.backward()
        self._slow.stretch(time.perf_counter() - t)  # an injected straggler
        self.store.accumulate(p.round, p.index, flat_grad(self.model))
        return PortionResult(p, self.spec.worker_id, float(loss.detach()), len(idx))


class Executor(Protocol):
    """Runs ``worker.compute(portion)`` on worker ``i``; in threads or Ray processes."""

    workers: int

    def submit(self, worker: int, portion: Portion) -> Any: ...

    def wait(self, handles: list[Any], timeout: float) -> list[tuple[Any, PortionResult]]: ...


class ThreadExecutor:
    """Workers as threads of this process (tests; torch releases the GIL while computing)."""

    def __init__(self, workers: list[SandblasterWorker]) -> None:
        self.ws, self.workers = workers, len(workers)
        self.pool = cf.ThreadPoolExecutor(max_workers=len(workers))

    def submit(self, worker: int, portion: Portion) -> Any:
        return self.pool.submit(self.ws[worker].compute, portion)

    def wait(self, handles: list[Any], timeout: float) -> list[tuple[Any, PortionResult]]:
        done, _ = cf.wait(handles, timeout=timeout, return_when=cf.FIRST_COMPLETED)
        return [(h, h.result()) for h in done]

    def close(self) -> None:
        self.pool.shutdown(wait=True)


@dataclass
class BatchStats:
    """One evaluation: its loss and what the scheduling did."""

    loss: float
    samples: int
    seconds: float
    backups: int = 0  # portions handed out a second time
    duplicates: int = 0  # results that arrived after the portion's first one (discarded)
    per_worker: dict[int, int] = field(default_factory=dict)  # portions that counted


class Scheduler:
    """Hands portions to free workers, and backup copies once most are done."""

    def __init__(self, executor: Executor, backup_after: float) -> None:
        self.ex = executor
        self.backup_after = backup_after
        self.busy: dict[Any, int] = {}  # handle -> worker, across rounds (a straggler's
        # losing copy keeps its worker busy into the next round)

    def run(self, portions: list[Portion]) -> BatchStats:
        t0 = time.time()
        todo = list(portions)
        copies: dict[int, int] = {}  # portion index -> copies handed out
        done: dict[int, PortionResult] = {}
        stats = BatchStats(0.0, 0, 0.0)
        rnd = portions[0].round
        while len(done) < len(portions):
            for w in self._idle():
                p = todo.pop(0) if todo else self._backup(portions, copies, done)
                if p is None:
                    break
                stats.backups += copies.get(p.index, 0) > 0
                copies[p.index] = copies.get(p.index, 0) + 1
                self.busy[self.ex.submit(w, p)] = w
            for handle, r in self.ex.wait(list(self.busy), timeout=1.0):
                del self.busy[handle]
                if r.portion.round != rnd:
                    continue  # a straggler's copy from an earlier round
                if r.portion.index in done:
                    stats.duplicates += 1
                    continue
                done[r.portion.index] = r
                stats.per_worker[r.worker] = stats.per_worker.get(r.worker, 0) + 1
        stats.loss = sum(r.loss_sum for r in done.values())
        stats.samples = sum(r.samples for r in done.values())
        stats.seconds = time.time() - t0
        return stats

    def _idle(self) -> list[int]:
        taken = set(self.busy.values())
        return [w for w in range(self.ex.workers) if w not in taken]

    def _backup(
        self, portions: list[Portion], copies: dict[int, int], done: dict[int, PortionResult]
    ) -> Portion | None:
        """An outstanding portion with the fewest copies, once backups are due."""
        if len(done) < self.backup_after * len(portions) or self.backup_after >= 1:
            return None
        waiting = [p for p in portions if p.index not in done and copies.get(p.index, 0) < 2]
        return min(waiting, key=lambda p: copies.get(p.index, 0)) if waiting else None


class Sandblaster:
    """The coordinator's loop: evaluate, direction, backtracking line search, new pair."""

    def __init__(
        self,
        cfg: SandblasterConfig,
        store: VectorStore,
        scheduler: Scheduler,
        train_size: int,
        seed: int,
    ) -> None:
        self.cfg, self.store, self.scheduler = cfg, store, scheduler
        self.lbfgs = LbfgsCoordinator(store, cfg.memory)
        self.n, self.seed = train_size, seed
        self.round = 0
        self.batch = 0  # which batch: the permutation seed
        self.samples = 0
        self.iterations = 0
        self.log: list[tuple[float, int, float]] = []  # (time, samples, batch loss)
        self.stalled = False  # no step decreases the fixed batch's loss: nothing left to do
        self.batches: list[BatchStats] = []

    @property
    def fixed_batch(self) -> bool:
        """Every evaluation is on the whole training set (batch_size 0, or at least its size):
        deterministic L-BFGS."""
        return self.cfg.batch_size == 0 or self.cfg.batch_size >= self.n

    def evaluate(self) -> float:
        """f and its gradient (into the shards' ``g``) at ``w``, on the current batch."""
        self.round += 1
        self.store.each("begin", self.round)
        count = self.cfg.portions
        size = self.cfg.batch_size
        seed = self.seed * 100_003 + self.batch
        portions = [Portion(self.round, i, count, seed, size) for i in range(count)]
        st = self.scheduler.run(portions)
        self.store.each("scale", G, 1.0 / st.samples)  # the batch mean
        self.samples += st.samples
        self.batches.append(st)
        f = st.loss / st.samples
        self.log.append((time.time(), self.samples, f))
        return f

    def step(self, f: float) -> float:
        """One L-BFGS iteration from ``w`` with value ``f`` (gradient in ``g``); returns the
        value at the new point, on the next iteration's batch."""
        st, lb = self.store, self.lbfgs
        gd = lb.direction("d")
        st.each("copy", W, "w_old")
        st.each("copy", G, "g_old")
        # the first step has no curvature yet: a step of length 1 along -g (torch's LBFGS too)
        t = 1.0 if lb.pairs else min(1.0, 1.0 / math.sqrt(max(lb.dot(G, G), 1e-30)))
        for _ in range(self.cfg.max_line_search):
            st.each("copy", "w_old", W)
            st.each("axpy", t, "d", W)
            f_new = self.evaluate()
            if f_new <= f + 1e-4 * t * gd:  # Armijo's sufficient decrease
                break
            t *= 0.5
        else:  # no decrease along d: back to w_old, and forget the history
            st.each("copy", "w_old", W)
            st.each("copy", "g_old", G)
            # not even along -g: converged to the batch's precision (or a fresh batch helps)
            self.stalled = not lb.pairs and self.fixed_batch
            lb.reset()
            self.iterations += 1
            return f
        lb.add_pair("d", t, "g_old")  # s = t d, y = g(w_new) - g(w_old), on the same batch
        self.iterations += 1
        if self.fixed_batch:
            return f_new  # one fixed batch: the new point's value and gradient are known
        self.batch += 1
        return self.evaluate()

    def run(self, keep_going: Callable[[], bool], on_iteration: Callable[[], None]) -> None:
        f = self.evaluate()
        on_iteration()
        while keep_going() and not self.stalled:
            f = self.step(f)
            on_iteration()


class _View:
    """The coordinator's state as the bench's :class:`Snapshotter` reads a server."""

    def __init__(self, coordinator: Sandblaster) -> None:
        self.c = coordinator

    def pull(self) -> Params:
        return Params(self.c.iterations, self.c.store.pull())

    def stats(self) -> ServerStats:
        c = self.c
        duplicates = sum(b.duplicates for b in c.batches)
        return ServerStats(c.iterations, c.iterations, duplicates, 0, c.samples, 0)


def run_sandblaster_mode(cfg: BenchConfig, data: SplitDataset, progress: Progress) -> ModeTrace:
    """Mode ``sandblaster``: shards and workers as Ray processes, the coordinator here. Every
    worker loads the whole training set, since any worker may be handed any portion."""
    from rltrain.runtime import ray as ray_runtime  # imported only when used

    begin = time.time()
    specs = worker_specs(cfg, "sandblaster", data, cfg.workers)
    sources = [ShardSource(cfg.data, 1, 0, cfg.seed) for _ in specs]
    rt = cfg.runtime
    store, shard_procs = ray_runtime.start_store(
        initial_params(cfg, data), cfg.server.shards, rt.server_cpus
    )
    executor = None
    try:
        executor = ray_runtime.RayExecutor(SandblasterWorker, specs, sources, store, rt.worker_cpus)
        t0 = time.time()
        executor.start(t0)  # constructors (data loading) are start-up, not training time
        c = Sandblaster(
            cfg.sandblaster,
            store,
            Scheduler(executor, cfg.sandblaster.backup_after),
            len(data.train),
            cfg.seed,
        )
        budget = cfg.budget
        snapper = Snapshotter(_View(c), cfg.eval.every_seconds, budget.max_seconds, progress)  # type: ignore[arg-type]
        t0 = snapper.t0 = time.time()
        deadline = t0 + budget.max_seconds if budget.max_seconds else math.inf
        max_samples = budget.epochs * len(data.train) if budget.epochs else math.inf

        def keep_going() -> bool:
            return time.time() < deadline and c.samples < max_samples

        def on_iteration() -> None:
            if snapper.due_in() == 0:
                snapper.take()

        snapper.take()
        c.run(keep_going, on_iteration)
        snapper.take()
    finally:
        if executor is not None:
            executor.kill()
        for p in shard_procs:
            p.kill()
    report = WorkerReport(0, t0, time.time(), c.iterations, c.samples, c.round, tuple(c.log))
    b = c.batches
    mean_s = sum(x.seconds for x in b) / max(1, len(b))
    progress.note(
        f"{c.iterations} L-BFGS iterations, {len(b)} batch evaluations of "
        f"{cfg.sandblaster.portions} portions, {mean_s:.2f} s each; "
        f"{sum(x.backups for x in b)} backup copies, "
        f"{sum(x.duplicates for x in b)} results discarded (a copy won)"
    )
    return finish_trace("sandblaster", begin, snapper, [report], t0=t0, workers=cfg.workers)
