"""The training mean's window: stop.window, but at least as many episodes as envs.

Envs that start their games together (a run's start, every --resume) end the short ones first,
so with more envs than the window the last ``stop.window`` episodes are the shortest of a round:
in Pong, the most lopsided wins. A resumed Pong run at 15 actors x 16 envs stopped "at 18.6"
on its first 17 games after the resume, all 18-21 wins, where the mean of its last 240 was 14.8.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from rltrain.config import load_config, to_dict
from rltrain.rl.config import StopConfig, TrainConfig
from rltrain.rl.config.train import episode_window
from rltrain.rl.rollout import WorkStats
from rltrain.rl.run.counters import KEEP_RETURNS, Counters

ROOT = Path(__file__).resolve().parents[1]
A3C = ROOT / "configs" / "cartpole_a3c.yaml"
# what the resumed Pong run had: 223 games of its last round, then the first 17 of the new one
AFTER_A_RESUME = [14.0] * 223 + [21.0] * 17


def config(*overrides: str) -> TrainConfig:
    return load_config(TrainConfig, A3C, ["stop.mean_return=18", *overrides])


def test_the_window_holds_at_least_one_episode_per_env() -> None:
    assert episode_window(20, 240) == 240
    assert episode_window(20, 16) == 20
    assert config("actors=15", "env.num_envs=16").episode_window == 240
    assert config("actors=1", "env.num_envs=16").episode_window == 20
    assert config("actors=auto", "env.num_envs=64").episode_window == 20  # not sized yet


def test_the_score_stop_is_not_met_by_the_first_short_games_of_a_round() -> None:
    c = Counters(recent_returns=list(AFTER_A_RESUME))
    stop = StopConfig(mean_return=18, window=20)
    assert c.mean_return(20) == pytest.approx(19.95)  # what stop.window alone would judge
    assert c.stop_met(stop, 0.0, window=20) == "mean_return"
    assert c.mean_return(240) == pytest.approx((223 * 14 + 17 * 21) / 240)
    assert c.stop_met(stop, 0.0, window=240) == ""


def test_counters_keep_a_window_larger_than_their_usual_thousand() -> None:
    c = Counters()
    window = KEEP_RETURNS + 500
    for _ in range(3):
        c.add(WorkStats(env_steps=1, episode_returns=[1.0] * 600), window)
    assert len(c.recent_returns) == window
    assert c.best_mean_return == pytest.approx(1.0)
    c.add(WorkStats(env_steps=1, episode_returns=[1.0] * 600), 20)
    assert len(c.recent_returns) == KEEP_RETURNS


@pytest.mark.parametrize(("actors", "refused"), [(15, False), (1, True)])
def test_a_resume_judges_the_stop_with_the_window_of_the_run(
    tmp_path: Path, actors: int, refused: bool
) -> None:
    """A run stopped on a biased window can be resumed; one whose whole window met the
    stop cannot (every process would start only to stop)."""
    from rltrain.checkpoint import CheckpointError, save_checkpoint
    from rltrain.ps.server import make_shards
    from rltrain.rl.config import server_settings
    from rltrain.rl.env_spec import initial_params, probe_env
    from rltrain.rl.run.resume import load_resume

    cfg = config(f"actors={actors}", "env.num_envs=16")
    spec = probe_env(cfg)
    _, shards = make_shards(initial_params(cfg, spec), cfg.optimizer, server_settings(cfg), 1)
    counters = Counters(episodes=240, recent_returns=list(AFTER_A_RESUME))
    state = {
        "shards": [s.state_dict() for s in shards],
        "counters": dataclasses.asdict(counters),
        "config": to_dict(cfg),
    }
    save_checkpoint(tmp_path, 0, state, keep=3)
    if refused:
        said = r"already met stop.mean_return=18.0 \(the mean of its last 20 episodes: 19.95\)"
        with pytest.raises(CheckpointError, match=said):
            load_resume(tmp_path, cfg, spec)
    else:
        resumed = load_resume(tmp_path, cfg, spec)
        assert resumed is not None and resumed.counters.recent_returns == AFTER_A_RESUME
    # actors: auto on resume takes the last session's size from the checkpoint
    auto = dataclasses.replace(cfg, actors=0)
    if refused:
        with pytest.raises(CheckpointError):
            load_resume(tmp_path, auto, spec)
    else:
        assert load_resume(tmp_path, auto, spec) is not None


def test_a_diverged_run_is_refused_in_one_line(tmp_path: Path) -> None:
    """A run the server stopped as diverged (every update refused as non-finite) says so on
    --resume, where it raised AttributeError (stop has no key 'diverged')."""
    from rltrain.checkpoint import CheckpointError, save_checkpoint
    from rltrain.ps.server import make_shards
    from rltrain.rl.config import server_settings
    from rltrain.rl.env_spec import initial_params, probe_env
    from rltrain.rl.run.counters import DIVERGED_AFTER
    from rltrain.rl.run.resume import load_resume

    cfg = config("actors=1")
    spec = probe_env(cfg)
    _, shards = make_shards(initial_params(cfg, spec), cfg.optimizer, server_settings(cfg), 1)
    counters = Counters(rejected_in_a_row=DIVERGED_AFTER)
    state = {
        "shards": [s.state_dict() for s in shards],
        "counters": dataclasses.asdict(counters),
        "config": to_dict(cfg),
    }
    save_checkpoint(tmp_path, 0, state, keep=3)
    with pytest.raises(CheckpointError, match="diverged .* last 100 updates as non-finite"):
        load_resume(tmp_path, cfg, spec)


def test_a_run_logs_the_mean_the_stop_judges(tmp_path: Path) -> None:
    """TensorBoard's episode/mean_return is the live line's and the stop's mean, with the
    window summary.json names (6 actors x 8 envs: 48, more than stop.window=20)."""
    import json

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from rltrain.cli import main

    run = tmp_path / "run"
    argv = ["train", str(ROOT / "configs" / "cartpole_appo.yaml"), "--run-dir", str(run)]
    for kv in ("runtime.backend=local", "actors=6", "stop.mean_return=null"):
        argv += ["--set", kv]
    assert main([*argv, "--set", "stop.max_env_steps=12000"]) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["mean_window"] == 48 and summary["episodes"] >= 48
    tb = EventAccumulator(str(run / "tb"), size_guidance={"scalars": 0})
    tb.Reload()
    returns = [p.value for p in tb.Scalars("episode/return")]
    means = tb.Scalars("episode/mean_return")
    assert len(returns) >= 48 and means
    assert means[-1].value == pytest.approx(sum(returns[-48:]) / 48, rel=1e-5)
    assert means[-1].value == pytest.approx(summary["final_mean_return"], rel=1e-5)
