"""Conjugate gradients on the server (cg_fr, cg_hs): hand computation, quadratics, shards."""

from __future__ import annotations

import pytest
import torch

from rltrain.config import ConfigError, load_config
from rltrain.ps.config import OptimizerConfig, ServerConfig
from rltrain.ps.optim import ConjugateGradient, make_optimizer
from rltrain.ps.server import LocalServer
from rltrain.records import GradUpdate


def test_two_dimensional_hand_computation_with_restart() -> None:
    """Three steps on W in R^2, written out: FR's beta, then a restart at step 3."""
    w = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
    opt = ConjugateGradient([w], lr=0.5, variant="fr", restart=2)
    grads = [torch.tensor([1.0, -1.0]), torch.tensor([0.5, 1.0]), torch.tensor([2.0, 0.0])]
    # step 1: p1 = -g1 = (-1, 1); W = (1, 2) + 0.5 (-1, 1) = (0.5, 2.5)
    # step 2: beta = |g2|^2 / |g1|^2 = 1.25 / 2 = 0.625; p2 = 0.625 (-1, 1) - (0.5, 1)
    #         = (-1.125, -0.375); W = (0.5, 2.5) + 0.5 p2 = (-0.0625, 2.3125)
    # step 3: a restart (step 2 % 2 == 0): p3 = -g3 = (-2, 0); W = (-1.0625, 2.3125)
    expected = [(0.5, 2.5), (-0.0625, 2.3125), (-1.0625, 2.3125)]
    for g, want in zip(grads, expected, strict=True):
        w.grad = g.clone()
        opt.step()
        assert torch.allclose(w.detach(), torch.tensor(want))


def test_hestenes_stiefel_beta_is_clipped_at_zero() -> None:
    """HS's beta = g2.(g2 - g1) / p1.(g2 - g1) is negative here: the step is -lr g2."""
    w = torch.nn.Parameter(torch.tensor([0.0, 0.0]))
    opt = ConjugateGradient([w], lr=1.0, variant="hs")
    w.grad = torch.tensor([1.0, 0.0])
    opt.step()  # p1 = (-1, 0); W = (-1, 0)
    w.grad = torch.tensor([2.0, 3.0])  # y = (1, 3): beta = 2 / -1 = -2 -> 0
    opt.step()
    assert torch.allclose(w.detach(), torch.tensor([-3.0, -3.0]))


@pytest.mark.parametrize("variant", ["fr", "hs"])
def test_reaches_the_optimum_of_a_quadratic_in_n_steps(variant: str) -> None:
    """f(W) = W'AW/2 - b'W with A SPD in n = 8 dimensions: with the exact step along each
    direction, alpha = -g.p / p'Ap, linear CG's theory gives the optimum in n steps."""
    n = 8
    gen = torch.Generator().manual_seed(0)
    q, _ = torch.linalg.qr(torch.randn(n, n, generator=gen, dtype=torch.float64))
    a = q @ torch.diag(torch.logspace(0, 2, n, dtype=torch.float64)) @ q.T  # condition 100
    b = torch.randn(n, generator=gen, dtype=torch.float64)
    w = torch.nn.Parameter(torch.zeros(n, dtype=torch.float64))
    opt = ConjugateGradient([w], lr=1.0, variant=variant)
    for _ in range(n):
        g = a @ w.detach() - b
        w.grad = g.clone()
        (p,) = opt.direction()
        opt.param_groups[0]["lr"] = float(-(g @ p) / (p @ a @ p))
        opt.step()
    optimum = torch.linalg.solve(a, b)
    assert torch.allclose(w.detach(), optimum, atol=1e-8)


def test_each_shard_keeps_its_own_direction() -> None:
    """Two shards equal two independent optimizers, each over its own slice."""
    init = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0])
    cfg = OptimizerConfig(name="cg_fr", lr=0.1)
    server = LocalServer(init.clone(), cfg, ServerConfig(rule="async", shards=2), 1)
    sizes = server.layout.sizes
    parts = [torch.nn.Parameter(x.clone()) for x in init.split(sizes)]
    opts = [make_optimizer([p], cfg) for p in parts]
    for version, g in enumerate([torch.arange(5.0), torch.tensor([1.0, -1.0, 0.5, 2.0, 0.0])]):
        server.push(GradUpdate(0, version, g.clone(), 1))
        for p, o, gs in zip(parts, opts, g.split(sizes), strict=True):
            p.grad = gs.clone()
            o.step()
    assert torch.allclose(server.pull().values, torch.cat([p.detach() for p in parts]))


def test_config_names_and_restart() -> None:
    assert OptimizerConfig(name="cg_hs", cg_restart=10).cg_restart == 10
    with pytest.raises(ConfigError, match="optimizer.cg_restart=-1: must be >= 0"):
        load_config_with(["optimizer.name=cg_fr", "optimizer.cg_restart=-1"])


def load_config_with(sets: list[str]) -> object:
    from rltrain.supervised.config import BenchConfig

    return load_config(BenchConfig, None, sets)
