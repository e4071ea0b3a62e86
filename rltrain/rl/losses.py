"""RL losses as pure tensor functions (shapes in comments; T = time, B = batch of envs).

* n-step returns and the A3C actor-critic loss (Mnih et al. 2016, Algorithm S3).
* V-trace targets and the IMPALA loss (Espeholt et al. 2018, Eq. 1 and Section 4.2).

``discounts[t] = gamma * (1 - terminal[t])``: a terminal step cuts the bootstrap.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class LossTerms:
    """The scalar loss to minimise and its parts (detached, for logging)."""

    total: torch.Tensor  # [] with grad
    policy: float
    value: float
    entropy: float


def nstep_returns(
    rewards: torch.Tensor,  # [T, B]
    discounts: torch.Tensor,  # [T, B]
    bootstrap: torch.Tensor,  # [B] value of the state after the last step
) -> torch.Tensor:  # [T, B]
    """R_t = r_t + d_t R_{t+1}, R_T = V(s_T): A3C's n-step targets for every step of a rollout."""
    out = torch.empty_like(rewards)
    acc = bootstrap
    for t in range(rewards.shape[0] - 1, -1, -1):
        acc = rewards[t] + discounts[t] * acc
        out[t] = acc
    return out


@dataclass(frozen=True)
class VTraceReturns:
    vs: torch.Tensor  # [T, B] V-trace value targets
    pg_advantages: torch.Tensor  # [T, B] rho_t (r_t + d_t v_{t+1} - V(x_t))


@torch.no_grad()
def vtrace(
    behaviour_logp: torch.Tensor,  # [T, B] log mu(a_t | x_t) of the acting policy
    target_logp: torch.Tensor,  # [T, B] log pi(a_t | x_t) of the learner's policy
    rewards: torch.Tensor,  # [T, B]
    discounts: torch.Tensor,  # [T, B]
    values: torch.Tensor,  # [T, B] V(x_t)
    bootstrap: torch.Tensor,  # [B] V(x_T)
    rho_bar: float = 1.0,
    c_bar: float = 1.0,
) -> VTraceReturns:
    """V-trace (Espeholt et al. 2018, Eq. 1), computed backwards:

    v_s - V(x_s) = delta_s + d_s c_s (v_{s+1} - V(x_{s+1})),
    delta_s = rho_s (r_s + d_s V(x_{s+1}) - V(x_s)),
    rho_s = min(rho_bar, pi/mu), c_s = min(c_bar, pi/mu).
    """
    ratios = torch.exp(target_logp - behaviour_logp)
    rhos = torch.clamp(ratios, max=rho_bar)
    cs = torch.clamp(ratios, max=c_bar)
    next_values = torch.cat([values[1:], bootstrap.unsqueeze(0)], dim=0)  # [T, B]
    deltas = rhos * (rewards + discounts * next_values - values)
    corrections = torch.empty_like(values)
    acc = torch.zeros_like(bootstrap)
    for t in range(values.shape[0] - 1, -1, -1):
        acc = deltas[t] + discounts[t] * cs[t] * acc
        corrections[t] = acc
    vs = values + corrections
    next_vs = torch.cat([vs[1:], bootstrap.unsqueeze(0)], dim=0)
    pg_advantages = rhos * (rewards + discounts * next_vs - values)
    return VTraceReturns(vs, pg_advantages)


def actor_critic_loss(
    logits: torch.Tensor,  # [T, B, A] of the policy being trained
    actions: torch.Tensor,  # [T, B] int64
    values: torch.Tensor,  # [T, B] of the critic being trained
    value_targets: torch.Tensor,  # [T, B] (no grad)
    advantages: torch.Tensor,  # [T, B] (no grad)
    value_coef: float,
    entropy_coef: float,
) -> LossTerms:
    """-log pi(a|x) A  +  c_v (V - target)^2 / 2  -  c_e H(pi): A3C's and IMPALA's loss.

    Summed over time and averaged over the batch, the convention of both papers' code.
    """
    log_probs = F.log_softmax(logits, dim=-1)  # [T, B, A]
    logp = log_probs.gather(-1, actions.unsqueeze(-1)).squeeze(-1)  # [T, B]
    entropy = -(log_probs.exp() * log_probs).sum(-1)  # [T, B]
    batch = logits.shape[1]
    policy = -(logp * advantages.detach()).sum() / batch
    value = 0.5 * ((values - value_targets.detach()) ** 2).sum() / batch
    ent = entropy.sum() / batch
    total = policy + value_coef * value - entropy_coef * ent
    return LossTerms(total, float(policy.detach()), float(value.detach()), float(ent.detach()))


def a3c_loss(
    logits: torch.Tensor,  # [T, B, A]
    actions: torch.Tensor,  # [T, B]
    values: torch.Tensor,  # [T, B]
    rewards: torch.Tensor,  # [T, B]
    discounts: torch.Tensor,  # [T, B]
    bootstrap: torch.Tensor,  # [B]
    value_coef: float = 0.5,
    entropy_coef: float = 0.01,
) -> LossTerms:
    """A3C: advantage = n-step return - V(x_t) (Mnih et al. 2016)."""
    returns = nstep_returns(rewards, discounts, bootstrap.detach())
    adv = returns - values.detach()
    return actor_critic_loss(logits, actions, values, returns, adv, value_coef, entropy_coef)


def vtrace_loss(
    logits: torch.Tensor,  # [T, B, A] learner policy
    behaviour_logits: torch.Tensor,  # [T, B, A] acting policy
    actions: torch.Tensor,  # [T, B]
    values: torch.Tensor,  # [T, B]
    rewards: torch.Tensor,  # [T, B]
    discounts: torch.Tensor,  # [T, B]
    bootstrap: torch.Tensor,  # [B]
    value_coef: float = 0.5,
    entropy_coef: float = 0.01,
    rho_bar: float = 1.0,
    c_bar: float = 1.0,
) -> LossTerms:
    """IMPALA: V-trace targets and importance-weighted policy gradient (Espeholt et al. 2018)."""
    target_logp = F.log_softmax(logits, -1).gather(-1, actions.unsqueeze(-1)).squeeze(-1)
    behaviour_logp = (
        F.log_softmax(behaviour_logits, -1).gather(-1, actions.unsqueeze(-1)).squeeze(-1)
    )
    vt = vtrace(
        behaviour_logp,
        target_logp.detach(),
        rewards,
        discounts,
        values.detach(),
        bootstrap.detach(),
        rho_bar,
        c_bar,
    )
    return actor_critic_loss(
        logits, actions, values, vt.vs, vt.pg_advantages, value_coef, entropy_coef
    )


@torch.no_grad()
def double_dqn_targets(
    rewards: torch.Tensor,  # [N]
    done: torch.Tensor,  # [N] bool: terminal, no bootstrap
    next_q_online: torch.Tensor,  # [N, A] online network at s'
    next_q_target: torch.Tensor,  # [N, A] target network at s'
    gamma: float,
) -> torch.Tensor:  # [N]
    """Double DQN (van Hasselt et al. 2016): y = r + gamma Q_target(s', argmax_a Q_online(s', a)).

    The online network chooses, the target network evaluates: less over-estimation than
    max_a Q_target(s', a) of the Nature DQN.
    """
    best = next_q_online.argmax(dim=1, keepdim=True)  # [N, 1]
    bootstrap = next_q_target.gather(1, best).squeeze(1)  # [N]
    return rewards + gamma * (~done).float() * bootstrap


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
