"""A3C and A2C (Mnih et al. 2016): workers that act and learn on their own rollouts.

The loss is the actor-critic's: the policy gradient -log pi(a|x) A, the value loss and the
entropy bonus (Algorithm S3), on GAE(lambda) advantages (lambda = 1: the paper's n-step
returns). A3C pushes each gradient asynchronously; A2C is the same behind the server's barrier.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rltrain.rl.algos.base import AlgoSpec, LossBatch, PolicyLoss, RunSettings, register_algo

if TYPE_CHECKING:
    from rltrain.rl.algos.estimators import GAE
    from rltrain.rl.algos.losses import LossSpec, LossTerms


class ActorCriticLoss(PolicyLoss):
    """policy + c_v (V - target)^2 / 2 - c_e H(pi) (:func:`rltrain.rl.algos.losses.
    actor_critic_loss`); subclasses set the PPO terms of its :class:`LossSpec`, which is
    built again when the entropy coefficient's schedule moves (once a batch, not per
    minibatch: a compiled minibatch step reads it, model.compile)."""

    def __init__(self, cfg: RunSettings) -> None:
        super().__init__(cfg)
        self.held = self.spec()

    def set_progress(self, progress: float) -> None:
        super().set_progress(progress)
        if self.held.entropy_coef != self.entropy_coef:
            self.held = self.spec()

    def spec(self) -> LossSpec:
        from rltrain.rl.algos.losses import LossSpec

        a = self.algo
        return LossSpec(a.value_coef, self.entropy_coef, reduction=a.loss_reduction)

    def __call__(self, b: LossBatch) -> LossTerms:
        from rltrain.rl.algos.losses import actor_critic_loss

        return actor_critic_loss(
            b.logits,
            b.actions,
            b.values,
            b.value_targets,
            b.advantages,
            self.held,
            behaviour_logits=b.reference_logits,
            old_values=b.old_values,
            dist=b.dist,
        )


def gae(cfg: RunSettings) -> GAE:
    """GAE(lambda) on the worker's own rollout (``algo.gae_lambda``)."""
    from rltrain.rl.algos.estimators import GAE

    return GAE(cfg.algo.gae_lambda)


A3C = register_algo(
    AlgoSpec("a3c", "worker", ActorCriticLoss, gae, summary="A3C (Mnih et al. 2016)"),
    built_in=True,
)
A2C = register_algo(
    AlgoSpec(
        "a2c", "worker", ActorCriticLoss, gae, barrier=True, summary="A2C: a3c behind a barrier"
    ),
    built_in=True,
)
