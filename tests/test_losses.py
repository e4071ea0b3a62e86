"""RL losses against slow references written in the papers' notation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rltrain.rl.losses import a3c_loss, nstep_returns, vtrace, vtrace_loss

T, B, A = 6, 3, 4


def data(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    done = torch.rand(T, B, generator=g) < 0.2
    return {
        "rewards": torch.randn(T, B, generator=g),
        "discounts": 0.9 * (~done).float(),
        "values": torch.randn(T, B, generator=g),
        "bootstrap": torch.randn(B, generator=g),
        "blogp": -torch.rand(T, B, generator=g) * 2,
        "tlogp": -torch.rand(T, B, generator=g) * 2,
    }


def slow_nstep(r: np.ndarray, d: np.ndarray, boot: np.ndarray) -> np.ndarray:
    """R_t = sum_{k>=t} (prod_{t<=i<k} d_i) r_k + (prod_{t<=i<T} d_i) V(x_T), term by term."""
    out = np.zeros_like(r)
    for b in range(r.shape[1]):
        for t in range(r.shape[0]):
            total, disc = 0.0, 1.0
            for k in range(t, r.shape[0]):
                total += disc * r[k, b]
                disc *= d[k, b]
            out[t, b] = total + disc * boot[b]
    return out


def slow_vtrace(blogp, tlogp, r, d, v, boot, rho_bar, c_bar):  # noqa: ANN001, ANN201
    """Espeholt et al. 2018, Eq. 1 written as the explicit sum over t >= s."""
    ratio = np.exp(tlogp - blogp)
    rho = np.minimum(rho_bar, ratio)
    c = np.minimum(c_bar, ratio)
    v_next = np.concatenate([v[1:], boot[None]], 0)
    vs = np.zeros_like(v)
    for b in range(v.shape[1]):
        for s in range(v.shape[0]):
            total, coef = 0.0, 1.0  # coef = (prod_{s<=i<t} d_i c_i)
            for t in range(s, v.shape[0]):
                delta = rho[t, b] * (r[t, b] + d[t, b] * v_next[t, b] - v[t, b])
                total += coef * delta
                coef *= d[t, b] * c[t, b]
            vs[s, b] = v[s, b] + total
    vs_next = np.concatenate([vs[1:], boot[None]], 0)
    adv = rho * (r + d * vs_next - v)
    return vs, adv


def test_nstep_returns_match_slow_reference() -> None:
    x = data()
    fast = nstep_returns(x["rewards"], x["discounts"], x["bootstrap"])
    slow = slow_nstep(x["rewards"].numpy(), x["discounts"].numpy(), x["bootstrap"].numpy())
    np.testing.assert_allclose(fast.numpy(), slow, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("rho_bar", "c_bar"), [(1.0, 1.0), (2.0, 0.5), (0.7, 1.3)])
def test_vtrace_matches_slow_reference(rho_bar: float, c_bar: float) -> None:
    x = data(1)
    out = vtrace(
        x["blogp"],
        x["tlogp"],
        x["rewards"],
        x["discounts"],
        x["values"],
        x["bootstrap"],
        rho_bar,
        c_bar,
    )
    vs, adv = slow_vtrace(
        *(x[k].numpy() for k in ("blogp", "tlogp", "rewards", "discounts", "values", "bootstrap")),
        rho_bar,
        c_bar,
    )
    np.testing.assert_allclose(out.vs.numpy(), vs, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out.pg_advantages.numpy(), adv, rtol=1e-5, atol=1e-5)


def test_vtrace_on_policy_equals_nstep_returns() -> None:
    """With pi = mu (all ratios 1) and c_bar, rho_bar >= 1, v_s is the n-step return."""
    x = data(2)
    out = vtrace(x["blogp"], x["blogp"], x["rewards"], x["discounts"], x["values"], x["bootstrap"])
    ret = nstep_returns(x["rewards"], x["discounts"], x["bootstrap"])
    torch.testing.assert_close(out.vs, ret, rtol=1e-5, atol=1e-5)


def test_a3c_loss_gradients_point_the_right_way() -> None:
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(T, B, A, generator=g, requires_grad=True)
    values = torch.zeros(T, B, requires_grad=True)
    actions = torch.zeros(T, B, dtype=torch.long)
    rewards = torch.ones(T, B)  # positive returns: action 0 should become more likely
    loss = a3c_loss(
        logits, actions, values, rewards, torch.full((T, B), 0.9), torch.zeros(B), 0.5, 0.0
    )
    loss.total.backward()
    assert (logits.grad[..., 0] < 0).all()  # descending the loss raises logit 0
    assert (values.grad < 0).all()  # and raises V towards the positive returns
    assert loss.value > 0 and loss.entropy > 0


def test_vtrace_loss_on_policy_equals_a3c_loss() -> None:
    x = data(4)
    g = torch.Generator().manual_seed(5)
    logits = torch.randn(T, B, A, generator=g)
    actions = torch.randint(0, A, (T, B), generator=g)
    args = (x["rewards"], x["discounts"], x["bootstrap"])
    a = a3c_loss(logits, actions, x["values"], *args)
    v = vtrace_loss(logits, logits.clone(), actions, x["values"], *args)
    assert a.total.item() == pytest.approx(v.total.item(), rel=1e-5)
    assert a.policy == pytest.approx(v.policy, rel=1e-5)


def test_double_dqn_target_hand_computed() -> None:
    """Online net picks the action at s', target net evaluates it; terminal cuts the bootstrap."""
    from rltrain.rl.losses import double_dqn_targets, dqn_loss

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
