"""The learner beside the server's shards, as the process runtime runs it (``rltrain: learner
0``, :mod:`rltrain.rl.learner_host`), built here in one process: it learns on its own shards,
answers shard calls for the other processes with CPU parameters, and after a restart refuses
them and waits for its restore."""

from __future__ import annotations

import dataclasses
import threading
import time

import pytest
import torch

from rltrain.envs.config import EnvConfig
from rltrain.faults import ShardFenced
from rltrain.ps.config import OptimizerConfig, ServerConfig
from rltrain.records import Params
from rltrain.rl.actor import Actor
from rltrain.rl.config import AlgoConfig, PPOConfig, StopConfig, TrainConfig
from rltrain.rl.env_spec import initial_params, probe_env
from rltrain.rl.learner_host import LearnerHost
from rltrain.rl.obs_slots import ObsSlots
from rltrain.rl.run.placement import hosts_shards


def _cfg() -> TrainConfig:
    return TrainConfig(
        env=EnvConfig(id="CartPole-v1", num_envs=4),
        algo=AlgoConfig(name="appo", rollout_length=16),
        ppo=PPOConfig(epochs=2, minibatches=2),
        optimizer=OptimizerConfig(name="adam", lr=3e-3),
        stop=StopConfig(max_env_steps=1000),
    )


def _host(c: TrainConfig) -> LearnerHost:
    spec = probe_env(c)
    init = initial_params(c, spec)
    server = (init, c.optimizer, ServerConfig(), 1, False, None, "cpu")
    return LearnerHost(server, c, spec.obs_shape, spec.actions)


def test_the_learner_learns_on_the_shards_beside_it() -> None:
    c = _cfg()
    host = _host(c)
    before = host.shard(0, "pull")
    stats = host.learn(0.0, Actor(c, 0).rollout())
    assert stats.updates == 2 * 2
    assert host.learner.live is not None  # its parameters are the shard's buffer: no copies
    after = host.shard(0, "pull", None)
    assert isinstance(after, Params) and after.version == 4
    assert after.values.device.type == "cpu"
    assert not torch.equal(before.values, after.values)
    assert host.shard(0, "pull", 4) is None  # nothing newer: nothing travels
    assert host.health() == [(4, False)]


def test_each_batch_reports_how_many_versions_its_actors_lagged_the_learner() -> None:
    """ps/actor_lag (explore98: the actors' lag was reported only as a KL): the versions from
    the oldest parameters that acted in a batch to those the learner starts it from."""
    c = _cfg()
    host, rollout = _host(c), dataclasses.replace(Actor(c, 0).rollout(), version=0)
    assert host.learn(0.0, rollout).actor_lag == [0]  # acted with the learner's parameters
    assert host.learn(0.0, rollout).actor_lag == [4]  # a learn (4 pushes) behind
    newer = dataclasses.replace(rollout, version=4)
    assert host.learn(0.0, rollout, newer).actor_lag == [8]  # the oldest that acted


def test_a_cut_learn_ends_after_the_minibatch_in_progress_and_counts_its_pushes() -> None:
    """The run is stopping (its stop met, or Ctrl-C): a cut heard while a batch is learned
    ends it after the minibatch in progress, and the learn returns counting exactly the
    pushes the server applied (so the final checkpoint's counters equal its version)."""
    c = dataclasses.replace(_cfg(), ppo=PPOConfig(epochs=4, minibatches=4))
    host = _host(c)
    rollout = Actor(c, 0).rollout()
    push = host.server.exchange_begin
    pushes = []

    def cut_at_the_third(*args: object, **kw: object) -> object:
        pushes.append(1)
        if len(pushes) == 3:
            host.interrupt()  # (the trainer's call, on another thread of the learner's process)
        return push(*args, **kw)

    host.server.exchange_begin = cut_at_the_third  # type: ignore[method-assign]
    stats = host.learn(0.0, rollout)
    assert stats.updates == stats.applied == 3 < 4 * 4
    assert host.health() == [(3, False)] and stats.env_steps == rollout.env_steps
    assert host.learn(0.0, rollout).updates == 1  # later: one minibatch each (never none)


def test_a_restarted_host_refuses_requests_and_learns_once_restored() -> None:
    c = _cfg()
    first = _host(c)
    first.learn(0.0, Actor(c, 0).rollout())
    state = first.shard(0, "state_dict")

    host = _host(c)  # the process that replaces it: the initial parameters again
    host.restarted()
    assert host.health() == [(0, True)]
    with pytest.raises(ShardFenced):
        host.shard(0, "pull")
    out: list = []
    learning = threading.Thread(target=lambda: out.append(host.learn(0.0, Actor(c, 1).rollout())))
    learning.start()
    time.sleep(0.2)
    assert learning.is_alive() and not out  # it waits for the guard's restore
    host.shard(0, "load_state_dict", state, 1)
    learning.join(timeout=30)
    assert out and out[0].updates == 4
    assert host.health() == [(8, False)]  # 4 restored + 4 of its own


def test_the_process_runtime_hosts_one_learner_of_impala_and_appo() -> None:
    c = _cfg()
    assert hosts_shards(c, "process")
    assert not hosts_shards(c, "local") and not hosts_shards(c, "ray")
    two = dataclasses.replace(c, learners=2)
    assert not hosts_shards(two, "process")  # several learners share the trainer's shards
    a3c = dataclasses.replace(c, algo=AlgoConfig(name="a3c"))
    assert not hosts_shards(a3c, "process")


def test_frames_written_into_slots_equal_the_stacked_rollouts_and_the_slots_never_grow() -> None:
    """An actor lent observation slots writes its frames there (one copy each) and the
    learner reads them in place: the rollouts equal those of an actor that stacks its own,
    over 100 rollouts through the same 3 slots, with no new memory."""
    c = dataclasses.replace(_cfg(), env=EnvConfig(id="CartPole-v1", num_envs=4, groups=2))
    spec = probe_env(c)
    slots = ObsSlots(3, c.algo.rollout_length, c.env.num_envs, spec.obs_shape, torch.float32)
    where = slots.obs.data_ptr()
    lent, own = Actor(c, 0, obs_slots=slots), Actor(c, 0)
    own.model.load_state_dict(lent.model.state_dict())  # (each drew its own initial weights)
    for i in range(100):
        k = i % len(slots)
        r = lent.rollout(slot=k)
        assert r.obs_slot == k and r.obs.numel() == 0  # the frames travel as the slot's number
        whole = own.rollout()
        seen = slots.attach(r)
        assert seen.obs.data_ptr() == slots.obs[k].data_ptr()  # a view: no copy
        torch.testing.assert_close(seen.obs, whole.obs, rtol=0, atol=0)
        torch.testing.assert_close(r.actions, whole.actions)
        assert r.norm is not None and whole.norm is not None  # (appo normalises CartPole's)
        torch.testing.assert_close(r.norm.obs.mean, whole.norm.obs.mean)  # read from the slot
    assert slots.obs.data_ptr() == where and len(slots) == 3


def test_a_slot_lent_to_another_actor_does_not_change_the_next_rollout() -> None:
    """Once its rollout is learned, a slot goes to whichever actor asks next: the actor that
    filled it must start its next rollout from its own last frames, not from whatever the
    slot holds by then (with 15 actors waiting for slots, it was often another's)."""
    c = _cfg()
    spec = probe_env(c)
    slots = ObsSlots(2, c.algo.rollout_length, c.env.num_envs, spec.obs_shape, torch.float32)
    lent, own = Actor(c, 0, obs_slots=slots), Actor(c, 0)
    own.model.load_state_dict(lent.model.state_dict())
    for i in range(6):
        k = i % len(slots)
        r = slots.attach(lent.rollout(slot=k))
        whole = own.rollout()
        torch.testing.assert_close(r.obs, whole.obs, rtol=0, atol=0)
        torch.testing.assert_close(r.actions, whole.actions)
        slots.obs[k].fill_(-7.0)  # learned, then lent to another actor who writes into it


def test_a_host_restarted_before_any_checkpoint_is_restored_to_its_built_state() -> None:
    """The restore point of a run's start is the shards as a learner's process builds them
    (the trainer reads it from no process): a restarted host goes back to it."""
    c = _cfg()
    host = _host(c)
    host.restarted()
    host.rebuilt(1)
    assert host.health() == [(0, False)]
    assert host.learn(0.0, Actor(c, 0).rollout()).updates == 4
