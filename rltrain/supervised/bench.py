"""`rltrain bench`: train the same problem with each update rule and compare.

For every mode the driver starts the workers (Ray processes, Hogwild processes, or the plain
baseline loop in this process), snapshots the parameters every ``eval.every_seconds`` while they
train, and evaluates the snapshots once the mode has ended (see :class:`EvalConfig` for why).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from pathlib import Path
from shlex import quote
from typing import Any

from rltrain import signals
from rltrain.driver import drive
from rltrain.failure import keep_log, your_error
from rltrain.faults import (
    BenchFailed,
    FaultCounters,
    FaultSchedule,
    PeerLost,
    ProcessLost,
    RestorePoint,
    RunFailed,
    describe_events,
)
from rltrain.pauses import resume_all
from rltrain.progress import Progress, quiet, say
from rltrain.ps.rules import UpdateRule
from rltrain.runtime.context import RunContext
from rltrain.runtime.contract import Runtime
from rltrain.supervised.config import BenchConfig, server_modes
from rltrain.supervised.datasets import SplitDataset
from rltrain.supervised.elastic import Elastic
from rltrain.supervised.local_modes import run_baseline, run_hogwild_mode
from rltrain.supervised.modes import (
    ModeRecord,
    ModeTrace,
    Snapshotter,
    finish_trace,
    initial_params,
    shards,
    worker_specs,
)
from rltrain.supervised.plots import SEED, plot_names, run_name
from rltrain.supervised.update_log import data_print, save_record
from rltrain.supervised.worker import SupervisedWorker, WorkerReport, WorkerSpec

# ---------------------------------------------------------------------------------------------
# The three ways a mode runs


def run_server_mode(
    cfg: BenchConfig, mode: str, data: SplitDataset, progress: Progress, runtime: Runtime
) -> ModeTrace:
    """Workers as processes of ``runtime`` (Ray's, or the process runtime's) around the server's
    shards (Ray processes, or objects of this process): sync, soft_sync, async*, average.

    Faults: a worker whose process dies is restarted and given the rest of the mode; a lost
    server shard (Ray) is restored, with every other shard, from the last snapshot's state
    (a bench keeps its restore points in memory: it writes no checkpoints).
    """
    begin = time.time()
    specs = worker_specs(cfg, mode, data, cfg.workers)
    rule = specs[0].update_rule
    restarts = cfg.faults.max_restarts
    record = cfg.server.record and rule.records_gradients  # average: no gradients to reapply
    init = initial_params(cfg, data)
    server = runtime.start_server(
        init, cfg.optimizer, specs[0].server, cfg.workers, cfg.runtime, restarts, record
    )
    sources = shards(cfg, cfg.workers)

    def spawn(spec: WorkerSpec, i: int) -> Any:  # a worker on data shard i
        return runtime.Remote(
            SupervisedWorker,
            spec,
            sources[i],
            role="worker",
            index=spec.worker_id,
            num_cpus=cfg.runtime.worker_cpus,
            max_restarts=restarts,
            max_concurrency=2,  # run, and stop (elastic remove) beside it
        )

    workers = [spawn(s, i) for i, s in enumerate(specs)]
    faults = FaultCounters()
    guard = runtime.ServerGuard(server, faults, progress.note)
    guard.remember(RestorePoint(0, server.state_dicts(), "the initial parameters"))
    ctx = RunContext(runtime, faults, progress.note, server, guard)
    procs = ctx.procs
    ctx.add("worker", workers)
    ctx.add("shard", runtime.server_processes(server))
    try:
        # constructors (data loading) are start-up, not training time
        runtime.wait_up(workers, progress.note)
        snapper = Snapshotter(server, cfg.eval.every_seconds, cfg.budget.max_seconds, progress)
        plan = BenchPlan(cfg, rule, ctx, snapper)
        need = cfg.runtime.worker_cpus
        plan.elastic = Elastic(specs, spawn, guard, procs, progress.note, runtime.free_cpus, need)
        drive(plan.pool, plan)
        if left := plan.schedule.left():
            progress.note(f"not injected, the mode ended first: {describe_events(left)}")
        t0, reports = plan.t0, plan.reports
        resume_all()
        _snapshot(snapper, server, guard, restarts != 0)
        point = guard.restored_from  # the log of a restarted shard begins at its restore
        start = None if point is None else point.states[0]
        kept = ModeRecord(tuple(server.push_log()), server.pull().values, start) if record else None
    finally:
        resume_all()  # never leave a process stopped by an injected pause
        for w in procs["worker"]:  # with the ones added mid-run
            w.kill()
        server.kill()
    if not reports:
        raise RunFailed(f"{mode}: every worker was lost; no results")
    trace = finish_trace(mode, begin, snapper, list(reports.values()), faults, t0)
    return dataclasses.replace(trace, record=kept)


class BenchPlan:
    """The supervised workers' hooks in the driver loop (:func:`rltrain.driver.drive`): each
    worker runs to the mode's deadline in one call; a worker Ray restarts gets the rest."""

    def __init__(
        self, cfg: BenchConfig, rule: UpdateRule, ctx: RunContext, snapper: Snapshotter
    ) -> None:
        self.cfg, self.rule, self.ctx, self.snapper = cfg, rule, ctx, snapper
        assert ctx.guard is not None  # run_mode's context has the server's guard
        self.server, self.guard, self.procs = ctx.server, ctx.guard, ctx.procs
        self.pool = ctx.runtime.Pool()
        self.reports: dict[int, WorkerReport] = {}
        self.t0 = time.time()
        self.deadline: float | None = None
        self.schedule = FaultSchedule(cfg.faults.events, None)  # armed as the workers start
        self.late: tuple[float, list[Any]] = (0.0, [])  # warm start: (when, workers to give)
        self.elastic: Elastic | None = None  # add/remove events

    def start(self) -> None:
        # the curve's first point is w0: taken before any worker is given work, as a worker
        # on a small problem can push within the driver's first wait (a flaky first point)
        _snapshot(self.snapper, self.server, self.guard, self.cfg.faults.max_restarts != 0)
        self.t0 = time.time()
        budget = self.cfg.budget.max_seconds
        self.deadline = self.t0 + budget if budget else None
        self.schedule.arm(self.t0)
        workers = self.procs["worker"]
        warm = self.cfg.warm_start.seconds
        if warm > 0 and len(workers) > 1:
            # Downpour's warm start (Dean et al. 2012): one replica trains alone first; the
            # others are away from the barriers until their first push rejoins them
            for w in workers[1:]:
                self.server.leave(w.index)
            self.late = (self.t0 + warm, workers[1:])
            workers = workers[:1]
        for w in workers:
            self._give(w)

    def _give(self, worker: Any, pushed: int = 0) -> None:
        self.pool.submit(worker, "run", self.server, self.t0, self.deadline, pushed)

    def on_result(self, done: Any) -> None:
        self.reports[done.remote.index] = done.value
        if self.elastic is not None:
            self.elastic.stopped(done.remote.index)
        if self.rule.barrier:  # its share done: no barrier may wait for it (soft_sync's K of
            self.guard.leave(done.remote.index)  # 3 waited server.barrier_timeout_s a round)
        if self.late[1] and not self.pool.calls:  # the warm start's replica ended its share
            self._join_late(f"worker {done.remote.index} ended its share first")  # (an epoch
            # budget: the mode idled to warm_start.seconds, its samples/s 40x too low)

    def on_fault(self, done: Any) -> None:
        verdict = self.ctx.respond(done, self.rule, self.cfg.faults.on_worker_loss)
        if verdict == "work":  # its predecessor's pushes stay done (an epoch budget)
            pushed = 0
            with contextlib.suppress(ProcessLost, PeerLost):  # (else its share again)
                pushed = self.server.stats().samples_by.get(done.remote.index, 0)
            self._give(done.remote, pushed)

    def refill(self) -> None:
        """Nothing: a worker's one call runs to the deadline."""

    def keep_going(self) -> bool:
        pool = self.pool
        before = self.deadline is None or time.time() < self.deadline
        waiting = bool(self.late[1]) and before  # warm start: workers still to join
        return bool(pool.calls) or waiting or (bool(pool) and before)

    def wait_s(self) -> float:
        late = max(0.0, self.late[0] - time.time()) if self.late[1] else float("inf")
        return min(self.snapper.due_in(), self.schedule.next_in(), self.guard.POLL_S, late)

    def _join_late(self, why: str) -> None:
        """The warm start is over (``why``: before its time): the other workers join."""
        late = self.late[1]
        joins = f"{len(late)} more worker{'s' * (len(late) != 1)} join{'s' * (len(late) == 1)}"
        at = f"{time.time() - self.t0:.1f}s"
        with contextlib.suppress(ProcessLost, PeerLost):  # (a shard down: the time alone)
            at += f", {self.server.stats().samples:,} samples"
        self.ctx.say(f"warm start over at {at}{f' ({why})' if why else ''}: {joins}")
        for w in late:
            self._give(w)
        self.late = (0.0, [])

    def tick(self) -> None:
        if self.late[1] and time.time() >= self.late[0]:
            self._join_late("")
        for action in self.schedule.due():
            if action.event.action in ("add", "remove") and self.elastic is not None:
                joined = self.elastic.apply(action.event)
                if joined is not None:
                    self._give(joined)
                continue
            self.ctx.inject(action)
        if self.snapper.due_in() == 0:
            restorable = self.cfg.faults.max_restarts != 0
            _snapshot(self.snapper, self.server, self.guard, restorable)
        self.guard.poll()


def _snapshot(snapper: Snapshotter, server: Any, guard: Any, restorable: bool) -> None:
    """A snapshot for evaluation, whose server state is also the restore point (only taken
    when shards can restart: a shard that cannot is never restored)."""
    try:
        snapper.take()
        if not restorable:
            return
        states = server.state_dicts()
        v = int(states[0]["version"])
        guard.remember(RestorePoint(v, states, "the last snapshot"))
    except (ProcessLost, PeerLost):  # a shard is down: restore it, snapshot next time
        guard.check()


def run_mode(
    cfg: BenchConfig,
    mode: str,
    data: SplitDataset,
    progress: Progress,
    runtime: Runtime | None = None,
) -> ModeTrace:
    """One mode of the bench (``runtime``: the module that runs the server modes' workers)."""
    signalled = [e for e in cfg.faults.events if e.action != "slow" or mode == "baseline"]
    if signalled and (mode not in server_modes() or cfg.model.stages > 1):
        how = "kill, pause, add, remove: the server modes' processes, unsplit; slow: workers"
        progress.note(
            f"not injected in {mode}: {describe_events(signalled)} ({how}, not the "
            "baseline's, the reference)"
        )
    if mode == "baseline":
        return run_baseline(cfg, data, progress)  # local_modes: no Ray
    if mode == "hogwild":
        return run_hogwild_mode(cfg, data, progress)
    if mode == "allreduce":
        from rltrain.supervised.allreduce import run_allreduce_mode

        return run_allreduce_mode(cfg, data, progress)
    if mode == "sandblaster":
        from rltrain.supervised.sandblaster import run_sandblaster_mode

        return run_sandblaster_mode(cfg, data, progress)
    if runtime is None:
        from rltrain import runtime as runtimes

        runtime = runtimes.backend(cfg.runtime)
    if cfg.model.stages > 1:
        from rltrain.supervised.pipeline_mode import run_pipeline_mode

        return run_pipeline_mode(cfg, mode, data, progress, runtime)
    return run_server_mode(cfg, mode, data, progress, runtime)


def say_slow_events(cfg: BenchConfig, mode: str, progress: Progress) -> int:
    """Say the ``slow`` events a mode's workers will apply to their own steps (nothing else
    shows them: a straggler that was never said, nor counted in ``faults.injected``); returns
    how many (the baseline, the reference, runs none)."""
    slow = [e for e in cfg.faults.events if e.action == "slow" and mode != "baseline"]
    for e in slow:
        until = f"to {e.at + e.seconds:g}s" if e.seconds else "to the end"
        progress.note(
            f"injected fault: worker {e.index} runs {e.factor:g}x slower from {e.at:g}s {until} "
            "(it stretches its own steps)"
        )
    return len(slow)


def run_bench(cfg: BenchConfig, data: SplitDataset, run_dir: Path) -> int:
    """`rltrain bench`: every mode in turn, evaluated and reported into ``run_dir``."""
    from rltrain import runtime as runtimes  # Ray stays at the edge: imported only when used
    from rltrain.supervised import evaluation, report, stopped, tables
    from rltrain.supervised.config import bench_backend

    started = time.time()
    needs_ray = any(m not in ("baseline", "hogwild") for m in cfg.modes)
    extra: dict[str, Any] = {}  # summary.json's "runtime": the backend, the job, the nodes
    name, why = bench_backend(cfg)
    runtime = runtimes.backend(dataclasses.replace(cfg.runtime, backend=name))
    if needs_ray:
        where = f"{runtime.start(cfg.runtime)}, chosen by {why}"
        stages = cfg.model.stages  # a process and a server shard per stage of each replica
        shards = stages if stages > 1 else cfg.server.shards
        fitted = runtime.fit_cpus(cfg.runtime, cfg.workers * stages, shards)
        cfg = dataclasses.replace(cfg, runtime=fitted)
        signals.install()  # again: ray.init replaces the SIGTERM handler
        say(f"runtime: {where}")
        extra["runtime"] = runtime.job_record()
    extra["modes"] = list(cfg.modes)  # asked for; results holds those that finished
    printed = data_print(data, cfg.data.root)  # what it trains on (explore100: said nowhere)
    extra["data"] = {k: v for k, v in printed.items() if k != "root" or data.source}
    results, curves = [], {}
    base = cfg
    # round by round (every mode at one seed, then the next): a drift in the machine's
    # speed falls on every mode alike
    runs = [(cfg.seed + k, mode) for k in range(cfg.seeds) for mode in cfg.modes]
    begun = time.time()
    try:
        for i, (seed, mode) in enumerate(runs):
            if mode in extra.get("failed", {}):  # (your code's error: at every seed alike)
                continue
            cfg = dataclasses.replace(base, seed=seed)
            name = run_name(mode, seed, cfg.seeds)
            label = f"[{i + 1}/{len(runs)} {name}]"
            progress = Progress(label)
            if i and not quiet():  # the end, at the runs' pace so far (quiet: explore119)
                each, left = (time.time() - begun) / i, len(runs) - i
                progress.note(  # (explore94: "3 runs at 19 s each so far" read as 3 done)
                    f"about {each * left / 60:.1f} min left: {left} run{'s' * (left > 1)} to go "
                    f"at {each:.0f} s each (the pace so far)"
                )
            slow = say_slow_events(cfg, mode, progress)
            try:
                trace = run_mode(cfg, mode, data, progress, runtime)
            except Exception as e:  # an error in your code fails its mode alone
                if (line := your_error(e, cfg.imports)) is None:
                    raise
                keep_log(run_dir / f"failure-{mode}.log", e, progress.note, cfg.imports)
                extra.setdefault("failed", {})[mode] = line
                say(f"{label} failed: {line}", note=True)
                continue
            trace.faults.injected += slow
            # a mode that has trained keeps its results: a first Ctrl-C waits for its
            # evaluation, cut to a few more snapshots (a second quits at once)
            with signals.deferred():
                if trace.record is not None:
                    save_record(run_dir, trace, printed)
                prog = Progress(label)
                how = evaluation.progress_hooks(prog)
                model = run_dir / "models" / f"{name.replace(SEED, '-seed')}.pt"
                trace, points = evaluation.evaluate(cfg, data, trace, *how, model)
                prog.close()
                res = report.summarize(cfg, trace, points)
                tb = name.replace(SEED, "/seed")  # tb/<mode>/seed<s>: TensorBoard's runs
                report.write_tensorboard(run_dir / "tb", cfg, trace, points, tb)
                results.append(res)
                curves[name] = points
            say(report.mode_line(label, res))
    except BaseException as e:  # a fault, Ctrl-C, a worker whose node lacks the dataset, ...
        cfg = base
        # the modes that finished keep their results; none finished: summary.json says so
        # (explore94: the folder held config.yaml alone)
        extra["stopped_by"] = "interrupt" if isinstance(e, KeyboardInterrupt) else "fault"
        report.write_outputs(run_dir, cfg, results, curves, extra)
        what = "run(s)" if cfg.seeds > 1 else "mode(s)"
        if results:
            said = f"stopped: results of {len(results)} finished {what} in {run_dir}/results.md"
            say(said, note=True)
        else:
            said = f"stopped before any {what[:-3]} finished: {run_dir}/summary.json says so"
            say(said, note=True)
        if rest := stopped.rest_command(cfg, results, run_dir):
            folders = "new run folders" if "; " in rest else "a new run folder"
            say(f"  to run the rest, into {folders}: {rest}", note=True)
        if isinstance(e, KeyboardInterrupt):  # (the API returns its BenchResult: explore106)
            e.run_dir = run_dir  # type: ignore[attr-defined]
        raise
    finally:
        if needs_ray:
            runtime.shutdown()
    cfg = base
    extra["stopped_by"] = "done"
    report.write_outputs(run_dir, cfg, results, curves, extra)
    failed = extra.get("failed", {})
    said = "; ".join(f"mode {name}: {line}" for name, line in failed.items())
    if not results:  # every mode failed: no table, no plot to show
        raise BenchFailed(f"{said} (no mode finished; summary.json in {run_dir})", run_dir)
    say()
    if cfg.seeds > 1:
        say(f"over {cfg.seeds} seeds (mean ± standard deviation; each run: results.md):")
    say((tables.seeds_table if cfg.seeds > 1 else tables.markdown_table)(cfg, results))
    files = ", ".join(["results.md", "results.csv", *plot_names(cfg), "summary.json"])
    say(f"done in {time.time() - started:.0f}s: {run_dir}/ holds {files}")
    say(f"  tensorboard --logdir {quote(str(run_dir / 'tb'))}")
    if cfg.server.record:
        say(f"  record/ of the pushes: rltrain reapply {run_dir}")
    if failed:  # (exit code 1, after every other mode's results)
        raise BenchFailed(f"{said} (the other modes' results: {run_dir}/results.md)", run_dir)
    return 0
