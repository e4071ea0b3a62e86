"""A new algorithm is one registry entry: a toy one, defined here alone, trains end to end."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import rltrain
from rltrain.config import ConfigError
from rltrain.rl.algos import AlgoSpec, TargetInputs, algo_spec, register_algo, unregister_algo
from rltrain.rl.config import TrainConfig
from rltrain.rl.losses import lambda_returns

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


def test_a_registered_algorithm_trains_through_the_trainer(toy_algo: AlgoSpec, tmp_path: Path):
    run = rltrain.train(
        ROOT / "configs" / "cartpole_a3c.yaml",
        run_dir=tmp_path / "run",
        algo__name="toy_mc",
        algo__gae_lambda=0.5,  # ignored by the toy's targets
        actors=1,
        runtime__backend="local",  # threads: they see the registration made here
        stop__mean_return=None,
        stop__max_env_steps=2_000,
    )
    assert run.stopped_by == "max_env_steps"
    assert run.summary["algo"] == "toy_mc" and run.summary["updates"] > 0
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
