"""Faults: losing processes, surviving it, and causing it on purpose.

Plain Python, no Ray. :mod:`rltrain.runtime.ray` turns Ray's errors into :class:`ProcessLost` and
:class:`PeerLost` (:mod:`rltrain.runtime.process`, a dead child into :class:`ProcessLost`);
the drivers (``rl/run/train.py``, ``supervised/bench.py``) count them in
:class:`FaultCounters`, and :class:`FaultSchedule` fires the configured ``faults.events`` (kills
and pauses of chosen processes at chosen times; ``slow`` events are applied by the workers
themselves through :class:`Slowdown`).

Why this shape: DistBelief and Gorila keep training when parts fail because no part waits for
any one other part. Here a lost worker, actor or learner is restarted and rejoins with
fresh parameters while the others go on; a lost server shard is restored from the latest
checkpoint, which bounds the loss to the updates since then.
"""

from __future__ import annotations

import dataclasses
import time
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rltrain.config import spec
from rltrain.errors import RLTrainError
from rltrain.names import Role

ACTIONS = ("kill", "pause", "slow", "add", "remove")
TARGETS: tuple[Role, ...] = ("actor", "learner", "worker", "shard", "policy")
ON_WORKER_LOSS = ("wait", "continue")


@dataclass(frozen=True)
class FaultEvent:
    """One injected fault: ``action`` on process ``target`` number ``index``, ``at`` seconds in."""

    action: str = field(default="kill", metadata=spec(choices=ACTIONS))
    """kill: SIGKILL the process (the runtime restarts it); pause: SIGSTOP it for `seconds`, then
    SIGCONT (a machine that hangs); slow: from `at` for `seconds` (0 = to the end) every step
    of a supervised worker takes `factor` times as long (a straggler); remove: the worker
    leaves for good (elastic: barriers count one fewer); add: a new worker joins, training on
    worker `index`'s data shard (barriers count one more). add/remove: bench workers."""
    target: str = field(default="actor", metadata=spec(choices=TARGETS))
    """actor (train: an impala/appo/dqn actor), learner (train: impala/appo/dqn), worker
    (train: an a3c/a2c/ppo worker, which acts and learns; bench: a supervised worker), shard
    (a parameter-server shard) or policy (train: the policy worker of runtime.inference=server)."""
    index: int = field(default=0, metadata=spec(ge=0))
    """Which one: 0 .. count-1."""
    at: float = field(default=0.0, metadata=spec(ge=0))
    """Seconds after training starts: once every process is up (train), or from each mode's
    start (bench)."""
    seconds: float = field(default=0.0, metadata=spec(ge=0))
    """pause: how long the process stays stopped; slow: how long it stays slow (0 = to the end)."""
    factor: float = field(default=5.0, metadata=spec(ge=1))
    """slow: each step takes this many times as long."""

    def __post_init__(self) -> None:
        if self.action == "pause" and self.seconds <= 0:
            raise ValueError("a pause event needs seconds > 0")
        if self.action in ("add", "remove") and self.target != "worker":
            raise ValueError(
                f"action {self.action} applies to target worker (rltrain bench), not {self.target}"
            )
        if self.action == "slow" and self.target != "worker":
            raise ValueError(
                f"action slow applies to target worker (rltrain bench), not {self.target}; "
                "use pause for actors, learners and shards"
            )

    def describe(self) -> str:
        what = {
            "kill": "kill",
            "pause": f"pause {self.seconds:g}s",
            "slow": f"{self.factor:g}x",
            "add": "add a copy of",
            "remove": "remove",
        }
        return f"{what[self.action]} {self.target} {self.index} at {self.at:g}s"


@dataclass(frozen=True)
class FaultsConfig:
    """Restarts, what a barrier does about a lost worker, and injected faults (for tests and
    benchmarks)."""

    max_restarts: int = field(default=3, metadata=spec(ge=-1))
    """Times the runtime (Ray, or the process runtime's trainer) restarts each worker, actor,
    learner or server shard after its process dies (-1 = always, 0 = never: the run goes on
    with the live ones; a lost shard, or the last process of a role, ends it)."""
    on_worker_loss: str = field(default="wait", metadata=spec(choices=ON_WORKER_LOSS))
    """sync/average barriers (and a2c) when a worker dies: wait for its restart (every step
    keeps N gradients), or continue with the live workers until it rejoins. soft_sync and
    async never wait for a dead worker."""
    hang_timeout_s: float | None = field(default=60.0, metadata={**spec(gt=0), "only": "train"})
    """train: a process whose call has run this long, and 10 times as long as any call of its
    role has taken, is taken for hung (stopped, deadlocked) and killed, and restarts as after a
    crash (faults.max_restarts; counted as faults/hung). No clock runs while a process starts
    (restarting, or in its first call: imports, a compile) but a stopped one's; the policy
    worker is timed by its heartbeat, and an actor waiting on it is not timed; a Ray shard
    that does not answer a no-op call in 5 s is killed (and restored) instead of the call
    waiting on it; a thread (runtime.backend=local) is only said. null: never (a hung
    process then holds up whatever waits for it)."""
    events: tuple[FaultEvent, ...] = ()
    """Faults to inject, e.g. [{action: kill, target: actor, index: 0, at: 10}]."""

    def check_targets(self, counts: Mapping[str, int | None]) -> None:
        """Every event must name a process this run has (``counts``: target -> how many; None:
        sized at start-up (``actors: auto``), at least one, checked again once sized)."""
        for i, e in enumerate(self.events):
            n = counts.get(e.target, 0)
            if n is None:
                continue
            if n == 0:
                have = ", ".join(t for t, c in counts.items() if c) or "none"
                raise ValueError(f"faults.events[{i}]: no {e.target} in this run (targets: {have})")
            if e.index >= n:
                raise ValueError(
                    f"faults.events[{i}]: {e.target} index {e.index} out of range 0..{n - 1}"
                )


# ---------------------------------------------------------------------------------------------
# What the runtime raises


class ProcessLost(Exception):
    """The process that ran a call died during it (``permanent``: it will not restart)."""

    def __init__(self, actor_id: str, permanent: bool, detail: str = "") -> None:
        super().__init__(detail or f"actor {actor_id} died")
        self.actor_id = actor_id
        self.permanent = permanent

    def __reduce__(self) -> tuple:  # crosses Ray inside task errors
        return type(self), (self.actor_id, self.permanent, str(self))


class PeerLost(Exception):
    """A call failed because another process it used died (a server shard, a replay shard,
    the actor whose rollout it was given): ``actor_id`` is that process."""

    def __init__(self, actor_id: str, detail: str = "") -> None:
        super().__init__(detail or f"peer {actor_id} died")
        self.actor_id = actor_id

    def __reduce__(self) -> tuple:
        return type(self), (self.actor_id, str(self))


class ShardFenced(RLTrainError):
    """A restarted server shard refuses pushes and pulls until it is restored (it would
    otherwise serve its freshly initialised parameters as if they were the run's)."""


class RunFailed(RLTrainError):
    """A fault the run cannot survive (e.g. a shard whose restarts are spent)."""


class ClusterLost(RunFailed):
    """The cluster the run's processes ran on is gone (a Ray head that stopped answering,
    :mod:`rltrain.runtime.ray.head`): nothing of the run is left there to save or ask."""


class TrainFailed(RunFailed):
    """``rltrain.train``'s run stopped by a fault or as diverged (where ``rltrain train`` exits
    with code 1): the message is summary.json's failure, ``result`` the ``RunResult`` with the
    figures of the run up to then (its final checkpoint and summary.json are written)."""

    def __init__(self, message: str, result: typing.Any) -> None:
        super().__init__(message)
        self.result = result


class BenchFailed(RunFailed):
    """``rltrain.bench``'s modes that an error in your code failed (each stopped alone, the
    others ran; ``rltrain bench`` exits with code 1): the message names each and its error,
    ``run_dir`` holds the other modes' results, ``result`` their ``BenchResult``."""

    def __init__(self, message: str, run_dir: Path) -> None:
        super().__init__(message)
        self.run_dir, self.result = run_dir, typing.cast(typing.Any, None)


class EnvFailed(RunFailed):
    """The user's environment raised (its constructor, ``reset``, ``step``, a wrapper), or
    returned what its spaces forbid (a wrong shape, NaN or inf), during a run: the message
    names the env and what it did, in one line; ``detail`` keeps the env's traceback.

    A fault the run cannot survive, not a lost process: a restarted actor would run the same
    code and fail again, so it ends the run (``stopped_by: fault``) at once."""

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail

    def __reduce__(self) -> tuple:  # crosses the process runtime's pipes and Ray
        return type(self), (str(self), self.detail)


# ---------------------------------------------------------------------------------------------
# Counting


@dataclass
class FaultCounters:
    """What went wrong and what it cost; logged as ``faults/*`` and kept in checkpoints."""

    actor_restarts: int = 0  # RL actors (impala, appo, dqn)
    learner_restarts: int = 0
    worker_restarts: int = 0  # a3c/a2c/ppo workers, supervised workers
    policy_restarts: int = 0  # the policy worker (runtime.inference: server)
    shard_restores: int = 0
    lost_updates: int = 0  # server versions rolled back by shard restores
    lost_calls: int = 0  # work in flight on a lost process (never counted anywhere else)
    left_barrier: int = 0  # times a barrier went on without a lost worker
    injected: int = 0  # injected kills, pauses, added or removed workers, slow workers
    hung: int = 0  # processes killed as hung (faults.hang_timeout_s)

    def restart(self, role: Role) -> None:
        """One more restart of an ``actor``, ``learner``, ``worker`` or ``policy``."""
        name = f"{role}_restarts"
        setattr(self, name, getattr(self, name) + 1)

    def tags(self) -> dict[str, int]:
        """``faults/<name>`` -> value, for TensorBoard and the log."""
        return {f"faults/{k}": v for k, v in dataclasses.asdict(self).items()}

    def total(self) -> int:
        return sum(dataclasses.asdict(self).values())

    def brief(self) -> str:
        parts = [f"{k} {v}" for k, v in dataclasses.asdict(self).items() if v]
        return ", ".join(parts) or "none"


@dataclass(frozen=True)
class RestorePoint:
    """Server state to fall back on when a shard is lost: the latest checkpoint (or the start)."""

    version: int
    states: list[dict]
    label: str
    at: float = field(default_factory=time.monotonic)  # when it was taken (its age is said)


# ---------------------------------------------------------------------------------------------
# Injecting


@dataclass(frozen=True)
class FaultAction:
    """One thing to do now: ``signal`` is kill or stop (a stop ends by itself, see
    :func:`pause`)."""

    signal: str
    event: FaultEvent


class FaultSchedule:
    """The kill, pause, add and remove events of a config, fired in time order from ``t0``
    (signal kill, stop, add, remove).

    ``slow`` events are not here: the worker applies them to its own steps (:class:`Slowdown`).
    The clock starts at ``t0``, or at :meth:`arm` (None: once every process is up, as
    start-up is not training time); until then nothing is due.
    """

    def __init__(self, events: Sequence[FaultEvent], t0: float | None) -> None:
        signals = {"kill": "kill", "pause": "stop", "add": "add", "remove": "remove"}
        plan = [(e.at, FaultAction(signals[e.action], e)) for e in events if e.action in signals]
        self.plan = sorted(plan, key=lambda p: p[0])
        self.t0 = t0

    def arm(self, t0: float) -> None:
        """Start the clock (once)."""
        if self.t0 is None:
            self.t0 = t0

    def due(self, now: float | None = None) -> list[FaultAction]:
        """The actions whose time has come, each returned once."""
        if self.t0 is None:
            return []
        t = (time.time() if now is None else now) - self.t0
        n = sum(1 for at, _ in self.plan if at <= t)
        out = [a for _, a in self.plan[:n]]
        self.plan = self.plan[n:]
        return out

    def next_in(self, now: float | None = None) -> float:
        """Seconds until the next action (inf when none is left, or the clock has not started)."""
        if not self.plan or self.t0 is None:
            return float("inf")
        t = (time.time() if now is None else now) - self.t0
        return max(0.0, self.plan[0][0] - t)

    def left(self) -> list[FaultEvent]:
        """The events not carried out yet: said as a run ends, lest a fault test pass on none
        injected."""
        return [a.event for _, a in self.plan]


class Slowdown:
    """Worker ``index``'s share of the ``slow`` events: stretches its steps while one is on."""

    def __init__(self, events: Sequence[FaultEvent], index: int) -> None:
        self.windows = [
            (e.at, e.at + e.seconds if e.seconds else float("inf"), e.factor)
            for e in events
            if e.action == "slow" and e.target == "worker" and e.index == index
        ]
        self.t0 = time.time()

    def start(self, t0: float) -> None:
        self.t0 = t0

    def factor(self, now: float | None = None) -> float:
        t = (time.time() if now is None else now) - self.t0
        return max((f for a, b, f in self.windows if a <= t < b), default=1.0)

    def stretch(self, worked_s: float) -> None:
        """Sleep so that a step that took ``worked_s`` takes ``factor`` times as long."""
        f = self.factor()
        if f > 1:
            time.sleep(worked_s * (f - 1))

    def __bool__(self) -> bool:
        return bool(self.windows)


class PusherRule(typing.Protocol):
    """What :func:`on_pusher_loss` asks of an update rule (:class:`rltrain.ps.rules.UpdateRule`,
    a layer above this module)."""

    @property
    def name(self) -> str: ...
    @property
    def barrier(self) -> bool: ...
    @property
    def waits_for_restart(self) -> bool: ...


def on_pusher_loss(rule: PusherRule, on_worker_loss: str, permanent: bool) -> tuple[bool, str]:
    """What a barrier does about a lost worker that pushes: (leave, what to say).

    ``rule``: the update rule it pushes under. ``leave``: the server stops waiting
    for it (it rejoins with its next push). A rule without a barrier has nothing to answer;
    one that does not wait for restarts (soft_sync: it never waits for a straggler, dead or
    alive) always goes on; the others (sync, average) wait for the restart unless
    ``on_worker_loss`` is ``continue`` or the worker will not come back.
    """
    if not rule.barrier:
        return False, ""
    if permanent:
        return True, f"; {rule.name} goes on with the live workers"
    if not rule.waits_for_restart or on_worker_loss == "continue":
        return True, f"; {rule.name} continues without it until it is back"
    return False, f"; {rule.name} waits for it (faults.on_worker_loss=wait)"


def describe_events(events: Sequence[FaultEvent]) -> str:
    return "; ".join(e.describe() for e in events)
