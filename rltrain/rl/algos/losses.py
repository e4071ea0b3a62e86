"""RL losses as pure tensor functions (shapes in comments; T = time, B = envs, N = samples).

* Value targets and advantages of a rollout: lambda-returns / GAE (Schulman et al. 2016), of
  which A3C's n-step returns are lambda = 1 (Mnih et al. 2016, Algorithm S3), and V-trace
  (Espeholt et al. 2018, Eq. 1, with Remark 2's lambda), all through one backward recursion.
* One actor-critic loss for A3C, IMPALA and PPO/APPO: the policy term is the plain policy
  gradient or PPO's clipped surrogate (Schulman et al. 2017, Eq. 7), plus the value loss
  (optionally clipped), the entropy bonus and an optional KL penalty.

Episode ends (Pardo et al. 2018, "Time limits in RL"): ``discounts[t] = gamma (1 - terminated)``
cuts the future at a terminal; ``next_values[t]`` is the value of the state after step t *in the
same episode*, V(obs[t+1]) or, where the episode was truncated, V(final obs); ``continues[t]``
is False at any episode end, so no return or trace runs into the next episode.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F

from rltrain.errors import RLTrainError
from rltrain.rl.algos.distributions import CATEGORICAL, Distribution


class LossParts(NamedTuple):
    """A loss's parts as numbers (:meth:`LossTerms.floats`)."""

    policy: float
    value: float
    entropy: float
    kl: float  # mean KL(mu || pi) over the batch; mu: the reference logits given
    clip_fraction: float


@dataclass(frozen=True)
class LossTerms:
    """The scalar loss to minimise and its parts (detached, for logging), kept on the loss's
    device until :meth:`floats` reads them in one transfer: a float() per part would make a
    GPU wait for the forward pass before the backward is queued, five times a minibatch."""

    total: torch.Tensor  # [] with grad
    parts: torch.Tensor  # [5] LossParts' fields, in order
    absent: tuple[str, ...] = ()
    """Parts this loss does not have (their slots hold 0): not logged. A3C's KL of the policy
    against itself is rounding noise, and IMPALA's is its ``lag_kl`` again (explore88)."""

    def floats(self) -> LossParts:
        return LossParts(*self.parts.tolist())


def check_terms(terms: object, algo: str) -> None:
    """A one-line error where an algorithm's loss returns anything but :class:`LossTerms` of a
    scalar total and ``len(LossParts._fields)`` parts (explore86's loss of your own met torch's
    errors instead: "not enough values to unpack (expected 7, got 5)"). Shapes only: no sync."""
    n = len(LossParts._fields)
    if isinstance(terms, LossTerms) and terms.total.dim() == 0 and terms.parts.shape == (n,):
        if not set(terms.absent) <= set(LossParts._fields):
            raise LossContractError(
                f"algo.name={algo}: its loss's absent={terms.absent!r} names no part of "
                f"LossTerms.parts ({', '.join(LossParts._fields)})"
            )
        return
    got = type(terms).__name__
    if isinstance(terms, LossTerms):
        got = f"total of shape {list(terms.total.shape)} and parts of {list(terms.parts.shape)}"
    raise LossContractError(
        f"algo.name={algo}: its loss returned {got}; a loss returns LossTerms(total, parts): "
        f"total a scalar tensor to minimise, parts a [{n}] tensor ({', '.join(LossParts._fields)})"
    )


def check_estimate(out: object, shape: tuple[int, ...], algo: str) -> None:
    """A one-line error where an algorithm's value estimator returns anything but (value
    targets, advantages), two tensors of the rollout's [T, B] (explore108: one tensor was
    "too many values to unpack", and [T] a shape error blamed on the loss). Shapes only."""
    pair = out if isinstance(out, tuple) and len(out) == 2 else ()
    if pair and all(isinstance(t, torch.Tensor) and tuple(t.shape) == shape for t in pair):
        return
    got = type(out).__name__
    if isinstance(out, tuple):
        each = [
            str(list(t.shape)) if isinstance(t, torch.Tensor) else type(t).__name__ for t in out
        ]
        got = f"({', '.join(each)})"
    elif isinstance(out, torch.Tensor):
        got = f"one tensor of shape {list(out.shape)}"
    raise LossContractError(
        f"algo.name={algo}: its value estimator returned {got}; an estimator returns (value "
        f"targets, advantages), two tensors of the rollout's [T, B] = {list(shape)}"
    )


class LossContractError(RLTrainError, ValueError):
    """A loss of your own that breaks :class:`LossTerms`' contract (:func:`check_terms`)."""


def next_state_values(
    values: torch.Tensor,  # [T+1, B] V(obs[t]), the last row is V(obs[T])
    final_values: torch.Tensor,  # [K] V(final obs) of the truncated episodes
    final_at: torch.Tensor,  # [K, 2] int64 (t, b) of each truncation
) -> torch.Tensor:  # [T, B]
    """V of the state after each step within its episode: V(obs[t+1]), or V(final obs) where
    the episode was truncated at t (obs[t+1] is then the next episode's first state)."""
    nxt = values[1:].clone()
    if len(final_at):
        nxt[final_at[:, 0], final_at[:, 1]] = final_values.to(nxt.dtype)
    return nxt


def _backward(deltas: torch.Tensor, coefs: torch.Tensor) -> torch.Tensor:  # [T, B] each
    """acc_t = deltas_t + coefs_t acc_{t+1}, acc_T = 0: the sum every target below is made of.

    A linear recurrence, computed as a parallel scan (Blelloch 1990, "Prefix sums and their
    applications"; the Hillis-Steele form): after the round with stride s, (c_t, d_t) stand for
    the s steps from t on, acc_t = d_t + c_t acc_{t+s}, and two such spans compose as
    (c, d) o (c', d') = (c c', d + c d'). log2(T) rounds of whole-tensor operations: 66 for a
    64-step rollout where a loop over the steps launches 387 (each a kernel on a GPU), and
    faster on a CPU too. Equal to the loop up to float rounding (tests/test_losses.py's
    slow references)."""
    d, c, s, T = deltas, coefs, 1, deltas.shape[0]
    while s < T:  # spans reaching past T - 1 are complete already: acc_T = 0
        d = torch.cat([torch.addcmul(d[:-s], c[:-s], d[s:]), d[-s:]])
        c = torch.cat([c[:-s] * c[s:], c[-s:]])
        s *= 2
    return d


@torch.no_grad()
def lambda_returns(
    rewards: torch.Tensor,  # [T, B]
    discounts: torch.Tensor,  # [T, B] gamma (1 - terminated)
    values: torch.Tensor,  # [T, B] V(obs[t])
    next_values: torch.Tensor,  # [T, B] see next_state_values
    continues: torch.Tensor,  # [T, B] bool
    lam: float = 1.0,
) -> torch.Tensor:  # [T, B]
    """TD(lambda) returns R_t; R_t - V(x_t) is GAE(lambda) (Schulman et al. 2016, Eq. 16).

    delta_t = r_t + d_t V(x_{t+1}) - V(x_t);  R_t - V(x_t) = delta_t + d_t lambda (R_{t+1} -
    V(x_{t+1})). lambda = 1: A3C's n-step returns, bootstrapped from V(obs[T]).
    """
    deltas = rewards + discounts * next_values - values
    return values + _backward(deltas, discounts * lam * continues.float())


@dataclass(frozen=True)
class VTraceReturns:
    vs: torch.Tensor  # [T, B] V-trace value targets
    pg_advantages: torch.Tensor  # [T, B] rho_t (r_t + d_t v_{t+1} - V(x_t))


@torch.no_grad()
def vtrace(
    behaviour_logp: torch.Tensor,  # [T, B] log mu(a_t | x_t) of the acting policy
    target_logp: torch.Tensor,  # [T, B] log pi(a_t | x_t) of the learner's policy
    rewards: torch.Tensor,  # [T, B]
    discounts: torch.Tensor,  # [T, B] gamma (1 - terminated)
    values: torch.Tensor,  # [T, B] V(x_t)
    next_values: torch.Tensor,  # [T, B] see next_state_values
    continues: torch.Tensor,  # [T, B] bool
    rho_bar: float = 1.0,
    c_bar: float = 1.0,
    pg_rho_bar: float = 1.0,
    lam: float = 1.0,
) -> VTraceReturns:
    """V-trace (Espeholt et al. 2018, Eq. 1), computed backwards:

    v_s - V(x_s) = delta_s + d_s c_s (v_{s+1} - V(x_{s+1})),
    delta_s = rho_s (r_s + d_s V(x_{s+1}) - V(x_s)),
    rho_s = min(rho_bar, pi/mu), c_s = lambda min(c_bar, pi/mu) (Remark 2);
    pg advantage_s = min(pg_rho_bar, pi/mu) (r_s + d_s v_{s+1} - V(x_s)), where v_{s+1} is
    the bootstrap value itself at an episode end (and at s = T - 1).
    """
    ratios = torch.exp(target_logp - behaviour_logp)
    rhos = torch.clamp(ratios, max=rho_bar)
    cs = lam * torch.clamp(ratios, max=c_bar)
    deltas = rhos * (rewards + discounts * next_values - values)
    vs = values + _backward(deltas, discounts * cs * continues.float())
    next_vs = next_values.clone()
    next_vs[:-1] = torch.where(continues[:-1], vs[1:], next_values[:-1])
    pg_rhos = torch.clamp(ratios, max=pg_rho_bar)
    return VTraceReturns(vs, pg_rhos * (rewards + discounts * next_vs - values))


@dataclass(frozen=True)
class LossSpec:
    """The coefficients of :func:`actor_critic_loss` (from AlgoConfig)."""

    value_coef: float = 0.5
    entropy_coef: float = 0.01
    clip: float = 0.0  # PPO's epsilon; 0: the plain policy gradient of A3C/IMPALA
    dual_clip: float = 0.0  # dual-clip PPO's c (> 1) bounding negative advantages; 0: off
    value_clip: float = 0.0  # 0: no value clipping
    kl_coef: float = 0.0
    normalize_advantages: bool = False
    reduction: str = "mean"  # or "sum"


def actor_critic_loss(
    logits: torch.Tensor,  # [N, P] of the policy being trained (logits, or Gaussian parameters)
    actions: torch.Tensor,  # [N] int64, or [N, n] float32
    values: torch.Tensor,  # [N] of the critic being trained
    value_targets: torch.Tensor,  # [N] (no grad)
    advantages: torch.Tensor,  # [N] (no grad)
    spec: LossSpec,
    behaviour_logits: torch.Tensor | None = None,  # [N, P] mu: the actors' policy or PPO's pi_old
    old_values: torch.Tensor | None = None,  # [N] values at the batch's start (value_clip)
    dist: Distribution = CATEGORICAL,
) -> LossTerms:
    """policy  +  c_v (V - target)^2 / 2  -  c_e H(pi)  +  c_kl KL(mu || pi).

    policy = -log pi(a|x) A (A3C, IMPALA), or with ``spec.clip`` PPO's clipped surrogate
    -min(r A, clip(r, 1 - eps, 1 + eps) A), r = pi(a|x) / mu(a|x), and with ``spec.dual_clip``
    c that minimum bounded below by c A where A < 0 (Ye et al. 2020). Each term is the mean (or
    the sum, ``spec.reduction``) over the N samples. ``dist``: the policy's distribution
    (:mod:`rltrain.rl.algos.distributions`; categorical for discrete actions).
    """
    reduce = torch.mean if spec.reduction == "mean" else torch.sum
    adv = advantages.detach()
    if spec.normalize_advantages and adv.numel() > 1:
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    logp = dist.log_prob(logits, actions)  # [N]
    entropy = reduce(dist.entropy(logits))
    kl = clip_fraction = torch.zeros((), device=logits.device)
    if behaviour_logits is not None:
        mu = behaviour_logits.detach()
        # bounded: an action deep in one policy's tail gives exp(a huge number) = inf, and
        # inf * 0 = NaN in the gradient; beyond e^20 the sample's gradient is cut instead
        log_ratio = (logp - dist.log_prob(mu, actions)).clamp(-20.0, 20.0)  # [N]
        kl_mu_pi = dist.kl(mu, logits)  # [N]
        kl = kl_mu_pi.mean().detach().clamp_min(0.0)  # (rounding made it -1e-9, explore88)
    if spec.clip > 0:
        assert behaviour_logits is not None, "the clipped surrogate needs the behaviour policy"
        ratio = log_ratio.exp()
        surrogate = torch.min(ratio * adv, ratio.clamp(1 - spec.clip, 1 + spec.clip) * adv)
        if spec.dual_clip > 0:
            bounded = torch.max(surrogate, spec.dual_clip * adv)
            surrogate = torch.where(adv < 0, bounded, surrogate)
        policy = -reduce(surrogate)
        clip_fraction = ((ratio - 1).abs() > spec.clip).float().mean()
    else:
        policy = -reduce(logp * adv)
    target = value_targets.detach()
    value_err = (values - target) ** 2
    if spec.value_clip > 0 and old_values is not None:
        clipped = old_values + (values - old_values).clamp(-spec.value_clip, spec.value_clip)
        value_err = torch.max(value_err, (clipped - target) ** 2)
    value = 0.5 * reduce(value_err)
    total = policy + spec.value_coef * value - spec.entropy_coef * entropy
    if spec.kl_coef > 0:
        assert behaviour_logits is not None, "the KL penalty needs the behaviour policy"
        total = total + spec.kl_coef * reduce(kl_mu_pi)
    parts = torch.stack([policy, value, entropy, kl, clip_fraction]).detach().float()
    return LossTerms(total, parts, absent_parts(spec))


def absent_parts(spec: LossSpec) -> tuple[str, ...]:
    """The parts :func:`actor_critic_loss` has no use for under ``spec``: the KL where neither
    PPO's ratio (``clip``) nor a penalty (``kl_coef``) reads it, the clip fraction unclipped."""
    uses_kl = spec.clip > 0 or spec.kl_coef > 0
    return (() if uses_kl else ("kl",)) + (() if spec.clip > 0 else ("clip_fraction",))


@torch.no_grad()
def double_dqn_targets(
    rewards: torch.Tensor,  # [N]
    done: torch.Tensor,  # [N] bool: terminal, no bootstrap
    next_q_online: torch.Tensor,  # [N, A] online network at s'
    next_q_target: torch.Tensor,  # [N, A] target network at s'
    gamma: float,
    steps: torch.Tensor | None = None,  # [N] int64 k of n-step returns (None: 1)
) -> torch.Tensor:  # [N]
    """Double DQN (van Hasselt et al. 2016): y = r + gamma Q_target(s', argmax_a Q_online(s', a)).

    The online network chooses, the target network evaluates: less over-estimation than
    max_a Q_target(s', a) of the Nature DQN. With n-step returns, r sums k discounted rewards
    and s' is s_{t+k}, so the bootstrap is discounted by gamma^k (Hessel et al. 2018, eq. 2).
    """
    best = next_q_online.argmax(dim=1, keepdim=True)  # [N, 1]
    bootstrap = next_q_target.gather(1, best).squeeze(1)  # [N]
    discount = gamma if steps is None else gamma ** steps.to(bootstrap.dtype)  # [] or [N]
    return rewards + discount * (~done).float() * bootstrap


def dqn_loss(
    q: torch.Tensor,  # [N, A] online network at s
    actions: torch.Tensor,  # [N] int64
    targets: torch.Tensor,  # [N] (no grad)
    weights: torch.Tensor,  # [N] importance weights (1 for uniform replay)
) -> tuple[torch.Tensor, torch.Tensor]:  # [] loss, [N] TD errors (detached)
    """Huber loss on the TD error (Mnih et al. 2015), importance-weighted (Schaul et al. 2016)."""
    q_a = q.gather(1, actions.unsqueeze(1)).squeeze(1)  # [N]
    td = targets.detach() - q_a
    loss = (weights * F.smooth_l1_loss(q_a, targets.detach(), reduction="none")).mean()
    return loss, td.detach()


@torch.no_grad()
def categorical_targets(
    rewards: torch.Tensor,  # [N]
    done: torch.Tensor,  # [N] bool: terminal, no bootstrap
    next_probs: torch.Tensor,  # [N, K] the target network's distribution at s', chosen action
    support: torch.Tensor,  # [K] the atoms' returns z_0 < ... < z_{K-1}, evenly spaced
    gamma: float,
    steps: torch.Tensor | None = None,  # [N] int64 k of n-step returns (None: 1)
) -> tuple[torch.Tensor, torch.Tensor]:  # [N, K] target, [N] share beyond the support
    """C51's target distribution (Bellemare et al. 2017, Algorithm 1): each atom moved to
    r + gamma^k z_j, clipped to the support, its probability split between the two atoms
    nearest (the projection onto the support). An atom that lands exactly on one keeps all of
    its probability there (Algorithm 1 as printed gives it to neither: floor = ceil). Also
    the share of each target's probability that was moved past the support's ends."""
    k = support.numel()
    v_min, v_max = support[0], support[-1]  # [] each (tensors: no wait for a GPU)
    dz = (v_max - v_min) / (k - 1)
    discount = gamma if steps is None else gamma ** steps.to(rewards.dtype)  # [] or [N]
    bootstrap = (discount * (~done).float()).reshape(-1, 1)  # [N, 1]
    raw = rewards.reshape(-1, 1) + bootstrap * support  # [N, K]
    beyond = (next_probs * ((raw < v_min) | (raw > v_max)).float()).sum(-1)  # [N]
    moved = torch.clamp(raw, v_min, v_max)  # [N, K]
    # in [0, K - 1], clamped again: float32 put an atom at v_max just above K - 1, and its
    # ceiling K past the last atom (review90: 20 of a grid of supports, e.g. -7.3..9.9)
    b = ((moved - v_min) / dz).clamp(0, k - 1)  # [N, K]
    lower, upper = b.floor().long(), b.ceil().long()
    upper_share = b - lower.float()  # [N, K] 0 where b is an atom: all to lower
    out = torch.zeros_like(next_probs)  # (float32: the replay's rewards)
    out.scatter_add_(1, lower, next_probs * (1.0 - upper_share))
    out.scatter_add_(1, upper, next_probs * upper_share)
    return out, beyond


def categorical_loss(
    log_probs: torch.Tensor,  # [N, A, K] online network at s
    actions: torch.Tensor,  # [N] int64
    targets: torch.Tensor,  # [N, K] (no grad)
    weights: torch.Tensor,  # [N] importance weights (1 for uniform replay)
) -> tuple[torch.Tensor, torch.Tensor]:  # [] loss, [N] cross-entropies (detached)
    """C51's loss: the cross-entropy of the projected target distribution against the online
    one at the action taken (Bellemare et al. 2017, Algorithm 1), importance-weighted. The
    per-sample cross-entropy is what prioritised replay ranks by, as Dopamine's and Kaixhin's
    Rainbow do (Hessel et al. 2018 name the KL, less the target's entropy)."""
    index = actions.reshape(-1, 1, 1).expand(-1, 1, log_probs.shape[-1])  # [N, 1, K]
    log_p = log_probs.gather(1, index).squeeze(1)  # [N, K]
    ce = -(targets.detach() * log_p).sum(-1)  # [N]
    return (weights * ce).mean(), ce.detach()
