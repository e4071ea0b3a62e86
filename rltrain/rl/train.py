"""`rltrain train`: the driver of actors, learners and the parameter server.

The driver only orchestrates. The one loop of :func:`rltrain.driver.drive` keeps every
process busy with one call in flight, with the algorithm's plan (:mod:`rltrain.rl.plans`)
saying what to submit; the :class:`Trainer` gathers the statistics the calls return, logs
them, checks the stop criteria, writes checkpoints and decides what a lost process means.
Rollouts go from actors to learners as Ray object references, never through the driver (the
process runtime copies them out of shared memory as they arrive; its learners are threads).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rltrain import signals
from rltrain.checkpoint import save_checkpoint
from rltrain.config import to_dict
from rltrain.driver import drive
from rltrain.faults import (
    FaultAction,
    FaultCounters,
    FaultSchedule,
    PeerLost,
    ProcessLost,
    RestorePoint,
    RunFailed,
    describe_events,
    resume_all,
)
from rltrain.progress import Progress
from rltrain.records import Role
from rltrain.rl.config import (
    SPLIT_ALGOS,
    TrainConfig,
    describe_sizes,
    gpu_learners,
    learner_cpus,
    linear,
    schedule_progress,
    server_rule,
    sized,
)
from rltrain.rl.learner import warm_gpu
from rltrain.rl.periodic import PeriodicEval
from rltrain.rl.plans import PLANS
from rltrain.rl.rollout import WorkStats
from rltrain.rl.setup import (
    Counters,
    EnvSpec,
    inference_device,
    initial_params,
    load_resume,
    probe_env,
    session_seed,
    shard_device,
)
from rltrain.rl.summary import train_summary
from rltrain.rl.tblog import TrainLogger, status_line, stop_fraction
from rltrain.rundir import unlock, write_summary
from rltrain.runtime.config import chosen_backend


class Trainer:
    """Runs one training session (a fresh run or a resumed one) to a stop criterion."""

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
        self.started = time.time() if started is None else started
        self.startup_seconds: float | None = None  # until the first result of any process
        self.startup: dict[str, float] = {}  # seconds from `started` at each start-up mark
        self.ray_where = ""
        if ray_up is not None:
            self.ray_where = ray_up[0]
            self.startup["ray"] = round(ray_up[1] - self.started, 2)
        self.cfg = cfg
        self.run_dir = run_dir
        gpu_here = cfg.learner_gpus > 0 and chosen_backend(cfg.runtime)[0] != "ray"
        if cfg.algo.name in SPLIT_ALGOS and gpu_here:  # (Ray's learners: processes of Ray's)
            warm_gpu()
        self.spec = spec or probe_env(cfg)
        resumed = load_resume(run_dir, cfg, self.spec) if resume else None
        self.counters = resumed.counters if resumed else Counters()
        self.faults = resumed.faults if resumed else FaultCounters()
        self.resume_state = resumed.state if resumed else None
        self.resume_path = resumed.path if resumed else None
        if resumed and resumed.changes:
            print(f"resumed with config changes: {'; '.join(resumed.changes)}")
        self.log = TrainLogger(
            run_dir / "tb",
            cfg,
            self.spec.protocol,
            self.spec.frames_per_step,
            self.counters.env_steps,
        )
        if resumed:  # (after the log's copy of the config: TensorBoard shows the run's seed)
            self.cfg = dataclasses.replace(
                cfg, seed=session_seed(cfg.seed, self.counters.env_steps)
            )
        self.progress = Progress("[train]")
        self.stopped_by = ""
        self.failure = ""  # why a run stopped_by "fault"
        self.mean_at_stop: float | None = None
        self.replay: Any = None  # dqn: the replay shards
        self.replay_bytes: int | None = None
        self.run_lock: int | None = None  # the run folder's (launch.prepare_train takes it)

    # --- the run ----------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        try:
            return self._run()
        finally:
            unlock(self.run_lock)
            self.run_lock = None

    def _run(self) -> dict[str, Any]:
        from rltrain import runtime as ray_runtime

        runtime = self.rt = ray_runtime.backend(self.cfg.runtime)  # Ray, processes or threads
        cfg = self.cfg
        steps = self.counters.env_steps
        self.evals = PeriodicEval(cfg, self.run_dir, runtime, steps, self.log, self.progress.note)
        session_start = time.time()
        self.wall_base = self.counters.wall_seconds
        self.session_start = session_start
        self.server: Any = None
        self.guard: Any = None
        self.net_bytes = (0, 0)  # bytes pushed to and pulled from the shards, last seen
        self.procs: dict[str, list[Any]] = {}
        self.schedule = FaultSchedule((), session_start)  # armed once every process is up
        self._arming = bool(cfg.faults.events)
        self._placement_said = False
        self.ray: dict[str, Any] = {}  # summary.json's "ray": the job and the nodes
        self._mark("trainer")  # imports, config, the env probe, the run folder
        try:
            self._start(runtime)
            plan = PLANS[self.cfg.algo.name](self, runtime)
            drive(plan.pool, plan)
            plan.finish()
        except KeyboardInterrupt:
            self.stopped_by = "interrupt"
            self.progress.note("interrupted: writing a final checkpoint and summary.json")
        except (RunFailed, ProcessLost, PeerLost) as e:
            self.stopped_by = "fault"
            self.failure = str(e)
            self.progress.note(f"run failed: {e}")
        except BaseException:  # a bug: no summary, but no processes or Ray left behind
            self._release(runtime)
            raise
        return self._finish(runtime)

    def _start(self, runtime: Any) -> None:
        cfg = self.cfg
        split = cfg.algo.name in SPLIT_ALGOS  # with separate learners
        modules = (*cfg.env.imports, *(w.partition(":")[0] for w in cfg.env.wrappers))
        where = self.ray_where or runtime.init_ray(cfg.runtime, ship=modules)
        self._mark("ray")
        signals.install()  # again: ray.init replaces the SIGTERM handler
        name, why = chosen_backend(cfg.runtime)
        where = f"{where}, chosen by {why}"
        self.gpu = gpu_learners(cfg, runtime.cluster_gpus(), name == "ray")
        cpus = runtime.cluster_cpus()
        self.inference = inference_device(cfg, self.gpu, name)
        cfg = sized(cfg, cpus, self.gpu, batched=self.inference is not None)
        processes = cfg.actors + (cfg.learners * learner_cpus(self.gpu) if split else 0)
        fitted = runtime.fit_cpus(cfg.runtime, processes, cfg.server.shards)
        self.shard_device = shard_device(cfg, self.gpu, name)
        where += f"; {describe_sizes(cfg)}; learners on {'GPU' if self.gpu else 'CPU'}"
        where += ", shards on GPU" if self.shard_device != "cpu" else ""
        if self.inference is not None:
            on = "GPU" if self.inference != "cpu" else "CPU"
            where += f", the actors' policy batched on the {on} (runtime.inference)"
        print(f"runtime: {where}")
        self.ray = runtime.ray_record()
        if fitted.worker_cpus < cfg.runtime.worker_cpus:
            self.progress.note(
                f"{processes:g} processes on {cpus:.0f} CPUs: each reserves "
                f"{fitted.worker_cpus:.2f} CPU and they share the cores (actors: auto sizes "
                "the run to the CPUs)"
            )
        self.cfg = cfg = dataclasses.replace(cfg, runtime=fitted)
        if cfg.faults.events:
            print(f"faults to inject: {describe_events(cfg.faults.events)}")
        self.server = runtime.start_server(
            initial_params(cfg, self.spec),
            cfg.optimizer,
            server_rule(cfg),
            self._pushers(),
            cfg.runtime,
            cfg.faults.max_restarts,
            device=self.shard_device,
        )
        label = "the initial parameters"
        if self.resume_state is not None:
            self.server.load_state_dicts(self.resume_state["shards"])
            label = f"checkpoint {self.resume_path.name}"
        self.guard = runtime.ServerGuard(self.server, self.faults, self.progress.note)
        self.guard.remember(
            RestorePoint(self.server.stats().version, self.server.state_dicts(), label)
        )
        self.procs["shard"] = runtime.server_processes(self.server)
        self._mark("server")  # shard processes up, the initial state read back
        self.evals.start()
        self.lr_factor: float | None = None  # sent next: a resumed run continues its schedule
        self.lr_restores = self.faults.shard_restores
        self._schedule_lr()
        self.last_ckpt = time.time()

    def _finish(self, runtime: Any) -> dict[str, Any]:
        """Final checkpoint, summary.json, and a clean stop of every process (or Ray), however
        the run ended."""
        self.counters.wall_seconds = self.wall_base + self._elapsed()
        resume_all()  # never leave a process stopped by an injected pause
        if self.server is not None:
            try:
                self._checkpoint()
            except (ProcessLost, PeerLost, RunFailed) as e:
                self.progress.note(f"no final checkpoint (the server is not whole: {e})")
            else:  # the last point: a run shorter than log_every_seconds still has one
                with contextlib.suppress(ProcessLost, PeerLost, RunFailed):
                    self.guard.poll()
                    self._log_point()
        self.evals.finish(wait=self.stopped_by not in ("interrupt", "fault"))
        summary = train_summary(self)
        write_summary(self.run_dir, summary)
        self.progress.close(self._status())
        self._release(runtime)
        return summary

    def _release(self, runtime: Any) -> None:
        self.evals.close()
        self.log.close()
        for r in (r for remotes in self.procs.values() for r in remotes):
            with contextlib.suppress(Exception):
                r.kill()
        runtime.shutdown()

    def _pushers(self) -> int:
        return self.cfg.learners if self.cfg.algo.name in SPLIT_ALGOS else self.cfg.actors

    def remotes(self, role: Role, cls: type, args_of: Callable[[int], tuple]) -> list[Any]:
        """Restartable processes of one role (actor or learner; a3c/a2c/ppo workers count as
        actors), process i built with ``args_of(i)``; learners take a GPU when there is one."""
        runtime = self.rt
        cfg = self.cfg
        learner = role == "learner"
        cpus = cfg.runtime.worker_cpus * (learner_cpus(self.gpu) if learner else 1)
        gpus = cfg.learner_gpus if learner and self.gpu else 0.0
        remotes = [
            runtime.Remote(
                cls,
                *args_of(i),
                role=role,
                index=i,
                num_cpus=cpus,
                num_gpus=gpus,
                max_restarts=cfg.faults.max_restarts,
            )
            for i in range(cfg.learners if learner else cfg.actors)
        ]
        self.procs[role] = remotes
        return remotes

    def _arm_faults(self) -> None:
        """Start the clock of ``faults.events`` once every process is up (start-up is not
        training time); checked without waiting, on every tick."""
        if not self._arming:
            return
        if all(r.is_up() for remotes in self.procs.values() for r in remotes):
            self.schedule = FaultSchedule(self.cfg.faults.events, time.time())
            self._arming = False

    def _watch_placement(self) -> None:
        """Once, 30 s into the session, if Ray has not started every process: say which and
        why (one that fits on no node would wait in silence while the others work)."""
        if self._placement_said:
            return
        if time.time() - self.session_start < 30:
            return
        self._placement_said = True
        waiting = [r for rs in self.procs.values() for r in rs if not r.is_up()]
        if waiting:
            self.progress.note(self.rt.placement_note(waiting))

    # --- faults -----------------------------------------------------------------------------

    def on_fault(self, d: Any, pushes: bool) -> bool:
        """Count and report a lost or revived process; True when it should get work now.

        ``pushes``: the process pushes gradients, so a barrier rule may be waiting for it.
        """
        r, cfg = d.remote, self.cfg
        rule = server_rule(cfg).rule if pushes else "async"
        verdict = self.rt.respond(
            d,
            rule,
            cfg.faults.on_worker_loss,
            self.server,
            self.guard,
            self.faults,
            self.progress.note,
        )
        self.log.faults(self.faults, self.counters.env_steps)
        if self.stopped_by and pushes and verdict != "gone":
            self.guard.leave(r.index)  # stopping: no barrier may wait for it now
            return False
        if verdict == "gone":
            self.procs[r.role] = [x for x in self.procs[r.role] if x is not r]
            if not self.procs[r.role]:
                raise RunFailed(f"every {r.role} died and none will restart")
        return verdict == "work" and not self.stopped_by

    def _inject(self, action: FaultAction) -> None:
        self.rt.inject(action, self.procs, self.faults, self.progress.note)

    def _mark(self, name: str) -> float:
        """Seconds since start-up began, kept the first time ``name`` is reached."""
        return self.startup.setdefault(name, round(time.time() - self.started, 2))

    def wait_s(self) -> float:
        poll = self.guard.POLL_S if self.guard is not None else 1.0
        return max(0.0, min(self.cfg.log_every_seconds, self.schedule.next_in(), poll))

    # --- bookkeeping ------------------------------------------------------------------------

    def absorb(self, stats: WorkStats) -> None:
        if stats.first_step_at is not None and "first_step" not in self.startup:
            self.startup["first_step"] = round(stats.first_step_at - self.started, 2)
        if self.startup_seconds is None:
            self.startup_seconds = self._mark("first_result")
        self.counters.add(stats, self.cfg.stop.window)
        self.log.absorb(stats, self.counters.env_steps)
        self._check_stop()

    def _check_stop(self) -> None:
        if self.stopped_by:
            return
        s, c = self.cfg.stop, self.counters
        self.stopped_by = c.stop_met(s, self.wall_base + self._elapsed())
        target = s.eval_mean_return
        if not self.stopped_by and target is not None and self.evals.reached(target):
            self.stopped_by = "eval_mean_return"
        if self.stopped_by:  # what the stop saw; work in flight still lands after it
            self.mean_at_stop = c.mean_return(s.window)

    def _elapsed(self) -> float:
        return time.time() - self.session_start

    def schedule_at(self) -> float:
        """Where the schedules stand: the share of their horizon's env steps done."""
        return schedule_progress(self.cfg, self.counters.env_steps)

    def _schedule_lr(self) -> None:
        """Tell the server the learning-rate schedule's factor when it moved by 1% or more,
        and each time the shards loaded a state (at the start, from a checkpoint or a
        restore point): they then hold the factor saved with it, which the schedule now in
        force may not share (a run resumed with another schedule, or none)."""
        end = self.cfg.schedule.lr_end
        factor = 1.0 if end is None else linear(1.0, end, self.schedule_at())
        last, restores = self.lr_factor, self.faults.shard_restores
        loaded = last is None or restores != self.lr_restores
        if loaded or abs(factor - last) >= 0.01 or (factor == end and last != end):
            self.server.set_lr_factor(factor)
            self.lr_factor, self.lr_restores = factor, restores

    def tick(self) -> None:
        self._schedule_lr()
        self._check_stop()
        self._arm_faults()
        self._watch_placement()
        for action in self.schedule.due():
            self._inject(action)
        self.guard.poll()
        if self.log.due():
            self._log_point()
        self.progress.update(self._fraction(), self._status())
        evaluate = not self.stopped_by and self.evals.due(self.counters.env_steps)
        if evaluate or time.time() - self.last_ckpt >= self.cfg.checkpoint.every_seconds:
            self.counters.wall_seconds = self.wall_base + self._elapsed()
            try:
                path, state = self._checkpoint()
            except (ProcessLost, PeerLost):  # a shard went down just now: restore, then retry
                self.guard.check()
            else:
                if evaluate:
                    self.evals.submit(path, state, self.counters)
        self.evals.poll()

    def _log_point(self) -> None:
        """One TensorBoard point of everything logged over time (the server's version, the
        replay's size, bytes, the learning rate, the faults)."""
        size = sum(self.replay.sizes()) if self.replay is not None else None
        with contextlib.suppress(ProcessLost, PeerLost):  # a lost shard: next time
            st = self.server.stats()
            self.net_bytes = (st.bytes_pushed, st.bytes_pulled)
        lr = self.cfg.optimizer.lr * (self.lr_factor or 1.0)
        self.log.flush(self.counters.env_steps, self.guard.last_seen, size, self.net_bytes, lr)
        self.log.faults(self.faults, self.counters.env_steps)

    def _fraction(self) -> float:
        return stop_fraction(self.cfg.stop, self.counters, self.wall_base + self._elapsed())

    def _status(self) -> str:
        secs = self._elapsed()
        return status_line(
            self.counters,
            self.cfg.stop.window,
            self.spec.frames_per_step,
            secs,
            self.wall_base,
            self.log.top,
        )

    def _checkpoint(self) -> tuple[Path, dict[str, Any]]:
        if self.guard is not None:  # never checkpoint a shard restarted but not yet restored
            self.guard.check()
        state = {
            "shards": self.server.state_dicts(),
            "counters": dataclasses.asdict(self.counters),
            "faults": dataclasses.asdict(self.faults),
            "config": to_dict(self.cfg),
        }
        version = int(state["shards"][0]["version"])
        path = save_checkpoint(self.run_dir, version, state, self.cfg.checkpoint.keep)
        if self.guard is not None:
            self.guard.remember(RestorePoint(version, state["shards"], f"checkpoint {path.name}"))
        self.last_ckpt = time.time()
        return path, state
