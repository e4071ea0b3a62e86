"""Value estimators: a batch's value targets and advantages from one :class:`TargetInputs`.

Each is an object called on the batch (:class:`rltrain.rl.algos.base.ValueEstimator`), which
an algorithm's spec builds from the run's config; another estimator is any callable of the
same signature (TorchRL's value estimators are the model).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from rltrain.rl.algos.losses import lambda_returns, vtrace


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


@dataclass(frozen=True)
class GAE:
    """lambda-returns and GAE(lambda) advantages (Schulman et al. 2016, Eq. 16)."""

    lam: float = 1.0

    def __call__(self, x: TargetInputs) -> tuple[torch.Tensor, torch.Tensor]:  # [T, B] each
        args = (x.rewards, x.discounts, x.values, x.next_values, x.continues)
        returns = lambda_returns(*args, self.lam)
        return returns, returns - x.values


class NStep(GAE):
    """A3C's n-step returns (Mnih et al. 2016, Algorithm S3): every step bootstraps from the
    rollout's last value, GAE with lambda = 1."""

    def __init__(self) -> None:
        super().__init__(1.0)


@dataclass(frozen=True)
class VTrace:
    """V-trace targets and policy-gradient advantages (Espeholt et al. 2018, Eq. 1 and 4),
    with Remark 2's lambda; the truncation levels rho-bar, c-bar and the policy gradient's."""

    rho_bar: float = 1.0
    c_bar: float = 1.0
    pg_rho_bar: float = 1.0
    lam: float = 1.0

    def __call__(self, x: TargetInputs) -> tuple[torch.Tensor, torch.Tensor]:  # [T, B] each
        vt = vtrace(
            *x.log_probs(),
            x.rewards,
            x.discounts,
            x.values,
            x.next_values,
            x.continues,
            rho_bar=self.rho_bar,
            c_bar=self.c_bar,
            pg_rho_bar=self.pg_rho_bar,
            lam=self.lam,
        )
        return vt.vs, vt.pg_advantages
