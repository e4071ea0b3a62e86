"""runtime.inference=server: one batched policy acts for every actor (rltrain.rl.inference)."""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path

import pytest
import torch
from conftest import read_summary

from rltrain.cli import main
from rltrain.config import ConfigError, load_config
from rltrain.ps.server import LocalServer
from rltrain.records import GradUpdate
from rltrain.rl.config import TrainConfig, server_rule
from rltrain.rl.inference import PolicyServer
from rltrain.rl.setup import inference_device, initial_params, probe_env

CFG = Path(__file__).resolve().parents[1] / "configs"


def setup() -> tuple[TrainConfig, PolicyServer, LocalServer]:
    cfg = load_config(TrainConfig, CFG / "cartpole_appo.yaml")
    spec = probe_env(cfg)
    server = LocalServer(initial_params(cfg, spec), cfg.optimizer, server_rule(cfg), 1)
    return cfg, PolicyServer(cfg, spec.obs_shape, spec.actions, server), server


def test_concurrent_callers_each_get_their_own_rows_of_one_policy() -> None:
    _, policy, server = setup()
    gen = torch.Generator().manual_seed(0)
    obs = [torch.randn(3 + i, 4, generator=gen) for i in range(6)]  # 6 actors, 3..8 envs each
    out: dict[int, tuple] = {}
    start = threading.Barrier(6)

    def actor(i: int) -> None:
        start.wait()
        out[i] = policy.act(obs[i])

    threads = [threading.Thread(target=actor, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert policy.rows == sum(len(o) for o in obs) and 1 <= policy.batches <= 6
    with torch.no_grad():
        for i, o in enumerate(obs):
            actions, logits, version = out[i]
            assert actions.shape == (len(o),) and version == 0
            torch.testing.assert_close(logits, policy.model(o)[0])  # its rows, not another's


def test_a_learner_batch_of_new_versions_acts_from_the_next_batch() -> None:
    """The policy takes new parameters by version, once a learner's batch of updates is in
    (ppo.epochs x ppo.minibatches versions), not at every version."""
    cfg, policy, server = setup()
    stride = cfg.ppo.epochs * cfg.ppo.minibatches
    assert policy.stride == stride > 1
    obs = torch.zeros(2, 4)
    _, before, v0 = policy.act(obs)
    numel = server.layout.numel
    for v in range(stride):
        assert policy.act(obs)[2] == 0  # fewer than a batch's updates: the same parameters
        server.push(GradUpdate(0, v, torch.ones(numel), 1))
    _, after, v1 = policy.act(obs)
    assert (v0, v1) == (0, stride) and not torch.equal(before, after)


def test_a_failed_batch_reaches_each_caller_and_the_next_batch_runs() -> None:
    _, policy, _ = setup()
    with pytest.raises(RuntimeError):
        policy.act(torch.zeros(2, 7))  # wrong observation size
    actions, _, _ = policy.act(torch.zeros(2, 4))
    assert actions.shape == (2,)


def test_where_the_policy_acts(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = load_config(TrainConfig, CFG / "cartpole_appo.yaml")

    def using(inference: str, algo: str = "appo") -> TrainConfig:
        runtime = dataclasses.replace(cfg.runtime, inference=inference)
        return dataclasses.replace(
            cfg, runtime=runtime, algo=dataclasses.replace(cfg.algo, name=algo)
        )

    assert inference_device(using("auto"), gpu=False, backend="process") is None
    assert inference_device(using("server"), gpu=False, backend="local") == "cpu"
    assert inference_device(using("actor"), gpu=True, backend="process") is None
    with pytest.raises(ConfigError, match="runtime.inference=server cannot be used with algo"):
        inference_device(using("server", "a3c"), gpu=False, backend="process")
    with pytest.raises(ConfigError, match="runtime.backend ray"):
        inference_device(using("server"), gpu=False, backend="ray")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert inference_device(using("auto"), gpu=True, backend="process") == "cuda"
    assert inference_device(using("auto"), gpu=True, backend="ray") is None


@pytest.mark.parametrize("backend", ["process", "local"])
def test_actors_train_through_the_batched_policy(tmp_path: Path, backend: str) -> None:
    run_dir = tmp_path / "run"
    argv = ["train", str(CFG / "cartpole_appo.yaml"), "--run-dir", str(run_dir)]
    argv += ["--set", f"runtime.backend={backend}", "--set", "runtime.inference=server"]
    argv += ["--set", "stop.mean_return=null", "--set", "stop.max_env_steps=6000"]
    assert main(argv) == 0
    s = read_summary(run_dir)
    assert s["stopped_by"] == "max_env_steps" and s["env_steps"] >= 6000
    assert s["updates"] > 0
