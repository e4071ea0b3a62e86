"""The algorithms: one typed spec each, in one registry.

Everything that asks "which algorithm is this?" asks its :class:`AlgoSpec`: the trainer and
the config (the process layout, the barrier, what may be configured), the plans (which one
drives the processes) and the learner (its targets and its loss). A new algorithm built from
these parts is one :func:`register_algo` call; ``tests/test_extension_algo.py`` adds one in the
test file alone and trains it. Processes of the process and Ray runtimes import rltrain
afresh: register in a module that ``env.imports`` names, so that they see it too.

The targets are pure tensor functions of one batch (:class:`TargetInputs`); the losses live
in :mod:`rltrain.rl.losses`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import torch

from rltrain.config import ConfigError
from rltrain.rl.losses import lambda_returns, vtrace

if TYPE_CHECKING:
    from rltrain.rl.config import TrainConfig

Layout = Literal["worker", "actor_learner", "replay"]


@dataclass(frozen=True)
class TargetInputs:
    """What a batch's value targets and advantages are computed from; T steps, B envs."""

    behaviour_log_prob: torch.Tensor  # [T, B] log mu(a|x) of the policy that acted
    target_log_prob: torch.Tensor  # [T, B] log pi(a|x) of the learner's policy
    rewards: torch.Tensor  # [T, B]
    discounts: torch.Tensor  # [T, B] gamma, 0 where an episode terminated
    values: torch.Tensor  # [T, B] V(x_t)
    next_values: torch.Tensor  # [T, B] V(x_t+1), V(final obs) where an episode was cut
    continues: torch.Tensor  # [T, B] 0 where an episode ended at t (no trace across it)


TargetFn = Callable[[TargetInputs, "TrainConfig"], tuple[torch.Tensor, torch.Tensor]]
"""(inputs, the run's config) -> value targets [T, B], advantages [T, B]."""


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
        x.behaviour_log_prob,
        x.target_log_prob,
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


@dataclass(frozen=True)
class AlgoSpec:
    """One algorithm: how its processes are laid out and what its learner computes."""

    name: str
    layout: Layout
    """worker: each process acts and learns on its own rollouts (a3c, a2c, ppo); actor_learner:
    acting-only actors feed learner processes their rollouts (impala, appo); replay: actors
    fill a replay memory that learners sample (dqn)."""
    barrier: bool = False
    """The server runs a barrier rule (sync, or soft_sync when configured) whatever
    ``server.rule`` says: a2c and ppo are a3c and appo behind a barrier."""
    clipped: bool = False
    """PPO's clipped surrogate over ``ppo.epochs`` x ``ppo.minibatches`` pushes per batch
    (Schulman et al. 2017); otherwise one policy-gradient push per batch."""
    targets: TargetFn | None = returns_targets
    """The batch's value targets and advantages (None: the algorithm has its own learner)."""
    normalizes: bool = True
    """Observation normalisation and reward scaling apply (dqn: no)."""
    sections: tuple[str, ...] = ("algo",)
    """The config sections it reads: ``algo`` (every algorithm's), then its own (``ppo``,
    ``impala``, ``dqn`` with ``replay``)."""
    summary: str = ""

    @property
    def split(self) -> bool:
        """Separate learner processes (``learners``, ``learner_gpus`` apply)."""
        return self.layout != "worker"

    @property
    def lags(self) -> bool:
        """Its rollouts were made by actors a version or more behind the learner (off-policy:
        loss/lag_kl is measured)."""
        return self.layout == "actor_learner"


_ALGOS: dict[str, AlgoSpec] = {}


def register_algo(spec: AlgoSpec) -> AlgoSpec:
    """Add ``spec`` (its name then works in ``algo.name``); a name already taken is refused."""
    if spec.name in _ALGOS:
        raise ValueError(f"algorithm {spec.name!r} is registered already")
    _ALGOS[spec.name] = spec
    return spec


def unregister_algo(name: str) -> None:
    """Remove a registered algorithm (a test's own, when it is done)."""
    _ALGOS.pop(name, None)


def algo_names() -> tuple[str, ...]:
    return tuple(_ALGOS)


def algo_spec(name: str) -> AlgoSpec:
    """The spec of ``algo.name``; a one-line error naming the registered ones otherwise."""
    try:
        return _ALGOS[name]
    except KeyError:
        raise ConfigError(f"algo.name={name!r}: allowed values are {', '.join(_ALGOS)}") from None


# In the order the options list them.
register_algo(AlgoSpec("a3c", "worker", summary="A3C (Mnih et al. 2016)"))
register_algo(
    AlgoSpec(
        "impala",
        "actor_learner",
        targets=vtrace_targets,
        sections=("algo", "impala"),
        summary="IMPALA, V-trace (Espeholt et al. 2018)",
    )
)
register_algo(AlgoSpec("a2c", "worker", barrier=True, summary="A2C: a3c behind a barrier"))
register_algo(
    AlgoSpec(
        "dqn",
        "replay",
        targets=None,
        normalizes=False,
        sections=("algo", "dqn", "replay"),
        summary="Gorila DQN (Nair et al. 2015)",
    )
)
register_algo(
    AlgoSpec(
        "appo",
        "actor_learner",
        clipped=True,
        targets=vtrace_targets,
        sections=("algo", "impala", "ppo"),
        summary="asynchronous PPO: IMPALA's layout, PPO's loss",
    )
)
register_algo(
    AlgoSpec(
        "ppo",
        "worker",
        barrier=True,
        clipped=True,
        sections=("algo", "ppo"),
        summary="PPO behind a barrier (DD-PPO, Wijmans et al. 2020)",
    )
)
