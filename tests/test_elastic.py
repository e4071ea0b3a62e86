"""Elastic workers: faults.events add / remove, with the barriers re-counting N."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from rltrain.config import ConfigError, load_config
from rltrain.ps.config import OptimizerConfig, ServerConfig
from rltrain.ps.shard import ParameterShard
from rltrain.records import GradUpdate
from rltrain.rl.config import TrainConfig


def push(shard: ParameterShard, worker: int, version: int) -> str:
    return shard.push(GradUpdate(worker, version, torch.ones(2), 1, {})).status


def test_a_joined_worker_counts_at_the_barrier_and_a_removed_one_does_not() -> None:
    sgd = OptimizerConfig(name="sgd", lr=1.0)
    shard = ParameterShard(torch.zeros(2), sgd, ServerConfig(rule="sync"), 2)
    shard.join(2)  # three workers now, but no barrier waits for 2 before its first push
    assert push(shard, 0, 0) == "accumulated" and push(shard, 1, 0) == "applied"
    assert push(shard, 2, 0) == "dropped"  # late for version 0: it counts from now on
    assert push(shard, 0, 1) == "accumulated" and push(shard, 1, 1) == "accumulated"
    assert push(shard, 2, 1) == "applied" and shard.version == 2
    shard.leave(1)  # removed: two again
    assert push(shard, 0, 2) == "accumulated" and push(shard, 2, 2) == "applied"


def test_add_and_remove_are_bench_worker_events(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(
        "env: {id: CartPole-v1}\nstop: {max_seconds: 5}\n"
        "faults: {events: [{action: remove, target: actor, index: 0, at: 1}]}\n"
    )
    with pytest.raises(ConfigError, match="action remove applies to target worker"):
        load_config(TrainConfig, path)


@pytest.mark.slow
def test_a_bench_mode_shrinks_and_grows_mid_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], run_bench: Any
) -> None:
    """sync, the harder case: its barrier must re-count N both ways (async needs nothing)."""
    out, summary = run_bench(
        "modes: [sync]\nworkers: 2\nbatch_size: 16\n"
        "data: {dataset: toy_quadratic, toy: {dim: 8, samples: 600, condition: 10, noise: 0.0}}\n"
        "budget: {max_seconds: 5}\neval: {every_seconds: 0.5}\n"
        "optimizer: {name: sgd, lr: 0.3}\nserver: {barrier_timeout_s: 5}\n"
        "faults: {events: [{action: remove, target: worker, index: 1, at: 1},"
        " {action: add, target: worker, index: 0, at: 2}]}\n"
    )
    said = capsys.readouterr()
    text = said.out + said.err
    assert "removed worker 1: 1 workers" in text
    assert "added worker 2 (on worker 0's data): 2 workers" in text
    row = summary["results"][0]
    assert row["workers"] == 3  # the removed worker stopped and reported its work too
    assert row["final_distance"] < 0.05
