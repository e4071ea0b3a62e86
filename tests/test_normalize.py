"""Observation and reward normalisation: the parallel merge, the server, checkpoints, eval."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from rltrain.checkpoint import load_checkpoint, save_checkpoint
from rltrain.normalize import Moments, NormStats, RewardScaler, merge_all
from rltrain.ps.config import OptimizerConfig, ServerConfig
from rltrain.ps.shard import ParameterShard
from rltrain.records import GradUpdate
from rltrain.rl.algos.models import build_policy


def test_merged_moments_equal_one_stream() -> None:
    """Chan et al.'s merge of 5 uneven parts == the moments of all the data at once."""
    g = torch.Generator().manual_seed(0)
    data = torch.randn(1000, 3, generator=g, dtype=torch.float64) * 4 + 7
    cuts = [0, 1, 17, 400, 401, 1000]
    parts = [Moments.of(data[a:b]) for a, b in zip(cuts, cuts[1:], strict=False)]
    merged = Moments.empty((3,))
    for p in parts:
        merged = merged.merge(p)
    whole = Moments.of(data)
    assert merged.count == whole.count == 1000
    torch.testing.assert_close(merged.mean, whole.mean)
    torch.testing.assert_close(merged.var, data.var(0, unbiased=False))
    both = merge_all([NormStats(parts[0]), None, NormStats(parts[1])])
    assert both is not None and both.obs is not None and both.obs.count == 17


def test_reward_scaler_divides_by_return_std_and_resets_at_episode_end() -> None:
    scaler = RewardScaler(num_envs=2, gamma=0.5, clip=10.0)
    r = np.array([1.0, 2.0], dtype=np.float32)
    scaled, seen = scaler(r, np.array([False, True]), scale=0.5)
    np.testing.assert_allclose(scaled, [0.5, 1.0])
    assert seen.count == 2 and float(seen.mean) == pytest.approx(1.5)
    np.testing.assert_allclose(scaler.returns, [1.0, 0.0])  # env 1 ended: its return restarts
    scaled, _ = scaler(np.array([100.0, 0.0]), np.array([False, False]), scale=1.0)
    assert scaled[0] == 10.0  # clipped
    assert NormStats(ret=Moments.of(torch.tensor([[1.0], [3.0]]))).reward_scale() == (
        pytest.approx(1.0, rel=1e-6)
    )
    assert NormStats(ret=Moments.of(torch.tensor([[1.0]]))).reward_scale() is None
    assert NormStats().reward_scale() is None


def test_before_the_server_knows_returns_a_scaler_scales_by_its_own() -> None:
    """The run's first rollouts: no server statistics yet, so each step's rewards are scaled
    by the std of every return this scaler has seen (this step's included), as VecNormalize
    does from its first step; the server's scale, once there, is used as given."""
    scaler = RewardScaler(num_envs=2, gamma=1.0, clip=10.0)
    scaled, _ = scaler(np.array([1.0, 3.0]), np.array([False, False]), scale=None)
    np.testing.assert_allclose(scaled, [1.0, 3.0], rtol=1e-6)  # returns 1 and 3: std 1
    scaled, _ = scaler(np.array([1.0, 1.0]), np.array([False, False]), scale=None)
    std = np.std([1.0, 3.0, 2.0, 4.0])  # every return seen so far
    np.testing.assert_allclose(scaled, [1 / std, 1 / std], rtol=1e-6)
    scaled, _ = scaler(np.array([2.0, 2.0]), np.array([False, False]), scale=0.5)
    np.testing.assert_allclose(scaled, [1.0, 1.0])  # the server's
    one = RewardScaler(num_envs=1, gamma=1.0, clip=10.0)  # one return: no std yet, so 1
    np.testing.assert_allclose(one(np.array([5.0]), np.array([False]), scale=None)[0], [5.0])


def shard() -> ParameterShard:
    return ParameterShard(torch.zeros(4), OptimizerConfig(name="sgd", lr=0.1), ServerConfig(), 1)


def test_server_merges_pushed_deltas_and_pulls_them_with_the_parameters() -> None:
    s = shard()
    a, b = torch.randn(10, 2, dtype=torch.float64), torch.randn(6, 2, dtype=torch.float64)
    s.push(GradUpdate(0, 0, torch.zeros(4), 10, norm=NormStats(Moments.of(a))))
    s.push(GradUpdate(0, 1, torch.zeros(4), 6, norm=NormStats(Moments.of(b))))
    pulled = s.pull().norm
    assert pulled is not None and pulled.obs is not None and pulled.obs.count == 16
    torch.testing.assert_close(pulled.obs.mean, torch.cat([a, b]).mean(0))
    bad = NormStats(Moments(1.0, torch.full((2,), float("nan")), torch.zeros(2)))
    assert s.push(GradUpdate(0, 2, torch.zeros(4), 1, norm=bad)).status == "rejected"
    assert s.pull().norm.obs.count == 16  # a rejected update never touches the statistics


def test_under_a_barrier_the_statistics_are_published_with_the_step() -> None:
    """sync: a push waiting at the barrier does not change what a pull of the same version
    returns, so a worker that pulls late acts with the same statistics as one that pulled
    early (measured: Taxi ppo on Ray and in one process then train bit-identically)."""
    s = ParameterShard(torch.zeros(4), OptimizerConfig(lr=0.1), ServerConfig(rule="sync"), 2)
    a, b = torch.randn(10, 2, dtype=torch.float64), torch.randn(6, 2, dtype=torch.float64)
    assert s.push(GradUpdate(0, 0, torch.ones(4), 10, norm=NormStats(Moments.of(a)))).status == (
        "accumulated"
    )
    early = s.pull()
    assert early.version == 0 and early.norm is None  # version 0's statistics: none yet
    assert s.push(GradUpdate(1, 0, torch.ones(4), 6, norm=NormStats(Moments.of(b)))).status == (
        "applied"
    )
    after = s.pull()
    assert after.version == 1 and after.norm is not None and after.norm.obs.count == 16


def test_normaliser_survives_a_checkpoint_round_trip(tmp_path: Path) -> None:
    s = shard()
    data = torch.randn(50, 2, dtype=torch.float64) * 3 + 1
    ret = Moments.of(torch.randn(50, 1, dtype=torch.float64))
    ret = Moments(ret.count, ret.mean[0], ret.m2[0])
    s.push(GradUpdate(0, 0, torch.zeros(4), 50, norm=NormStats(Moments.of(data), ret)))
    path = save_checkpoint(tmp_path, 1, {"shards": [s.state_dict()], "counters": {}}, keep=1)
    restored = shard()
    restored.load_state_dict(load_checkpoint(path)["shards"][0])  # weights_only=True
    before, after = s.pull().norm, restored.pull().norm
    assert after is not None and after.obs is not None and after.ret is not None
    assert after.obs.count == before.obs.count and after.ret.count == 50
    torch.testing.assert_close(after.obs.mean, before.obs.mean)
    torch.testing.assert_close(after.obs.m2, before.obs.m2)
    assert after.reward_scale() == pytest.approx(before.reward_scale())


def test_model_normalises_its_inputs_with_the_merged_statistics() -> None:
    net = build_policy("mlp", (2,), 3, 8, obs_norm_clip=5.0)
    data = torch.tensor([[0.0, 10.0], [2.0, 30.0]], dtype=torch.float64)
    net.set_norm(NormStats(Moments.of(data)))
    z = net.obs_norm(torch.tensor([[1.0, 20.0], [3.0, 1000.0]]))
    torch.testing.assert_close(z[0], torch.zeros(2), atol=1e-4, rtol=0)
    assert z[1, 0] == pytest.approx(2.0, rel=1e-4) and z[1, 1] == 5.0  # clipped at 5
    # the statistics are buffers, never parameters the server would train
    assert all("obs_norm" not in name for name, _ in net.named_parameters())


def test_auto_leaves_one_hot_observations_and_images_raw() -> None:
    """normalize.obs auto: on for vectors, off for one-hot cells (flattened Discrete spaces)
    and images; always / never are taken as given."""
    from gymnasium import spaces

    from rltrain.envs.adapt import one_hot
    from rltrain.rl.config import StopConfig, TrainConfig
    from rltrain.rl.inputs import normalizes_obs

    cfg = TrainConfig(stop=StopConfig(max_seconds=1))
    assert normalizes_obs(cfg, (4,)) and not normalizes_obs(cfg, (500,), one_hot=True)
    assert not normalizes_obs(cfg, (4, 84, 84))
    assert one_hot(spaces.Discrete(500)) and one_hot(spaces.MultiBinary(3))
    assert one_hot(spaces.Tuple((spaces.Discrete(32), spaces.Discrete(11), spaces.Discrete(2))))
    assert not one_hot(spaces.Dict({"pos": spaces.Box(0, 1, (2,)), "cell": spaces.Discrete(4)}))
    assert not one_hot(None)


@pytest.mark.parametrize(
    ("env_id", "given", "written"),
    [
        ("FrozenLake-v1", "auto", "never"),
        ("CartPole-v1", "auto", "always"),
        ("FrozenLake-v1", "always", "always"),
    ],
)
def test_a_new_run_writes_what_auto_chose(env_id: str, given: str, written: str, tmp_path: Path):
    """config.yaml holds the choice, so a resumed session and `rltrain eval` build the network
    the run trained (they see only the observation shape)."""
    from rltrain.config import load_config
    from rltrain.launch import prepare_train
    from rltrain.rl.config import TrainConfig

    cfg = load_config(
        TrainConfig,
        Path(__file__).resolve().parents[1] / "configs" / "cartpole_ppo.yaml",
        [f"env.id={env_id}", f"normalize.obs={given}", "runtime.backend=local"],
    )
    trainer = prepare_train(cfg, tmp_path / "run")
    assert trainer.cfg.normalize.obs == written
    saved = load_config(TrainConfig, tmp_path / "run" / "config.yaml")
    assert saved.normalize.obs == written
