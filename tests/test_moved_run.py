"""A run folder changed under a running run, or under a reader of one (explore89): moved away
mid-run (the run stops in one line, its processes go, nothing re-creates the old folder), and
the newest checkpoint pruned between its pick and its read (it is picked again)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

from rltrain.checkpoint import save_checkpoint
from rltrain.faults import RunFailed
from rltrain.ps.config import OptimizerConfig, ServerConfig
from rltrain.ps.server import LocalServer
from rltrain.rl.config import StopConfig, TrainConfig
from rltrain.rl.rollout import WorkStats
from rltrain.rl.run.tblog import TrainLogger
from rltrain.rundir import write_summary


def state(version: int) -> dict:
    server = LocalServer(torch.zeros(5), OptimizerConfig(name="sgd"), ServerConfig(), 1)
    return {"shards": server.state_dicts(), "counters": {"env_steps": version}, "config": {}}


def test_a_run_folder_moved_away_is_never_written_again(tmp_path: Path) -> None:
    run, moved = tmp_path / "run", tmp_path / "run2"
    run.mkdir()
    save_checkpoint(run, 1, state(1), keep=3)
    run.rename(moved)
    for write in (
        lambda: save_checkpoint(run, 2, state(2), keep=3),
        lambda: write_summary(run, {"env_steps": 2}),
    ):
        with pytest.raises(RunFailed, match=f"the run folder {run} is gone .*--resume it where"):
            write()
    assert not run.exists() and [p.name for p in (moved / "checkpoints").iterdir()] == [
        "ckpt-0000000001.pt"
    ]


def test_tensorboard_in_a_moved_folder_stops_the_run_once_in_one_line(tmp_path: Path) -> None:
    """TensorBoard's writer thread failed, every later call raised it again, and the trainer's
    release (log.close first) left its processes up, idle, for good."""
    run = tmp_path / "run"
    log = TrainLogger(run / "tb", TrainConfig(stop=StopConfig(max_env_steps=10)), {}, 1)
    log.absorb(WorkStats(env_steps=8), 8)
    log.flush(8, version=1)
    run.rename(tmp_path / "run2")
    with pytest.raises(RunFailed, match=f"the run folder {run} is gone") as first:
        for steps in range(16, 4000, 8):  # until the writer's thread has met the move
            log.absorb(WorkStats(env_steps=8, episode_returns=[1.0], episode_lengths=[8]), steps)
            log.flush(steps, version=steps)
            time.sleep(0.01)
    assert "\n" not in str(first.value)
    log.absorb(WorkStats(env_steps=8), 4008)  # the stop goes on: said once, then quiet
    log.flush(4008, version=2)
    log.close()
    assert not run.exists()


def test_the_newest_checkpoint_pruned_as_it_is_read_is_picked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader of a run that trains (eval, load_policy) met "checkpoint not found" once in a
    hundred reads with checkpoint.keep=1: the file it picked was pruned before it read it."""
    from rltrain.rl import evaluate

    save_checkpoint(tmp_path, 1, state(1), keep=1)
    picks: list[Path] = []
    real = evaluate.pick_checkpoint

    def racing(run_dir: Path, which: str, style: str = "cli") -> Path:
        picks.append(real(run_dir, which, style))  # type: ignore[arg-type]
        if len(picks) == 1:  # the run writes its next one, and prunes this, meanwhile
            save_checkpoint(tmp_path, 2, state(2), keep=1)
        return picks[-1]

    monkeypatch.setattr(evaluate, "pick_checkpoint", racing)
    path, loaded = evaluate.load_picked(tmp_path, "latest")
    assert path.name == "ckpt-0000000002.pt" and loaded["counters"]["env_steps"] == 2
    assert [p.name for p in picks] == ["ckpt-0000000001.pt", "ckpt-0000000002.pt"]
