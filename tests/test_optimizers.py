"""Known gradients give the known result for every server-side optimizer name.

The expected values are written out from each algorithm's update equations (not by calling
torch.optim), two steps each so that state (momentum, moments, accumulators) matters.
"""

from __future__ import annotations

import dataclasses
import io
import math

import pytest
import torch

from rltrain.ps.config import OPTIMIZERS, OptimizerConfig, ServerConfig
from rltrain.ps.optim import RMSpropTF, make_optimizer, materialize_state
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
    if name == "rmsprop_tf":  # TF1: v starts at 1; v = a v + (1-a) g^2; p -= lr g / sqrt(v + eps)
        a = 0.99
        v1 = a * 1.0 + (1 - a) * G1**2
        p -= LR * G1 / math.sqrt(v1 + EPS)
        v2 = a * v1 + (1 - a) * G2**2
        return p - LR * G2 / math.sqrt(v2 + EPS)
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
    if name in ("cg_fr", "cg_hs"):  # p1 = -g1; beta2 from g1, g2, p1; p2 = beta2 p1 - g2
        p1 = -G1
        fr, hs = G2**2 / G1**2, G2 * (G2 - G1) / (p1 * (G2 - G1))
        beta = fr if name == "cg_fr" else hs
        return P0 + LR * p1 + LR * (max(beta, 0.0) * p1 - G2)
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


# --- rmsprop_tf: TensorFlow 1's RMSProp (eps inside the root, mean square starting at 1) ---


def rmsprop_tf_reference(
    p: float,
    grads: list[float],
    lr: float,
    alpha: float,
    eps: float,
    momentum: float = 0.0,
    centered: bool = False,
    wd: float = 0.0,
) -> float:
    """tf.train.RMSPropOptimizer's kernels (ApplyRMSProp / ApplyCenteredRMSProp), one scalar."""
    ms, mg, mom = 1.0, 0.0, 0.0  # TF1 slots: rms = ones, mg = zeros, momentum = zeros
    for g in grads:
        g = g + wd * p  # torch-style L2 (TF1 has none)
        ms = alpha * ms + (1 - alpha) * g * g
        mg = alpha * mg + (1 - alpha) * g
        var = ms - mg * mg if centered else ms
        mom = momentum * mom + lr * g / math.sqrt(var + eps)
        p -= mom
    return p


@pytest.mark.parametrize(
    ("momentum", "centered", "wd"), [(0.0, False, 0.0), (0.9, False, 0.0), (0.5, True, 0.01)]
)
def test_rmsprop_tf_matches_hand_computation(momentum: float, centered: bool, wd: float) -> None:
    cfg = OptimizerConfig(
        name="rmsprop_tf",
        lr=0.01,
        alpha=0.9,
        eps=0.1,
        rmsprop_momentum=momentum,
        centered=centered,
        weight_decay=wd,
    )
    x = torch.nn.Parameter(torch.tensor([P0, -2.0], dtype=torch.float64))
    opt = make_optimizer([x], cfg)
    assert isinstance(opt, RMSpropTF)
    grads = [(G1, 3.0), (G2, -0.01), (2 * G1, 0.5)]
    for g in grads:
        x.grad = torch.tensor(g, dtype=torch.float64)
        opt.step()
    for i, p0 in enumerate((P0, -2.0)):
        gi = [g[i] for g in grads]
        want = rmsprop_tf_reference(p0, gi, 0.01, 0.9, 0.1, momentum, centered, wd)
        assert x[i].item() == pytest.approx(want, rel=1e-12)


def test_rmsprop_tf_equals_torch_rmsprop_for_large_grads_and_tiny_eps() -> None:
    """eps -> 0 and |g| >> 1: where eps sits and the initial mean square stop mattering.

    With v0 = 1 instead of 0 the mean square differs by alpha^t, negligible against g^2.
    """
    torch.manual_seed(0)
    a = torch.nn.Parameter(torch.randn(50, dtype=torch.float64))
    b = torch.nn.Parameter(a.detach().clone())
    p0 = a.detach().clone()
    kw = {"lr": 1e-3, "alpha": 0.99, "eps": 1e-12, "momentum": 0.9}
    ours = RMSpropTF([a], **kw)
    ref = torch.optim.RMSprop([b], **kw)
    for _ in range(20):
        sign = torch.randint(0, 2, (50,), dtype=torch.float64) * 2 - 1
        g = 1e6 * sign * (1 + torch.rand(50, dtype=torch.float64))  # |g| >= 1e6
        a.grad, b.grad = g.clone(), g.clone()
        ours.step()
        ref.step()
    torch.testing.assert_close(a.detach() - p0, b.detach() - p0, rtol=1e-7, atol=0.0)


def test_rmsprop_tf_differs_from_torch_rmsprop_at_a3c_eps() -> None:
    """The point of the variant: at eps 0.1 small gradients move torch's ~sqrt(10)x further."""
    a = torch.nn.Parameter(torch.zeros(1))
    b = torch.nn.Parameter(torch.zeros(1))
    ours = RMSpropTF([a], lr=1.0, alpha=0.99, eps=0.1, initial_square_avg=0.0)
    ref = torch.optim.RMSprop([b], lr=1.0, alpha=0.99, eps=0.1)
    a.grad, b.grad = torch.tensor([1e-4]), torch.tensor([1e-4])
    ours.step()
    ref.step()
    assert (b / a).item() == pytest.approx(math.sqrt(10), rel=1e-3)


def test_rmsprop_tf_state_dict_round_trip_with_weights_only_load() -> None:
    cfg = OptimizerConfig(
        name="rmsprop_tf", lr=0.01, eps=0.1, rmsprop_momentum=0.9, centered=True, weight_decay=0.01
    )
    a = torch.nn.Parameter(torch.tensor([P0, -P0]))
    oa = make_optimizer([a], cfg)
    for g in (G1, G2):
        a.grad = torch.tensor([g, 2 * g])
        oa.step()
    buf = io.BytesIO()
    torch.save(oa.state_dict(), buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=True)
    assert set(loaded["state"][0]) == {"step", "square_avg", "grad_avg", "momentum_buffer"}
    b = torch.nn.Parameter(a.detach().clone())
    ob = make_optimizer([b], cfg)
    ob.load_state_dict(loaded)
    assert ob.state[b]["step"].item() == 2
    for g in (G1, -G2):  # both continue identically
        a.grad = torch.tensor([g, 2 * g])
        b.grad = torch.tensor([g, 2 * g])
        oa.step()
        ob.step()
    torch.testing.assert_close(a.detach(), b.detach(), rtol=0, atol=0)
    for key, value in oa.state[a].items():
        torch.testing.assert_close(ob.state[b][key], value, rtol=0, atol=0)


@pytest.mark.parametrize("centered", [False, True])
def test_rmsprop_tf_materialized_state_equals_fresh_state(centered: bool) -> None:
    """materialize_state must not decay the mean square away from its initial 1."""
    p = torch.nn.Parameter(torch.tensor([P0, -P0]))
    cfg = OptimizerConfig(name="rmsprop_tf", rmsprop_momentum=0.9, centered=centered)
    opt = make_optimizer([p], cfg)
    materialize_state(opt)
    state = opt.state[p]
    assert torch.equal(p.detach(), torch.tensor([P0, -P0]))
    assert state["step"].item() == 0
    assert torch.equal(state["square_avg"], torch.ones(2))
    assert torch.equal(state["momentum_buffer"], torch.zeros(2))
    assert ("grad_avg" in state) == centered
    tensors = {k: v.data_ptr() for k, v in state.items()}
    p.grad = torch.tensor([G1, G2])
    opt.step()  # updates in place: Hogwild shares these very tensors
    assert {k: v.data_ptr() for k, v in opt.state[p].items()} == tensors
    assert state["step"].item() == 1


def test_rmsprop_tf_on_a_sharded_server_equals_one_optimizer() -> None:
    """Each shard steps its own slice; elementwise, so the split does not change the result."""
    from rltrain.ps.server import LocalServer

    cfg = OptimizerConfig(name="rmsprop_tf", lr=0.01, eps=0.1, rmsprop_momentum=0.5)
    init = torch.linspace(-1, 1, 7)
    server = LocalServer(init, cfg, ServerConfig(rule="async", shards=3), 1)
    x = torch.nn.Parameter(init.clone())
    opt = make_optimizer([x], cfg)
    for version, scale in enumerate((1.0, -0.5, 2.0)):
        g = scale * torch.arange(7, dtype=torch.float32)
        server.push(GradUpdate(0, version, g, 1))
        x.grad = g
        opt.step()
    torch.testing.assert_close(server.pull().values, x.detach())


def test_a_checkpoint_of_an_unfused_optimizer_loads_into_a_fused_one() -> None:
    """Older checkpoints hold Adam's state without `fused`: loading keeps the fused kernel."""
    from rltrain.ps.optim import load_optimizer_state

    old = torch.optim.Adam([torch.nn.Parameter(torch.ones(3))], lr=LR)
    new = make_optimizer([torch.nn.Parameter(torch.ones(3))], opt_cfg("adam"))
    assert new.param_groups[0]["fused"] is True
    load_optimizer_state(new, old.state_dict())
    assert new.param_groups[0]["fused"] is True and new.param_groups[0]["lr"] == LR


def test_a_loaded_state_keeps_the_moments_and_takes_the_new_hyperparameters() -> None:
    """A run resumed with another eps or betas steps with them (torch's load_state_dict
    alone would restore the saved ones), from the saved moments."""
    from rltrain.ps.optim import load_optimizer_state

    x = torch.nn.Parameter(torch.ones(3))
    old = torch.optim.Adam([x], lr=LR, eps=1e-8)
    x.grad = torch.ones(3)
    old.step()
    new = torch.optim.Adam([torch.nn.Parameter(torch.ones(3))], lr=LR, eps=1e-5, betas=(0.8, 0.9))
    load_optimizer_state(new, old.state_dict())
    group = new.param_groups[0]
    assert group["eps"] == 1e-5 and group["betas"] == (0.8, 0.9)
    state = next(iter(new.state.values()))
    assert int(state["step"]) == 1 and torch.equal(state["exp_avg"], old.state[x]["exp_avg"])


@pytest.mark.parametrize("name", ["sgd", "adam", "rmsprop_tf"])
def test_warm_up_ramps_each_step_and_then_holds(name: str) -> None:
    """Goyal et al.'s gradual warm-up: step k at lr x (k + 1) / W, then lr; the group's lr is
    the base between steps (the shard sets it each step; a schedule reads it)."""
    cfg = dataclasses.replace(opt_cfg(name), lr=1.0, warmup_steps=4)
    x = torch.nn.Parameter(torch.zeros(2))
    opt = make_optimizer([x], cfg)
    moved = []
    for _ in range(6):
        x.grad = torch.ones(2)
        before = x.detach().clone()
        opt.step()
        moved.append(float((before - x.detach())[0]))
        assert opt.param_groups[0]["lr"] == 1.0
    # sgd moves lr x g; adam and rmsprop_tf about lr x sign(g) at first: 1/4, 2/4, 3/4, 1, 1
    assert moved[:4] == pytest.approx([0.25, 0.5, 0.75, 1.0], rel=0.05)
    assert moved[4] == pytest.approx(moved[3], rel=0.05)  # held at lr


def test_warm_up_scales_the_lr_a_shard_sets_and_resumes_mid_ramp() -> None:
    """A shard scales its lr per push (staleness) and by a schedule: the warm-up multiplies
    that, and its count is saved with the state, so a restored shard goes on up the ramp."""
    sgd = OptimizerConfig(name="sgd", lr=1.0, warmup_steps=4)
    s = ParameterShard(torch.zeros(1), sgd, ServerConfig(rule="async"), 1)
    s.set_lr_factor(0.5)
    s.push(GradUpdate(0, 0, torch.ones(1), 8))
    assert s.pull().values.item() == pytest.approx(-0.5 * 0.25)  # schedule x warm-up 1/4
    s.push(GradUpdate(0, 1, torch.ones(1), 8))
    state = s.state_dict()
    back = ParameterShard(torch.zeros(1), sgd, ServerConfig(rule="async"), 1)
    back.load_state_dict(state)
    back.set_lr_factor(1.0)
    before = back.pull().values.item()
    back.push(GradUpdate(0, 2, torch.ones(1), 8))
    assert before - back.pull().values.item() == pytest.approx(0.75)  # its third step: 3/4
