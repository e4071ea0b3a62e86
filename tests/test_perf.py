"""Phase timers (perf/time/*): every actor, learner and worker call accounts for its time."""

from __future__ import annotations

import time

import pytest

from rltrain import perf
from rltrain.envs import EnvConfig
from rltrain.ps.config import OptimizerConfig, ServerConfig
from rltrain.ps.server import LocalServer
from rltrain.rl.actor import Actor
from rltrain.rl.config import AlgoConfig, PPOConfig, StopConfig, TrainConfig
from rltrain.rl.env_spec import initial_params, probe_env
from rltrain.rl.learner import Learner
from rltrain.rl.worker import Worker


def cfg(algo: str, env: str = "ALE/Pong-v5") -> TrainConfig:
    return TrainConfig(
        env=EnvConfig(id=env, num_envs=4, num_threads=1),
        algo=AlgoConfig(name=algo, rollout_length=16),
        ppo=PPOConfig(epochs=2, minibatches=2),
        optimizer=OptimizerConfig(name="adam", lr=1e-4),
        stop=StopConfig(max_env_steps=1000),
    )


def server_for(c: TrainConfig) -> LocalServer:
    return LocalServer(initial_params(c, probe_env(c)), c.optimizer, ServerConfig(), 1)


def covered(seconds: dict[str, float], wall: float) -> float:
    return sum(seconds.values()) / wall


def test_actor_phases_add_up_to_wall_time() -> None:
    c = cfg("appo")
    server, actor = server_for(c), Actor(c, 0)
    actor.collect(server)  # its wait counts from construction: measure the next ones
    t = time.perf_counter()
    r1 = actor.collect(server)
    time.sleep(0.05)  # the driver was slow to hand out the next rollout: a wait
    r2 = actor.collect(server)
    wall = time.perf_counter() - t
    seconds = perf.merge(dict(r1.phases), r2.phases)
    assert set(seconds) >= {"actor/env", "actor/inference", "actor/pull", "actor/wait"}
    assert seconds["actor/wait"] >= 0.05
    assert covered(seconds, wall) == pytest.approx(1.0, abs=0.05)


@pytest.mark.parametrize("algo", ["appo", "impala"])
def test_learner_phases_add_up_to_wall_time_and_carry_the_actors(algo: str) -> None:
    c = cfg(algo)
    server, actor = server_for(c), Actor(c, 0)
    learner = Learner(c, actor.env.obs_shape, actor.env.num_actions)
    rollouts = [actor.collect(server) for _ in range(3)]
    learner.learn(server, 0.0, rollouts[0])
    t = time.perf_counter()
    stats = learner.learn(server, 0.0, rollouts[1], rollouts[2])
    wall = time.perf_counter() - t
    mine = {k: v for k, v in stats.phases.items() if k.startswith("learner/")}
    assert {"learner/learn", "learner/exchange", "learner/collate"} <= set(mine)
    assert covered(mine, wall) == pytest.approx(1.0, abs=0.05)
    actors = {k: v for k, v in stats.phases.items() if k.startswith("actor/")}
    expected = perf.merge(dict(rollouts[1].phases), rollouts[2].phases)
    assert actors == pytest.approx(expected)


def test_worker_phases_add_up_to_wall_time() -> None:
    c = cfg("a3c")  # Pong: the work per step dwarfs the loop's own bookkeeping
    server, worker = server_for(c), Worker(c, 0)
    worker.work(server, 1)
    t = time.perf_counter()
    stats = worker.work(server, 3)
    wall = time.perf_counter() - t
    assert {"worker/env", "worker/inference", "worker/learn", "worker/exchange"} <= set(
        stats.phases
    )
    assert covered(stats.phases, wall) == pytest.approx(1.0, abs=0.05)


def test_shares_are_per_role_and_the_biggest_phase_is_named() -> None:
    seconds = {"actor/env": 3.0, "actor/wait": 1.0, "learner/learn": 9.0, "learner/pull": 1.0}
    s = perf.shares(seconds)
    assert s["actor/env"] == pytest.approx(0.75) and s["learner/learn"] == pytest.approx(0.9)
    assert perf.biggest(seconds) == "actor env 75%, learner learn 90%"
    assert perf.shares({}) == {} and perf.biggest({}) == ""


def test_rate_window_counts_bursts_over_its_window_never_zero_while_steps_arrive() -> None:
    """1,000 steps land every 3 s (one rollout at a time); log points every 2 s fall between
    them, yet each reads ~333/s (the steps of the last 10 s over 10 s), not 0 and 500."""
    window = perf.RateWindow(10.0, total=0, now=0.0)
    rates = []
    for tick in range(1, 31):  # 60 s in 2 s log points; arrivals at 3, 6, 9, ... s
        t = 2.0 * tick
        for arrival in range(int(t - 2) // 3 + 1, int(t) // 3 + 1):
            window.add(1000 * arrival, now=3.0 * arrival)
        window.add(1000 * (int(t) // 3), now=t)  # the log point itself
        rates.append(window.rate(now=t))
    assert rates[0] == 0.0  # nothing has arrived in the first 2 s
    assert all(r > 0 for r in rates[1:])
    assert all(abs(r - 1000 / 3) <= 1000 / 10 for r in rates[5:])  # one burst's share of 10 s
    assert window.rate(now=200.0) == 0.0  # nothing for a whole window: a stall shows as 0


def test_rate_window_starts_short_and_counts_on_from_a_resumed_total() -> None:
    window = perf.RateWindow(10.0, total=5_000, now=100.0)
    window.add(5_400, now=102.0)
    assert window.rate(now=104.0) == pytest.approx(100.0)  # 400 steps in 4 s, not in 10
    window.add(6_400, now=120.0)
    assert window.rate(now=120.0) == pytest.approx(100.0)  # 1,000 since 110 s (total 5,400)
