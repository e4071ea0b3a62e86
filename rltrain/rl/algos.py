"""The algorithms: one typed spec each, in one registry.

Everything that asks "which algorithm is this?" asks its :class:`AlgoSpec`: the trainer and
the config (the process layout, the barrier, what may be configured), the plans (which one
drives the processes) and the learner (its targets and its loss). A new algorithm built from
these parts is one :func:`register_algo` call; ``tests/test_extension_algo.py`` adds one in the
test file alone and trains it. Processes of the process and Ray runtimes import rltrain
afresh: register in a module that ``env.imports`` names (imported before a train config is
checked, and by every process that makes an env or learns), so that they see it too.

The targets are pure tensor functions of one batch (:mod:`rltrain.rl.targets`); the losses
live in :mod:`rltrain.rl.losses`. This module imports no torch: configs are read first.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from rltrain.config import ConfigError
from rltrain.extensions import track

if TYPE_CHECKING:
    import torch

    from rltrain.rl.config import TrainConfig
    from rltrain.rl.targets import TargetInputs

Layout = Literal["worker", "actor_learner", "replay"]


TargetFn = Callable[["TargetInputs", "TrainConfig"], tuple["torch.Tensor", "torch.Tensor"]]
"""(inputs, the run's config) -> value targets [T, B], advantages [T, B]
(:mod:`rltrain.rl.targets`)."""


def returns_targets(x: TargetInputs, cfg: TrainConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """lambda-returns and GAE(lambda) (:func:`rltrain.rl.targets.returns_targets`; imported
    when first used: a config is read before torch is imported)."""
    from rltrain.rl import targets

    return targets.returns_targets(x, cfg)


def vtrace_targets(x: TargetInputs, cfg: TrainConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """V-trace, or lambda-returns with ``impala.correction: none``
    (:func:`rltrain.rl.targets.vtrace_targets`)."""
    from rltrain.rl import targets

    return targets.vtrace_targets(x, cfg)


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
    def q_network(self) -> bool:
        """The network is a Q-network, one value per Discrete action, acting greedily (the
        replay layout's learner: double DQN); otherwise a policy and a value head."""
        return self.layout == "replay"

    @property
    def lags(self) -> bool:
        """Its rollouts were made by actors a version or more behind the learner (off-policy:
        loss/lag_kl is measured)."""
        return self.layout == "actor_learner"


_ALGOS: dict[str, AlgoSpec] = {}


def register_algo(spec: AlgoSpec) -> AlgoSpec:
    """Add ``spec`` (its name then works in ``algo.name``); a name already taken, or a spec
    whose parts do not fit together, is refused (ValueError)."""
    if spec.name in _ALGOS:
        raise ValueError(f"algorithm {spec.name!r} is registered already")
    if spec.layout not in ("worker", "actor_learner", "replay"):
        raise ValueError(
            f"algorithm {spec.name!r}: layout {spec.layout!r} is not one of "
            "worker, actor_learner, replay"
        )
    if (spec.targets is None) != (spec.layout == "replay"):
        raise ValueError(
            f"algorithm {spec.name!r}: an actor-critic layout needs targets; "
            "the replay layout (dqn's learner) has its own"
        )
    _ALGOS[spec.name] = spec
    return spec


def unregister_algo(name: str) -> None:
    """Remove an algorithm registered with :func:`register_algo` (a test's own; built-ins
    stay)."""
    if name in BUILT_IN:
        raise ValueError(f"algorithm {name!r} is built in")
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

BUILT_IN = algo_names()
"""The algorithms rltrain ships (:func:`unregister_algo` keeps them)."""


def _add_unknown(spec: AlgoSpec) -> None:
    if spec.name not in _ALGOS:  # a worker that imported the user's module has it already
        register_algo(spec)


# what the user registers reaches Ray's processes too (rltrain.extensions)
track(__name__, lambda: [s for n, s in _ALGOS.items() if n not in BUILT_IN], _add_unknown)
