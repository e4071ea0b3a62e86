"""IMPALA (Espeholt et al. 2018): acting-only actors, learners that batch their rollouts and
correct the actors' policy lag with V-trace.

The loss is the actor-critic's (:class:`rltrain.rl.algos.a3c.ActorCriticLoss`) on V-trace's
value targets and policy-gradient advantages (Eq. 1 and 4); ``impala.correction: none`` is
the paper's no-correction baseline, GAE(lambda) as if the actors had acted with the learner's
policy.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rltrain.config import spec
from rltrain.rl.algos.a3c import ActorCriticLoss
from rltrain.rl.algos.base import AlgoSpec, RunSettings, ValueEstimator, register_algo

CORRECTIONS = ("vtrace", "none")


@dataclass(frozen=True)
class ImpalaConfig:
    """impala and appo (section ``impala``): acting-only actors whose rollouts learners batch,
    and how the learner corrects the actors' policy lag (Espeholt et al. 2018)."""

    rho_bar: float = field(default=1.0, metadata=spec(gt=0))
    """V-trace: truncation of the importance weights in the value targets (rho-bar)."""
    pg_rho_bar: float = field(default=1.0, metadata=spec(gt=0))
    """V-trace: truncation of the importance weights of the policy-gradient advantages
    (scalable_agent's clip_pg_rho_threshold)."""
    c_bar: float = field(default=1.0, metadata=spec(gt=0))
    """V-trace: truncation of the trace-cutting weights (c-bar)."""
    correction: str = field(default="vtrace", metadata=spec(choices=CORRECTIONS))
    """How the learner treats the actors' policy lag. vtrace: V-trace targets and advantages
    (Espeholt et al. 2018). none: lambda-returns and GAE(lambda) as if the
    actors had acted with the learner's policy (the paper's "no correction" baseline).
    When each batch moves the policy far (many epochs of minibatches), the actors' data lag by
    a whole batch and V-trace's truncated weights cut most traces (docs/benchmarks.md: appo
    on Taxi). loss/lag_kl shows the lag."""
    learner_batch: int = field(default=2, metadata=spec(ge=1))
    """Rollouts each learner step batches together."""
    in_flight: int = field(default=0, metadata=spec(ge=0))
    """Rollouts that may be queued or being made at once, which bounds the actors' lag behind
    the learner (ps/actor_lag). 0: it adapts, from two batches per learner (few cores: the
    learner is the bottleneck, and more rollouts would only wait, older) up to every actor
    acting with a batch per learner queued, while a learner waits for data (a GPU learner
    faster than its actors). N: held at N, within a batch per learner and actors + a batch per
    learner (said at the start where N is outside): pong_appo's 15 actors on 2 cores with 16
    (learner_batch 1) lag as they do on a box whose learner keeps up with them all
    (docs/pong.md, "The actors' lag")."""


def in_flight_range(learners: int, learner_batch: int, actors: int) -> tuple[int, int]:
    """The rollouts in flight ``impala.in_flight`` may hold: (a batch per learner, every actor
    acting with a batch per learner queued), at least two batches at the top."""
    batches = learners * learner_batch
    return batches, max(2 * batches, actors + batches)


def vtrace(cfg: RunSettings) -> ValueEstimator:
    """V-trace with ``impala``'s truncations and ``algo.gae_lambda`` as its lambda, or GAE
    with ``impala.correction: none``."""
    from rltrain.rl.algos.estimators import GAE, VTrace

    v: ImpalaConfig = cfg.section("impala")
    lam = cfg.algo.gae_lambda
    if v.correction != "vtrace":
        return GAE(lam)
    return VTrace(v.rho_bar, v.c_bar, v.pg_rho_bar, lam)


IMPALA = register_algo(
    AlgoSpec(
        "impala",
        "actor_learner",
        ActorCriticLoss,
        vtrace,
        sections=("algo", "impala"),
        options={"impala": ImpalaConfig},
        summary="IMPALA, V-trace (Espeholt et al. 2018)",
    ),
    built_in=True,
)
