"""The plan of dqn (Gorila) in the driver loop (:func:`rltrain.driver.drive`): actors fill
the replay shards; learners start once the memory holds ``dqn.learning_starts``
transitions, and actors pause while they are more than ``dqn.env_steps_per_update`` ahead
of the learners."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rltrain.driver import Done
from rltrain.faults import PeerLost, RunFailed
from rltrain.rl.config import waits_at_barrier
from rltrain.rl.run.plan_base import Early, Host, RLPlan

if TYPE_CHECKING:
    from rltrain.runtime.contract import Runtime

DQN_BLOCKS_PER_CALL = 4  # transition blocks per dqn actor call


class ReplayPlan(RLPlan):
    """dqn (Gorila): actors fill the replay shards; learners start after learning_starts."""

    @classmethod
    def spawn_early(cls, host: Host, runtime: Runtime) -> Early:
        from rltrain.rl.gorila import DQNActor

        cfg = host.cfg
        c = host.counters  # (an older checkpoint has no per-env count: this session's sizes)
        per_env_steps = int(c.per_env_steps) or c.env_steps // (cfg.actors * cfg.env.num_envs)
        return Early(host.spawn("actor", DQNActor, lambda i: (cfg, i, per_env_steps)))

    def start(self) -> None:
        from rltrain.replay import ReplayMemory
        from rltrain.rl.gorila import DQNLearner, memory_args

        cfg, host, spec = self.cfg, self.host, self.host.spec
        args = [memory_args(cfg, spec, i) for i in range(cfg.replay.shards)]
        self.replay = self.runtime.start_replay(ReplayMemory, args, cfg.actors + cfg.learners + 4)
        self.ctx.add("replay", [])  # replay shards are killed at the end, not restarted
        self.replay_ids = {a: i for i, a in enumerate(self.replay.actor_ids())}
        actors = self.early_processes().actors
        host.spawn(
            "learner", DQNLearner, lambda i: (cfg, spec.obs_shape, spec.num_actions, host.gpu, i)
        )
        self.idle: list[Any] = []  # actors paused by the replay ratio
        self.learning = False
        self.ratio = ReplayRatio(cfg.dqn.env_steps_per_update)
        for a in actors:
            self._give(a)

    def _give(self, r: Any) -> None:
        if r.role == "learner":
            self.pool.submit(r, "learn", self.server, self.replay, self.cfg.dqn.updates_per_call)
        else:
            self.pool.submit(r, "collect", self.server, self.replay, DQN_BLOCKS_PER_CALL)

    def _again(self, r: Any) -> None:
        if r.role == "learner":
            self._give(r)
        else:
            self.idle.append(r)

    def on_result(self, done: Done) -> None:
        self.host.absorb(done.value)
        if not self.host.stopped_by:
            self._again(done.remote)
        elif done.remote.role == "learner" and waits_at_barrier(self.cfg):
            self.guard.leave(done.remote.index)  # stopping: no barrier may wait for it now

    def on_fault(self, done: Done) -> None:
        if isinstance(done.error, PeerLost) and done.error.actor_id in self.replay_ids:
            raise RunFailed(
                f"replay shard {self.replay_ids[done.error.actor_id]} died; the replay memory "
                "is not checkpointed: continue with `rltrain train --resume RUN_DIR`"
            )
        learner = done.remote.role == "learner"
        if self.host.on_fault(done, pushes=learner) and (not learner or self.learning):
            self._again(done.remote)

    def refill(self) -> None:
        host, d = self.host, self.cfg.dqn
        if host.stopped_by:
            return
        c = host.counters
        ahead = self.learning and self.ratio.ahead(c.env_steps, c.updates)
        while self.idle and not ahead:
            self._give(self.idle.pop())
        if not self.learning and sum(self.replay.sizes()) >= d.learning_starts:
            self.learning = True
            self.ratio.start(c.env_steps, c.updates)
            for h in self.ctx.procs["learner"]:
                self._give(h)

    def finish(self) -> None:
        """After the loop: the memory's size for summary.json, and the shards stopped (none
        where a Ctrl-C came while they were being built: explore112, whose AttributeError
        left the run's processes up and the command hung)."""
        if self.replay is None:
            return
        self.replay_bytes = self.replay.nbytes()
        self.replay_kept = sum(self.replay.sizes())  # (the run's last point logs it after)
        for h in self.replay.handles:
            self.runtime.kill(h)


class ReplayRatio:
    """``dqn.env_steps_per_update``: actors are ahead while this session's env steps since
    learning started exceed ``per_update`` x its learner updates since then. Counted from that
    start, not the run's: a resume refills the memory first, and a ratio new to the run would
    otherwise hold its actors back until the learners caught up with every earlier session."""

    def __init__(self, per_update: float) -> None:
        self.per_update = per_update
        self.env_steps = self.updates = 0

    def start(self, env_steps: int, updates: int) -> None:
        """Learning starts now, at the run's counters ``env_steps`` and ``updates``."""
        self.env_steps, self.updates = env_steps, updates

    def ahead(self, env_steps: int, updates: int) -> bool:
        """Whether actors should pause, at the run's counters now (0 = never)."""
        steps = env_steps - self.env_steps
        return self.per_update > 0 and steps > self.per_update * (updates - self.updates)
