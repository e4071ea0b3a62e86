"""The Python API: Config, train, evaluate, load_policy and bench, against summary.json."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from pathlib import Path

import pytest

import rltrain
from rltrain.config import ConfigError
from rltrain.plot import PlotError, read_curve

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
    run_dir = tmp_path / "run"
    done = threading.Event()

    def interrupt_once_training() -> None:
        # Wait for the first scalars in TensorBoard (training has begun) rather than a fixed
        # delay: start-up time varies with the machine's load.
        while not done.wait(0.5):
            with contextlib.suppress(PlotError):
                read_curve(run_dir)  # raises until an episode's return is in TensorBoard
                os.kill(os.getpid(), signal.SIGINT)
                return

    watcher = threading.Thread(target=interrupt_once_training, daemon=True)
    watcher.start()
    try:
        # An unreachable target: only the interrupt (or the 120 s cap) can end this run.
        run = rltrain.train(CARTPOLE, run_dir=run_dir, stop__max_seconds=120, stop__mean_return=1e9)
    finally:
        done.set()
    assert run.stopped_by == "interrupt"
    assert list((tmp_path / "run" / "checkpoints").glob("ckpt-*.pt"))


@pytest.mark.slow
def test_a_ray_the_caller_started_is_left_running(tmp_path: Path) -> None:
    """A notebook that called ray.init itself keeps its Ray after a run (rltrain stops only
    the Ray it started)."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")
    try:
        run = rltrain.train(
            CARTPOLE, run_dir=tmp_path / "run", stop__max_env_steps=2000, stop__mean_return=None
        )
        assert run.stopped_by == "max_env_steps"
        assert ray.is_initialized()
    finally:
        ray.shutdown()
