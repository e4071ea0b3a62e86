"""What an algorithm is: its ``algo`` config section, its loss and value estimator, its spec.

An algorithm is a :class:`AlgoSpec` in one registry: how its processes are laid out, which
:class:`PolicyLoss` its learners minimise (TorchRL's ``LossModule`` is the model), which
:class:`ValueEstimator` turns a rollout into value targets and advantages (GAE, V-trace,
n-step returns: swappable objects, as TorchRL's value estimators), and the config sections it
adds. The built-in families register themselves (:mod:`rltrain.rl.algos.a3c`, ``impala``,
``ppo``, ``dqn``); a new one is one :func:`register_algo` call in the user's module
(``tests/test_extension_algo.py`` adds REINFORCE with a learned baseline in the test file
alone). Processes of the process and Ray runtimes import rltrain afresh: register in a module
that ``imports`` names, so that they see it too (:mod:`rltrain.extensions`).

Torch-free: a config is read, and the process runtime's forkserver started, before torch is
imported. Losses and estimators import their tensor functions when first called.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from rltrain.config import ConfigError, spec
from rltrain.extensions import forget_importer, note_importer, track

if TYPE_CHECKING:
    import torch

    from rltrain.rl.algos.distributions import Distribution
    from rltrain.rl.algos.estimators import TargetInputs
    from rltrain.rl.algos.losses import LossTerms

Layout = Literal["worker", "actor_learner", "replay"]
REDUCTIONS = ("mean", "sum")


def linear(start: float, end: float | None, progress: float) -> float:
    """start -> end linearly over progress in [0, 1]; a constant when end is None. Exactly
    ``end`` at 1 (``start + (end - start) * 1`` gave 0.09999999999999998 for 1 -> 0.1, and the
    learning-rate sender, which resends the end value, never sent it: explore98)."""
    if end is None or end == start:  # (the blend below is not exactly start all along)
        return start
    return start * (1.0 - progress) + end * progress


@dataclass(frozen=True)
class AlgoConfig:
    """The learning algorithm and what every algorithm's loss reads."""

    name: str = field(default="a3c", metadata=spec(choices=lambda: algo_names()))
    """a3c: each worker acts and learns on its own rollouts and pushes asynchronously (Mnih et
    al. 2016). impala: actors only act; learners batch their rollouts and correct the policy
    lag with V-trace (Espeholt et al. 2018). appo: IMPALA's actors and learners with PPO's
    clipped surrogate on V-trace advantages, several epochs of minibatches per learner batch
    (asynchronous PPO, as RLlib's APPO and Sample Factory). a2c and ppo: workers that act and
    learn behind the server's barrier (`sync`, or `soft_sync`), the synchronous twins of a3c
    and appo (ppo: every worker's minibatch gradient is averaged before each step, as in
    DD-PPO). dqn: Gorila (Nair et al. 2015): epsilon-greedy actors fill a replay memory,
    learners push double-DQN gradients."""
    rollout_length: int = field(default=20, metadata=spec(ge=1))
    """T: environment steps per rollout (A3C's t_max; n of the n-step return)."""
    gamma: float = field(default=0.99, metadata=spec(ge=0, le=1))
    """Discount factor."""
    gae_lambda: float = field(default=1.0, metadata=spec(ge=0, le=1))
    """lambda of the value targets and advantages: GAE(lambda) (Schulman et al. 2016) for
    a3c/a2c/ppo and for impala/appo with correction: none, V-trace's lambda (c_s = lambda
    min(c_bar, pi/mu), Espeholt et al. 2018, Remark 2) for impala/appo with correction:
    vtrace. 1 = A3C's n-step returns."""
    value_coef: float = field(default=0.5, metadata=spec(ge=0))
    """Weight of the value loss."""
    entropy_coef: float = field(default=0.01, metadata=spec(ge=0))
    """Weight of the entropy bonus (its start value when schedule.entropy_end is set)."""
    max_grad_norm: float = field(default=40.0, metadata=spec(ge=0))
    """Clip each gradient's global norm to this before pushing (0 = no clipping)."""
    loss_reduction: str = field(default="mean", metadata=spec(choices=REDUCTIONS))
    """How the per-step losses of a batch combine: mean (over every step of every env: PPO's
    and CleanRL's convention; learning rates then do not depend on rollout_length or batch
    size) or sum (over time and batch: scalable_agent's IMPALA and the A3C papers)."""


class RunSettings(Protocol):
    """What an algorithm reads of a run's config (rltrain.rl.config.TrainConfig is one):
    the ``algo`` section, and any section by name (its own, ``schedule``, ``env``)."""

    @property
    def algo(self) -> AlgoConfig: ...

    def section(self, name: str) -> Any: ...


@dataclass(frozen=True)
class LossBatch:
    """What a loss is computed on: N samples of one (mini)batch, on the learner's device."""

    logits: torch.Tensor  # [N, P] the policy being trained (logits, or Gaussian parameters)
    actions: torch.Tensor  # [N] int64, or [N, n] float32
    values: torch.Tensor  # [N] the critic being trained
    value_targets: torch.Tensor  # [N] (no grad)
    advantages: torch.Tensor  # [N] (no grad)
    reference_logits: torch.Tensor  # [N, P] mu: the actors' policy, or pi_old (minibatched)
    old_values: torch.Tensor  # [N] the values at the batch's start
    dist: Distribution


class PolicyLoss(abc.ABC):
    """An actor-critic algorithm's loss: built from the run's config, called on each
    :class:`LossBatch`, it returns the scalar to minimise and its parts
    (:class:`rltrain.rl.algos.losses.LossTerms`: policy, value, entropy, kl, clip fraction).

    ``minibatched`` losses (PPO's) take ``epochs`` passes of ``minibatches`` shuffled
    minibatches over each batch, with targets computed once at its start and
    ``reference_logits`` the policy there (pi_old); the others take one pass, their targets
    from the same forward pass and ``reference_logits`` the actors' policy mu."""

    minibatched: bool = False
    epochs: int = 1
    minibatches: int = 1
    target_kl: float = 0.0  # minibatched: end a batch's epochs once one's mean KL passes 1.5x

    def __init__(self, cfg: RunSettings) -> None:
        self.algo = cfg.algo
        self.entropy_end: float | None = cfg.section("schedule").entropy_end
        self.entropy_coef = cfg.algo.entropy_coef

    @property
    def pushes(self) -> int:
        """Gradients pushed per batch (one per minibatch)."""
        return self.epochs * self.minibatches

    def set_progress(self, progress: float) -> None:
        """Where the schedules stand, in [0, 1] (the entropy coefficient's anneal)."""
        self.entropy_coef = linear(self.algo.entropy_coef, self.entropy_end, progress)

    @abc.abstractmethod
    def __call__(self, batch: LossBatch) -> LossTerms:
        """The loss on ``batch``."""


class ValueEstimator(Protocol):
    """Value targets and advantages [T, B] of one batch's :class:`TargetInputs` (GAE,
    V-trace, n-step returns: :mod:`rltrain.rl.algos.estimators`)."""

    def __call__(self, x: TargetInputs) -> tuple[torch.Tensor, torch.Tensor]: ...


LossFactory = Callable[[RunSettings], PolicyLoss]
EstimatorFactory = Callable[[RunSettings], ValueEstimator]
Check = Callable[[Any], None]
"""A check across sections of a run's config (a TrainConfig): ValueError with one line."""


@dataclass(frozen=True)
class AlgoSpec:
    """One algorithm: how its processes are laid out, what its learner computes, and the
    config sections it reads and adds."""

    name: str
    layout: Layout
    """worker: each process acts and learns on its own rollouts (a3c, a2c, ppo); actor_learner:
    acting-only actors feed learner processes their rollouts (impala, appo); replay: actors
    fill a replay memory that learners sample (dqn)."""
    loss: LossFactory | None = None
    """Its learners' loss (None: a Q-learner's, which the replay layout's learner owns)."""
    estimator: EstimatorFactory | None = None
    """Its value targets and advantages (None: the Q-learner's own targets)."""
    q_network: bool = False
    """The network is a Q-network, one value per Discrete action, acting greedily (dqn's
    double-DQN learner); otherwise a policy and a value head."""
    barrier: bool = False
    """The server runs a barrier rule (sync, or soft_sync when configured) whatever
    ``server.rule`` says: a2c and ppo are a3c and appo behind a barrier."""
    normalizes: bool = True
    """Observation normalisation and reward scaling apply (dqn: no)."""
    sections: tuple[str, ...] = ("algo",)
    """The config sections it reads: ``algo`` (every algorithm's), then its own."""
    options: Mapping[str, type] = field(default_factory=dict)
    """The config sections it adds, by name: a dataclass each (:func:`section_types`)."""
    checks: tuple[Check, ...] = ()
    """Its checks across the run's config sections, run when a config is made."""
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

    def make_loss(self, cfg: RunSettings) -> PolicyLoss:
        assert self.loss is not None, f"{self.name}: a Q-learner has no policy loss"
        return self.loss(cfg)

    def pushes(self, cfg: RunSettings) -> int:
        """Gradients its learners push per batch (:attr:`PolicyLoss.pushes`; a Q-learner's: 1)."""
        return 1 if self.loss is None else self.loss(cfg).pushes

    def minibatched(self, cfg: RunSettings) -> bool:
        """Its loss takes minibatches over each batch (:attr:`PolicyLoss.minibatched`)."""
        return self.loss is not None and self.loss(cfg).minibatched

    def make_estimator(self, cfg: RunSettings) -> ValueEstimator:
        assert self.estimator is not None, f"{self.name}: a Q-learner has its own targets"
        return self.estimator(cfg)


_ALGOS: dict[str, AlgoSpec] = {}
_SECTIONS: dict[str, type] = {}
BUILT_IN: set[str] = set()
_RESTORED: set[str] = set()  # the driver's copies in a child, until their module registers
TOP_LEVEL_KEYS = (
    *("seed", "imports", "env", "algo", "model", "sections", "actors", "learners"),
    *("learner_gpus", "optimizer", "schedule", "server", "normalize", "stop", "eval"),
    *("checkpoint", "runtime", "faults", "log_every_seconds"),
)
"""rltrain train's keys that are no algorithm's section (a test holds them to TrainConfig's):
an algorithm's section of such a name broke every config (explore86)."""
"""The algorithms rltrain ships (:func:`unregister_algo` keeps them)."""


def register_algo(spec: AlgoSpec, built_in: bool = False) -> AlgoSpec:
    """Add ``spec`` (its name then works in ``algo.name``, its sections in a config); returns
    the registered spec. A name taken by another spec (an equal one is the same algorithm
    again: a child process holds the driver's before it imports the ``imports`` module that
    registers it), a section another class holds, or parts that do not fit together are
    refused (ValueError)."""
    held = _ALGOS.get(spec.name)
    if held is not None and held == spec:
        return held
    if held is not None and spec.name not in _RESTORED:
        raise ValueError(f"algorithm {spec.name!r} is registered already")
    if held is not None:  # the driver's copy, unpickled (a partial, a lambda by value: equal
        unregister_algo(spec.name)  # only by identity), gives way to its module's own
        _RESTORED.discard(spec.name)
    if spec.layout not in ("worker", "actor_learner", "replay"):
        raise ValueError(
            f"algorithm {spec.name!r}: layout {spec.layout!r} is not one of "
            "worker, actor_learner, replay"
        )
    if spec.q_network != (spec.layout == "replay") or (spec.loss is None) != spec.q_network:
        raise ValueError(
            f"algorithm {spec.name!r}: an actor-critic layout needs a loss and an estimator; "
            "the replay layout's learner is a Q-learner with its own (q_network=True)"
        )
    if (spec.estimator is None) != (spec.loss is None):
        raise ValueError(f"algorithm {spec.name!r}: a loss needs its value estimator")
    for name, cls in spec.options.items():
        if _SECTIONS.get(name, cls) is not cls or name in TOP_LEVEL_KEYS:
            raise ValueError(f"algorithm {spec.name!r}: config section {name!r} is taken")
    _SECTIONS.update(spec.options)
    _ALGOS[spec.name] = spec
    note_importer("rltrain.rl.algos", spec.name)
    if built_in:
        BUILT_IN.add(spec.name)
    return spec


def unregister_algo(name: str) -> None:
    """Remove an algorithm registered with :func:`register_algo`, and the sections no other
    algorithm adds (a test's own; built-ins stay)."""
    if name in BUILT_IN:
        raise ValueError(f"algorithm {name!r} is built in")
    spec = _ALGOS.pop(name, None)
    forget_importer("rltrain.rl.algos", name)
    for section in spec.options if spec else ():
        if not any(section in s.options for s in _ALGOS.values()):
            _SECTIONS.pop(section, None)


def algo_names() -> tuple[str, ...]:
    return tuple(_ALGOS)


def algo_spec(name: str) -> AlgoSpec:
    """The spec of ``algo.name``; a one-line error naming the registered ones otherwise."""
    try:
        return _ALGOS[name]
    except KeyError:
        raise ConfigError(f"algo.name={name!r}: allowed values are {', '.join(_ALGOS)}") from None


def section_types(built_in: bool | None = None) -> dict[str, type]:
    """Every algorithm's config sections by name (``built_in``: only those a built-in
    algorithm adds, or only the others; None: all)."""
    if built_in is None:
        return dict(_SECTIONS)
    ours = {n for s in _ALGOS.values() if s.name in BUILT_IN for n in s.options}
    return {n: c for n, c in _SECTIONS.items() if (n in ours) == built_in}


def _add_unknown(spec: AlgoSpec) -> None:
    if spec.name not in _ALGOS:  # a worker that imported the user's module has it already
        register_algo(spec)
        _RESTORED.add(spec.name)


# what the user registers reaches Ray's processes too (rltrain.extensions)
track("rltrain.rl.algos", lambda: [s for n, s in _ALGOS.items() if n not in BUILT_IN], _add_unknown)
