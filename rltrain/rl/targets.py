"""A batch's value targets and advantages: pure tensor functions of one :class:`TargetInputs`.

An algorithm names its targets in its spec (:mod:`rltrain.rl.algos`); a new one is a function
of the same signature.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from rltrain.rl.losses import lambda_returns, vtrace

if TYPE_CHECKING:
    from rltrain.rl.config import TrainConfig


@dataclass(frozen=True)
class TargetInputs:
    """What a batch's value targets and advantages are computed from; T steps, B envs."""

    log_probs: Callable[[], tuple[torch.Tensor, torch.Tensor]]
    """([T, B] log mu(a|x) of the policy that acted, [T, B] log pi(a|x) of the learner's),
    computed when asked: on-policy targets never need them."""
    rewards: torch.Tensor  # [T, B]
    discounts: torch.Tensor  # [T, B] gamma, 0 where an episode terminated
    values: torch.Tensor  # [T, B] V(x_t)
    next_values: torch.Tensor  # [T, B] V(x_t+1), V(final obs) where an episode was cut
    continues: torch.Tensor  # [T, B] 0 where an episode ended at t (no trace across it)


def returns_targets(x: TargetInputs, cfg: TrainConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """lambda-returns and GAE(lambda) advantages (Schulman et al. 2016); lambda = 1 gives
    A3C's n-step returns (Mnih et al. 2016)."""
    args = (x.rewards, x.discounts, x.values, x.next_values, x.continues)
    returns = lambda_returns(*args, cfg.algo.gae_lambda)
    return returns, returns - x.values


def vtrace_targets(x: TargetInputs, cfg: TrainConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """V-trace targets and policy-gradient advantages (Espeholt et al. 2018, eq. 1 and 4), or
    lambda-returns when ``impala.correction: none`` (the paper's no-correction baseline)."""
    v = cfg.impala
    if v.correction != "vtrace":
        return returns_targets(x, cfg)
    vt = vtrace(
        *x.log_probs(),
        x.rewards,
        x.discounts,
        x.values,
        x.next_values,
        x.continues,
        rho_bar=v.rho_bar,
        c_bar=v.c_bar,
        pg_rho_bar=v.pg_rho_bar,
        lam=cfg.algo.gae_lambda,
    )
    return vt.vs, vt.pg_advantages
