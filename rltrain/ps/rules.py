"""Update rules: what a shard does with a pushed update, and what everyone around it does.

A rule is one object that answers every question the code asks about it: whether workers
wait at a barrier, how many updates a barrier step averages, the learning-rate factor of an
update applied on arrival, whether workers push gradients or parameters, what a lost worker
means, how many calls a shard process must serve at once. The shard
(:class:`~rltrain.ps.shard.ParameterShard`), the workers and the driver ask the object, never
the rule's name, so that a new rule is a subclass and one :func:`register_rule` call::

    class HalfAsync(Async):
        name = "async_half"
        def lr_scale(self, server, staleness):
            return 0.5 * super().lr_scale(server, staleness)

    register_rule(HalfAsync())  # now server.rule / bench modes accept async_half

``server.rule`` stays a name in YAML, on the command line and in checkpoints; its allowed
values are read from the registry when a config is checked (:func:`rule_names`). The object
travels with the workers' specs (it pickles by class), so a rule registered in the driver's
process also runs in worker processes; a shard resolves the name where it lives (the driver's
process on the process runtime; on Ray, every worker process registers the driver's rules
first, :mod:`rltrain.extensions`). A rule defined in a module of your own is named in the
config's ``imports`` so that the command line and ``rltrain reapply`` know it too.
"""

from __future__ import annotations

import math
import numbers
from typing import ClassVar, Protocol

from rltrain.config import ConfigError
from rltrain.errors import RLTrainError
from rltrain.extensions import forget_importer, note_importer, track


class RuleContractError(RLTrainError, ValueError):
    """A rule of your own whose answer rltrain cannot act on (:meth:`UpdateRule.checked_scale`)."""


class RuleSettings(Protocol):
    """The server settings a rule reads (fields of :class:`rltrain.ps.config.ServerConfig`,
    which names its rule and so imports this module)."""

    @property
    def k(self) -> int: ...
    @property
    def staleness(self) -> str: ...
    @property
    def max_staleness(self) -> int: ...


class UpdateRule:
    """The base of every rule: an on-arrival rule (each update applied as it comes) unless a
    subclass says otherwise. Stateless: one object serves every shard and worker."""

    name: ClassVar[str] = ""
    """The name in ``server.rule`` and in bench ``modes``."""
    barrier: ClassVar[bool] = False
    """Workers wait at a barrier: the shard accumulates a version's updates and steps once with
    their mean, and a worker that pushed for version v waits for v + 1 (False: the shard
    applies each update on arrival, and workers never wait)."""
    pushes_parameters: ClassVar[bool] = False
    """Workers push their parameters after local optimizer steps, and the barrier's step
    replaces the parameters with their mean (parameter averaging) instead of an optimizer
    step on a mean gradient."""
    supervised_only: ClassVar[bool] = False
    """Only ``rltrain bench`` runs it (``rltrain train``'s workers push gradients)."""
    waits_for_restart: ClassVar[bool] = True
    """A barrier rule waits for a lost worker's restart (unless ``faults.on_worker_loss`` is
    continue); False: it goes on with the live workers at once."""

    @property
    def records_gradients(self) -> bool:
        """``server.record`` can log its pushes for ``rltrain reapply`` (gradients only: a
        pushed parameter vector depends on local steps no log follows)."""
        return not self.pushes_parameters

    @property
    def corrects_momentum(self) -> bool:
        """``server.momentum_correction`` applies: asynchrony among N pushers adds momentum
        (Mitliagkas et al. 2016) only where updates are applied on arrival."""
        return not self.barrier

    def aggregate_count(
        self, server: RuleSettings, num_workers: int, live: int | None = None
    ) -> int:
        """Updates a barrier step waits for: the ``live`` workers (default all N; fewer when
        some have left), at least 1."""
        return max(1, num_workers if live is None else live)

    def lr_scale(self, server: RuleSettings, staleness: int) -> float:
        """The learning-rate factor of an update applied on arrival ``staleness`` versions
        behind the shard (barrier steps use 1)."""
        return 1.0

    def drop_reason(self, server: RuleSettings, staleness: int) -> str:
        """Why an on-arrival update is refused ("" = apply it)."""
        return ""

    def checked_drop(self, server: RuleSettings, staleness: int) -> str:
        """:meth:`drop_reason` as the shard reads it (not to override): a string, else one line
        (explore108: ``return staleness > k`` dropped by truthiness, ``None`` applied, unsaid)."""
        reason = self.drop_reason(server, staleness)
        if not isinstance(reason, str):
            raise RuleContractError(
                f"update rule {self.name!r}: drop_reason returned {reason!r} for staleness "
                f"{staleness}; it returns why the update is dropped, a string ('' to apply it)"
            )
        return reason

    def checked_scale(self, server: RuleSettings, staleness: int) -> float:
        """:meth:`lr_scale` as the shard steps by it (not to override): anything but a finite
        number >= 0 stops the run in one line, before a step it would make NaN or reverse."""
        scale = self.lr_scale(server, staleness)
        number = isinstance(scale, numbers.Real) and not isinstance(scale, bool)
        if not (number and scale >= 0 and math.isfinite(scale)):
            raise RuleContractError(
                f"update rule {self.name!r}: lr_scale returned {scale!r} for staleness "
                f"{staleness}; it returns a learning-rate factor, a finite number >= 0"
            )
        return float(scale)

    def checked_count(self, server: RuleSettings, num_workers: int, live: int | None = None) -> int:
        """:meth:`aggregate_count` as a barrier waits for it (not to override): a whole number
        from 1 to ``num_workers``, else one line (explore108: N + 3 waited for updates that
        never came, past every stop; a float ran as another count)."""
        k = self.aggregate_count(server, num_workers, live)
        if not isinstance(k, numbers.Integral) or isinstance(k, bool) or not 1 <= k <= num_workers:
            raise RuleContractError(
                f"update rule {self.name!r}: aggregate_count returned {k!r} for {num_workers} "
                "workers; it returns how many updates a step waits for, a whole number from 1 "
                f"to {num_workers}"
            )
        return int(k)

    def decides(self, server: RuleSettings) -> bool:
        """Whether an update's fate depends on the shard's own version or arrival order (a
        barrier, a staleness policy, or a rule's own ``lr_scale`` or ``drop_reason``, which
        may read the staleness each shard sees apart: explore86's two shards scaled 9% of
        the updates' halves differently): several shards then let shard 0 decide for all
        (:meth:`~rltrain.ps.shard.ParameterShard.push`)."""
        own = any(_own(self, m) for m in ("lr_scale", "drop_reason"))
        return self.barrier or server.staleness != "none" or own

    def scales(self, server: RuleSettings) -> bool:
        """Whether an applied update may step at another rate than the optimizer's: a
        staleness policy that scales (``server.staleness: scale``) or a rule's own
        ``lr_scale`` (TensorBoard's ``optim/lr_effective`` is written where one does)."""
        return server.staleness == "scale" or _own(self, "lr_scale")

    def max_concurrency(self, num_workers: int) -> int:
        """Calls a shard process serves at once: every waiter of a barrier, and a few more
        for pulls and the driver; an on-arrival shard has no waiter and serves one at a time."""
        return num_workers + 8 if self.barrier else 1

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class Async(UpdateRule):
    """Apply every update on arrival (Downpour SGD, Dean et al. 2012; Gorila; A3C), its
    staleness handled by ``server.staleness``: scale lr by 1 / staleness (Zhang et al. 2016)
    or drop updates staler than ``server.max_staleness``."""

    name = "async"

    def lr_scale(self, server: RuleSettings, staleness: int) -> float:
        return 1.0 / max(1, staleness) if server.staleness == "scale" else 1.0

    def drop_reason(self, server: RuleSettings, staleness: int) -> str:
        if server.staleness == "drop" and staleness > server.max_staleness:
            return f"staleness {staleness} > max_staleness {server.max_staleness}"
        return ""


class Sync(UpdateRule):
    """Wait for every worker's update of a version, step once with their mean (DistBelief's
    synchronous baseline; DD-PPO)."""

    name = "sync"
    barrier = True


class SoftSync(UpdateRule):
    """Step after the first K of N updates of a version and drop the late ones (TensorFlow's
    SyncReplicasOptimizer with N - K backup workers); never waits for a straggler."""

    name = "soft_sync"
    barrier = True
    waits_for_restart = False

    def aggregate_count(
        self, server: RuleSettings, num_workers: int, live: int | None = None
    ) -> int:
        """K of N (``server.k``, 0 = N - 1), and min(K, live) once workers have left."""
        k = server.k or max(1, num_workers - 1)
        if k > num_workers:
            raise ValueError(f"server.k={k} is larger than the number of workers ({num_workers})")
        return max(1, min(k, num_workers if live is None else live))


class Average(UpdateRule):
    """Parameter averaging: workers take ``server.average_every`` local optimizer steps, push
    their parameters, and the shard replaces its own with the mean of the N."""

    name = "average"
    barrier = True
    pushes_parameters = True
    supervised_only = True


ASYNC, SYNC, SOFT_SYNC, AVERAGE = Async(), Sync(), SoftSync(), Average()
_RULES: dict[str, UpdateRule] = {}


BENCH_MODE_NAMES = ("baseline", "async_scale", "async_drop", "hogwild", "sandblaster", "allreduce")
"""The bench's modes that are not update rules (:data:`rltrain.supervised.config.MODES`): a
rule of such a name would replace one mode (async_scale) and be ignored by another
(baseline), without a word (explore86)."""


def register_rule(rule: UpdateRule) -> UpdateRule:
    """Make ``rule`` known by its name (to configs, the shards, the bench's modes); returns the
    registered rule. A name registered already is refused (ValueError), unless by the same
    rule again (its class, with equal attributes): a child process holds the driver's rules
    (:mod:`rltrain.extensions`) before it imports the ``imports`` module that registers them."""
    if not rule.name or not rule.name.isidentifier():
        raise ValueError(f"an update rule needs a name that is an identifier, got {rule.name!r}")
    if rule.name in BENCH_MODE_NAMES:
        raise ValueError(
            f"update rule {rule.name!r}: the name of a bench mode that is no rule "
            f"({', '.join(BENCH_MODE_NAMES)}); a rule is a mode of its own name"
        )
    held = _RULES.get(rule.name)
    if held is not None and (type(held) is not type(rule) or vars(held) != vars(rule)):
        raise ValueError(f"update rule {rule.name!r} is registered already ({held!r})")
    if held is None:  # (an equal rule again changes nothing, nor who registered it)
        note_importer(__name__, rule.name)
    return _RULES.setdefault(rule.name, rule)


def unregister_rule(name: str) -> None:
    """Forget a rule registered with :func:`register_rule` (a test's own; built-ins stay)."""
    if name in (r.name for r in BUILT_IN):
        raise ValueError(f"update rule {name!r} is built in")
    _RULES.pop(name, None)
    forget_importer(__name__, name)


def rule_named(name: str) -> UpdateRule:
    """The registered rule called ``name`` (a one-line ConfigError naming the registered ones
    if none, as :func:`rltrain.rl.algos.algo_spec`)."""
    rule = _RULES.get(name)
    if rule is None:
        raise ConfigError(f"server.rule={name!r}: allowed values are {', '.join(rule_names())}")
    return rule


def rule_names() -> tuple[str, ...]:
    """The registered rules' names, built-in first, in registration order."""
    return tuple(_RULES)


def _add_unknown(rule: UpdateRule) -> None:
    if rule.name not in _RULES:  # a worker that imported the user's module has it already
        register_rule(rule)


BUILT_IN: tuple[UpdateRule, ...] = (SYNC, SOFT_SYNC, ASYNC, AVERAGE)


def _own(rule: UpdateRule, method: str) -> bool:
    """Whether ``rule``'s ``method`` is its own, none of the built-in rules'."""
    impl = getattr(type(rule), method)
    return all(impl is not getattr(type(b), method) for b in (*BUILT_IN, UpdateRule()))


for _rule in BUILT_IN:
    register_rule(_rule)
# what the user registers reaches Ray's processes too (rltrain.extensions)
track(__name__, lambda: [r for r in _RULES.values() if r not in BUILT_IN], _add_unknown)
