"""TensorBoard logging of `rltrain train`: rates without a 0 between rollouts, and a
custom-scalars layout in each run's tb folder whose charts cover the tags the logger writes."""

from __future__ import annotations

import re
import time
from dataclasses import replace
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.custom_scalar import layout_pb2

from rltrain.faults import FaultCounters
from rltrain.rl.algos import AlgoConfig
from rltrain.rl.config import StopConfig, TrainConfig
from rltrain.rl.rollout import LossStats, WorkStats
from rltrain.rl.run.tblog import LAYOUT, SESSION_TAG, TrainLogger

CFG = TrainConfig(stop=StopConfig(max_env_steps=100_000))


class Clock:
    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


def events(tb: Path) -> EventAccumulator:
    acc = EventAccumulator(str(tb), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return acc


def test_env_fps_is_a_windowed_rate_not_a_saw_tooth(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rollouts of 1,024 steps (4 frames each) land every 3 s, log points every 2 s: each
    point after the first rollout shows ~1,365 frames/s, none shows 0."""
    clock = Clock()
    monkeypatch.setattr(time, "time", clock)
    log = TrainLogger(tmp_path / "tb", CFG, {}, frames_per_step=4)
    steps, start = 0, clock.t
    for ms in range(100, 60_001, 100):  # the driver's loop: a turn every 0.1 s for 60 s
        clock.t = start + ms / 1000
        if ms % 3000 == 0:
            steps += 1024
            log.absorb(WorkStats(env_steps=1024, updates=2), steps)
        if ms % 2000 == 0:
            log.flush(steps, version=ms)
    log.close()
    fps = [e.value for e in events(tmp_path / "tb").Scalars("perf/env_fps")]
    updates = [e.value for e in events(tmp_path / "tb").Scalars("perf/learner_updates_per_s")]
    assert len(fps) == 30 and fps[0] == 0.0  # nothing arrived in the first 2 s
    assert all(x > 0 for x in fps[1:])
    assert all(x == pytest.approx(4096 / 3, rel=0.3) for x in fps[5:])
    assert all(x == pytest.approx(2 / 3, rel=0.3) for x in updates[5:])


def read_layout(tb: Path) -> layout_pb2.Layout:
    acc = events(tb)
    assert "custom_scalars__config__" in acc.PluginTagToContent("custom_scalars")
    (event,) = acc.Tensors("custom_scalars__config__")
    return layout_pb2.Layout.FromString(event.tensor_proto.string_val[0])


def test_the_layout_covers_every_tag_the_logger_writes(tmp_path: Path) -> None:
    from rltrain.ps.config import ServerConfig

    scaled = replace(CFG, server=ServerConfig(staleness="scale"))
    log = TrainLogger(tmp_path / "tb", scaled, {"frame_skip": 4}, frames_per_step=4)
    loss = LossStats(1.0, policy=0.1, value=0.2, entropy=1.3, kl=0.01, clip_fraction=0.1)
    stats = WorkStats(
        env_steps=64,
        episode_returns=[9.0],
        episode_lengths=[9],
        updates=4,
        dropped=1,
        staleness=[0, 2],
        lr_scales=[1.0, 0.5],  # server.staleness: scale's 1 / staleness
        losses=[loss, LossStats(2.0, td=0.5, lag_kl=0.02)],
        actor_lag=[4, 8],
        epsilon=0.5,
        q_mean=1.0,
        phases={"actor/env": 1.0, "learner/learn": 2.0, "worker/wait": 1.0},
    )
    log.absorb(stats, 64, mean=9.0)  # the training mean, once its window is full
    log.flush(64, 3, replay_size=64, net=(10, 20), lr=1e-3)
    log.faults(FaultCounters(), 64)
    log.close()
    titles = list(LAYOUT)  # every algorithm's charts: each run writes those it fills
    assert titles == ["returns", "speed", "staleness", "losses", "faults"]
    patterns = {
        title: [re.compile(r) for _, tags in charts.values() for r in tags]
        for title, charts in LAYOUT.items()
    }
    written = set(events(tmp_path / "tb").Tags()["scalars"])
    written |= {"eval/mean_return", "eval/mean_length"}  # rltrain.rl.run.periodic's
    home = {t: [c for c, rs in patterns.items() if any(r.search(t) for r in rs)] for t in written}
    assert all(home.values()), [t for t, c in home.items() if not c]  # every tag has a chart
    assert {"perf/env_fps", "perf/time/actor/env", "net/bytes_pushed", SESSION_TAG} <= {
        t for t, c in home.items() if "speed" in c
    }
    assert {"ps/staleness_mean", "ps/staleness_max", "ps/dropped_fraction", "loss/lag_kl"} <= {
        t for t, c in home.items() if "staleness" in c
    }
    assert {"ps/actor_lag_mean", "ps/actor_lag_max"} <= {
        t for t, c in home.items() if "staleness" in c
    }
    assert [e.value for e in events(tmp_path / "tb").Scalars("ps/actor_lag_mean")] == [6.0]
    # the rate the applied updates stepped with (explore98: optim/lr alone hid the scaling)
    effective = events(tmp_path / "tb").Scalars("optim/lr_effective")
    assert [e.value for e in effective] == [pytest.approx(0.75e-3)]
    assert {"optim/lr", "optim/lr_effective"} <= {t for t, c in home.items() if "losses" in c}
    # the staleness is the applied updates': the drops beside it (explore85)
    assert [e.value for e in events(tmp_path / "tb").Scalars("ps/dropped_fraction")] == [0.25]
    assert {"episode/return", "episode/mean_return"} <= {
        t for t, c in home.items() if "returns" in c
    }
    assert {t for t in written if t.startswith("faults/")} == {
        t for t, c in home.items() if "faults" in c
    }


def test_the_effective_rate_is_written_where_the_rule_scales(tmp_path: Path) -> None:
    """optim/lr_effective where a rule may scale a step, from the first point (review 86: it
    began at the first interval with a staleness of 2); elsewhere it would be optim/lr."""
    from rltrain.ps.config import ServerConfig

    scaled = replace(CFG, server=ServerConfig(staleness="scale"))
    for cfg, tb in ((CFG, tmp_path / "tb"), (scaled, tmp_path / "scaled")):
        log = TrainLogger(tb, cfg, {}, frames_per_step=1)
        log.absorb(WorkStats(env_steps=64, updates=2, staleness=[0, 1], lr_scales=[1.0, 1.0]), 64)
        log.flush(64, 2, lr=1e-3)
        log.close()
    assert "optim/lr_effective" not in events(tmp_path / "tb").Tags()["scalars"]
    assert [e.value for e in events(tmp_path / "scaled").Scalars("optim/lr_effective")] == [
        pytest.approx(1e-3)
    ]


@pytest.mark.parametrize(
    ("algo", "policy_worker", "roles", "absent"),
    [
        (
            "a3c",
            False,
            {"worker"},
            {"replay size", "behaviour-policy lag KL", "td", "kl, clip fraction"},
        ),
        ("ppo", False, {"worker"}, {"replay size", "behaviour-policy lag KL", "td"}),
        ("appo", True, {"actor", "learner", "policy"}, {"replay samples/s", "td"}),
        ("impala", False, {"actor", "learner"}, {"replay size", "kl, clip fraction", "td"}),
        ("dqn", False, {"actor", "learner"}, {"policy", "entropy", "behaviour-policy lag KL"}),
    ],
)
def test_each_run_lays_out_only_the_charts_it_fills(
    tmp_path: Path, algo: str, policy_worker: bool, roles: set[str], absent: set[str]
) -> None:
    """explore98: an a3c run's CUSTOM SCALARS tab showed 9 empty panels (replay, dqn, the
    actors' lag, roles it has not); the layout a run writes names the charts it fills."""
    cfg = TrainConfig(algo=AlgoConfig(name=algo), stop=StopConfig(max_env_steps=100_000))
    log = TrainLogger(tmp_path / "tb", cfg, {}, frames_per_step=1)
    log.layout(cfg, policy_worker)
    log.close()
    charts = {ch.title for c in read_layout(tmp_path / "tb").category for ch in c.chart}
    assert {f"{r} time shares" for r in ("actor", "learner", "worker", "policy")} & charts == {
        f"{r} time shares" for r in roles
    }
    assert not absent & charts
    assert {"env frames/s", "server version", "gradient norm"} <= charts
    assert ("replay size" in charts) == (algo == "dqn")
    assert ("kl, clip fraction" in charts) == (algo in ("ppo", "appo"))


def test_each_session_marks_its_start_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """session/start: the first scalar of each session (a run, a --resume), at the env steps
    it starts from, so that `rltrain plot` can leave out the downtime between sessions."""
    clock = Clock()
    monkeypatch.setattr(time, "time", clock)
    for start_steps in (0, 640):
        log = TrainLogger(tmp_path / "tb", CFG, {}, frames_per_step=1, start_steps=start_steps)
        clock.t += 1
        stats = WorkStats(env_steps=64, episode_returns=[1.0], episode_lengths=[1])
        log.absorb(stats, start_steps + 64)
        log.flush(start_steps + 64, version=1)
        log.close()
        clock.t += 30  # the next session: a new event file (names are by the second)
    acc = events(tmp_path / "tb")
    marks = acc.Scalars(SESSION_TAG)
    assert [(m.step, m.value) for m in marks] == [(0, 1.0), (640, 1.0)]
    first = min(e.wall_time for t in acc.Tags()["scalars"] for e in acc.Scalars(t))
    assert marks[0].wall_time == first == 1_000_000.0
    assert marks[1].wall_time == 1_000_031.0  # before that session's other events


def test_the_round_is_marked_settled_and_unsettled_as_the_stop_sees_it(tmp_path: Path) -> None:
    """session/settled at the session's first counted result (0 here: envs in their first
    game), 1 once every counting actor says its envs have ended a game; 0 when a restarted
    actor's envs start theirs together (the stop waits again); nothing while no actor has
    counted, or for a repeat of the same state."""
    from rltrain.rl.rollout import RoundCount as R
    from rltrain.rl.run.counters import Counters
    from rltrain.rl.run.tblog import SETTLED_TAG

    log = TrainLogger(tmp_path / "tb", CFG, {}, frames_per_step=1)
    c = Counters()
    c.new_session()
    steps = 0
    restart = 1.0  # actor 1's restart: a later round (RoundCount.since)
    for said in (
        {},
        {0: R(2, 0.0), 1: R(4, 0.0)},
        {0: R(0, 0.0)},
        {1: R(0, 0.0)},
        {0: R(0, 0.0)},
        {1: R(4, restart)},
        {1: R(1, restart)},
        {1: R(0, restart)},
    ):
        steps += 100
        c.add(WorkStats(env_steps=100, unsettled=said), 240)
        log.round(c.round_settled, steps)
    c.actor_gone(0)
    c.actor_gone(1)  # none counts any more: the state stands
    log.round(c.round_settled, steps + 100)
    log.close()
    marks = events(tmp_path / "tb").Scalars(SETTLED_TAG)
    assert [(m.step, m.value) for m in marks] == [(200, 0.0), (400, 1.0), (600, 0.0), (800, 1.0)]


def test_the_bar_reaches_100_percent_only_where_the_score_stop_may_judge() -> None:
    """explore103: an IMPALA run on MsPacman, whose mean passed pong_impala.yaml's 18 while
    15 envs were in their first game, read 100% from 41 s to its time stop."""
    from rltrain.rl.run.counters import Counters
    from rltrain.rl.run.tblog import stop_fraction

    stop = StopConfig(mean_return=18, max_seconds=100)
    c = Counters(episodes=2, recent_returns=[160.0, 160.0], unsettled={0: 15}, actors=1)
    assert stop_fraction(stop, c, 41.0, 20) == 0.99
    c.unsettled = {0: 0}
    assert stop_fraction(stop, c, 41.0, 20) == 0.99  # 2 episodes of the 20 it judges
    c.recent_returns = [160.0] * 20
    assert stop_fraction(stop, c, 41.0, 20) >= 1.0


def test_the_live_line_says_the_updates_dropped_as_stale() -> None:
    """explore85: half the updates of a staleness=drop run were dropped, and the live line
    said updates 810, staleness 0.74 (the applied ones')."""
    from rltrain.rl.run.counters import Counters
    from rltrain.rl.run.tblog import status_line

    c = Counters(env_steps=1000, updates=810, applied=413, dropped=397)
    assert "updates 810 (397 dropped)  staleness" in status_line(c, 20, 1, 10.0, 0.0, "")
    assert "dropped" not in status_line(Counters(updates=5, applied=5), 20, 1, 10.0, 0.0, "")


def test_a_resumed_runs_live_line_counts_the_runs_seconds() -> None:
    """explore97 #8: a resume's line said 2s beside 35% of the run's max_seconds, and the stop
    line then said the run's 23s after a last line of 9s: one clock, the run's."""
    from rltrain.rl.run.counters import Counters
    from rltrain.rl.run.tblog import status_line

    line = status_line(Counters(env_steps=3000), 20, 1, 2.0, 98.0, "")
    assert line.startswith("  100s  steps 3,000  30 frames/s")


def test_no_rate_is_written_once_the_stop_has_come(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """explore88: the work in flight at the stop lands at once, and Breakout's last
    perf/env_fps point read 2,867 frames/s where the run held 2,048. After the stop the points
    carry the version and the losses, no rates; a run whose first point is after it has one."""
    clock = Clock()
    monkeypatch.setattr(time, "time", clock)
    log = TrainLogger(tmp_path / "tb", CFG, {}, frames_per_step=4)
    for i in range(1, 4):
        clock.t += 2
        log.absorb(WorkStats(env_steps=1024, updates=2), 1024 * i)
        log.flush(1024 * i, version=i)
    log.rates = False  # the stop: three rollouts in flight land within a second
    clock.t += 1
    log.absorb(WorkStats(env_steps=3072, updates=6), 6144)
    log.flush(6144, version=6)
    log.close()
    acc = events(tmp_path / "tb")
    assert [e.step for e in acc.Scalars("perf/env_fps")] == [1024, 2048, 3072]
    assert [e.step for e in acc.Scalars("ps/version")] == [1024, 2048, 3072, 6144]
    late = TrainLogger(tmp_path / "tb2", CFG, {}, frames_per_step=4)
    late.rates = False
    late.absorb(WorkStats(env_steps=512), 512)
    late.flush(512, version=1)
    late.close()
    assert len(events(tmp_path / "tb2").Scalars("perf/env_fps")) == 1


def test_no_point_is_due_before_the_first_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """explore88: an Atari run's 12 s of start-up wrote six points, all at step 0."""
    clock = Clock()
    monkeypatch.setattr(time, "time", clock)
    log = TrainLogger(tmp_path / "tb", CFG, {}, frames_per_step=4)
    clock.t += 12
    assert not log.due()
    log.absorb(WorkStats(env_steps=1024), 1024)
    assert log.due()
    log.close()


def test_the_hparams_tab_shows_the_settings_a_run_chose(tmp_path: Path) -> None:
    """explore110: no run wrote HPARAMS; the keys that differ from the defaults, and the
    keys that tell runs apart, with the metrics the run writes anyway."""
    from tensorboard.plugins.hparams import plugin_data_pb2

    cfg = replace(CFG, optimizer=replace(CFG.optimizer, lr=0.003), seed=4)
    TrainLogger(tmp_path / "tb", cfg, {"id": "CartPole-v1"}, frames_per_step=1).close()
    content = events(tmp_path / "tb").PluginTagToContent("hparams")
    data = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"])
    values = data.session_start_info.hparams
    assert values["optimizer.lr"].number_value == pytest.approx(0.003)
    assert values["seed"].number_value == 4 and values["algo.name"].string_value == "a3c"
    assert values["stop.max_env_steps"].number_value == 100_000
    assert "optimizer.name" not in values  # at its default: a blank in the table
    # no experiment summary: TensorBoard took the first run's columns for every run, hiding
    # the keys only others set (review88); without one it lists the union, every scalar a metric
    assert "_hparams_/experiment" not in content
    ppo = replace(
        CFG, algo=replace(CFG.algo, name="ppo"), normalize=replace(CFG.normalize, reward=True)
    )
    from rltrain.rl.run.hparams import hparam_values

    assert hparam_values(ppo)["server.rule"] == "sync"  # the rule its server runs
    assert hparam_values(ppo)["normalize.reward"] == "True"  # (a bool: not 0 or 1)


def test_each_session_writes_its_config_at_its_first_step(tmp_path: Path) -> None:
    """explore110: a resume wrote its config at step 0 again, hiding the first session's."""
    TrainLogger(tmp_path / "tb", CFG, {}, frames_per_step=1).close()
    more = replace(CFG, stop=StopConfig(max_env_steps=200_000))
    TrainLogger(tmp_path / "tb", more, {}, frames_per_step=1, start_steps=500).close()
    texts = events(tmp_path / "tb").Tensors("config/text_summary")
    assert [t.step for t in texts] == [0, 500]
    assert b"max_env_steps: 200000" in texts[1].tensor_proto.string_val[0]
