"""REINFORCE with a learned baseline (Williams 1992; vanilla policy gradient) as an rltrain
algorithm: docs/extending.md."""

from dataclasses import dataclass, field

import torch

from rltrain.config import spec
from rltrain.rl.algos import AlgoSpec, LossBatch, PolicyLoss, RunSettings, register_algo
from rltrain.rl.algos.estimators import NStep
from rltrain.rl.algos.losses import LossTerms


@dataclass(frozen=True)
class ReinforceConfig:
    """vpg: the baseline's weight (the section `vpg` of a config)."""

    baseline_coef: float = field(default=0.5, metadata=spec(ge=0))
    """Weight of the baseline's squared error beside the policy term."""


class ReinforceLoss(PolicyLoss):
    """-log pi(a|s) (G - b(s)) + c_b (b(s) - G)^2 - c_e H(pi); b = V, the critic."""

    def __init__(self, cfg: RunSettings) -> None:
        super().__init__(cfg)  # the algo section, the entropy coefficient and its schedule
        self.baseline_coef = cfg.section("vpg").baseline_coef

    def __call__(self, b: LossBatch) -> LossTerms:
        logp = b.dist.log_prob(b.logits, b.actions)  # [N]
        policy = -(logp * b.advantages.detach()).mean()
        baseline = ((b.values - b.value_targets.detach()) ** 2).mean()
        entropy = b.dist.entropy(b.logits).mean()
        total = policy + self.baseline_coef * baseline - self.entropy_coef * entropy
        zero = torch.zeros(())
        parts = torch.stack([policy, baseline, entropy, zero, zero]).detach()
        return LossTerms(total, parts, absent=("kl", "clip_fraction"))  # no KL, no clipping


def returns_to_go(cfg: RunSettings) -> NStep:
    """Each step's return to the end of its rollout, bootstrapped from the last value."""
    return NStep()


register_algo(
    AlgoSpec(
        "vpg",
        "worker",  # each worker acts and learns, as a3c's; "actor_learner": impala's layout
        ReinforceLoss,
        returns_to_go,
        sections=("algo", "vpg"),  # the sections its loss reads
        options={"vpg": ReinforceConfig},
        summary="REINFORCE with a learned baseline (Williams 1992)",
    )
)
