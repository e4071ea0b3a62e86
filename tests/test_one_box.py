"""The GPU box's layout, run on the CPU with a tiny Atari budget: the actors act through the
trainer's batched policy, and the learner beside its shard computes with the shard's own
buffer and reads nothing from the device inside a batch."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from conftest import read_summary

from rltrain.checkpoint import latest_checkpoint
from rltrain.cli import main

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]


def test_pong_trains_through_the_batched_policy_and_the_learner_process(tmp_path: Path) -> None:
    run = tmp_path / "run"
    sets = {
        "actors": 1,
        "env.num_envs": 4,
        "algo.rollout_length": 16,
        "ppo.minibatches": 2,
        "ppo.epochs": 2,
        "model.precision": "fp32",  # (the GPU box's: views there; a CPU's CNN is copied in,
        # channels-last, and test_learner_views checks the views on an MLP)
        "runtime.backend": "process",
        "runtime.inference": "server",  # the GPU box's batched policy, on the CPU
        "stop.mean_return": "null",
        "stop.max_env_steps": 640,
        "eval.every_steps": 0,
    }
    argv = ["train", str(ROOT / "configs" / "pong_appo.yaml"), "--run-dir", str(run)]
    for key, value in sets.items():
        argv += ["--set", f"{key}={value}"]
    assert main(argv) == 0
    s = read_summary(run)
    assert s["stopped_by"] == "max_env_steps" and s["env_steps"] >= 640
    written = yaml.safe_load((run / "config.yaml").read_text())
    assert written["env"]["sticky_actions"] == 0.25  # the config's null: the id's, resolved
    assert s["updates"] == s["updates_applied"] > 0 and s["rejected"] == 0
    state = torch.load(latest_checkpoint(run), weights_only=True)
    shard = state["shards"][0]
    assert shard["counters"][0] == int(shard["version"]) == s["updates_applied"]
    assert shard["zero_steps"] == 0
