"""`rltrain train`: the driver of actors, learners and the parameter server.

The driver only orchestrates (rollouts go from actors to learners, not through it): one loop,
:func:`rltrain.driver.drive`, keeps each process busy with one call, the plan
(:mod:`rltrain.rl.run.plans`) saying what to submit; the :class:`Trainer` gathers the calls'
statistics, logs them, checks the stops, writes checkpoints and judges lost processes."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rltrain import signals
from rltrain.driver import drive
from rltrain.failure import failure_line, keep_traceback, your_error
from rltrain.faults import (
    ClusterLost,
    FaultCounters,
    FaultSchedule,
    PeerLost,
    ProcessLost,
    RunFailed,
    describe_events,
)
from rltrain.pauses import resume_all
from rltrain.progress import Progress, say
from rltrain.ps.rules import ASYNC
from rltrain.records import Role
from rltrain.rl.config import TrainConfig, server_settings
from rltrain.rl.device import warm_gpu
from rltrain.rl.env_spec import EnvSpec, initial_params, probe_env, start_notes
from rltrain.rl.learner_host import learner_process
from rltrain.rl.obs_slots import ObsSlots
from rltrain.rl.rollout import WorkStats
from rltrain.rl.run.counters import Counters, diverged_note
from rltrain.rl.run.periodic import PeriodicEval
from rltrain.rl.run.placement import computes_on_gpu_here, note_sizes, place, spawn_role
from rltrain.rl.run.plan_base import Early, RLPlan
from rltrain.rl.run.plans import obs_slots_for, plan_of
from rltrain.rl.run.resume import (
    finishing,
    first_restore_point,
    load_resume,
    save_session,
    session_seed,
)
from rltrain.rl.run.summary import SessionRecord, interrupted_note, train_summary
from rltrain.rl.run.tblog import TrainLogger, status_line, stop_fraction
from rltrain.rl.schedules import LRSender, schedule_progress
from rltrain.rundir import unlock, write_summary
from rltrain.runtime.config import chosen_backend
from rltrain.runtime.context import RunContext
from rltrain.runtime.contract import Runtime


class Trainer:
    """Runs one training session (a fresh run or a resumed one) to a stop criterion: the
    :class:`~rltrain.rl.run.plan_base.Host` of the algorithm's plan."""

    def __init__(
        self,
        cfg: TrainConfig,
        run_dir: Path,
        resume: bool = False,
        spec: EnvSpec | None = None,
        started: float | None = None,
        ray_up: tuple[str, float] | None = None,
    ) -> None:
        """``started``: when start-up began (the command's start, see ``process_start_time``);
        by default, now. ``startup_seconds`` in summary.json counts from it. ``ray_up``: Ray
        was started already (``launch.start_ray_then_probe``): its description and when."""
        self.record = SessionRecord(time.time() if started is None else started)
        self.ray_where = "" if ray_up is None else ray_up[0]
        if ray_up is not None:
            self.record.startup["runtime"] = round(ray_up[1] - self.record.started, 2)
        self.cfg, self.run_dir = cfg, run_dir
        if computes_on_gpu_here(cfg, chosen_backend(cfg.runtime)[0]):
            warm_gpu()
        self.spec = spec or probe_env(cfg)
        resumed = load_resume(run_dir, cfg, self.spec) if resume else None
        self.counters = resumed.counters if resumed else Counters()
        self.counters.new_session()  # (after the resume check: it judges the stopped run)
        self.faults, self.resumed = resumed.faults if resumed else FaultCounters(), resumed
        steps, spec = self.counters.env_steps, self.spec
        self.log = TrainLogger(run_dir / "tb", cfg, spec.protocol, spec.frames_per_step, steps)
        if resumed:  # (after the log's copy of the config: TensorBoard shows the run's seed)
            self.cfg = dataclasses.replace(cfg, seed=session_seed(cfg.seed, steps))
        self.progress = Progress("[train]")
        self.file_notes: list[str] = []  # start notes on the config file (launch.py's)
        self.run_lock: int | None = None  # the run folder's (launch.prepare_train takes it)
        self._ctx: RunContext | None = None  # (these: set as the session starts, _run, _start)
        self._evals: PeriodicEval | None = None
        self.plan: RLPlan | None = None
        self.gpu = False  # the learners compute on a GPU
        self.inference: str | None = None  # the batched policy's device (runtime.inference)
        self.shard_device, self.hosted = "cpu", False  # hosted: the learner holds the shards
        self.obs_slots: ObsSlots | None = None  # where the rollouts' frames wait (hosted)
        self.early: Early | None = None  # the actors, spawned before the server (_start)
        self.lr = LRSender()
        self.schedule = FaultSchedule(cfg.faults.events, None)  # armed once all are up
        self._placement_said = False
        self.wall_base = self.counters.wall_seconds
        self.session_start = self.last_ckpt = time.time()

    @property
    def stopped_by(self) -> str:
        return self.record.stopped_by

    @property
    def ctx(self) -> RunContext:
        """The session's processes, guard and fault handling (set as the session starts)."""
        assert self._ctx is not None, "the session has not started"
        return self._ctx

    @property
    def evals(self) -> PeriodicEval:
        """The evaluations during training (set as the session starts)."""
        assert self._evals is not None, "the session has not started"
        return self._evals

    def run(self) -> dict[str, Any]:
        try:
            return self._run()
        finally:
            unlock(self.run_lock)
            self.run_lock = None

    def _run(self) -> dict[str, Any]:
        from rltrain import runtime as runtimes

        runtime: Runtime = runtimes.backend(self.cfg.runtime)  # processes, threads or Ray
        self._ctx = RunContext(runtime, self.faults, self.progress.note)
        steps, note = self.counters.env_steps, self.progress.note
        self._evals = PeriodicEval(self.cfg, self.run_dir, runtime, steps, self.log, note)
        self.session_start = time.time()
        self.record.mark("trainer")  # imports, config, the env probe, the run folder
        try:
            self._start(runtime)
            if not self.stopped_by:  # (a run that is only finished: _finish_only)
                self.plan = plan_of(self.cfg.algo_spec.layout)(self, runtime)
                drive(self.plan.pool, self.plan)
                self.plan.finish()
        except KeyboardInterrupt:
            self.record.stop("interrupt", self.counters, self.cfg.episode_window)
            self.progress.note(interrupted_note(self.ctx.restorable, self.resumed is not None))
            if self.plan is not None:
                self.plan.settle()  # the updates in flight are on the server: count them
        except (RunFailed, ProcessLost, PeerLost) as e:
            self.record.stopped_by = "fault"
            self.record.failure = failure_line(e, self.run_dir, self.progress.note)
            self.progress.note(f"run failed: {self.record.failure}")
        except BaseException as e:  # a bug: no summary, but no processes or Ray left behind
            keep_traceback(self.run_dir, e, self.progress.note, self.cfg.imports)  # to report
            if (line := your_error(e, self.cfg.imports)) is None:
                self._release(runtime)
                raise
            self.record.stopped_by, self.record.failure = "fault", line  # restarts fail alike
        return self._finish(runtime)

    def _start_runtime(self, runtime: Runtime) -> str:
        modules = (*self.cfg.imports, *(w.partition(":")[0] for w in self.cfg.env.wrappers))
        where = self.ray_where or runtime.start(self.cfg.runtime, ship=modules)
        self.record.mark("runtime")  # Ray, the forkserver or threads up
        self.record.runtime = runtime.job_record()
        signals.install()  # again: ray.init replaces the SIGTERM handler
        return where

    def _finish_only(self, runtime: Runtime) -> None:
        """A run that met its stop but ended before its summary.json: its final evaluation."""
        assert self.resumed is not None
        met, path = self.resumed.unfinished, self.resumed.path
        why = "ended before its summary.json (killed in its final evaluation?): finishing it"
        self.progress.note(f"{path.name} met stop.{met}; the run {why}")
        self._start_runtime(runtime)  # (the evaluator's process)
        self.cfg, mean = finishing(self.cfg, self.resumed.state, met)  # (its stop's window)
        self.record.stop(met, self.counters, self.cfg.episode_window, mean)
        self.evals.final = (path, self.resumed.state)

    def _start(self, runtime: Runtime) -> None:
        if self.resumed is not None and self.resumed.unfinished:
            return self._finish_only(runtime)
        cfg, ctx = self.cfg, self.ctx
        where = self._start_runtime(runtime)
        name, why = chosen_backend(cfg.runtime)
        cpus = runtime.cluster_cpus()
        placed = place(cfg, name, cpus, runtime.cluster_gpus())
        self.gpu, self.inference = placed.gpu, placed.inference
        self.log.layout(cfg, placed.inference is not None)
        self.shard_device, cfg, processes = placed.shard_device, placed.cfg, placed.processes
        fitted = runtime.fit_cpus(cfg.runtime, processes, cfg.server.shards)
        say(f"runtime: {where}, chosen by {why}; {placed.describe()}")
        note_sizes(self.run_dir, placed, cpus, runtime.cluster_gpus())
        notes = placed.notes(cpus, cfg.runtime, fitted, self.cfg.actors != 0)
        for note in [*self.file_notes, *notes, *start_notes(cfg, self.spec, self.counters)]:
            self.progress.note(note)
        self.cfg = cfg = dataclasses.replace(cfg, runtime=fitted)
        if cfg.faults.events:
            say(f"faults to inject: {describe_events(cfg.faults.events)}")
        pushers = cfg.learners if cfg.algo_spec.split else cfg.actors  # a3c/a2c/ppo: workers
        self.hosted, host = placed.hosted, {}
        if placed.hosted:  # the learner's process holds the shards; the frames wait in slots
            self.obs_slots = slots = obs_slots_for(cfg, self.spec, self.progress.note)
            host["host"] = learner_process(self.spawn, cfg, self.spec, self.gpu, slots)
        # the actors build their envs (their slowest part: ale-py's) while the shards start
        self.early = plan_of(cfg.algo_spec.layout).spawn_early(self, runtime)
        ctx.server = runtime.start_server(
            initial_params(cfg, self.spec),
            cfg.optimizer,
            server_settings(cfg),
            pushers,
            cfg.runtime,
            cfg.faults.max_restarts,
            device=self.shard_device,
            **host,
        )
        ctx.guard = runtime.ServerGuard(ctx.server, self.faults, self.progress.note)
        first_restore_point(ctx, self.resumed)  # (a signal now stops after a final checkpoint)
        ctx.add("shard", runtime.server_processes(ctx.server))
        self.record.mark("server")  # shard processes up, the initial state read back
        self.evals.start()
        self._send_lr()
        self.last_ckpt = time.time()

    def _finish(self, runtime: Runtime) -> dict[str, Any]:
        """Final checkpoint, summary.json, and a clean stop of every process, however it ended."""
        self.counters.wall_seconds = self.wall_base + self._elapsed()
        resume_all()  # never leave a process stopped by an injected pause
        # planned faults the run ended before: said, lest a fault test pass on none injected
        if left := self.schedule.left():
            self.progress.note(f"not injected, the run ended first: {describe_events(left)}")
        try:
            summary = self._wrap_up()
        finally:  # whatever went wrong above, no process or Ray is left behind
            self.progress.close(self._status())
            self._release(runtime)
        return summary

    def _wrap_up(self) -> dict[str, Any]:
        if self.plan is not None:  # flush: the results of a round a fault cut short count
            self.plan.flush()
            self.record.replay_bytes = self.plan.replay_bytes
        if self.ctx.restorable:  # (not before: the shards may not hold the run's state yet)
            try:
                self.evals.final = self._checkpoint()  # scored unless an eval saw it
            except (ProcessLost, PeerLost, RunFailed) as e:  # (a lost cluster's was said)
                why = "the shards went with the cluster" if isinstance(e, ClusterLost) else e
                self.progress.note(f"no final checkpoint ({why})")
            else:  # the last point: a run shorter than log_every_seconds still has one
                with contextlib.suppress(ProcessLost, PeerLost, RunFailed):
                    self.ctx.shard_guard().poll()
                    self._log_point()
        self.evals.finish(wait=self.stopped_by not in ("interrupt", "fault", "diverged"))
        args = (self.cfg, self.spec, self.counters, self.faults, self.record, self.ctx.procs)
        summary = train_summary(*args, self.evals.summary())
        write_summary(self.run_dir, summary, self.progress.note)  # (said where it cannot be)
        return summary

    def _release(self, runtime: Runtime) -> None:
        try:
            if self.plan is not None:
                self.plan.close()
            self.evals.close()
            self.log.close()
        finally:  # whatever failed above (explore89: a run folder moved away), none stays up
            self.ctx.kill_all()
            runtime.shutdown()

    def spawn(
        self, role: Role, cls: type, args_of: Callable[[int], tuple[Any, ...]], **options: Any
    ) -> list[Any]:
        """Restartable processes of one role (:func:`~rltrain.rl.run.placement.spawn_role`)."""
        return spawn_role(self.ctx, self.cfg, self.gpu, role, cls, args_of, **options)

    def _arm_faults(self) -> None:
        """Start the clock of ``faults.events`` once every process is up (start-up is not
        training time); checked without waiting, on every tick."""
        if self.schedule.plan and self.schedule.t0 is None and self.ctx.all_up():
            self.schedule.arm(time.time())

    def _watch_placement(self) -> None:
        """Once, 30 s into the session, if Ray has not started every process: say which and
        why (one that fits on no node would wait in silence while the others work)."""
        if self._placement_said or time.time() - self.session_start < 30:
            return
        self._placement_said = True
        waiting = [r for r in self.ctx.everyone() if not r.is_up()]
        if waiting:
            self.progress.note(self.ctx.runtime.placement_note(waiting))

    def on_fault(self, d: Any, pushes: bool) -> bool:
        """Count and report a lost or revived process; True when it should get work now.
        ``pushes``: the process pushes gradients, so a barrier rule may be waiting for it."""
        rule = server_settings(self.cfg).update_rule if pushes else ASYNC
        verdict = self.ctx.respond(d, rule, self.cfg.faults.on_worker_loss)
        self.log.faults(self.faults, self.counters.env_steps)
        if verdict == "gone":
            self.ctx.forget(d.remote, d.error)
            if d.remote.role in ("actor", "worker"):  # (an a3c/a2c/ppo worker acts too)
                self.counters.actor_gone(d.remote.index)
        if self.stopped_by and pushes and verdict != "gone":
            self.ctx.shard_guard().leave(d.remote.index)  # stopping: no barrier may wait for it now
            return False
        return verdict == "work" and not self.stopped_by

    def wait_s(self) -> float:
        poll = self.ctx.guard.POLL_S if self.ctx.guard is not None else 1.0
        return max(0.0, min(self.cfg.log_every_seconds, self.schedule.next_in(), poll))

    # --- bookkeeping ------------------------------------------------------------------------

    def absorb(self, stats: WorkStats) -> None:
        rec = self.record
        if stats.first_step_at is not None and "first_step" not in rec.startup:
            rec.startup["first_step"] = round(stats.first_step_at - rec.started, 2)
        if rec.startup_seconds is None:
            rec.startup_seconds = rec.mark("first_result")
        c = self.counters
        mean = c.add(stats, self.cfg.episode_window, (self.cfg.actors, self.cfg.env.num_envs))
        self.log.absorb(stats, c.env_steps, mean)
        self.log.round(c.round_settled, c.env_steps)
        self._check_stop()

    def _check_stop(self) -> None:
        if self.stopped_by:
            return
        s, c, rec = self.cfg.stop, self.counters, self.record
        rec.stopped_by = c.stop_met(s, self.wall_base + self._elapsed(), self.cfg.episode_window)
        target = s.eval_mean_return
        if not rec.stopped_by and target is not None and self.evals.reached(target):
            rec.stopped_by = "eval_mean_return"
        if rec.stopped_by == "diverged":
            rec.failure = diverged_note(c, self.ctx.server.stats().last_reject)
        if rec.stopped_by:
            rec.stop(rec.stopped_by, c, self.cfg.episode_window)

    def _elapsed(self) -> float:  # (this session's seconds)
        return time.time() - self.session_start

    def schedule_at(self) -> float:
        """Where the schedules stand: the share of their horizon's env steps done."""
        return schedule_progress(self.cfg, self.counters.env_steps)

    def _send_lr(self) -> None:
        self.lr.send(self.cfg, self.ctx.server, self.faults.shard_restores, self.schedule_at())

    def tick(self) -> None:
        self._send_lr()
        self._check_stop()
        self._arm_faults()
        self._watch_placement()
        for action in self.schedule.due():
            self.ctx.inject(action)
        self.ctx.shard_guard().poll()
        if self.log.due():
            self._log_point()
        self.progress.update(self._fraction(), self._status())
        evaluate = not self.stopped_by and self.evals.due(self.counters.env_steps)
        if evaluate or time.time() - self.last_ckpt >= self.cfg.checkpoint.every_seconds:
            self.counters.wall_seconds = self.wall_base + self._elapsed()
            try:
                path, state = self._checkpoint()
            except (ProcessLost, PeerLost):  # a shard went down just now: restore, then retry
                self.ctx.shard_guard().check()
            else:
                if evaluate:
                    self.evals.submit(path, state, self.counters)
        self.evals.poll()

    def _log_point(self) -> None:
        """One TensorBoard point of everything logged over time (the server's version, the
        replay's size, bytes, the learning rate, the faults)."""
        size = self.plan.replay_size() if self.plan is not None else None
        with contextlib.suppress(ProcessLost, PeerLost):  # a lost shard: next time
            st = self.ctx.server.stats()
            self.record.net_bytes = (st.bytes_pushed, st.bytes_pulled)
        seen = self.ctx.shard_guard().last_seen
        self.log.rates = not self.stopped_by  # after any stop the work in flight lands at once
        self.log.flush(
            self.counters.env_steps, seen, size, self.record.net_bytes, self.lr.lr(self.cfg, seen)
        )
        self.log.faults(self.faults, self.counters.env_steps)

    def _fraction(self) -> float:
        seconds, window = self.wall_base + self._elapsed(), self.cfg.episode_window
        return stop_fraction(self.cfg.stop, self.counters, seconds, window)

    def _status(self) -> str:
        c, fps, secs = self.counters, self.spec.frames_per_step, self._elapsed()
        return status_line(c, self.cfg.episode_window, fps, secs, self.wall_base, self.log.top)

    def _checkpoint(self) -> tuple[Path, dict[str, Any]]:
        c, acts = self.counters, self.spec.actions  # (and the stop once it came: self.record)
        saved = save_session(self.ctx, self.run_dir, self.cfg, c, self.faults, self.record, acts)
        self.last_ckpt = time.time()
        return saved
