"""`rltrain train`: the driver of actors, learners and the parameter server.

The driver only orchestrates: it keeps every worker (a3c/a2c) or actor and learner (impala)
busy with one call in flight, gathers the statistics they return, logs them, checks the stop
criteria and writes checkpoints. Rollouts go from actors to learners as Ray object
references, never through the driver.
"""

from __future__ import annotations

import collections
import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.nn.utils import parameters_to_vector

from envs import make_env
from rltrain.checkpoint import CheckpointError, latest_checkpoint, load_checkpoint, save_checkpoint
from rltrain.config import to_dict
from rltrain.progress import Progress
from rltrain.ps.config import ServerConfig
from rltrain.ps.server import ShardLayout
from rltrain.rl.actor import Actor
from rltrain.rl.config import TrainConfig
from rltrain.rl.learner import A3CWorker, Learner
from rltrain.rl.models import build_policy, build_qnet
from rltrain.rl.rollout import WorkStats
from rltrain.rl.tblog import TrainLogger
from rltrain.rundir import write_summary

WORK_CHUNK = 5  # rollouts per a3c/a2c call: long enough to amortise the call, short to steer
DQN_BLOCKS_PER_CALL = 4  # transition blocks per dqn actor call


@dataclass(frozen=True)
class EnvSpec:
    obs_shape: tuple[int, ...]
    obs_dtype: str
    num_actions: int
    frames_per_step: int
    protocol: dict[str, Any]


def probe_env(cfg: TrainConfig) -> EnvSpec:
    """Open one environment here to learn shapes and the protocol (and fail early on a bad id)."""
    env = make_env(cfg.env, seed=cfg.seed, num_envs=1)
    try:
        protocol = {**env.protocol, "num_envs": cfg.env.num_envs}  # per actor
        return EnvSpec(
            tuple(env.obs_shape),
            str(np.dtype(env.obs_dtype)),
            env.num_actions,
            int(protocol.get("frame_skip", 1)),
            protocol,
        )
    finally:
        env.close()


def initial_params(cfg: TrainConfig, spec: EnvSpec) -> torch.Tensor:
    torch.manual_seed(cfg.seed)
    build = build_qnet if cfg.algo.name == "dqn" else build_policy
    model = build(cfg.model.kind, spec.obs_shape, spec.num_actions, cfg.model.hidden)
    return parameters_to_vector(model.parameters()).detach().clone()


def check_fits(path: Path, state: dict[str, Any], params: torch.Tensor, cfg: TrainConfig) -> None:
    """A checkpoint must match the server layout and model of the config it resumes under."""
    sizes = [int(s["param"].numel()) for s in state["shards"]]
    expected = ShardLayout(params.numel(), cfg.server.shards).sizes
    if sizes != expected:
        raise CheckpointError(
            f"{path} holds {len(sizes)} shard(s) of {sum(sizes)} parameters; this config needs "
            f"{len(expected)} of {sum(expected)} (keep server.shards and the model as they were)"
        )


def server_rule(cfg: TrainConfig) -> ServerConfig:
    """a2c is A3C through the server's hard barrier; a3c and impala use the configured rule."""
    if cfg.algo.name == "a2c":
        return dataclasses.replace(cfg.server, rule="sync")
    return cfg.server


@dataclass
class Counters:
    """Everything the run has counted; saved in checkpoints so --resume continues them."""

    env_steps: int = 0
    episodes: int = 0
    updates: int = 0
    applied: int = 0
    dropped: int = 0
    rejected: int = 0
    staleness_sum: int = 0
    wall_seconds: float = 0.0
    best_mean_return: float | None = None
    recent_returns: list[float] = field(default_factory=list)

    def mean_return(self, window: int) -> float | None:
        r = self.recent_returns[-window:]
        return sum(r) / len(r) if r else None


class Trainer:
    """Runs one training session (a fresh run or a resumed one) to a stop criterion."""

    def __init__(
        self, cfg: TrainConfig, run_dir: Path, resume: bool = False, spec: EnvSpec | None = None
    ) -> None:
        self.cfg = cfg
        self.run_dir = run_dir
        self.spec = spec or probe_env(cfg)
        self.counters = Counters()
        self.resume_state: dict[str, Any] | None = None
        if resume:
            ckpt = latest_checkpoint(run_dir)
            if ckpt is not None:
                self.resume_state = load_checkpoint(ckpt)
                check_fits(ckpt, self.resume_state, initial_params(cfg, self.spec), cfg)
                self.counters = Counters(**self.resume_state["counters"])
        self.log = TrainLogger(
            run_dir / "tb",
            cfg,
            self.spec.protocol,
            self.spec.frames_per_step,
            self.counters.env_steps,
        )
        self.progress = Progress("[train]")
        self.stopped_by = ""
        self.mean_at_stop: float | None = None
        self.replay: Any = None  # dqn: the replay shards
        self.replay_bytes: int | None = None

    # --- the run ----------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        from rltrain import runtime

        cfg = self.cfg
        session_start = time.time()
        self.wall_base = self.counters.wall_seconds
        self.session_start = session_start
        impala = cfg.algo.name in ("impala", "dqn")  # with separate learners
        need = cfg.actors * cfg.runtime.worker_cpus + (cfg.learners if impala else 0)
        need += cfg.server.shards * cfg.runtime.server_cpus
        where = runtime.init_ray(cfg.runtime, need)
        # learners ask Ray for GPUs when the cluster has them (the driver itself may have none)
        gpu_learners = impala and cfg.learner_gpus > 0 and runtime.cluster_gpus() > 0
        print(f"runtime: {where}; learners on {'GPU' if gpu_learners else 'CPU'}")
        server = runtime.start_server(
            initial_params(cfg, self.spec),
            cfg.optimizer,
            server_rule(cfg),
            self._pushers(),
            cfg.runtime,
        )
        if self.resume_state is not None:
            server.load_state_dicts(self.resume_state["shards"])
        self.server = server
        self.last_ckpt = time.time()
        try:
            if cfg.algo.name == "impala":
                self._run_impala(runtime, server, gpu_learners)
            elif cfg.algo.name == "dqn":
                self._run_dqn(runtime, server, gpu_learners)
            else:
                self._run_a3c(runtime, server)
        except KeyboardInterrupt:
            self.stopped_by = "interrupt"
        self.counters.wall_seconds = self.wall_base + time.time() - session_start
        self._checkpoint()
        summary = self._summary()
        write_summary(self.run_dir, summary)
        self.progress.close(self._status())
        self.log.close()
        server.kill()
        runtime.shutdown()
        return summary

    def _pushers(self) -> int:
        return self.cfg.learners if self.cfg.algo.name in ("impala", "dqn") else self.cfg.actors

    def _run_a3c(self, runtime: Any, server: Any) -> None:
        """a3c: each worker is resubmitted as soon as it returns. a2c: in rounds, so that every
        worker runs the same number of barrier steps and none is left waiting at the end."""
        cfg = self.cfg
        workers = [
            runtime.Remote(A3CWorker, cfg, i, num_cpus=cfg.runtime.worker_cpus)
            for i in range(cfg.actors)
        ]
        lockstep = cfg.algo.name == "a2c"
        inflight = {w.call("work", server, WORK_CHUNK): w for w in workers}
        idle: list[Any] = []
        while inflight:
            for ref in runtime.wait_any(list(inflight), timeout=self.cfg.log_every_seconds):
                idle.append(inflight.pop(ref))
                self._absorb(runtime.get([ref])[0])
            if not self.stopped_by and (not lockstep or not inflight):
                inflight.update({w.call("work", server, WORK_CHUNK): w for w in idle})
                idle = []
            self._tick()
        for w in workers:
            w.kill()

    def _run_impala(self, runtime: Any, server: Any, gpu: bool) -> None:
        cfg = self.cfg
        actors = [
            runtime.Remote(Actor, cfg, i, num_cpus=cfg.runtime.worker_cpus)
            for i in range(cfg.actors)
        ]
        learner_gpus = cfg.learner_gpus if gpu else 0.0
        learners = [
            runtime.Remote(
                Learner,
                cfg,
                self.spec.obs_shape,
                self.spec.num_actions,
                gpu,
                i,
                num_cpus=1 if not gpu else 0.5,
                num_gpus=learner_gpus,
            )
            for i in range(cfg.learners)
        ]
        acting = {a.call("collect", server): a for a in actors}
        learning: dict[Any, Any] = {}
        idle_learners = list(learners)
        idle_actors: list[Any] = []
        ready: collections.deque = collections.deque()
        cap = 2 * cfg.learners * cfg.algo.learner_batch  # bounded queue: actors wait, not memory
        while acting or learning:
            for ref in runtime.wait_any([*acting, *learning], timeout=cfg.log_every_seconds):
                if ref in acting:
                    actor = acting.pop(ref)
                    ready.append(ref)
                    idle_actors.append(actor)
                else:
                    idle_learners.append(learning.pop(ref))
                    self._absorb(runtime.get([ref])[0])
            while not self.stopped_by and idle_learners and len(ready) >= cfg.algo.learner_batch:
                batch = [ready.popleft() for _ in range(cfg.algo.learner_batch)]
                learner = idle_learners.pop()
                learning[learner.call("learn", server, *batch)] = learner
            while not self.stopped_by and idle_actors and len(ready) + len(acting) < cap:
                actor = idle_actors.pop()
                acting[actor.call("collect", server)] = actor
            self._tick()
        for h in (*actors, *learners):
            h.kill()

    def _run_dqn(self, runtime: Any, server: Any, gpu: bool) -> None:
        """Gorila: actors fill the replay shards; learners start after learning_starts."""
        from rltrain.replay import ReplayMemory
        from rltrain.rl.dqn import DQNActor, DQNLearner, memory_args

        cfg, spec = self.cfg, self.spec
        args = [
            memory_args(cfg, spec.obs_shape, spec.obs_dtype, i) for i in range(cfg.replay.shards)
        ]
        replay = runtime.start_replay(ReplayMemory, args, cfg.actors + cfg.learners + 4)
        per_env_steps = self.counters.env_steps // (cfg.actors * cfg.env.num_envs)
        self.replay = replay
        actors = [
            runtime.Remote(DQNActor, cfg, i, per_env_steps, num_cpus=cfg.runtime.worker_cpus)
            for i in range(cfg.actors)
        ]
        learners = [
            runtime.Remote(
                DQNLearner,
                cfg,
                spec.obs_shape,
                spec.num_actions,
                gpu,
                i,
                num_cpus=0.5 if gpu else 1,
                num_gpus=cfg.learner_gpus if gpu else 0.0,
            )
            for i in range(cfg.learners)
        ]
        chunk, d = DQN_BLOCKS_PER_CALL, cfg.dqn
        calls = {a.call("collect", server, replay, chunk): a for a in actors}
        idle: list[Any] = []  # actors paused by the replay ratio
        learning_started = False
        while calls:
            for ref in runtime.wait_any(list(calls), timeout=cfg.log_every_seconds):
                handle = calls.pop(ref)
                self._absorb(runtime.get([ref])[0])
                if self.stopped_by:
                    continue
                if handle in learners:
                    calls[handle.call("learn", server, replay, d.updates_per_call)] = handle
                else:
                    idle.append(handle)
            ahead = (
                learning_started
                and d.env_steps_per_update > 0
                and self.counters.env_steps - d.learning_starts
                > d.env_steps_per_update * self.counters.updates
            )
            while idle and not ahead and not self.stopped_by:
                actor = idle.pop()
                calls[actor.call("collect", server, replay, chunk)] = actor
            ready = not learning_started and not self.stopped_by
            if ready and sum(replay.sizes()) >= d.learning_starts:
                learning_started = True
                for h in learners:
                    calls[h.call("learn", server, replay, d.updates_per_call)] = h
            self._tick()
        self.replay_bytes = replay.nbytes()
        for h in (*actors, *learners):
            h.kill()
        for h in replay.handles:
            runtime.kill(h)

    # --- bookkeeping ------------------------------------------------------------------------

    def _absorb(self, stats: WorkStats) -> None:
        c = self.counters
        c.env_steps += stats.env_steps
        c.episodes += len(stats.episode_returns)
        c.updates += stats.updates
        c.applied += stats.applied
        c.dropped += stats.dropped
        c.rejected += stats.rejected
        c.staleness_sum += sum(stats.staleness)
        c.recent_returns = (c.recent_returns + list(stats.episode_returns))[-1000:]
        mean = c.mean_return(self.cfg.stop.window)
        if mean is not None and len(c.recent_returns) >= self.cfg.stop.window:
            c.best_mean_return = (
                mean if c.best_mean_return is None else max(c.best_mean_return, mean)
            )
        self.log.absorb(stats, c.env_steps)
        self._check_stop()

    def _check_stop(self) -> None:
        if self.stopped_by:
            return
        s, c = self.cfg.stop, self.counters
        mean = c.mean_return(s.window)
        if (
            s.mean_return is not None
            and len(c.recent_returns) >= s.window
            and mean >= s.mean_return
        ):
            self.stopped_by = "mean_return"
        elif s.max_env_steps and c.env_steps >= s.max_env_steps:
            self.stopped_by = "max_env_steps"
        elif s.max_seconds and self.wall_base + self._elapsed() >= s.max_seconds:
            self.stopped_by = "max_seconds"
        if self.stopped_by:
            self.mean_at_stop = mean  # what the stop saw; work in flight still lands after it

    def _elapsed(self) -> float:
        return time.time() - self.session_start

    def _tick(self) -> None:
        self._check_stop()
        if self.log.due():
            size = sum(self.replay.sizes()) if self.replay is not None else None
            self.log.flush(self.counters.env_steps, self.server.stats().version, size)
        self.progress.update(self._fraction(), self._status())
        if time.time() - self.last_ckpt >= self.cfg.checkpoint.every_seconds:
            self.counters.wall_seconds = self.wall_base + self._elapsed()
            self._checkpoint()

    def _fraction(self) -> float:
        s, c = self.cfg.stop, self.counters
        parts = []
        if s.max_seconds:
            parts.append((self.wall_base + self._elapsed()) / s.max_seconds)
        if s.max_env_steps:
            parts.append(c.env_steps / s.max_env_steps)
        if s.mean_return is not None and c.mean_return(s.window) is not None:
            parts.append(
                max(0.0, c.mean_return(s.window) / s.mean_return) if s.mean_return > 0 else 0
            )
        return max(parts, default=0.0)

    def _status(self) -> str:
        c = self.counters
        mean = c.mean_return(self.cfg.stop.window)
        secs = self._elapsed()
        fps = (
            c.env_steps * self.spec.frames_per_step / max(1e-9, secs + self.wall_base)
            if secs
            else 0
        )
        ret = f"{mean:.1f}" if mean is not None else "-"
        stale = c.staleness_sum / c.applied if c.applied else 0.0
        return (
            f"{secs:5.0f}s  steps {c.env_steps:,}  {fps:,.0f} frames/s  return {ret} "
            f"({c.episodes} ep)  updates {c.updates:,}  staleness {stale:.2f}"
        )

    def _checkpoint(self) -> None:
        state = {
            "shards": self.server.state_dicts(),
            "counters": dataclasses.asdict(self.counters),
            "config": to_dict(self.cfg),
        }
        version = state["shards"][0]["version"]
        save_checkpoint(self.run_dir, int(version), state, self.cfg.checkpoint.keep)
        self.last_ckpt = time.time()

    def _summary(self) -> dict[str, Any]:
        c = self.counters
        final = c.mean_return(self.cfg.stop.window)
        mean = self.mean_at_stop if self.mean_at_stop is not None else final
        return {
            "command": "train",
            "env": self.cfg.env.id,
            "algo": self.cfg.algo.name,
            "stopped_by": self.stopped_by or "finished",
            "wall_seconds": round(c.wall_seconds, 2),
            "env_steps": c.env_steps,
            "env_frames": c.env_steps * self.spec.frames_per_step,
            "episodes": c.episodes,
            "mean_return": mean,  # over the last stop.window episodes when the run stopped
            "final_mean_return": final,  # the same, with the episodes of work then in flight
            "best_mean_return": c.best_mean_return,
            "updates": c.updates,
            "updates_applied": c.applied,
            "dropped": c.dropped,
            "rejected": c.rejected,
            "mean_staleness": round(c.staleness_sum / c.applied, 4) if c.applied else 0.0,
            "protocol": self.spec.protocol,
            **({"replay_bytes": self.replay_bytes} if self.replay_bytes is not None else {}),
        }


def train(cfg: TrainConfig, run_dir: Path, resume: bool = False) -> dict[str, Any]:
    return Trainer(cfg, run_dir, resume).run()
