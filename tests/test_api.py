"""The Python API: Config, train, evaluate, load_policy and bench, against summary.json."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

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
