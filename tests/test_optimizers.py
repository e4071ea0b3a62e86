"""Known gradients give the known result for every server-side optimizer name.

The expected values are written out from each algorithm's update equations (not by calling
torch.optim), two steps each so that state (momentum, moments, accumulators) matters.
"""

from __future__ import annotations

import math

import pytest
import torch

from rltrain.ps.config import OPTIMIZERS, OptimizerConfig, ServerConfig
from rltrain.ps.optim import make_optimizer, materialize_state
from rltrain.ps.shard import ParameterShard
from rltrain.records import GradUpdate

P0, G1, G2 = 1.0, 0.5, -0.25  # one parameter, two gradients
LR, MOM, EPS = 0.1, 0.9, 1e-8


def expected(name: str) -> float:
    """Two steps of each optimizer in its paper/PyTorch-doc notation."""
    p = P0
    if name == "sgd":
        return P0 - LR * G1 - LR * G2
    if name == "momentum":  # b1 = g1; b2 = mu b1 + g2; p -= lr b
        b1 = G1
        b2 = MOM * b1 + G2
        return P0 - LR * b1 - LR * b2
    if name == "nesterov":  # b as above; step uses g + mu b
        b1 = G1
        p -= LR * (G1 + MOM * b1)
        b2 = MOM * b1 + G2
        return p - LR * (G2 + MOM * b2)
    if name == "adagrad":  # s += g^2; p -= lr g / (sqrt(s) + eps)
        s1 = G1**2
        p -= LR * G1 / (math.sqrt(s1) + EPS)
        s2 = s1 + G2**2
        return p - LR * G2 / (math.sqrt(s2) + EPS)
    if name == "rmsprop":  # v = a v + (1-a) g^2; p -= lr g / (sqrt(v) + eps)
        a = 0.99
        v1 = (1 - a) * G1**2
        p -= LR * G1 / (math.sqrt(v1) + EPS)
        v2 = a * v1 + (1 - a) * G2**2
        return p - LR * G2 / (math.sqrt(v2) + EPS)
    if name == "adadelta":  # Zeiler 2012, Algorithm 1 with lr scaling
        rho = 0.9
        v, u = 0.0, 0.0
        for g in (G1, G2):
            v = rho * v + (1 - rho) * g**2
            delta = math.sqrt(u + EPS) / math.sqrt(v + EPS) * g
            u = rho * u + (1 - rho) * delta**2
            p -= LR * delta
        return p
    if name == "adam":  # Kingma & Ba 2015, Algorithm 1
        b1, b2 = 0.9, 0.999
        m = v = 0.0
        for t, g in enumerate((G1, G2), start=1):
            m = b1 * m + (1 - b1) * g
            v = b2 * v + (1 - b2) * g**2
            p -= LR * (m / (1 - b1**t)) / (math.sqrt(v / (1 - b2**t)) + EPS)
        return p
    raise AssertionError(name)


def opt_cfg(name: str) -> OptimizerConfig:
    return OptimizerConfig(name=name, lr=LR, momentum=MOM, eps=EPS, alpha=0.99, rho=0.9)


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_known_gradients_give_known_result(name: str) -> None:
    shard = ParameterShard(torch.tensor([P0]), opt_cfg(name), ServerConfig(rule="async"), 1)
    for version, g in enumerate((G1, G2)):
        shard.push(GradUpdate(0, version, torch.tensor([g]), 1))
    p = shard.pull()
    assert p.version == 2
    assert p.values.item() == pytest.approx(expected(name), rel=1e-5, abs=1e-6)


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_materialized_state_behaves_like_fresh_state(name: str) -> None:
    """Hogwild builds optimizer state eagerly; the first real step must be unchanged."""
    a = torch.nn.Parameter(torch.tensor([P0, -P0]))
    b = torch.nn.Parameter(torch.tensor([P0, -P0]))
    cfg = OptimizerConfig(name=name, lr=LR, weight_decay=0.01)
    oa, ob = make_optimizer([a], cfg), make_optimizer([b], cfg)
    materialize_state(ob)
    assert torch.equal(b.detach(), torch.tensor([P0, -P0]))
    for g in (G1, G2):
        a.grad = torch.tensor([g, 2 * g])
        b.grad = torch.tensor([g, 2 * g])
        oa.step()
        ob.step()
    torch.testing.assert_close(a.detach(), b.detach())
