"""PPO (Schulman et al. 2017) behind a barrier, and asynchronous PPO (APPO) on IMPALA's actors.

The loss is the clipped surrogate -min(r A, clip(r, 1 - eps, 1 + eps) A) (Eq. 7), optionally
dual-clipped (Ye et al. 2020), over ``ppo.epochs`` passes of ``ppo.minibatches`` shuffled
minibatches per batch. ppo's workers learn on their own rollouts with GAE and average their
minibatch gradients at the barrier (DD-PPO, Wijmans et al. 2020); appo's learners take V-trace
advantages on IMPALA's batches (the decoupled objective of Hilton et al. 2022: the ratio is to
the learner's policy at the batch's start, V-trace's weight corrects the actors' lag).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rltrain.config import spec
from rltrain.rl.algos.a3c import ActorCriticLoss, gae
from rltrain.rl.algos.base import AlgoSpec, RunSettings, register_algo
from rltrain.rl.algos.impala import ImpalaConfig, vtrace

if TYPE_CHECKING:
    from rltrain.rl.algos.losses import LossSpec


@dataclass(frozen=True)
class PPOConfig:
    """ppo and appo (section ``ppo``): PPO's clipped surrogate over several epochs of
    minibatches per batch (Schulman et al. 2017)."""

    epochs: int = field(default=4, metadata=spec(ge=1))
    """Passes over each batch (a worker's rollout, a learner's batch)."""
    minibatches: int = field(default=4, metadata=spec(ge=1))
    """Minibatches per pass; each is one gradient push (one server step). More of them is
    more updates per frame: on Atari Pong at 240 envs 8 learned faster per frame than 4 and
    16 faster still under sticky actions 0 (18 by 6.9M frames on four seeds of five; 2 slower;
    on v5 16 no better than 8), at 2x and 4x the learner's work per frame (docs/pong.md)."""
    clip: float = field(default=0.2, metadata=spec(gt=0))
    """Epsilon of the clipped surrogate, ratio clipped to [1 - eps, 1 + eps]."""
    dual_clip: float = field(default=3.0, metadata=spec(ge=0))
    """c of dual-clip PPO (Ye et al. 2020): with a negative advantage the surrogate
    is bounded below by c A, so a sample far in the new policy's tail (a ratio of 1e3 when a
    Gaussian's std has shrunk) cannot blow the step up; 0 = off, else > 1."""
    value_clip: float = field(default=0.0, metadata=spec(ge=0))
    """Clip the value's change from its batch-start value to +-this (0 = off)."""
    kl_coef: float = field(default=0.0, metadata=spec(ge=0))
    """Weight of a KL(pi_old || pi) penalty, pi_old the policy at the batch's start
    (0 = off)."""
    target_kl: float = field(default=0.0, metadata=spec(ge=0))
    """Stop a batch's epochs early once an epoch's mean KL(pi_old || pi) over its minibatches
    exceeds 1.5x this (the early stop of Spinning Up's PPO and SB3's ``target_kl``): a
    bound on how far one batch moves the policy, which the ratio's clip does not give a
    Gaussian policy (0 = off; 0.01-0.05 usual). Checked once an epoch, not per minibatch:
    one wait for the device per epoch."""
    normalize_advantages: bool = True
    """Standardise the advantages of each minibatch (zero mean, unit std)."""
    overlap_push: bool = False
    """Without a barrier: compute each minibatch's gradient while the previous push is
    in flight, at the parameters before it (one step of staleness). It hides the round trip,
    but the delay acts as momentum on top of Adam's (Mitliagkas et al. 2016, "Asynchrony
    begets momentum") and destabilised PPO's epochs on Pong (docs/pong.md). Off by default."""

    def __post_init__(self) -> None:
        if 0 < self.dual_clip <= 1:
            raise ValueError(
                f"dual_clip={self.dual_clip:g}: must be 0 (off) or above 1 (the bound c A "
                "lies below the clipped surrogate's (1 - eps) A only for c > 1)"
            )


class PPOLoss(ActorCriticLoss):
    """The clipped surrogate with ``ppo``'s terms, over epochs x minibatches per batch."""

    minibatched = True

    def __init__(self, cfg: RunSettings) -> None:
        self.ppo: PPOConfig = cfg.section("ppo")  # (before the base builds the spec from it)
        super().__init__(cfg)
        self.epochs, self.minibatches = self.ppo.epochs, self.ppo.minibatches
        self.target_kl = self.ppo.target_kl

    def spec(self) -> LossSpec:
        from rltrain.rl.algos.losses import LossSpec

        a, p = self.algo, self.ppo
        return LossSpec(
            value_coef=a.value_coef,
            entropy_coef=self.entropy_coef,
            clip=p.clip,
            dual_clip=p.dual_clip,
            value_clip=p.value_clip,
            kl_coef=p.kl_coef,
            normalize_advantages=p.normalize_advantages,
            reduction=a.loss_reduction,
        )


def check_batches(cfg: Any) -> None:
    """Each minibatch holds one sample at least. A batch is a worker's rollout
    (rollout_length x num_envs: every actor steps env.num_envs, known here), or a learner's
    impala.learner_batch rollouts; more minibatches than samples would push fewer gradients
    than ppo.minibatches says, one sample each."""
    p = cfg.section("ppo")
    parts = [("algo.rollout_length", cfg.algo.rollout_length), ("env.num_envs", cfg.env.num_envs)]
    if cfg.algo_spec.layout == "actor_learner":
        parts.append(("impala.learner_batch", cfg.section("impala").learner_batch))
    samples = 1
    for _, n in parts:
        samples *= n
    if p.minibatches > samples:
        how = " x ".join(f"{key} {n}" for key, n in parts)
        raise ValueError(
            f"ppo.minibatches={p.minibatches}: exceeds the {samples} samples of each batch "
            f"({how}); use at most {samples}"
        )


def check_target_kl(cfg: Any) -> None:
    """``ppo.target_kl`` ends a batch's epochs when its policy moved enough, so a learner
    pushes a varying number of gradients: behind a barrier every pusher must push for each
    version, and a round would wait for pushes that never come."""
    p = cfg.section("ppo")
    if p.target_kl > 0 and (cfg.algo_spec.barrier or cfg.server.update_rule.barrier):
        rule = "sync (ppo's)" if cfg.algo_spec.barrier else cfg.server.rule
        fix = "algo.name=appo with " if cfg.algo_spec.barrier else ""  # (an appo run: the rule)
        raise ValueError(
            f"ppo.target_kl={p.target_kl:g}: an early stop needs an asynchronous server, and "
            f"this run's rule is {rule}; use {fix}server.rule=async, or ppo.target_kl=0 (to "
            "compare rules, on the asynchronous runs too: only the rule then differs)"
        )


PPO = register_algo(
    AlgoSpec(
        "ppo",
        "worker",
        PPOLoss,
        gae,
        barrier=True,
        sections=("algo", "ppo"),
        options={"ppo": PPOConfig},
        checks=(check_batches, check_target_kl),
        summary="PPO behind a barrier (DD-PPO, Wijmans et al. 2020)",
    ),
    built_in=True,
)
APPO = register_algo(
    AlgoSpec(
        "appo",
        "actor_learner",
        PPOLoss,
        vtrace,
        sections=("algo", "impala", "ppo"),
        options={"impala": ImpalaConfig, "ppo": PPOConfig},
        checks=(check_batches, check_target_kl),
        summary="asynchronous PPO: IMPALA's layout, PPO's loss",
    ),
    built_in=True,
)
