"""The fault paths that lost or doubled work, or hung a run (issue 30), each at the level where
it happened: a shard's restore, a barrier's timeout, the stop of a plan, a learner's death."""

from __future__ import annotations

import collections
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from rltrain.driver import Done
from rltrain.envs import EnvConfig
from rltrain.faults import PeerLost, ProcessLost
from rltrain.ps.config import OptimizerConfig, ServerConfig
from rltrain.ps.server import LocalServer
from rltrain.records import GradUpdate
from rltrain.rl.actor import Actor
from rltrain.rl.config import AlgoConfig, StopConfig, TrainConfig
from rltrain.rl.rollout import WorkStats
from rltrain.rl.run.plans import ActorLearnerPlan
from rltrain.runtime import process

SGD = OptimizerConfig(name="sgd", lr=0.1)


def update(version: int, n: int, worker: int = 0, restore_epoch: int = 0) -> GradUpdate:
    return GradUpdate(worker, version, torch.ones(n), 1, restore_epoch=restore_epoch)


# --- 1. a restore starts an epoch: a push from before it lands nowhere after it ----------------


def test_a_push_split_around_a_restore_lands_on_no_shard_after_it() -> None:
    """The update's first slice reaches shard 0 before the restore, its second reaches shard 1
    after it: shard 1 drops it (its epoch is older), so both shards are the restore point's
    (before the fix shard 1 applied it: one version ahead of shard 0, with other values)."""
    server = LocalServer(torch.zeros(6), SGD, ServerConfig(shards=2), 1)
    for v in range(2):
        server.push(update(v, 6))
    point, at_point = server.state_dicts(), server.pull().values
    for v in range(2, 4):
        server.push(update(v, 6))
    first, second = server._split(update(2, 6))  # computed at version 2, before the restore
    server.shards[0].push(first)
    server.load_state_dicts(point, restore_epoch=1)  # the guard's restore
    assert server.shards[1].push(second).status == "dropped"
    assert [s.version for s in server.shards] == [2, 2]
    assert torch.equal(server.pull().values, at_point)


def test_after_a_restore_only_pushes_of_fresh_parameters_apply() -> None:
    server = LocalServer(torch.zeros(4), SGD, ServerConfig(shards=2, rule="async"), 1)
    point = server.state_dicts()
    server.push(update(0, 4))
    server.load_state_dicts(point, restore_epoch=1)
    stale = server.push(update(0, 4))  # version 0 exists again, but of the old epoch
    assert stale.status == "dropped" and "before the restore" in stale.reason
    fresh = server.pull()
    assert fresh.restore_epoch == 1
    assert (
        server.push(update(fresh.version, 4, restore_epoch=fresh.restore_epoch)).status == "applied"
    )


def test_a_coordinated_follower_drops_what_shard_0_decided_before_its_restore() -> None:
    server = LocalServer(torch.zeros(4), SGD, ServerConfig(shards=2, rule="sync"), 1)
    point = server.state_dicts()
    first, second = server._split(update(0, 4))
    decided = server.shards[0].push(first)
    assert decided.status == "applied"
    server.load_state_dicts(point, restore_epoch=1)
    assert server.shards[1].push(second, decided).status == "dropped"
    assert [s.version for s in server.shards] == [0, 0]


# --- 3. a barrier's timeout: the worker waits again instead of spinning ------------------------


def test_a_worker_whose_barrier_wait_timed_out_waits_again_when_it_pushes_again() -> None:
    """sync with 2 workers, worker 1 gone (on_worker_loss: wait): worker 0's wait times out,
    it pushes again, and that push waits for the round (before the fix it was dropped at
    once, and the worker pushed again and again without end)."""
    server = LocalServer(torch.zeros(4), SGD, ServerConfig(rule="sync"), 2)
    result, params = server.exchange(update(0, 4), 1, timeout=0.05)  # times out
    assert result.status == "accumulated" and params.version == 0
    out: list[Any] = []
    again = threading.Thread(target=lambda: out.append(server.exchange(update(0, 4), 1, 60.0)))
    again.start()
    again.join(timeout=0.5)
    assert again.is_alive()  # waiting for the round, not back to push a third time
    server.push(update(0, 4, worker=1))  # the round completes
    again.join(timeout=30)
    result, params = out[0]
    assert result.status == "dropped" and result.waits and params.version == 1
    assert server.stats().applied == 2  # the two workers' updates, once each


# --- 2, 4, 5: what an impala/appo plan does at the stop and when a learner dies ---------------


class Shards:
    """A guard's view of one shard that died and came back (fenced) once asked to."""

    def __init__(self) -> None:
        self.told: list[tuple[str, int]] = []
        self.fenced = False

    def health(self) -> list[tuple[int, bool]]:
        return [(7, self.fenced)]

    def leave(self, worker_id: int) -> None:
        self.told.append(("leave", worker_id))

    def load_state_dicts(self, states: Any, restore_epoch: int | None = None) -> None:
        self.fenced = False


def test_a_restore_does_not_tell_the_shards_a_worker_left_once_it_is_back() -> None:
    """Worker 1 died (it left the barrier), was restarted and pushes again: a later restore
    tells the shards only of worker 2, still gone (review88b: it told them of both, and the
    restored barrier stepped once without worker 1's update)."""
    from rltrain.faults import FaultCounters, RestorePoint
    from rltrain.ps.rules import ASYNC, SYNC
    from rltrain.runtime import fault_policy
    from rltrain.runtime.guard import ServerGuard

    shards, said = Shards(), []
    guard = ServerGuard(shards, FaultCounters(), said.append)  # type: ignore[arg-type]
    guard.remember(RestorePoint(5, [{}], "the start"))
    counters = FaultCounters()
    for i in (1, 2):
        w = SimpleNamespace(role="worker", index=i, mark_lost=lambda: True, restarted_by="Ray")
        lost = Done(w, error=ProcessLost(f"worker-{i}", False, "died"))
        fault_policy.respond(lost, SYNC, "continue", shards, guard, counters, said.append)
    back = Done(SimpleNamespace(role="worker", index=1, pid=lambda: 42), revived=True)
    verdict = fault_policy.respond(back, SYNC, "continue", shards, guard, counters, said.append)
    assert verdict == "work" and "worker 1 is back" in said[-1]
    actor = Done(SimpleNamespace(role="actor", index=2, pid=lambda: 43), revived=True)
    fault_policy.respond(actor, ASYNC, "continue", shards, guard, counters, said.append)
    assert guard.left == {2}  # (an actor pushes nothing: its index is no pusher's, review89)
    shards.told.clear()
    shards.fenced = True
    assert guard.check()
    assert shards.told == [("leave", 2)], shards.told


def appo_cfg() -> TrainConfig:
    return TrainConfig(
        env=EnvConfig(id="CartPole-v1", num_envs=3),
        algo=AlgoConfig(name="appo", rollout_length=5),
        server=ServerConfig(rule="sync"),
        learners=2,
        stop=StopConfig(max_env_steps=1000),
    )


class Stub:
    """The host of a plan and its run context, as far as these paths use them."""

    def __init__(self) -> None:
        self.absorbed: list[WorkStats] = []
        self.stopped_by = ""
        self.guard = SimpleNamespace(left={0}, told=[])
        self.guard.leave = self.guard.told.append
        self.ctx = SimpleNamespace(
            guard=self.guard,
            faults=SimpleNamespace(lost_calls=0),
            procs={"actor": [], "learner": []},
            say=print,
        )
        self.ctx.shard_guard = lambda: self.guard

    def absorb(self, stats: WorkStats) -> None:
        self.absorbed.append(stats)

    def on_fault(self, done: Done, pushes: bool) -> bool:
        return True

    def schedule_at(self) -> float:
        return 0.0


def plan_with(t: Stub, cfg: TrainConfig) -> ActorLearnerPlan:
    plan = ActorLearnerPlan.__new__(ActorLearnerPlan)
    plan.host, plan.ctx, plan.cfg, plan.runtime = t, t.ctx, cfg, process
    plan.pool = process.Pool()
    plan.ready = collections.deque()
    plan.idle_learners, plan.idle_actors = [], []
    return plan


@pytest.fixture(scope="module")
def rollouts() -> list[Any]:
    actor = Actor(appo_cfg(), 0)
    actor.version = 0
    return [actor.rollout() for _ in range(3)]


def test_rollouts_queued_at_the_stop_count_their_env_steps(rollouts: list[Any]) -> None:
    t = Stub()
    plan = plan_with(t, appo_cfg())
    plan.ready.extend((r, None) for r in rollouts)
    plan.finish()
    assert sum(s.env_steps for s in t.absorbed) == 3 * 15 and not plan.ready


def test_an_error_in_taking_in_the_work_after_a_ctrl_c_is_said_and_the_stop_goes_on(
    tmp_path: Path,
) -> None:
    """explore112: a dqn plan's finish raised AttributeError after a Ctrl-C in its start-up;
    it escaped the interrupt's handler, the run's processes were never released and the
    command hung. The stop now goes on (a checkpoint, the processes stopped), and says it."""
    t = Stub()  # (no call in flight: settle goes to finish at once)
    t.run_dir = tmp_path
    said: list[str] = []
    t.ctx.say = said.append
    plan = plan_with(t, appo_cfg())

    def broken() -> None:
        raise AttributeError("'NoneType' object has no attribute 'nbytes'")

    plan.finish = broken  # type: ignore[method-assign]
    plan.settle()
    assert said[0] == (
        "interrupted: the work in flight not taken in (AttributeError: 'NoneType' object "
        "has no attribute 'nbytes')"
    )
    assert "in broken" in (tmp_path / "failure.log").read_text()  # its traceback kept (review89)


def test_at_the_stop_every_idle_learner_leaves_the_barrier_even_one_that_left_before() -> None:
    """Learner 0 left once (it died and came back), rejoined by pushing, and is idle at the
    stop: it is told to leave again, or the other learner's last push waits for it until the
    barrier's timeout."""
    t = Stub()
    t.stopped_by = "max_env_steps"
    plan = plan_with(t, appo_cfg())
    plan.idle_learners = [SimpleNamespace(index=0), SimpleNamespace(index=1)]
    plan.refill()
    assert sorted(t.guard.told) == [0, 1]


def test_the_batch_of_a_learner_that_died_is_counted_not_learned_again(
    rollouts: list[Any],
) -> None:
    """It may have pushed some of its minibatches: learning the batch again would apply them
    twice. A call that failed on a lost rollout (it never ran) gives back the others."""
    t = Stub()
    plan = plan_with(t, appo_cfg())
    learner = SimpleNamespace(role="learner", index=1)
    batch = [(r, None) for r in rollouts[:2]]
    died = Done(learner, tag=batch, error=ProcessLost("learner-1", False, "died"))
    assert plan._salvage(died) == []
    assert sum(s.env_steps for s in t.absorbed) == 2 * 15
    plan.runtime = SimpleNamespace(failed=lambda refs: ["", "died"][: len(refs)])
    actor = SimpleNamespace(mark_lost=lambda: False, role="actor", index=0)
    peer = Done(learner, tag=[(rollouts[0], actor), (rollouts[1], actor)], error=PeerLost("x"))
    assert plan._salvage(peer) == [(rollouts[0], actor)]
