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


SETS = {
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


def pong(run: Path, **sets: object) -> list[str]:
    argv = ["train", str(ROOT / "configs" / "pong_appo.yaml"), "--run-dir", str(run)]
    for key, value in {**SETS, **sets}.items():
        argv += ["--set", f"{key}={value}"]
    return argv


def test_pong_trains_through_the_batched_policy_and_the_learner_process(tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert main(pong(run)) == 0
    s = read_summary(run)
    assert s["stopped_by"] == "max_env_steps" and s["env_steps"] >= 640
    written = yaml.safe_load((run / "config.yaml").read_text())
    assert written["env"]["sticky_actions"] == 0.25  # the config's null: the id's, resolved
    assert s["updates"] == s["updates_applied"] > 0 and s["rejected"] == 0
    state = torch.load(latest_checkpoint(run), weights_only=True)
    shard = state["shards"][0]
    assert shard["counters"][0] == int(shard["version"]) == s["updates_applied"]
    assert shard["zero_steps"] == 0


def test_pong_goes_on_when_its_actor_policy_worker_and_learner_are_killed_mid_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The rollouts' slots hold each step's newest frame (rltrain.rl.frames): a slot whose
    actor or learner died mid-call is lent again, and the restarted actor writes its first
    stacks whole; the steps still add up."""
    run = tmp_path / "run"
    kills = "[{at: 1.0, target: actor, action: kill}, {at: 2.0, target: policy, action: kill}"
    kills += ", {at: 3.0, target: learner, action: kill}]"  # (the learner: with its shard)
    argv = pong(run, **{"stop.max_env_steps": 2560, "faults.events": kills})
    assert main(argv) == 0
    s = read_summary(run)
    assert s["stopped_by"] == "max_env_steps" and s["env_steps"] >= 2560
    faults = s["faults"]
    assert faults["injected"] == 3 and faults["actor_restarts"] == faults["policy_restarts"] == 1
    assert faults["learner_restarts"] == 1
    assert s["updates_applied"] > 0 and s["rejected"] == 0
    out = "".join(capsys.readouterr())
    assert "injected fault: kill actor 0" in out and "injected fault: kill policy 0" in out
    assert "actor 0 is back" in out and "policy 0 is back" in out and "kill learner 0" in out
