"""A shard on the learner's device (server.device): the same steps, checkpoints and counts as a
CPU shard. CPU tensors stand in for the GPU where there is none (CI); with CUDA, every test
also runs there."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from rltrain.config import load_config
from rltrain.ps.config import OptimizerConfig, ServerConfig
from rltrain.ps.server import LocalServer
from rltrain.ps.shard import ParameterShard
from rltrain.records import GradUpdate
from rltrain.rl.config import TrainConfig
from rltrain.rl.run.placement import shard_device

CARTPOLE = Path(__file__).resolve().parents[1] / "configs" / "cartpole_appo.yaml"
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
ADAM = OptimizerConfig(name="adam", lr=1e-2)
P = 1000


def grads(n: int, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(P, generator=g) for _ in range(n)]


def reference(init: torch.Tensor, gs: list[torch.Tensor]) -> torch.Tensor:
    """What torch.optim.Adam makes of the same gradients, on the CPU."""
    p = torch.nn.Parameter(init.clone())
    opt = torch.optim.Adam([p], lr=ADAM.lr, betas=(ADAM.beta1, ADAM.beta2), eps=ADAM.eps)
    for g in gs:
        p.grad = g.clone()
        opt.step()
    return p.detach()


@pytest.mark.parametrize("device", DEVICES)
def test_device_shard_equals_the_optimizer_on_the_cpu(device: str) -> None:
    init = torch.linspace(-1, 1, P)
    s = ParameterShard(init, ADAM, ServerConfig(), 1, device=device)
    gs = grads(20)
    for v, g in enumerate(gs):  # pushed from the device (a co-located learner) and the CPU
        values = g.to(device) if v % 2 else g
        assert s.push(GradUpdate(0, v, values, 4)).status == "applied"
    got = s.pull()
    assert got.values.device.type == device and got.version == 20
    torch.testing.assert_close(got.values.cpu(), reference(init, gs), atol=1e-6, rtol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_checkpoint_is_on_the_cpu_and_restores_on_any_device(device: str) -> None:
    init, gs = torch.zeros(P), grads(30, seed=1)
    whole = ParameterShard(init, ADAM, ServerConfig(), 1, device=device)
    for v, g in enumerate(gs):
        whole.push(GradUpdate(0, v, g, 1))
    first = ParameterShard(init, ADAM, ServerConfig(), 1, device=device)
    for v, g in enumerate(gs[:10]):
        first.push(GradUpdate(0, v, g, 1))
    state = first.state_dict()
    tensors = [state["param"], *state["optimizer"]["state"][0].values()]
    assert all(t.device.type == "cpu" for t in tensors)  # loads where there is no GPU
    for where in ("cpu", device):  # resumed on the CPU, or on the device
        second = ParameterShard(torch.ones(P), ADAM, ServerConfig(), 1, device=where)
        second.load_state_dict(state)
        for v, g in enumerate(gs[10:], start=10):
            second.push(GradUpdate(0, v, g, 1))
        assert second.version == whole.version == 30
        torch.testing.assert_close(second.pull().values.cpu(), whole.pull().values.cpu())
        unpulled = [dataclasses.replace(s.stats(), bytes_pulled=0) for s in (second, whole)]
        assert unpulled[0] == unpulled[1]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("rule", ["async", "sync", "soft_sync", "average"])
def test_staleness_and_counts_match_a_cpu_server(device: str, rule: str) -> None:
    """Two shards, three pushers at scattered versions: every counter and histogram, and the
    parameters, as on the CPU."""
    rule_cfg = ServerConfig(rule=rule, shards=2, staleness="scale" if rule == "async" else "none")
    init = torch.linspace(0, 1, P)
    servers = [LocalServer(init, ADAM, rule_cfg, 3, device=d) for d in ("cpu", device)]
    gs = grads(24, seed=2)
    for i, g in enumerate(gs):
        for s in servers:
            have = s.stats().version
            version = max(0, have - i % 3)  # up to two versions stale
            s.push(GradUpdate(i % 3, version, g, 2))
    cpu, dev = (s.stats() for s in servers)
    assert dataclasses.astuple(cpu) == dataclasses.astuple(dev)
    assert cpu.applied > 0
    torch.testing.assert_close(servers[1].pull().values.cpu(), servers[0].pull().values)


def test_the_shards_go_to_the_learners_gpu_only_beside_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    cfg = load_config(TrainConfig, CARTPOLE)
    assert shard_device(cfg, gpu=True, backend="process") == "cuda"
    assert shard_device(cfg, gpu=True, backend="local") == "cuda"
    assert shard_device(cfg, gpu=True, backend="ray") == "cpu"  # a process of its own
    assert shard_device(cfg, gpu=False, backend="process") == "cpu"
    on_cpu = dataclasses.replace(cfg, server=dataclasses.replace(cfg.server, device="cpu"))
    assert shard_device(on_cpu, gpu=True, backend="process") == "cpu"
