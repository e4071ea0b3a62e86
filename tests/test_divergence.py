"""A run whose every update the server refuses (non-finite gradients) stops as "diverged" in
one line, with its parameters untouched, whatever the algorithm's layout: a3c/a2c/ppo workers
behind a barrier used to wait there for good, their version never reaching the target."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rltrain.cli import main

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("config", ["cartpole_ppo.yaml", "cartpole_appo.yaml"])
def test_a_run_that_only_makes_nan_gradients_stops_as_diverged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], config: str
) -> None:
    run = tmp_path / "run"
    code = main(
        [
            "train",
            str(ROOT / "configs" / config),
            "--run-dir",
            str(run),
            "--set",
            "env.imports=[custom_envs]",
            "--set",
            "env.wrappers=[custom_envs:HugeReward]",
            "--set",
            "normalize.reward=false",
            "--set",
            "stop.mean_return=null",
            "--set",
            "stop.max_seconds=120",
            "--set",
            "eval.every_steps=0",
        ]
    )
    assert code == 1
    summary = json.loads((run / "summary.json").read_text())
    assert summary["stopped_by"] == "diverged"
    assert summary["updates_applied"] == 0 and summary["rejected"] >= 100
    assert summary["wall_seconds"] < 60
    err = capsys.readouterr().err.strip().splitlines()[-1]
    # (none applied: from the first update, not a rate to lower; explore108)
    assert err.startswith("rltrain: run failed: diverged: the server refused all ")
    assert "non-finite" in err and "from the first" in err and "normalize.reward" in err
    from rltrain.rl.run.counters import Counters, diverged_note

    later = diverged_note(Counters(applied=50, rejected_in_a_row=100), "")
    assert later.startswith("diverged: the server refused the last 100 updates (non-finite)")
    assert "lower optimizer.lr" in later
