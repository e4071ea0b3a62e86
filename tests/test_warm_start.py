"""Warm start (DistBelief): one worker trains alone, then the others join the barriers."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import torch

from rltrain.ps.config import OptimizerConfig, ServerConfig
from rltrain.ps.shard import ParameterShard
from rltrain.records import GradUpdate


def push(shard: ParameterShard, worker: int, version: int) -> str:
    return shard.push(GradUpdate(worker, version, torch.ones(3), 1, {})).status


def test_a_worker_away_from_the_barrier_rejoins_with_its_first_push_even_a_late_one() -> None:
    shard = ParameterShard(
        torch.zeros(3), OptimizerConfig(name="sgd", lr=1.0), ServerConfig(rule="sync"), 2
    )
    shard.leave(1)  # warm start: worker 1 is not there yet
    assert push(shard, 0, 0) == "applied" and shard.version == 1  # a barrier of one
    assert push(shard, 1, 0) == "dropped"  # late for version 0, but it is back
    assert push(shard, 0, 1) == "accumulated" and shard.version == 1  # the barrier waits for 1
    assert push(shard, 1, 1) == "applied" and shard.version == 2


@pytest.mark.slow
def test_bench_warm_start_lets_worker_0_train_alone_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], run_bench: Any
) -> None:
    out, summary = run_bench(
        "modes: [sync]\nworkers: 2\nbatch_size: 16\nwarm_start: {seconds: 1.5}\n"
        "data: {dataset: toy_quadratic, toy: {dim: 8, samples: 600, condition: 10, noise: 0.0}}\n"
        "budget: {max_seconds: 4}\neval: {every_seconds: 0.5}\n"
        "optimizer: {name: sgd, lr: 0.3}\n"
    )
    said = capsys.readouterr()
    # when, on the accuracy curve's axes
    assert re.search(r"warm start over at 1\.\ds, [\d,]+ samples: 1 more worker joins", said.err)
    row = summary["results"][0]
    assert row["final_distance"] < 0.05 and row["dropped"] <= 2


def test_a_warm_start_ends_when_its_worker_ends_its_share(
    capsys: pytest.CaptureFixture[str], run_bench: Any
) -> None:
    """An epoch budget: worker 0 ended its share in 0.5 s and the mode idled to the warm
    start's end (20 s; samples/s 40x too low). The others join once it has ended."""
    _, summary = run_bench(
        "modes: [async]\nworkers: 2\nbatch_size: 16\nwarm_start: {seconds: 600}\n"
        "data: {dataset: toy_quadratic, toy: {dim: 8, samples: 640, noise: 0.0}}\n"
        "budget: {max_seconds: 0, epochs: 1}\neval: {every_seconds: 0.5}\n"
    )
    said = capsys.readouterr()
    assert "samples (worker 0 ended its share first): 1 more worker joins" in said.err
    assert summary["results"][0]["samples"] == 640  # (both workers' shares, whole)


@pytest.mark.slow
def test_a_warm_starts_late_workers_train_their_whole_share(run_bench: Any) -> None:
    """Under a barrier rule a late worker skipped to the server's version in its epoch plan:
    as many batches of its share as worker 0 had trained alone (an epoch of 8,000 samples
    trained 4,000). Now every sample of the epoch budget is trained."""
    _, summary = run_bench(
        "modes: [sync, average]\nworkers: 2\nbatch_size: 16\nwarm_start: {seconds: 1.0}\n"
        "data: {dataset: toy_quadratic, toy: {dim: 8, samples: 8000, noise: 0.0}}\n"
        "budget: {max_seconds: 0, epochs: 1}\neval: {every_seconds: 0.5}\n"
        "optimizer: {name: sgd, lr: 0.3}\n"
    )
    for row in summary["results"]:
        assert row["samples"] == 8000, row["mode"]
