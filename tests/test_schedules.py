"""Linear learning-rate and entropy schedules over the run's env steps."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from rltrain.config import ConfigError, load_config
from rltrain.envs import EnvConfig
from rltrain.faults import PeerLost
from rltrain.ps.config import OptimizerConfig, ServerConfig
from rltrain.ps.shard import ParameterShard
from rltrain.records import GradUpdate
from rltrain.rl.config import AlgoConfig, ScheduleConfig, StopConfig, TrainConfig
from rltrain.rl.schedules import LRSender, linear, schedule_progress


def test_linear_and_progress() -> None:
    assert linear(1.0, None, 0.7) == 1.0  # no end: constant
    assert linear(1.0, 0.0, 0.25) == 0.75
    assert linear(0.01, 0.001, 1.0) == pytest.approx(0.001)
    c = TrainConfig(stop=StopConfig(max_env_steps=1000))
    assert schedule_progress(c, 250) == 0.25 and schedule_progress(c, 5000) == 1.0
    c = TrainConfig(stop=StopConfig(max_seconds=5), schedule=ScheduleConfig(steps=100))
    assert schedule_progress(c, 50) == 0.5
    # schedule.start: held at the start value until then, then linear to `steps`
    c = TrainConfig(stop=StopConfig(max_seconds=5), schedule=ScheduleConfig(steps=300, start=100))
    assert [schedule_progress(c, n) for n in (0, 100, 200, 300, 900)] == [0, 0, 0.5, 1, 1]


def test_entropy_schedule_reaches_the_loss() -> None:
    c = TrainConfig(
        env=EnvConfig(),
        algo=AlgoConfig(entropy_coef=0.02),
        schedule=ScheduleConfig(steps=100, entropy_end=0.0),
        stop=StopConfig(max_seconds=1),
    )
    loss = c.algo_spec.make_loss(c)
    assert loss.entropy_coef == 0.02
    loss.set_progress(0.5)
    assert loss.entropy_coef == pytest.approx(0.01)
    loss.set_progress(1.0)
    assert loss.entropy_coef == 0.0


def test_lr_factor_scales_the_server_step() -> None:
    """SGD at lr 0.1: a unit gradient moves a weight by 0.1, by 0.025 at factor 0.25."""
    s = ParameterShard(torch.zeros(1), OptimizerConfig(name="sgd", lr=0.1), ServerConfig(), 1)
    s.push(GradUpdate(0, 0, torch.ones(1), 1))
    s.set_lr_factor(0.25)
    s.push(GradUpdate(0, 1, torch.ones(1), 1))
    assert s.pull().values.item() == pytest.approx(-0.125)
    restored = ParameterShard(
        torch.zeros(1), OptimizerConfig(name="sgd", lr=0.1), ServerConfig(), 1
    )
    restored.load_state_dict(s.state_dict())  # a resumed run keeps its schedule's factor
    restored.push(GradUpdate(0, 2, torch.ones(1), 1))
    assert restored.pull().values.item() == pytest.approx(-0.15)


def test_the_driver_sends_the_factor_each_time_the_shards_loaded_a_state() -> None:
    """Resumed shards hold their checkpoint's factor (0 after a finished anneal): the first
    tick replaces it, with 1.0 when the run now has no schedule; so does a shard restore."""
    sent: list[float] = []
    cfg = TrainConfig(stop=StopConfig(max_seconds=1))  # schedule.lr_end None
    server = SimpleNamespace(set_lr_factor=sent.append)
    lr = LRSender()
    lr.send(cfg, server, 0, 0.5)
    lr.send(cfg, server, 0, 0.5)
    assert sent == [1.0]
    lr.send(cfg, server, 1, 0.5)  # a shard restore
    assert sent == [1.0, 1.0]


def test_the_learning_rate_logged_at_the_anneals_end_is_zero() -> None:
    """optim/lr jumped back to optimizer.lr at the last point of a run annealed to 0 (a
    factor of 0 read as none sent)."""
    cfg = load_config(TrainConfig, None, ["stop.max_env_steps=100", "schedule.lr_end=0"])
    lr = LRSender()
    assert lr.lr(cfg) == cfg.optimizer.lr  # nothing sent yet: the configured rate
    lr.send(cfg, SimpleNamespace(set_lr_factor=lambda f: None), 0, 1.0)
    assert lr.factor == 0.0 and lr.lr(cfg) == 0.0


def test_the_anneal_ends_exactly_at_lr_end() -> None:
    """explore98: cartpole_impala.yaml's 0.003 -> 0.0003 stepped at 0.0003228 past its end:
    1 -> 0.1 at progress 1 was 0.09999999999999998, not the end the sender resends, and the
    last factor sent (0.1076) was within 1% of it."""
    assert linear(1.0, 0.1, 1.0) == 0.1 and linear(0.01, 0.001, 1.0) == 0.001
    assert all(linear(0.01, 0.01, i / 1000) == 0.01 for i in range(1001))  # (review 84)
    cfg = load_config(TrainConfig, None, ["stop.max_env_steps=100", "schedule.lr_end=0.1"])
    sent: list[float] = []
    lr = LRSender()
    for progress in (0.0, 0.5, 0.99, 0.992, 1.0, 1.0):
        lr.send(cfg, SimpleNamespace(set_lr_factor=sent.append), 0, progress)
    assert sent[-1] == 0.1 and sent.count(0.1) == 1


def test_the_learning_rate_logged_includes_the_warm_up_at_the_shards_version() -> None:
    """optim/lr said the full rate while the shards stepped at a fortieth of it (explore82):
    the warm-up's factor at the version logged, the shards' optimizer steps."""
    cfg = load_config(TrainConfig, None, ["optimizer.warmup_steps=100", "stop.max_seconds=1"])
    lr = LRSender()
    assert lr.lr(cfg, 0) == pytest.approx(cfg.optimizer.lr / 100)
    assert lr.lr(cfg, 49) == pytest.approx(cfg.optimizer.lr / 2)
    assert lr.lr(cfg, 100) == lr.lr(cfg, 5000) == cfg.optimizer.lr


def test_a_factor_the_server_could_not_take_is_sent_again() -> None:
    """A shard down when the factor moved (its process died): the factor is sent again at
    the next look, not lost, and the run goes on (the guard restores the shard)."""
    sent: list[float] = []

    def down(factor: float) -> None:
        raise PeerLost("learner-0", "learner 0's process died")

    cfg = TrainConfig(stop=StopConfig(max_seconds=1))
    lr = LRSender()
    lr.send(cfg, SimpleNamespace(set_lr_factor=down), 0, 0.5)
    lr.send(cfg, SimpleNamespace(set_lr_factor=sent.append), 0, 0.5)
    assert sent == [1.0]


def test_schedule_without_horizon_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="schedule"):
        load_config(TrainConfig, None, ["stop.max_seconds=10", "schedule.lr_end=0"])


def test_schedule_start_must_come_before_its_end() -> None:
    with pytest.raises(ConfigError, match="schedule.start=500: must be below"):
        load_config(TrainConfig, None, ["stop.max_env_steps=500", "schedule.start=500"])
