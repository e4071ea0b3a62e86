"""The Python API: Config, train, evaluate, load_policy and bench, against summary.json."""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path

import numpy as np
import pytest

import rltrain
from rltrain.config import ConfigError

ROOT = Path(__file__).resolve().parents[1]
CARTPOLE = ROOT / "configs" / "cartpole_a3c.yaml"


def test_config_from_yaml_with_overrides_validates_as_the_cli() -> None:
    base = rltrain.Config.from_yaml(CARTPOLE)
    cfg = base.with_overrides({"env.id": "Acrobot-v1", "optimizer.lr": 3e-4})
    assert cfg.value.env.id == "Acrobot-v1" and cfg.value.optimizer.lr == 3e-4
    assert base.value.env.id == "CartPole-v1"  # immutable: a new Config came back
    with pytest.raises(ConfigError, match="optimizer.lr='fast': expected a number"):
        base.with_overrides({"optimizer.lr": "fast"})
    with pytest.raises(ConfigError, match="unknown config key 'algo.epoch'"):
        base.with_overrides({"algo.epoch": 3})
    assert cfg.to_dict()["env"]["id"] == "Acrobot-v1"


@pytest.mark.slow
def test_train_evaluate_and_load_policy_agree_with_the_run(tmp_path: Path) -> None:
    run = rltrain.train(
        CARTPOLE, run_dir=tmp_path / "run", stop__max_env_steps=3000, stop__mean_return=None
    )
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert run.summary == summary
    assert run.stopped_by == summary["stopped_by"] == "max_env_steps"
    assert (run.env_steps, run.episodes, run.updates) == (
        summary["env_steps"],
        summary["episodes"],
        summary["updates"],
    )
    assert run.mean_return == summary["mean_return"]

    result = rltrain.evaluate(run.run_dir, episodes=3)
    assert len(result.returns) == 3 and result.mean == pytest.approx(np.mean(result.returns))

    policy = rltrain.load_policy(run.run_dir)
    action = policy(np.zeros(4, np.float32))
    assert isinstance(action, int) and action in (0, 1)
    batch = policy(np.zeros((5, 4), np.float32), deterministic=True)
    assert batch.shape == (5,) and set(batch.tolist()) <= {0, 1}
    with pytest.raises(ValueError, match=r"this policy takes \(4,\)"):
        policy(np.zeros(3, np.float32))


@pytest.mark.slow
def test_ctrl_c_stops_a_python_run_gracefully(tmp_path: Path) -> None:
    """As in a notebook: SIGINT (KeyboardInterrupt) mid-run ends it with a checkpoint."""
    timer = threading.Timer(12.0, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        run = rltrain.train(CARTPOLE, run_dir=tmp_path / "run", stop__max_seconds=120)
    finally:
        timer.cancel()
    assert run.stopped_by == "interrupt"
    assert list((tmp_path / "run" / "checkpoints").glob("ckpt-*.pt"))


@pytest.mark.slow
def test_bench_result_is_the_summary(tiny_root: Path, tmp_path: Path) -> None:
    res = rltrain.bench(
        ROOT / "configs" / "bench_fashion_mnist.yaml",
        run_dir=tmp_path / "bench",
        **{
            "data.root": str(tiny_root),
            "data.download": False,
            "modes": ["baseline"],
            "budget.epochs": 1,
            "batch_size": 32,
        },
    )
    summary = json.loads((tmp_path / "bench" / "summary.json").read_text())
    assert res.results == summary["results"]
    assert res.by_mode()["baseline"]["final_accuracy"] > 0
