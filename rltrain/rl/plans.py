"""What each algorithm contributes to the driver loop (:func:`rltrain.driver.drive`).

* :class:`WorkerPlan` (a3c, a2c, ppo): workers that act and learn; a3c resubmits each worker
  as soon as it returns, a2c/ppo in rounds, so that every worker runs the same number of
  barrier steps and none is left waiting at the end.
* :class:`ActorLearnerPlan` (impala, appo): acting-only actors whose rollouts (Ray object
  references, never fetched by the driver; on the process runtime, copies out of shared
  memory) are batched to the next free learner; a bounded
  queue makes actors wait rather than memory grow.
* :class:`ReplayPlan` (dqn, Gorila): actors fill the replay shards; learners start once the
  memory holds ``dqn.learning_starts`` transitions, and actors pause while they are more than
  ``dqn.env_steps_per_update`` ahead of the learners.

The trainer (:class:`rltrain.rl.train.Trainer`, a plan's :class:`Host`) owns the bookkeeping
every plan shares: the counters, the stop criteria, logs, checkpoints and what a lost process means.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from rltrain.faults import PeerLost, RunFailed
from rltrain.records import Role
from rltrain.rl.actor import Actor
from rltrain.rl.config import TrainConfig, waits_at_barrier
from rltrain.rl.inference import PolicyServer
from rltrain.rl.learner import Learner
from rltrain.rl.rollout import Rollout, WorkStats
from rltrain.rl.setup import Counters, EnvSpec
from rltrain.rl.worker import Worker

if TYPE_CHECKING:
    from rltrain.runtime.context import RunContext
    from rltrain.runtime.contract import Runtime

WORK_CHUNK = 5  # rollouts per a3c/a2c call: long enough to amortise the call, short to steer
DQN_BLOCKS_PER_CALL = 4  # transition blocks per dqn actor call


class Host(Protocol):
    """What a plan asks of the session that runs it (:class:`rltrain.rl.train.Trainer`)."""

    cfg: TrainConfig
    spec: EnvSpec
    counters: Counters
    gpu: bool  # the learners compute on a GPU
    inference: str | None  # runtime.inference: the batched policy's device, None: none

    @property
    def ctx(self) -> RunContext:
        """The session's processes, guard, fault counters and notes."""

    @property
    def stopped_by(self) -> str:
        """Why the run stops ("" while it runs)."""

    def spawn(self, role: Role, cls: type, args_of: Callable[[int], tuple]) -> list[Any]:
        """Restartable processes of one role, process i built with ``args_of(i)``."""

    def absorb(self, stats: WorkStats) -> None: ...

    def on_fault(self, done: Any, pushes: bool) -> bool:
        """Count and report a lost or revived process; True when it should get work now."""

    def wait_s(self) -> float: ...

    def tick(self) -> None: ...

    def schedule_at(self) -> float: ...


class RLPlan:
    """The hooks every RL plan shares with its host: when to stop, wait and tick."""

    def __init__(self, host: Host, runtime: Runtime) -> None:
        self.host = host
        self.ctx = host.ctx
        self.cfg = host.cfg
        self.server = host.ctx.server
        self.runtime = runtime
        self.pool = runtime.Pool()
        self.replay: Any = None  # dqn: the replay shards
        self.replay_bytes: int | None = None  # dqn: their size at the end, for summary.json
        self.left_starting = False  # stopped while processes were still starting: said once

    def keep_going(self) -> bool:
        """Run until stopped; then until the calls in flight have returned, but not those of
        processes not up: a constructor that never ends, or a process Ray cannot place, has
        nothing to return, and a stop (stop.max_seconds, a fault) must not wait for it."""
        if not self.host.stopped_by:
            return bool(self.pool)
        starting = [r for r, _, _ in self.pool.calls.values() if not r.is_up()]
        if starting and not self.left_starting:  # nor may a barrier the others wait at
            self.left_starting = True
            note = self.runtime.placement_note(starting)
            self.ctx.say(f"the stop does not wait for processes not up ({note})")
            for r in starting:
                if self.pushes(r) and waits_at_barrier(self.cfg):
                    self.ctx.guard.leave(r.index)
        return len(starting) < len(self.pool.calls)

    def pushes(self, remote: Any) -> bool:
        """Whether ``remote`` pushes gradients (a barrier rule waits for its pushes)."""
        return remote.role == "learner"

    def wait_s(self) -> float:
        return self.host.wait_s()

    def tick(self) -> None:
        self.host.tick()

    def finish(self) -> None:
        """After the loop (a normal end, not a failure)."""


class WorkerPlan(RLPlan):
    """a3c, a2c, ppo: one kind of process, which acts and learns."""

    def start(self) -> None:
        cfg = self.cfg
        workers = self.host.spawn("actor", Worker, lambda i: (cfg, i))
        self.lockstep = waits_at_barrier(cfg)
        # a ppo rollout is epochs x minibatches server steps already: one per call
        self.chunk = 1 if cfg.algo_spec.clipped else WORK_CHUNK
        self.idle: list[Any] = []
        for w in workers:
            self._give(w)

    def _give(self, worker: Any) -> None:
        self.pool.submit(worker, "work", self.server, self.chunk, self.host.schedule_at())

    def pushes(self, remote: Any) -> bool:
        return True  # a worker acts and learns

    def on_result(self, done: Any) -> None:
        self.host.absorb(done.value)
        self.idle.append(done.remote)

    def on_fault(self, done: Any) -> None:
        if not self.host.on_fault(done, pushes=True):
            return
        if self.lockstep and not self.pool.calls:
            self.idle.append(done.remote)  # between rounds: it starts with the next one
        else:  # a round (a barrier) may be waiting for it: it joins at once
            self._give(done.remote)

    def refill(self) -> None:
        if self.host.stopped_by or (self.lockstep and self.pool.calls):
            return
        for w in self.idle:
            self._give(w)
        self.idle = []


@dataclass
class RolloutCap:
    """How many rollouts may be queued or being made: a bound on the actors' policy lag.

    It starts at two batches per learner: on few cores the learner is the bottleneck, and
    actors beyond that would only lengthen the queue (older rollouts, the same learning
    rate). At each look (each turn of the driver's loop that had results) it grows by one
    while a learner waits for a batch (the actors are the bottleneck, e.g. a GPU learner on a
    many-core box: every actor can act), and shrinks by one while more than one batch per
    learner is queued, between ``low`` and ``high`` (all actors acting with a batch per
    learner queued)."""

    batches: int  # rollouts the learners take at once
    high: int
    value: int = field(init=False)

    def __post_init__(self) -> None:
        self.value = self.low

    @property
    def low(self) -> int:
        return 2 * self.batches

    @classmethod
    def of(cls, learners: int, learner_batch: int, actors: int) -> RolloutCap:
        batches = learners * learner_batch
        return cls(batches, max(2 * batches, actors + batches))

    def update(self, starving: bool, queued: int, batches: int | None = None) -> int:
        """The cap after one look at the learners: ``starving``, one waits for a batch;
        ``queued``, rollouts made and not yet taken; ``batches``, what the learners still
        alive take at once (learners gone for good take none)."""
        if batches is not None:
            self.batches = batches
        if starving:
            self.value = min(self.value + 1, self.high)
        elif queued > self.batches:
            self.value -= 1
        self.value = min(max(self.value, self.low), self.high)
        return self.value


class ActorLearnerPlan(RLPlan):
    """impala, appo: acting-only actors and learners that batch their rollouts."""

    def start(self) -> None:
        cfg, host = self.cfg, self.host
        actors = host.spawn("actor", Actor, lambda i: (cfg, i))
        spec = host.spec
        learners = host.spawn(
            "learner", Learner, lambda i: (cfg, spec.obs_shape, spec.actions, host.gpu, i)
        )
        self.ready: collections.deque = collections.deque()  # (rollout future, actor)
        self.idle_learners = list(learners)
        self.idle_actors: list[Any] = []
        self.cap = RolloutCap.of(cfg.learners, cfg.impala.learner_batch, len(actors))
        self.policy = None  # runtime.inference: one batched policy acts for every actor
        if host.inference is not None:
            device = host.inference
            self.policy = PolicyServer(cfg, spec.obs_shape, spec.actions, self.server, device)
        for a in actors:
            self.pool.submit(a, "collect", self.server, self.policy, fetch=False)

    def _usable(self, actor: Any) -> bool:  # not gone for good, not being restarted
        return actor in self.ctx.procs["actor"] and actor not in self.pool.restarting()

    def _idle(self, actor: Any) -> None:
        if self._usable(actor) and actor not in self.idle_actors:
            self.idle_actors.append(actor)

    def on_result(self, done: Any) -> None:
        if done.remote.role == "actor":
            self.ready.append((done.value, done.remote))
            self._idle(done.remote)
            return
        self.host.absorb(done.value)
        self.idle_learners.append(done.remote)

    def on_fault(self, done: Any) -> None:
        if done.remote.role == "actor":
            if self.host.on_fault(done, pushes=False):
                self._idle(done.remote)
            return
        self.ready.extendleft(reversed(self._salvage(done)))
        if self.host.on_fault(done, pushes=True):
            self.idle_learners.append(done.remote)

    def finish(self) -> None:
        """The rollouts made and never learned from (queued at the stop, or in the batch of a
        learner that died) still count: their env steps and episodes happened."""
        self._count_unlearned([ref for ref, _ in self.ready])
        self.ready.clear()

    def _count_unlearned(self, refs: list[Any]) -> None:
        stats = WorkStats()
        for ref in refs:
            try:  # a value on the process runtime, an object of an actor's on Ray
                rollout = ref if isinstance(ref, Rollout) else self.runtime.get([ref])[0]
            except Exception:  # noqa: BLE001 - its actor died with it: nothing to count
                continue
            stats.add_rollout(rollout)
        if stats.env_steps:
            self.host.absorb(stats)

    def refill(self) -> None:
        host, cfg, pool = self.host, self.cfg, self.pool
        if host.stopped_by:
            if waits_at_barrier(cfg):  # no barrier may wait for idle learners now, one that
                for learner in self.idle_learners:  # left once and rejoined by pushing too
                    self.ctx.guard.leave(learner.index)
            return
        n = cfg.impala.learner_batch
        while self.idle_learners and len(self.ready) >= n:
            batch = [self.ready.popleft() for _ in range(n)]
            refs = [ref for ref, _ in batch]
            learner = self.idle_learners.pop()
            pool.submit(learner, "learn", self.server, host.schedule_at(), *refs, tag=batch)
        acting = sum(1 for r, _, _ in pool.calls.values() if r.role == "actor")
        restarting = pool.restarting()  # (a learner Ray restarts waits for itself, not data)
        starving = any(learner not in restarting for learner in self.idle_learners)
        live = len(self.ctx.procs["learner"]) * n
        cap = self.cap.update(starving, queued=len(self.ready), batches=live)
        while self.idle_actors and len(self.ready) + acting < cap:
            actor = self.idle_actors.pop()
            if self._usable(actor) and not pool.busy(actor):
                pool.submit(actor, "collect", self.server, self.policy, fetch=False)
                acting += 1

    def _salvage(self, done: Any) -> list[Any]:
        """The rollouts of a failed learner call that are still good, to learn from again.

        A learner that died may have pushed some of its batch's minibatches: learning the
        batch again would apply those twice, so its rollouts are counted (env steps,
        episodes) and not learned from. A call that failed because one of its rollouts failed
        (its actor died, or a server shard the actor pulled from did) failed before it ran,
        and loses that rollout only; an actor's death is counted here if its own next call
        did not show it (Ray may have restarted it first).
        """
        batch = done.tag or []
        if not isinstance(done.error, PeerLost):
            self._count_unlearned([ref for ref, _ in batch])
            return []
        why = self.runtime.failed([ref for ref, _ in batch])
        for (_, actor), w in zip(batch, why, strict=True):
            if w == "died" and actor.mark_lost():
                if self.cfg.faults.max_restarts != 0:
                    self.ctx.faults.restart(actor.role)
                self.ctx.say(f"actor {actor.index} lost: its process died")
                # no work for it until the pool has seen it back (or seen it gone for good)
                self.idle_actors = [a for a in self.idle_actors if a is not actor]
                self.pool.watch(actor)
        self.ctx.faults.lost_calls += sum(1 for w in why if w)
        return [item for item, w in zip(batch, why, strict=True) if not w]


class ReplayPlan(RLPlan):
    """dqn (Gorila): actors fill the replay shards; learners start after learning_starts."""

    def start(self) -> None:
        from rltrain.replay import ReplayMemory
        from rltrain.rl.dqn import DQNActor, DQNLearner, memory_args

        cfg, host, spec = self.cfg, self.host, self.host.spec
        args = [memory_args(cfg, spec, i) for i in range(cfg.replay.shards)]
        self.replay = self.runtime.start_replay(ReplayMemory, args, cfg.actors + cfg.learners + 4)
        self.ctx.add("replay", [])  # replay shards are killed at the end, not restarted
        self.replay_ids = {a: i for i, a in enumerate(self.replay.actor_ids())}
        per_env_steps = host.counters.env_steps // (cfg.actors * cfg.env.num_envs)
        actors = host.spawn("actor", DQNActor, lambda i: (cfg, i, per_env_steps))
        host.spawn(
            "learner", DQNLearner, lambda i: (cfg, spec.obs_shape, spec.num_actions, host.gpu, i)
        )
        self.idle: list[Any] = []  # actors paused by the replay ratio
        self.learning = False
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

    def on_result(self, done: Any) -> None:
        self.host.absorb(done.value)
        if not self.host.stopped_by:
            self._again(done.remote)

    def on_fault(self, done: Any) -> None:
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
        ahead = (
            self.learning
            and d.env_steps_per_update > 0
            and c.env_steps - d.learning_starts > d.env_steps_per_update * c.updates
        )
        while self.idle and not ahead:
            self._give(self.idle.pop())
        if not self.learning and sum(self.replay.sizes()) >= d.learning_starts:
            self.learning = True
            for h in self.ctx.procs["learner"]:
                self._give(h)

    def finish(self) -> None:
        """After the loop: the memory's size for summary.json, and the shards stopped."""
        self.replay_bytes = self.replay.nbytes()
        for h in self.replay.handles:
            self.runtime.kill(h)


PLANS: dict[str, type[RLPlan]] = {
    "worker": WorkerPlan,
    "actor_learner": ActorLearnerPlan,
    "replay": ReplayPlan,
}
"""The plan of each process layout (:attr:`rltrain.rl.algos.AlgoSpec.layout`)."""
