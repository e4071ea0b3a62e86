"""What each algorithm contributes to the driver loop (:func:`rltrain.driver.drive`).

* :class:`WorkerPlan` (a3c, a2c, ppo): workers that act and learn, each resubmitted as it
  returns; under a barrier that waits for every worker (sync) in rounds, so that all run the
  same number of barrier steps and none is left waiting at the end.
* :class:`ActorLearnerPlan` (impala, appo): acting-only actors whose rollouts (Ray object
  references, never fetched by the driver; on the process runtime, copies out of shared
  memory) are batched to the next free learner; a bounded
  queue makes actors wait rather than memory grow.
* :class:`~rltrain.rl.run.replay_plan.ReplayPlan` (dqn, Gorila), in a module of its own.

The trainer (:class:`rltrain.rl.run.train.Trainer`, a plan's
:class:`~rltrain.rl.run.plan_base.Host`) owns the bookkeeping every plan shares: the
counters, the stop criteria, logs, checkpoints and what a lost process means.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from rltrain import perf, signals
from rltrain.driver import Done
from rltrain.faults import PeerLost, ProcessLost, RunFailed
from rltrain.rl.actor import Actor, frame_stack_of
from rltrain.rl.algos.impala import in_flight_range
from rltrain.rl.config import TrainConfig, server_settings, waits_at_barrier
from rltrain.rl.env_spec import EnvSpec
from rltrain.rl.inference import ActSlots, PolicyWorker
from rltrain.rl.learner import Learner
from rltrain.rl.obs_slots import ObsSlots
from rltrain.rl.rollout import Rollout, WorkStats
from rltrain.rl.run.hangs import Beats
from rltrain.rl.run.plan_base import Early, Host, RLPlan
from rltrain.rl.worker import Worker
from rltrain.runtime.process.shm import shm_free

if TYPE_CHECKING:
    from rltrain.runtime.contract import Runtime

WORK_CHUNK = 5  # rollouts per a3c/a2c call: long enough to amortise the call, short to steer


class WorkerPlan(RLPlan):
    """a3c, a2c, ppo: one kind of process, which acts and learns."""

    @classmethod
    def spawn_early(cls, host: Host, runtime: Runtime) -> Early:
        return Early(host.spawn("worker", Worker, lambda i: (host.cfg, i)))

    def start(self) -> None:
        cfg = self.cfg
        workers = self.early_processes().actors
        # in rounds only where a barrier waits for every worker (sync): soft_sync's K of N
        # steps without stragglers (explore111: one paused stalled K = 3 of 4 as sync)
        rule, n = server_settings(cfg), len(workers)
        self.lockstep = waits_at_barrier(cfg) and rule.update_rule.aggregate_count(rule, n) >= n
        # a ppo rollout is epochs x minibatches server steps already: one per call
        self.chunk = 1 if cfg.algo_spec.minibatched(cfg) else WORK_CHUNK
        self.idle: list[Any] = []
        self.landed: list[tuple[int, WorkStats]] = []  # a lockstep round's results so far
        for w in workers:
            self._give(w)

    def _give(self, worker: Any) -> None:
        self.pool.submit(worker, "work", self.server, self.chunk, self.host.schedule_at())

    def pushes(self, remote: Any) -> bool:
        return True  # a worker acts and learns

    def on_result(self, done: Done) -> None:
        self.idle.append(done.remote)
        if self.lockstep:  # taken in as the round ends (refill)
            self.landed.append((done.remote.index, done.value))
        else:
            self.host.absorb(done.value)

    def _absorb_round(self) -> None:
        """A round's results in the workers' order, not in the order they arrived: identical
        sync runs, which train bit for bit alike, log the same episodes at the same steps,
        hence the same means and the same stop (explore85: 115.70 vs 114.55)."""
        landed, self.landed = sorted(self.landed, key=lambda one: one[0]), []
        with signals.deferred():  # (a Ctrl-C: all of the round counted, once)
            for _, stats in landed:
                self.host.absorb(stats)

    def on_fault(self, done: Done) -> None:
        if not self.host.on_fault(done, pushes=True):
            return
        if self.lockstep and not self.pool.calls:
            self.idle.append(done.remote)  # between rounds: it starts with the next one
        else:  # a round (a barrier) may be waiting for it: it joins at once
            self._give(done.remote)

    def refill(self) -> None:
        if self.lockstep and self.pool.calls:
            return  # mid-round
        self._absorb_round()  # (which may stop the run)
        if self.host.stopped_by:
            # no barrier may wait for a worker the stop gives no more work (soft_sync's
            # calls end apart: those still in one push to a barrier the idle never reach)
            for w in self.idle:
                self.leave_barrier(w)
            return
        for w in self.idle:
            self._give(w)
        self.idle = []

    def flush(self) -> None:
        self._absorb_round()  # a round cut short (a fault, a Ctrl-C's settle out of time)


@dataclass
class RolloutCap:
    """How many rollouts may be queued or being made: a bound on the actors' policy lag.

    It starts at two batches per learner: on few cores the learner is the bottleneck, and
    actors beyond that would only lengthen the queue (older rollouts, the same learning
    rate). At each look (each turn of the driver's loop that had results) it grows by one
    while a learner waits for a batch (the actors are the bottleneck, e.g. a GPU learner on a
    many-core box: every actor can act), and shrinks by one while more than one batch per
    learner is queued, between ``low`` and ``high`` (all actors acting with a batch per
    learner queued). ``held`` (``impala.in_flight``) holds it instead, within a batch per
    learner and ``high``: on few cores, where the learner is the bottleneck, ``actors +
    batches`` gives the actors the lag they have on a box whose learner keeps up with them."""

    batches: int  # rollouts the learners take at once
    high: int
    held: int = 0  # 0: it adapts
    value: int = field(init=False)

    def __post_init__(self) -> None:
        self.value = self.low

    @property
    def low(self) -> int:
        return min(max(self.held, self.batches), self.high) if self.held else 2 * self.batches

    @classmethod
    def of(cls, learners: int, learner_batch: int, actors: int, held: int = 0) -> RolloutCap:
        batches, high = in_flight_range(learners, learner_batch, actors)
        return cls(batches, high, held)

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
        self.value = self.low if self.held else min(max(self.value, self.low), self.high)
        return self.value


def rollout_cap(cfg: TrainConfig, actors: int) -> RolloutCap:
    """The run's :class:`RolloutCap` (``impala.learner_batch`` and ``impala.in_flight``)."""
    return RolloutCap.of(cfg.learners, cfg.impala.learner_batch, actors, cfg.impala.in_flight)


def obs_slots_for(cfg: TrainConfig, spec: EnvSpec, say: Callable[[str], None]) -> ObsSlots | None:
    """The run's observation slots (:class:`ObsSlots`): one per rollout that can be in
    flight at once (being made or queued: the rollout cap's ceiling; being learned: a batch
    per learner). None, said, where /dev/shm (torch's shared memory) lacks the room: the
    rollouts then travel as messages."""
    cap = rollout_cap(cfg, cfg.actors)
    count = cap.high + cap.batches
    dtype = torch.from_numpy(np.zeros(0, dtype=spec.obs_dtype)).dtype
    T, B = cfg.algo.rollout_length, cfg.env.num_envs
    k = frame_stack_of(spec.protocol)  # Atari's stacks: each step's newest frame alone
    frame = spec.obs_shape[1:] if k > 1 else spec.obs_shape
    need = count * ((T + k) * B * math.prod(frame) * dtype.itemsize + (T + 1) * B)  # (blank)
    free = shm_free()
    if free is not None and free < 2 * need:
        say(
            f"the rollouts' frames travel as messages, not through shared slots: they need "
            f"{need / 2**20:.0f} MB of /dev/shm and {free / 2**20:.0f} MB are free "
            "(docker: --shm-size)"
        )
        return None
    return ObsSlots(count, T, B, spec.obs_shape, dtype, k)


class ActorLearnerPlan(RLPlan):
    """impala, appo: acting-only actors and learners that batch their rollouts."""

    slots: ActSlots | None = None  # runtime.inference: the policy worker's, shared with actors

    @classmethod
    def spawn_early(cls, host: Host, runtime: Runtime) -> Early:
        cfg, spec = host.cfg, host.spec
        # runtime.inference: one policy worker acts for every actor, through shared slots
        slots, policy = None, None
        if host.inference is not None:
            semaphore = runtime.Semaphore
            slots = ActSlots.for_run(  # (the actors' frames are read where they wrote them)
                cfg, spec.obs_shape, spec.obs_dtype, spec.actions, semaphore, host.obs_slots
            )
        clients = [None if slots is None else slots.client(i) for i in range(cfg.actors)]
        actors = host.spawn("actor", Actor, lambda i: (cfg, i, clients[i], host.obs_slots))
        if slots is not None:
            args = (cfg, spec.obs_shape, spec.actions, slots, host.inference)
            (policy,) = host.spawn("policy", PolicyWorker, lambda i: args)
        return Early(actors, policy, slots)

    def start(self) -> None:
        cfg, host, spec = self.cfg, self.host, self.host.spec
        early = self.early_processes()
        actors, self.slots = early.actors, early.slots
        self._policy_seen: dict[str, float] = {}  # the policy worker's seconds, logged so far
        # the observation slots (the learner process's, made with it): lent one per rollout
        self.obs_slots = host.obs_slots
        self.free_slots = list(range(len(host.obs_slots))) if host.obs_slots else []
        if early.policy is not None:
            self.pool.submit(early.policy, "serve", self.server)
            slots = early.slots
            assert slots is not None
            waits = lambda r: r.role == "actor" and slots.waits(r.index)  # noqa: E731
            self.hangs.beating(Beats("policy", slots.beat, waits))
        self.learn_args: tuple[Any, ...] = ()  # before the batch: the server, if not hosted
        if host.hosted:  # started with the server, whose shards it holds: it learns there
            learners = self.ctx.procs["learner"]
        else:
            learners = host.spawn(
                "learner", Learner, lambda i: (cfg, spec.obs_shape, spec.actions, host.gpu, i)
            )
            self.learn_args = (self.server,)
        self.ready: collections.deque[tuple[Any, Any]] = collections.deque()  # (rollout, actor)
        self.idle_learners = list(learners)
        self.idle_actors: list[Any] = []
        self.cap = rollout_cap(cfg, len(actors))
        for a in actors:
            self._collect(a)

    def _collect(self, actor: Any) -> None:
        """A rollout of ``actor``'s, in a free observation slot where the run has them."""
        slot = self.free_slots.pop(0) if self.obs_slots is not None else None
        self.pool.submit(actor, "collect", self.server, slot, fetch=False, tag=slot)

    def _can_collect(self) -> bool:
        return self.obs_slots is None or bool(self.free_slots)

    def _give_back(self, rollouts: list[Any]) -> None:
        """Their observation slots are free again (learned from, or never to be)."""
        for r in rollouts:
            slot = getattr(r, "obs_slot", None)
            if slot is not None:
                self.free_slots.append(slot)

    def _usable(self, actor: Any) -> bool:  # not gone for good, not being restarted
        return actor in self.ctx.procs["actor"] and actor not in self.pool.restarting()

    def _idle(self, actor: Any) -> None:
        if self._usable(actor) and actor not in self.idle_actors:
            self.idle_actors.append(actor)

    def on_result(self, done: Done) -> None:
        if done.remote.role == "policy":  # serve returned: the run has stopped
            return
        if done.remote.role == "actor":
            self.ready.append((done.value, done.remote))
            self._idle(done.remote)
            return
        if self.slots is not None:  # the policy worker's time since, with the learner's
            perf.merge(done.value.phases, self._policy_seconds())
            if done.value.version is not None:  # new weights: the policy worker reads it
                self.slots.learned(done.value.version)
        self._give_back([ref for ref, _ in done.tag])
        self.host.absorb(done.value)
        self.idle_learners.append(done.remote)

    def on_fault(self, done: Done) -> None:
        if done.remote.role == "policy":
            self._policy_fault(done)
            return
        if done.remote.role == "actor":
            if done.tag is not None:  # its slot, half written: free for another rollout
                self.free_slots.append(done.tag)
            if self.host.on_fault(done, pushes=False):
                self._idle(done.remote)
            return
        kept = self._salvage(done)
        self._give_back([ref for ref, _ in done.tag or [] if all(ref is not k for k, _ in kept)])
        self.ready.extendleft(reversed(kept))
        if self.host.on_fault(done, pushes=True):
            self.idle_learners.append(done.remote)

    def _policy_seconds(self) -> dict[str, float]:
        """The policy worker's seconds per phase since the last call (perf/time/policy/*)."""
        assert self.slots is not None
        now = self.slots.phases()
        seen, self._policy_seen = self._policy_seen, now
        return {k: v - seen.get(k, 0.0) for k, v in now.items()}

    def _policy_fault(self, done: Any) -> None:
        """The policy worker died, or is back: the actors wait for it meanwhile (their
        requests stay in the slots, answered by the next one), so it serves again even
        after a stop, until the actors' calls have returned."""
        self.host.on_fault(done, pushes=False)
        if done.revived or isinstance(done.error, PeerLost):  # (its first pull: the shards
            self.pool.submit(done.remote, "serve", self.server)  # were lost, now restored)
        elif isinstance(done.error, ProcessLost) and done.error.permanent:
            raise RunFailed(
                "the policy worker died and will not restart (faults.max_restarts spent); "
                "the actors cannot act without it (runtime.inference=server)"
            )

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
            # an actor not up yet (still building its envs) has no rollout to finish: the stop
            # does not wait for it (keep_going), nor may the policy worker serve on for it
            any_acting = any(r.role == "actor" and r.is_up() for r, _, _ in pool.calls.values())
            if self.slots is not None and not any_acting:  # no actor waits for actions now
                self.slots.stop()
            if waits_at_barrier(cfg):  # no barrier may wait for idle learners now, one that
                for learner in self.idle_learners:  # left once and rejoined by pushing too
                    self.guard.leave(learner.index)
            return
        n = cfg.impala.learner_batch
        while self.idle_learners and len(self.ready) >= n:
            batch = [self.ready.popleft() for _ in range(n)]
            refs = [ref for ref, _ in batch]
            learner = self.idle_learners.pop()
            args = (*self.learn_args, host.schedule_at(), *refs)
            pool.submit(learner, "learn", *args, tag=batch)
        acting = sum(1 for r, _, _ in pool.calls.values() if r.role == "actor")
        restarting = pool.restarting()  # (a learner Ray restarts waits for itself, not data)
        starving = any(learner not in restarting for learner in self.idle_learners)
        live = len(self.ctx.procs["learner"]) * n
        cap = self.cap.update(starving, queued=len(self.ready), batches=live)
        while self.idle_actors and len(self.ready) + acting < cap and self._can_collect():
            actor = self.idle_actors.pop(0)  # the longest idle first: none starves
            if self._usable(actor) and not pool.busy(actor):
                self._collect(actor)
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
                again = ""  # (said as the fault policy says it: explore99)
                if self.cfg.faults.max_restarts != 0:
                    self.ctx.faults.restart(actor.role)
                    again = f"; {actor.restarted_by} restarts it"
                self.ctx.say(f"actor {actor.index} lost: its process died{again}")
                # no work for it until the pool has seen it back (or seen it gone for good)
                self.idle_actors = [a for a in self.idle_actors if a is not actor]
                self.pool.watch(actor)
        self.ctx.faults.lost_calls += sum(1 for w in why if w)
        return [item for item, w in zip(batch, why, strict=True) if not w]


def plan_of(layout: str) -> type[RLPlan]:
    """The plan of a process layout (:attr:`rltrain.rl.algos.AlgoSpec.layout`)."""
    if layout == "replay":
        from rltrain.rl.run.replay_plan import ReplayPlan  # (it builds on RLPlan, from here)

        return ReplayPlan
    return {"worker": WorkerPlan, "actor_learner": ActorLearnerPlan}[layout]
