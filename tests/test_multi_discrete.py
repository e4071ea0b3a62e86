"""MultiDiscrete and MultiBinary actions: a categorical per sub-action (as SB3's and RLlib's
MultiCategorical), through the actors, the learners and a loaded policy."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.distributions import Categorical, kl_divergence

from rltrain.cli import main
from rltrain.envs import ActionSpace
from rltrain.rl.algos.distributions import MultiCategorical, distribution

ROOT = Path(__file__).resolve().parents[1]
NVEC = (3, 4)


def test_the_joint_is_the_product_of_the_sub_actions_categoricals() -> None:
    torch.manual_seed(0)
    p, q = torch.randn(5, 7), torch.randn(5, 7)  # [B, 3 + 4] logits
    d = distribution(ActionSpace(2, nvec=NVEC))
    assert isinstance(d, MultiCategorical)
    actions = torch.stack([torch.randint(0, 3, (5,)), torch.randint(0, 4, (5,))], -1)  # [B, 2]
    parts = [Categorical(logits=x) for x in torch.split(p, NVEC, -1)]
    others = [Categorical(logits=x) for x in torch.split(q, NVEC, -1)]
    want = sum(c.log_prob(actions[:, i]) for i, c in enumerate(parts))
    torch.testing.assert_close(d.log_prob(p, actions), want)
    torch.testing.assert_close(d.entropy(p), sum(c.entropy() for c in parts))
    kl = sum(kl_divergence(a, b) for a, b in zip(parts, others, strict=True))
    torch.testing.assert_close(d.kl(p, q), kl)
    drawn = d.sample(p, torch.Generator().manual_seed(1))
    assert drawn.shape == (5, 2) and drawn.dtype == torch.int64
    assert (drawn[:, 0] < 3).all() and (drawn[:, 1] < 4).all()
    assert d.mode(p).tolist() == [[int(x.argmax()) for x in torch.split(r, NVEC)] for r in p]


def test_appo_learns_each_sub_action_and_the_policy_acts_in_the_envs_units(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The cue's target for each of MultiDiscrete([3, 4], start=[-1, 0])'s sub-actions: 40
    the best return of 20 steps; the env refuses an action outside its space."""
    import rltrain

    run = tmp_path / "run"
    argv = ["train", str(ROOT / "configs" / "cartpole_appo.yaml"), "--run-dir", str(run)]
    for value in (
        "imports=[custom_envs]",
        "env.id=rltrain_test/MultiDiscrete-v0",
        "stop.mean_return=38",
        "stop.max_seconds=60",
        "runtime.backend=local",
    ):
        argv += ["--set", value]
    assert main(argv) == 0, capsys.readouterr().err
    summary: dict[str, Any] = json.loads((run / "summary.json").read_text())
    assert summary["stopped_by"] == "mean_return", summary["stopped_by"]
    policy, env = rltrain.load_policy(run), rltrain.make_env(run)
    obs, _ = env.reset(seed=0)
    action = policy(obs, deterministic=True)
    assert action.dtype == np.int64 and action.shape == (2,)
    assert env.action_space.contains(action)  # -1..1 and 0..3: the env's own units
    assert type(env.unwrapped).__name__ == "PickEach"  # the user's env itself
    gorila = ["train", str(ROOT / "configs" / "cartpole_gorila.yaml")]
    gorila += ["--run-dir", str(tmp_path / "q")]
    gorila += ["--set", "imports=[custom_envs]", "--set", "env.id=rltrain_test/MultiDiscrete-v0"]
    assert main(gorila) == 2
    assert "needs Discrete actions; rltrain_test/MultiDiscrete-v0 has MultiDiscrete([3, 4])" in (
        capsys.readouterr().err
    )
