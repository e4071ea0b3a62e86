"""RL losses against slow references written in the papers' notation."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
import torch

from rltrain.rl.algos.losses import (
    LossSpec,
    actor_critic_loss,
    lambda_returns,
    next_state_values,
    vtrace,
)

T, B, A = 6, 3, 4


def data(seed: int = 0) -> dict[str, torch.Tensor]:
    """Random rollouts with terminations, truncations (bootstrapped from their own values)
    and both at once."""
    g = torch.Generator().manual_seed(seed)
    term = torch.rand(T, B, generator=g) < 0.2
    trunc = torch.rand(T, B, generator=g) < 0.2
    values = torch.randn(T + 1, B, generator=g)
    at = trunc.nonzero()
    return {
        "rewards": torch.randn(T, B, generator=g),
        "discounts": 0.9 * (~term).float(),
        "continues": ~(term | trunc),
        "values": values[:T],
        "next_values": next_state_values(values, torch.randn(len(at), generator=g), at),
        "blogp": -torch.rand(T, B, generator=g) * 2,
        "tlogp": -torch.rand(T, B, generator=g) * 2,
    }


def slow_vtrace(blogp, tlogp, r, d, cont, v, nv, rho_bar, c_bar, pg_rho_bar, lam):  # noqa: ANN001, ANN201
    """Espeholt et al. 2018, Eq. 1 (with Remark 2's lambda) as the explicit sum over t >= s,
    cut at the end of the episode: v_s = V(x_s) + sum_t (prod_{s<=i<t} d_i c_i) delta_t."""
    ratio = np.exp(tlogp - blogp)
    rho, c, pg_rho = (
        np.minimum(rho_bar, ratio),
        lam * np.minimum(c_bar, ratio),
        np.minimum(pg_rho_bar, ratio),
    )
    vs = np.zeros_like(v)
    for b in range(v.shape[1]):
        for s in range(v.shape[0]):
            total, coef = 0.0, 1.0
            for t in range(s, v.shape[0]):
                total += coef * rho[t, b] * (r[t, b] + d[t, b] * nv[t, b] - v[t, b])
                if not cont[t, b]:
                    break
                coef *= d[t, b] * c[t, b]
            vs[s, b] = v[s, b] + total
    adv = np.zeros_like(v)
    for b in range(v.shape[1]):
        for s in range(v.shape[0]):
            nxt = vs[s + 1, b] if s + 1 < v.shape[0] and cont[s, b] else nv[s, b]
            adv[s, b] = pg_rho[s, b] * (r[s, b] + d[s, b] * nxt - v[s, b])
    return vs, adv


def slow_lambda_returns(r, d, cont, v, nv, lam):  # noqa: ANN001, ANN201
    """R_t = r_t + d_t ((1 - lam) V(x_{t+1}) + lam R_{t+1}), with R_{t+1} -> V(x_{t+1}) at an
    episode end and at the rollout's end (Sutton and Barto, Eq. 12.18)."""
    out = np.zeros_like(r)
    for b in range(r.shape[1]):
        nxt = nv[-1, b]
        for t in range(r.shape[0] - 1, -1, -1):
            follow = nxt if cont[t, b] and t + 1 < r.shape[0] else nv[t, b]
            out[t, b] = r[t, b] + d[t, b] * ((1 - lam) * nv[t, b] + lam * follow)
            nxt = out[t, b]
    return out


def np_args(x: dict[str, torch.Tensor], *keys: str) -> list[np.ndarray]:
    return [x[k].numpy() for k in keys]


@pytest.mark.parametrize("lam", [1.0, 0.95, 0.0])
def test_lambda_returns_match_slow_reference(lam: float) -> None:
    x = data()
    keys = ("rewards", "discounts", "values", "next_values", "continues")
    fast = lambda_returns(*(x[k] for k in keys), lam)
    slow = slow_lambda_returns(
        *np_args(x, "rewards", "discounts", "continues", "values", "next_values"), lam
    )
    np.testing.assert_allclose(fast.numpy(), slow, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("rho_bar", "c_bar", "pg_rho_bar", "lam"),
    [(1.0, 1.0, 1.0, 1.0), (2.0, 0.5, 1.0, 1.0), (0.7, 1.3, 2.0, 0.9)],
)
def test_vtrace_matches_slow_reference(
    rho_bar: float, c_bar: float, pg_rho_bar: float, lam: float
) -> None:
    x = data(1)
    keys = ("blogp", "tlogp", "rewards", "discounts", "values", "next_values", "continues")
    out = vtrace(*(x[k] for k in keys), rho_bar, c_bar, pg_rho_bar, lam)
    vs, adv = slow_vtrace(
        *np_args(x, "blogp", "tlogp", "rewards", "discounts", "continues", "values"),
        x["next_values"].numpy(),
        rho_bar,
        c_bar,
        pg_rho_bar,
        lam,
    )
    np.testing.assert_allclose(out.vs.numpy(), vs, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out.pg_advantages.numpy(), adv, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("lam", [1.0, 0.9])
def test_vtrace_on_policy_equals_lambda_returns(lam: float) -> None:
    """With pi = mu (all ratios 1) and c_bar, rho_bar >= 1, v_s is the lambda-return."""
    x = data(2)
    rest = (x["rewards"], x["discounts"], x["values"], x["next_values"], x["continues"])
    out = vtrace(x["blogp"], x["blogp"], *rest, lam=lam)
    torch.testing.assert_close(out.vs, lambda_returns(*rest, lam), rtol=1e-5, atol=1e-5)


def test_truncation_bootstraps_and_termination_cuts_by_hand() -> None:
    """Reward 1 per step, gamma 0.5, V = 2 everywhere (the true value of a never-ending
    episode: 1 / (1 - 0.5)). A truncation at t = 1 bootstraps from V(final obs) = 2, so the
    targets stay exactly 2; a termination at t = 1 cuts them: R_1 = 1, R_0 = 1 + 0.5 * 1."""
    r = torch.ones(3, 1)
    v = torch.full((3, 1), 2.0)
    end = torch.tensor([[False], [True], [False]])
    cut = lambda_returns(r, 0.5 * (~end).float(), v, torch.full((3, 1), 2.0), ~end)
    torch.testing.assert_close(cut, torch.tensor([[1.5], [1.0], [2.0]]))
    # truncated at t = 1: obs[2] is the next episode's, the final obs has V = 2 (next_values)
    values = torch.tensor([[2.0], [2.0], [-7.0], [2.0]])  # V(obs[2]) must not be used
    nv = next_state_values(values, torch.tensor([2.0]), torch.tensor([[1, 0]]))
    kept = lambda_returns(r, torch.full((3, 1), 0.5), values[:3], nv, ~end)
    torch.testing.assert_close(kept, torch.full((3, 1), 2.0))


def test_clipped_surrogate_hand_computed() -> None:
    """PPO's -min(r A, clip(r, 0.8, 1.2) A) for ratios 1.5 / 0.5 with advantages +-1."""
    mu = torch.log(torch.tensor([[0.4, 0.6], [0.4, 0.6], [0.4, 0.6], [0.4, 0.6]]))
    pi = torch.log(torch.tensor([[0.6, 0.4], [0.2, 0.8], [0.6, 0.4], [0.2, 0.8]]))
    pi.requires_grad_(True)
    actions = torch.zeros(4, dtype=torch.long)  # ratios 1.5, 0.5, 1.5, 0.5
    adv = torch.tensor([1.0, 1.0, -1.0, -1.0])
    spec = LossSpec(value_coef=0.0, entropy_coef=0.0, clip=0.2)
    zeros = torch.zeros(4)
    out = actor_critic_loss(pi, actions, zeros, zeros, adv, spec, behaviour_logits=mu)
    # min(1.5, 1.2) = 1.2; min(0.5, 0.8) = 0.5; min(-1.5, -1.2) = -1.5; min(-0.5, -0.8) = -0.8
    assert out.floats().policy == pytest.approx(-(1.2 + 0.5 - 1.5 - 0.8) / 4)
    assert out.floats().clip_fraction == 1.0
    out.total.backward()
    g = pi.grad[:, 0]  # only the unclipped samples (1 and 2) carry a gradient
    assert g[0] == 0 and g[3] == 0 and g[1] != 0 and g[2] != 0


def test_dual_clip_bounds_a_negative_advantage_hand_computed() -> None:
    """Dual-clip PPO (Ye et al. 2020): with A < 0 the surrogate is max(min(r A, clip(r) A), c A).
    Ratios 5 and 2 with A = -1, c = 3: -5 is bounded to -3 (no gradient), -2 stays."""
    mu = torch.log(torch.tensor([[0.1, 0.9], [0.2, 0.8], [0.1, 0.9]]))
    pi = torch.log(torch.tensor([[0.5, 0.5], [0.4, 0.6], [0.5, 0.5]])).requires_grad_(True)
    actions = torch.zeros(3, dtype=torch.long)  # ratios 5, 2, 5
    adv = torch.tensor([-1.0, -1.0, 1.0])
    zeros = torch.zeros(3)
    spec = LossSpec(value_coef=0.0, entropy_coef=0.0, clip=0.2, dual_clip=3.0)
    out = actor_critic_loss(pi, actions, zeros, zeros, adv, spec, behaviour_logits=mu)
    # max(min(-5, -1.2), -3) = -3; max(min(-2, -1.2), -3) = -2; A > 0: min(5, 1.2) = 1.2
    assert out.floats().policy == pytest.approx(-(-3 - 2 + 1.2) / 3)
    out.total.backward()
    g = pi.grad[:, 0]
    assert g[0] == 0 and g[1] != 0 and g[2] == 0
    plain = dataclasses.replace(spec, dual_clip=0.0)
    out = actor_critic_loss(pi, actions, zeros, zeros, adv, plain, behaviour_logits=mu)
    assert out.floats().policy == pytest.approx(-(-5 - 2 + 1.2) / 3)


def test_a_ratio_beyond_exp_20_gives_no_nan() -> None:
    """An action 300 stds out in the behaviour policy's tail but likely under the new one:
    the ratio is cut at e^20 instead of overflowing to inf (and to NaN in the gradient)."""
    from rltrain.rl.algos.distributions import DIAG_GAUSSIAN as dist

    mu = torch.tensor([[3.0, -4.6]])  # mean 3, std 0.01
    pi = torch.tensor([[0.0, 0.0]], requires_grad=True)  # mean 0, std 1
    actions = torch.tensor([[0.0]])
    spec = LossSpec(value_coef=0.0, entropy_coef=0.0, clip=0.2, dual_clip=0.0)
    z = torch.zeros(1)
    out = actor_critic_loss(pi, actions, z, z, torch.tensor([-1.0]), spec, mu, dist=dist)
    out.total.backward()
    assert torch.isfinite(out.total) and torch.isfinite(pi.grad).all()


def test_value_clip_and_sum_reduction() -> None:
    """value_clip keeps the larger error of the clipped and unclipped values; sum = N x mean."""
    values = torch.tensor([3.0, 0.0])
    old = torch.tensor([0.0, 0.0])
    target = torch.tensor([1.0, 0.5])
    z = torch.zeros(2, 2)
    a = torch.zeros(2, dtype=torch.long)
    spec = LossSpec(value_coef=1.0, entropy_coef=0.0, value_clip=0.5)
    out = actor_critic_loss(z, a, values, target, torch.zeros(2), spec, old_values=old)
    # sample 0: max((3-1)^2, (0.5-1)^2) = 4; sample 1: 0.25; 0.5 * mean = 1.0625
    assert out.floats().value == pytest.approx(0.5 * (4 + 0.25) / 2)
    total = dataclasses.replace(spec, reduction="sum")
    out_sum = actor_critic_loss(z, a, values, target, torch.zeros(2), total, old_values=old)
    assert out_sum.floats().value == pytest.approx(2 * out.floats().value)


def test_policy_gradient_points_the_right_way() -> None:
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(T * B, A, generator=g, requires_grad=True)
    values = torch.zeros(T * B, requires_grad=True)
    actions = torch.zeros(T * B, dtype=torch.long)
    targets = torch.ones(T * B)  # positive returns: action 0 should become more likely
    loss = actor_critic_loss(logits, actions, values, targets, targets, LossSpec(entropy_coef=0))
    loss.total.backward()
    assert (logits.grad[..., 0] < 0).all()  # descending the loss raises logit 0
    assert (values.grad < 0).all()  # and raises V towards the positive returns
    assert loss.floats().value > 0 and loss.floats().entropy > 0


def test_double_dqn_target_hand_computed() -> None:
    """Online net picks the action at s', target net evaluates it; terminal cuts the bootstrap."""
    from rltrain.rl.algos.losses import double_dqn_targets, dqn_loss

    rewards = torch.tensor([1.0, 0.5, -1.0])
    done = torch.tensor([False, False, True])
    online = torch.tensor([[1.0, 3.0], [2.0, 0.0], [5.0, 9.0]])  # argmax: 1, 0, 1
    target = torch.tensor([[10.0, 20.0], [30.0, 40.0], [50.0, 60.0]])
    y = double_dqn_targets(rewards, done, online, target, gamma=0.9)
    # 1 + 0.9 * 20 ; 0.5 + 0.9 * 30 ; -1 (terminal)
    torch.testing.assert_close(y, torch.tensor([19.0, 27.5, -1.0]))

    q = torch.tensor([[18.0, 18.5], [27.0, 0.0], [0.0, 1.0]], requires_grad=True)
    loss, td = dqn_loss(q, torch.tensor([1, 0, 1]), y, torch.tensor([1.0, 1.0, 0.5]))
    torch.testing.assert_close(td, torch.tensor([0.5, 0.5, -2.0]))
    # Huber: 0.5 * 0.25 for |td| <= 1, |td| - 0.5 otherwise; weighted mean
    assert loss.item() == pytest.approx((0.125 + 0.125 + 0.5 * 1.5) / 3)


def test_a_loss_that_breaks_the_contract_is_one_line_naming_it() -> None:
    """explore86: a loss of your own with 3 parts met "not enough values to unpack (expected
    7, got 5)"; a bare tensor, "'Tensor' object has no attribute 'total'"."""
    from rltrain.rl.algos.losses import LossContractError, LossTerms, check_terms

    check_terms(LossTerms(torch.zeros(()), torch.zeros(5)), "a3c")
    for bad, said in (
        (LossTerms(torch.zeros(()), torch.zeros(3)), "parts of [3]"),
        (LossTerms(torch.zeros(4), torch.zeros(5)), "total of shape [4]"),
        (torch.zeros(()), "returned Tensor"),
    ):
        with pytest.raises(LossContractError) as e:
            check_terms(bad, "mine")
        assert str(e.value).startswith("algo.name=mine: its loss returned") and said in str(e.value)
    with pytest.raises(LossContractError, match=r"absent=\('kl', 'clip'\) names no part"):
        check_terms(LossTerms(torch.zeros(()), torch.zeros(5), absent=("kl", "clip")), "mine")


def test_parts_a_loss_has_no_use_for_are_not_logged() -> None:
    """explore88: a3c/a2c logged KL(pi || pi), rounding noise below 0, and a clip fraction of
    0; impala a KL equal to its lag_kl. The loss names its absent parts, and they read None."""
    from rltrain.rl.rollout import Gradient, read_losses

    logits = torch.randn(64, 6, generator=torch.Generator().manual_seed(0))
    actions, zeros = torch.zeros(64, dtype=torch.long), torch.zeros(64)
    absent = {}
    for name, spec in {
        "a3c": LossSpec(),
        "ppo": LossSpec(clip=0.2),
        "kl penalty": LossSpec(kl_coef=0.1),
    }.items():
        out = actor_critic_loss(logits, actions, zeros, zeros, zeros, spec, logits + 0.1)
        assert out.floats().kl == 0.0  # KL(pi || pi), the logits shifted: -3.7e-9 unclamped
        stats = torch.cat([torch.ones(1), out.parts, torch.zeros(2)])  # (no lag, no std)
        (read,) = read_losses([Gradient(torch.zeros(3), stats, 64, absent=out.absent)])
        absent[name] = (read.kl is None, read.clip_fraction is None)
    assert absent == {"a3c": (True, True), "ppo": (False, False), "kl penalty": (False, True)}


def test_an_estimator_that_returns_no_pair_of_t_by_b_is_one_line() -> None:
    """explore108: an estimator returning one tensor was "too many values to unpack" as an
    internal error, and one of [T] a shape error blamed on the loss's line."""
    from rltrain.rl.algos.losses import LossContractError, check_estimate

    check_estimate((torch.zeros(4, 2), torch.zeros(4, 2)), (4, 2), "a3c")
    for bad, said in (
        (torch.zeros(4, 2), "one tensor of shape [4, 2]"),
        ((torch.zeros(4), torch.zeros(4)), "([4], [4])"),
        ([torch.zeros(4, 2)] * 2, "list"),
    ):
        with pytest.raises(
            LossContractError, match=rf"its value estimator returned {re.escape(said)}; "
        ):
            check_estimate(bad, (4, 2), "mine")
