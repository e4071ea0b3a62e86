"""What every RL plan shares: the :class:`Host` it runs in (the trainer) and
:class:`RLPlan`, the hooks of the driver loop (:func:`rltrain.driver.drive`) common to all."""

from __future__ import annotations

import abc
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from rltrain.driver import step
from rltrain.failure import keep_traceback
from rltrain.faults import PeerLost, ProcessLost, RunFailed
from rltrain.records import Role
from rltrain.rl.config import TrainConfig, waits_at_barrier
from rltrain.rl.env_spec import EnvSpec
from rltrain.rl.obs_slots import ObsSlots
from rltrain.rl.rollout import WorkStats
from rltrain.rl.run.counters import Counters
from rltrain.rl.run.hangs import HangWatch

STOP_WAIT_S = 5.0  # a stop that waits this long for calls in flight says what it waits for
SETTLE_S = 5.0  # a Ctrl-C waits this long for the calls in flight (their updates are applied)

if TYPE_CHECKING:
    from rltrain.driver import Done
    from rltrain.rl.inference import ActSlots
    from rltrain.runtime.context import RunContext
    from rltrain.runtime.contract import Guard, RemoteProcess, Runtime


@dataclass
class Early:
    """The processes slowest to start, spawned before the server (:meth:`RLPlan.spawn_early`)
    so that they start while the learner and the shards do: the actors, which build and reset
    their envs in their constructors (ale-py loads each game's ROM twice, 0.2 s each on a
    2-core EPYC), and the policy worker. The plan gives them their first calls."""

    actors: list[RemoteProcess] = field(default_factory=list)
    policy: RemoteProcess | None = None  # runtime.inference's policy worker
    slots: ActSlots | None = None  # ... and the slots it acts through


class Host(Protocol):
    """What a plan asks of the session that runs it (:class:`rltrain.rl.run.train.Trainer`)."""

    cfg: TrainConfig
    spec: EnvSpec
    counters: Counters
    gpu: bool  # the learners compute on a GPU
    inference: str | None  # runtime.inference: the batched policy's device, None: none
    hosted: bool  # the one learner is a process that holds the shards (started with them)
    obs_slots: ObsSlots | None  # the rollouts' shared observation buffers (hosted runs)
    early: Early | None  # spawned before the server (None: the plan spawns them)
    run_dir: Path  # (failure.log: a bug's traceback)

    @property
    def ctx(self) -> RunContext:
        """The session's processes, guard, fault counters and notes."""

    @property
    def stopped_by(self) -> str:
        """Why the run stops ("" while it runs)."""

    def spawn(self, role: Role, cls: type, args_of: Callable[[int], tuple[Any, ...]]) -> list[Any]:
        """Restartable processes of one role, process i built with ``args_of(i)``."""

    def absorb(self, stats: WorkStats) -> None: ...

    def on_fault(self, done: Done, pushes: bool) -> bool:
        """Count and report a lost or revived process; True when it should get work now."""

    def wait_s(self) -> float: ...

    def tick(self) -> None: ...

    def schedule_at(self) -> float: ...


class RLPlan(abc.ABC):
    """The hooks every RL plan shares with its host: when to stop, wait and tick; a plan of
    :mod:`rltrain.rl.run.plans` adds what to submit and what a result or a fault means (the rest
    of :class:`rltrain.driver.Plan`)."""

    def __init__(self, host: Host, runtime: Runtime) -> None:
        self.host = host
        self.ctx = host.ctx
        self.cfg = host.cfg
        self.server = host.ctx.server
        self.runtime = runtime
        self.pool = runtime.Pool()
        limit = self.cfg.faults.hang_timeout_s
        restarting = self.pool.restarting
        shards = lambda: self.ctx.procs.get("shard", [])  # noqa: E731 - (filled in later)
        self.hangs = HangWatch(
            self.pool.calls,
            limit,
            self.ctx.say,
            self.ctx.faults,
            restarting,
            shards,
            self.pool.answered,
            self.ctx.hung,
        )
        self.replay: Any = None  # dqn: the replay shards
        self.replay_bytes: int | None = None  # dqn: their size at the end, for summary.json
        self.replay_kept: int | None = None  # dqn: their sample count once they are stopped
        self.left_starting = False  # stopped while processes were still starting: said once
        self.left: set[int] = set()  # (ids of) those not waited for, out of the barrier
        self.stop_seen: float | None = None  # when keep_going first saw the stop
        self.stop_waits_said = False  # say_stop_waits has said what the stop waits for

    def keep_going(self) -> bool:
        """Run until stopped; then until the calls in flight have returned, but not those of
        processes not up: a constructor that never ends, or a process Ray cannot place, has
        nothing to return, and a stop (stop.max_seconds, a fault) must not wait for it."""
        if not self.host.stopped_by:
            return bool(self.pool)
        calls = [r for r, _, _ in self.pool.calls.values()]
        if self.stop_seen is None:  # (set below, by say_stop_waits: this runs once)
            self.interrupt_learns(calls)
        starting = [r for r in calls if not r.is_up()]
        hung = [r for r in calls if self.hangs.is_hung_thread(r)]  # (it cannot be killed)
        self.say_stop_waits(starting + hung)
        if starting and not self.left_starting:  # nor may a barrier the others wait at
            self.left_starting = True
            note = self.runtime.placement_note(starting)
            self.ctx.say(f"the stop does not wait for processes not up ({note})")
        for r in starting + hung:
            if self.pushes(r):
                self.leave_barrier(r)
        return len(starting) + len(hung) < len(calls)

    def leave_barrier(self, r: Any) -> None:
        """Take ``r`` out of the barrier once (no barrier waits for a process the stop does not
        wait for, or gives no more work); nothing under a rule without one."""
        if waits_at_barrier(self.cfg) and id(r) not in self.left:
            self.left.add(id(r))
            self.guard.leave(r.index)

    def interrupt_learns(self, calls: list[Any]) -> None:
        """The stop is met: each learner learning ends its batch after the minibatch in
        progress (:meth:`Learner.interrupt`), so that the stop, stop.max_seconds' or a Ctrl-C's,
        comes a minibatch later rather than a whole batch of epochs, and the pushes it made
        are counted. Heard at once where the learner's process answers calls beside its learn
        (the process runtime's learner process, which holds the shards: ``host.hosted``);
        elsewhere a call would wait for the learn, which ends as before."""
        if not self.host.hosted:
            return
        for r in calls:
            if r.role == "learner" and r.is_up():
                r.call("interrupt")  # (unwaited: a learner lost meanwhile is handled as a loss)

    def say_stop_waits(self, starting: list[Any]) -> None:
        """Once, STOP_WAIT_S into a stop: the calls it still waits for, and what ends a hung
        one (a user's env that hangs in step() held a run stopped by stop.max_seconds)."""
        now = time.monotonic()
        if self.stop_seen is None:
            self.stop_seen = now
        if now - self.stop_seen < STOP_WAIT_S or self.stop_waits_said:
            return
        self.stop_waits_said = True
        waits = [f"{r.role} {r.index}" for r, _, _ in self.pool.calls.values() if r not in starting]
        if not waits:
            return
        limit = self.cfg.faults.hang_timeout_s
        ends = (
            f"one hung is killed after faults.hang_timeout_s={limit:g}"
            if limit is not None
            else "faults.hang_timeout_s=null waits for a hung one; Ctrl-C ends the wait"
        )
        self.ctx.say(f"stopping: waiting for the calls in flight of {', '.join(waits)} ({ends})")

    @classmethod
    @abc.abstractmethod
    def spawn_early(cls, host: Host, runtime: Runtime) -> Early:
        """Spawn the plan's actors (and policy worker) before the server is up: their
        constructors need no server (:class:`Early`)."""

    def early_processes(self) -> Early:
        """What :meth:`spawn_early` spawned for this session (taken from the host: they are
        the plan's now), spawned now if nothing was (a plan started without a trainer)."""
        early, self.host.early = self.host.early, None
        return early if early is not None else self.spawn_early(self.host, self.runtime)

    @property
    def guard(self) -> Guard:
        """The server's guard (it starts with the server, before any plan)."""
        return self.ctx.shard_guard()

    @abc.abstractmethod
    def start(self) -> None:
        """Submit the first calls."""

    @abc.abstractmethod
    def on_result(self, done: Done) -> None:
        """A call returned its value (``done.value``)."""

    @abc.abstractmethod
    def on_fault(self, done: Done) -> None:
        """A call failed (its process died, or one it used did) or a process came back."""

    @abc.abstractmethod
    def refill(self) -> None:
        """Give idle processes their next call, as far as the run's state allows."""

    def pushes(self, remote: RemoteProcess) -> bool:
        """Whether ``remote`` pushes gradients (a barrier rule waits for its pushes)."""
        return remote.role == "learner"

    def wait_s(self) -> float:
        return self.host.wait_s()

    def tick(self) -> None:
        self.hangs.start()  # once, with the run's first tick (close() stops it, however it ends)
        self.host.tick()

    def settle(self) -> None:
        """After a Ctrl-C (the host has stopped): take in the calls in flight for up to
        SETTLE_S. Their updates are on the server already, and the final checkpoint's
        counters (summary.json's, a resumed run's) should count them and their env steps."""
        deadline = time.monotonic() + SETTLE_S
        try:
            while self.keep_going() and (left := deadline - time.monotonic()) > 0:
                step(self.pool, self, min(left, 0.5))  # (the driver's loop, without ticks)
            self.finish()
        except (ProcessLost, PeerLost, RunFailed) as e:  # what is counted stays counted
            self.ctx.say(f"interrupted: not all the work in flight was counted ({e})")
        except Exception as e:  # a bug here would skip the processes' release: the command
            # hung with them up (explore112); the stop goes on, says it and keeps its traceback
            self.ctx.say(f"interrupted: the work in flight not taken in ({type(e).__name__}: {e})")
            keep_traceback(self.host.run_dir, e, self.ctx.say, self.cfg.imports)

    def replay_size(self) -> int | None:
        """The samples the replay memory holds (dqn; None for the others), as its shards held
        them when :meth:`finish` stopped them (the last TensorBoard point is logged after)."""
        if self.replay is None or self.replay_kept is not None:
            return self.replay_kept
        return int(sum(self.replay.sizes()))

    def finish(self) -> None:  # noqa: B027 - an optional hook: most plans have nothing to do
        """After the loop (a normal end, not a failure)."""

    def flush(self) -> None:  # noqa: B027 - an optional hook
        """However the run ended, before its final checkpoint: results taken but not yet
        counted are counted (a lockstep round's, :class:`~rltrain.rl.run.plans.WorkerPlan`)."""

    def close(self) -> None:
        """However the run ended: the hang watch stops."""
        self.hangs.close()
