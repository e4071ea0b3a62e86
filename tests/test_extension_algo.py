"""A new algorithm is one registry entry: a toy one, defined here alone, trains end to end."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import rltrain
from rltrain.config import ConfigError
from rltrain.rl.algos import AlgoSpec, algo_spec, register_algo, unregister_algo
from rltrain.rl.config import TrainConfig
from rltrain.rl.losses import lambda_returns
from rltrain.rl.targets import TargetInputs

ROOT = Path(__file__).resolve().parents[1]
CALLS: list[tuple[int, ...]] = []


def monte_carlo_targets(x: TargetInputs, cfg: TrainConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """Whole-rollout returns whatever ``algo.gae_lambda`` says (lambda = 1), and advantages
    against the value baseline: REINFORCE with a baseline over each rollout."""
    CALLS.append(tuple(x.rewards.shape))
    returns = lambda_returns(x.rewards, x.discounts, x.values, x.next_values, x.continues, lam=1.0)
    return returns, returns - x.values


@pytest.fixture
def toy_algo() -> Iterator[AlgoSpec]:
    CALLS.clear()
    spec = register_algo(AlgoSpec("toy_mc", "worker", targets=monte_carlo_targets))
    yield spec
    unregister_algo("toy_mc")


@pytest.mark.parametrize("backend", ["local", "process"])
def test_a_registered_algorithm_trains_through_the_trainer(
    toy_algo: AlgoSpec, tmp_path: Path, backend: str
) -> None:
    """On threads the workers see the registration made here; the process runtime's children
    (forks of a forkserver that started earlier) get it with their arguments."""
    run = rltrain.train(
        ROOT / "configs" / "cartpole_a3c.yaml",
        run_dir=tmp_path / "run",
        algo__name="toy_mc",
        algo__gae_lambda=0.5,  # ignored by the toy's targets
        actors=1,
        runtime__backend=backend,
        stop__mean_return=None,
        stop__max_env_steps=2_000,
    )
    assert run.stopped_by == "max_env_steps"
    assert run.summary["algo"] == "toy_mc" and run.summary["updates"] > 0
    if backend == "local":  # the targets ran in this process
        assert CALLS and CALLS[0] == (16, 8)  # [T, B]: algo.rollout_length x env.num_envs


def test_the_registry_names_every_algorithm_in_a_bad_name_error(toy_algo: AlgoSpec) -> None:
    assert algo_spec("toy_mc") is toy_algo
    with pytest.raises(ConfigError, match=r"algo.name='toy': allowed values are a3c, .*toy_mc"):
        rltrain.Config.from_yaml(ROOT / "configs" / "cartpole_a3c.yaml").with_overrides(
            {"algo.name": "toy"}
        )
    with pytest.raises(ValueError, match="registered already"):
        register_algo(AlgoSpec("toy_mc", "worker"))


def test_options_of_the_old_flat_algo_section_still_load() -> None:
    """Configs, command lines and checkpoints of an older rltrain kept PPO's and IMPALA's
    options in ``algo``: they land in their own sections."""
    cfg = rltrain.Config.from_yaml(ROOT / "configs" / "cartpole_appo.yaml").with_overrides(
        {"algo.epochs": 3, "algo.correction": "none", "algo.gamma": 0.9}
    )
    assert cfg.value.ppo.epochs == 3 and cfg.value.impala.correction == "none"
    assert cfg.value.algo.gamma == 0.9
    assert algo_spec("appo").sections == ("algo", "impala", "ppo")


def test_a_new_key_set_over_an_old_run_config_wins(tmp_path: Path) -> None:
    """A run's config.yaml from before the sections holds algo.epochs; --set ppo.epochs on
    resume must win over it, and a resume names the change."""
    from rltrain.config import load_config
    from rltrain.rl.resume import resume_changes

    old = tmp_path / "config.yaml"
    old.write_text("algo: {name: appo, epochs: 4}\nstop: {max_env_steps: 100}\n")
    cfg = load_config(TrainConfig, old, ["ppo.epochs=8"])
    assert cfg.ppo.epochs == 8
    saved = {"algo": {"name": "appo", "epochs": 4}, "stop": {"max_env_steps": 100}}
    assert resume_changes(tmp_path / "ckpt.pt", saved, cfg) == ["ppo.epochs: 4 -> 8"]


def test_a_module_of_env_imports_registers_before_the_config_is_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From the command line a user's algorithm lives in a module of ``env.imports``: it is
    imported before ``algo.name`` is checked (and by every process that makes an env or
    learns)."""
    from rltrain.config import load_config

    (tmp_path / "my_algos.py").write_text(
        "from rltrain.rl.algos import AlgoSpec, register_algo\n"
        'register_algo(AlgoSpec("mine", "worker"))\n'
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        argv = ["env.imports=[my_algos]", "algo.name=mine", "stop.max_env_steps=10"]
        assert load_config(TrainConfig, None, argv).algo_spec.name == "mine"
    finally:
        unregister_algo("mine")
        sys.modules.pop("my_algos", None)


def test_reading_a_train_config_imports_no_torch() -> None:
    """``rltrain train`` reads its config, then starts Ray while torch loads elsewhere: the
    registries keep their tensor code out of the config's imports."""
    code = "import sys, rltrain.rl.config; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
