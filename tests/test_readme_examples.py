"""The README's examples run as written: "From Python" and "Your own environment"."""

from __future__ import annotations

import functools
import json
import re
import types
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

import rltrain
from rltrain.config import load_config, merge, read_yaml
from rltrain.rl.config import TrainConfig

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]


def blocks(section: str, lang: str) -> list[str]:
    """The ``lang`` code blocks of the README section titled ``section``."""
    text = (ROOT / "README.md").read_text()
    body = text.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(rf"```{lang}\n(.*?)```", body, re.S)


def test_from_python_trains_evaluates_and_acts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "configs").symlink_to(ROOT / "configs")
    scope: dict = {}
    exec(blocks("From Python", "python")[0], scope)  # noqa: S102 - the README's own code
    run = scope["run"]
    # the typed result is the run's summary.json
    summary = json.loads((tmp_path / "runs" / "acrobot" / "summary.json").read_text())
    assert run.summary == summary and run.stopped_by == "mean_return"
    assert (run.env_steps, run.episodes, run.mean_return) == (
        summary["env_steps"],
        summary["episodes"],
        summary["mean_return"],
    )
    # load_policy acts as rltrain eval's policy does on the same observations
    from rltrain.rl.evaluate import checkpoint_params, load_policy

    cfg = load_config(TrainConfig, run.run_dir / "config.yaml")
    path, _, values, norm = checkpoint_params(run.run_dir)
    policy = scope["policy"]
    evaluator = load_policy(cfg, run.run_dir, (path, values, norm), (6,), policy.actions)
    obs = np.random.default_rng(0).normal(size=(32, 6)).astype(np.float32)
    assert np.array_equal(policy(obs, deterministic=True), evaluator.act(obs, None, True))
    policy.generator.manual_seed(7)
    assert np.array_equal(policy(obs), evaluator.act(obs, torch.Generator().manual_seed(7)))
    assert isinstance(policy(obs[0]), int)
    with pytest.raises(ValueError, match=r"this policy takes \(6,\)"):
        policy(np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="observation holds NaN or inf"):
        policy(np.full(6, np.nan, np.float32))  # it acted on NaN logits, silently
    with pytest.raises(ValueError, match="^deterministic='no': allowed are True or False$"):
        policy(obs, deterministic="no")  # (a truthy string: it played the most likely)


def test_from_python_bench(
    tiny_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bench example, pointed at tiny generated files (no download here) for one epoch."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "configs").symlink_to(ROOT / "configs")
    tiny = types.SimpleNamespace(
        bench=functools.partial(
            rltrain.bench,
            **{"data.root": str(tiny_root), "data.download": False, "budget.epochs": 1},
        )
    )
    scope: dict = {"rltrain": tiny}
    exec(blocks("From Python", "python")[1], scope)  # noqa: S102
    res = scope["res"]
    summary = json.loads((res.run_dir / "summary.json").read_text())
    assert res.results == summary["results"] and set(res.by_mode()) == {"sync", "async"}


def test_your_own_environment_trains_in_actor_processes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The YAML of "Your own environment" on top of cartpole_appo.yaml, through actor
    processes (the default runtime) that import the user's module themselves (it is not
    installed: the key `imports` names it)."""
    monkeypatch.chdir(ROOT)  # where `examples` is found, as the README's command runs
    env = yaml.safe_load(blocks("Your own environment", "yaml")[0])
    data = merge(read_yaml(ROOT / "configs" / "cartpole_appo.yaml"), env)
    cfg = rltrain.Config(data).with_overrides(
        {"stop.mean_return": 8.0, "stop.max_seconds": 120}  # scaled by ScaleReward: 10 x 0.8
    )
    run = rltrain.train(cfg, run_dir=tmp_path / "corridor")
    assert run.stopped_by == "mean_return", run.summary
    assert run.summary["protocol"]["id"] == "examples/Corridor-v0"


def test_your_own_environments_command_meets_its_stop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bash command of "Your own environment", as written: its stop (0.8) is the
    corridor's best return, which float32 rewards sum to 0.79999999702; it was never met and
    the run went on to cartpole_appo's max_seconds."""
    import shlex

    from rltrain.cli import main

    monkeypatch.chdir(ROOT)
    (command,) = [b for b in blocks("Your own environment", "bash") if "Corridor" in b]
    argv = shlex.split(command.replace("\\\n", " "), comments=True)
    assert argv[0] == "rltrain"
    out = tmp_path / "corridor"
    assert main([*argv[1:], "--set", "stop.max_seconds=120", "--run-dir", str(out)]) == 0
    assert json.loads((out / "summary.json").read_text())["stopped_by"] == "mean_return"
