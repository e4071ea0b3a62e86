"""The process runtime (``runtime.backend: process``, what ``auto`` picks on one machine).

Actors, a3c/a2c/ppo workers, supervised workers, the policy worker and the evaluator run as
OS processes, forked by a forkserver that has imported torch, the envs and the algorithms
once, so they start in parallel in a fraction of a second each. One learner (impala, appo)
is a process of its own too, and the server's shards live in it (:class:`HostedServer`,
:mod:`rltrain.rl.learner_host`): a push is its optimizer step, a pull copies nothing, and it
shares its interpreter and CUDA context with nothing else. Otherwise (several learners, dqn's)
the shards, the replay memory and the learners stay in the trainer's process (learners as
threads, :mod:`rltrain.runtime.local`). This is Sample Factory's layout for one machine
(Petrenko et al. 2020): many sampler processes, policy workers, one learner.

Between the processes, calls, results and server requests are pickled small; their tensors
go through reused shared-memory slots (:mod:`rltrain.runtime.shm`). Each child has two pipes:
its calls (driver -> child -> driver) and its requests to the server or the replay (child ->
a thread of the trainer that serves them, so a worker waiting at a barrier holds only its own
thread).

Faults are those of Ray's runtime, with the same counters and messages: a child that dies is
restarted with its constructor's arguments (up to ``faults.max_restarts``), its call in flight
fails with :class:`~rltrain.faults.ProcessLost`, and the pool reports it back once it is up;
``faults.events`` kill (SIGKILL) and pause (SIGSTOP/SIGCONT) the children. A learner process
takes its shards with it when it dies: the guard (:mod:`rltrain.runtime.guard`) restores
them from the last restore point, as it restores Ray's. A learner that is a thread of the
trainer, or a shard there, cannot be killed apart from it: such a fault is skipped and said so.

Imports neither Ray nor anything that starts it.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

import torch

from rltrain import extensions
from rltrain.driver import Done
from rltrain.faults import FaultAction, PeerLost, ProcessLost, RunFailed, ShardFenced, pause
from rltrain.ps.config import OptimizerConfig, ServerConfig
from rltrain.ps.server import LocalServer, ShardedServer, ShardLayout, make_shards
from rltrain.records import Role, ServerStats
from rltrain.runtime import child, guard, local
from rltrain.runtime.config import RuntimeConfig
from rltrain.runtime.forkserver import context, no_main, serve, service_names
from rltrain.runtime.local import Pool, cluster_gpus, start_replay
from rltrain.runtime.local import Remote as ThreadRemote
from rltrain.runtime.policy import respond
from rltrain.runtime.shm import shm_note

__all__ = [
    "Done",
    "HostedServer",
    "Pool",
    "Remote",
    "Semaphore",
    "ServerGuard",
    "cluster_cpus",
    "cluster_gpus",
    "fit_cpus",
    "free_cpus",
    "get",
    "start",
    "inject",
    "placement_note",
    "job_record",
    "respond",
    "server_processes",
    "shutdown",
    "start_replay",
    "start_server",
    "wait_any",
    "wait_up",
]

DESCRIPTION = "processes on this machine (runtime.backend=process: a forkserver, shared memory)"
IN_TRAINER: tuple[Role, ...] = ("learner",)
"""Roles that stay in the trainer's process, next to the shards (as threads), unless the
shards live with them (``own_process``: :class:`HostedServer`)."""
_children: list[Remote] = []  # every process started (and restarted) in this session


class Remote:
    """A plain class in a process of its own (learners: in a thread of this one, see
    :data:`IN_TRAINER`): ``call`` returns a future of the method's result; the process runs
    its calls one at a time, in order.

    ``max_restarts``: how often a dead process is started again (-1: always), its
    constructor re-run with the same arguments, as Ray does.
    """

    restarted_by = "the trainer"

    def __new__(
        cls, target: type, *args: Any, role: Role = "actor", own_process: bool = False, **kw: Any
    ) -> Any:
        if role in IN_TRAINER and not own_process:
            return ThreadRemote(target, *args, role=role, **kw)
        return super().__new__(cls)

    def __init__(
        self,
        target: type,
        *args: Any,
        role: Role = "actor",
        index: int = 0,
        num_cpus: float = 1.0,
        num_gpus: float = 0.0,
        max_restarts: int = 0,
        max_concurrency: int = 1,
        own_process: bool = False,
    ) -> None:
        """``own_process``: a process even for a role of :data:`IN_TRAINER`."""
        self.role, self.index, self.cpus, self.gpus = role, index, num_cpus, num_gpus
        self.actor_id = f"{role}-{index}"
        self.target, self.args = target, args
        self.max_restarts = max_restarts
        self.restarts = 0
        self.concurrency = max_concurrency
        self.services: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._pending: dict[int, cf.Future] = {}
        self._next_call = 0
        self._closing = False
        self._noted = 0  # deaths counted by mark_lost
        self._deaths = 0
        self._unseen: ProcessLost | None = None  # a death while no call was in flight
        self._gone: BaseException | None = None  # gone for good: what every later call raises
        self._start()
        _children.append(self)

    def _start(self) -> None:
        ctx = context()
        ctrl, ctrl_child = ctx.Pipe()
        svc, svc_child = ctx.Pipe()
        self.up: cf.Future = cf.Future()
        path, extended = list(sys.path), extensions.packed()  # as the trainer has them now
        self.process = ctx.Process(
            target=child.main,
            args=(
                self.target,
                self.args,
                ctrl_child,
                svc_child,
                path,
                self.concurrency,
                extended,
                (self.role, self.index),  # its name in ps and top
                self.restarts > 0,
            ),
            name=f"rltrain-{self.role}{self.index}",
            daemon=False,  # an actor may start processes of its own (gymnasium's async envs)
        )
        with no_main():
            self.process.start()
        ctrl_child.close()
        svc_child.close()
        self.calls = child.Channel(ctrl)
        name = f"rltrain-{self.role}{self.index}"
        self.threads = [
            threading.Thread(target=self._read, args=(self.calls,), name=name, daemon=True),
            threading.Thread(
                target=serve, args=(svc, self.services), name=f"{name}-serve", daemon=True
            ),
        ]
        for t in self.threads:
            t.start()

    # --- calls ------------------------------------------------------------------------------

    def call(self, method: str, *args: Any) -> cf.Future:
        future: cf.Future = cf.Future()
        future.set_running_or_notify_cancel()
        with self._lock:
            if self._closing:
                future.set_exception(ProcessLost(self.actor_id, True, f"{self.name} was stopped"))
                return future
            if self._unseen is not None:  # the death is this call's to report (nothing sent)
                future.set_exception(self._unseen)
                self._unseen = None
                return future
            if self._gone is not None:  # no process reads the pipe: it would wait forever
                future.set_exception(self._gone)
                return future
            self._next_call += 1
            self._pending[self._next_call] = future
            with contextlib.suppress(BrokenPipeError, OSError):  # dead: the reader fails it
                self.calls.send(self._next_call, method, service_names(args, self.services))
        return future

    @property
    def name(self) -> str:
        return f"{self.role} {self.index}"

    def _read(self, calls: child.Channel) -> None:
        """The results of this incarnation's calls, in order; then its death."""
        failure: BaseException | None = None
        while True:
            try:
                kind, value, tb, call_id = calls.recv()
            except (EOFError, OSError):
                break
            except Exception as e:  # noqa: BLE001 - a result this side cannot read: a bug
                failure = e
                with contextlib.suppress(OSError, ValueError, AttributeError):
                    self.process.kill()
                break
            if kind == "up":
                self.up.set_result(value)
            elif kind == "failed":  # the constructor raised: a bug or bad input, not a fault
                failure = child.rebuild(value, tb)
                if self.restarts:  # it ran before: as Ray, a process that cannot come back
                    first = str(failure).strip().splitlines()[-1:] or [type(failure).__name__]
                    failure = ProcessLost(
                        self.actor_id, True, f"{self.name} could not restart: {first[0]}"
                    )
                break  # its last word: a process still ending (threads, children of its
                # own) must not hold the error back until it has ended
            else:
                with self._lock:
                    future = self._pending.pop(call_id, None)
                if future is None:
                    continue
                if kind == "ok":
                    future.set_result(value)
                else:
                    future.set_exception(child.rebuild(value, tb))
        self._died(failure)

    def _died(self, failure: BaseException | None) -> None:
        self.process.join(timeout=5 if failure is None else 0.5)  # (its exit code, if it died)
        code = self.process.exitcode
        with self._lock:
            pending, self._pending = list(self._pending.values()), {}
            closing = self._closing
            again = not closing and failure is None and self._may_restart()
            if not closing:
                self._deaths += 1
            up = self.up
            if again:
                self.restarts += 1
                try:
                    self._start()  # a new `up` future first: the pool probes the new process
                except Exception as e:  # noqa: BLE001 - no new process: this one is gone
                    again = False
                    failure = ProcessLost(self.actor_id, True, f"{self.name} not restarted: {e}")
            if failure is None:
                how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
                failure = ProcessLost(
                    self.actor_id, not again, f"{self.name}'s process died ({how})"
                )
            if not again and not closing:  # under the lock: a call from now on fails at once
                self._gone = failure  # (e.g. one first submitted after its constructor raised)
        was_up = up.done()
        if not was_up:  # whoever waits for it to come up hears of this death
            up.set_exception(failure)
        for f in pending:
            f.set_exception(failure)
        if was_up and not pending and not closing and isinstance(failure, ProcessLost):
            with self._lock:  # died idle: the next call says so, as Ray's would
                self._unseen = failure

    def _may_restart(self) -> bool:
        return self.max_restarts < 0 or self.restarts < self.max_restarts

    @property
    def gone(self) -> BaseException | None:
        """Why it will not come back (its restarts spent, or it could not restart), or None."""
        with self._lock:
            return self._gone

    # --- what the driver asks of a process --------------------------------------------------

    def probe(self) -> cf.Future:
        """A future of the pid that resolves once this incarnation is up."""
        return self.up

    def is_up(self) -> bool:
        return self.up.done() and self.up.exception() is None

    def node(self) -> str | None:
        return None

    def pid(self) -> int:
        return int(self.up.result())

    def mark_lost(self) -> bool:
        """Note a death; False if it was noted already (one death, seen twice)."""
        with self._lock:
            if self._noted >= max(self._deaths, 1):
                return False
            self._noted += 1
            return True

    def signal(self, action: FaultAction) -> str:
        """Kill or pause this process (an injected fault); returns what was done."""
        up = self.up  # once: a restart may replace it meanwhile
        if not up.done() or up.exception() is not None:
            return f"skipped {action.signal} {self.name}: it is not up"
        pid = int(up.result())
        if action.signal == "kill":
            os.kill(pid, signal.SIGKILL)
            return f"kill {self.name} (pid {pid})"
        pause(pid, action.event.seconds)
        return f"pause {self.name} (pid {pid}) for {action.event.seconds:g}s"

    def kill(self) -> None:
        """Stop the process now (SIGKILL: a call may be waiting at a barrier); not restarted."""
        with self._lock:
            self._closing = True
        with contextlib.suppress(OSError, ValueError, AttributeError):
            self.process.kill()


def Semaphore(value: int = 0) -> Any:  # noqa: N802 - a factory, named as the class it makes
    """A semaphore of the forkserver's context: a child takes it as a constructor argument
    (a POSIX semaphore; no pipe, no pickle when it is used)."""
    return context().Semaphore(value)


class HostedServer(ShardedServer):
    """The server's shards in a learner's process (:class:`rltrain.rl.learner_host.
    LearnerHost`), as the trainer and the other processes reach them: each shard call is a
    call to that process, answered by one of its threads beside the learner's ``learn``.

    When that process dies its shards die with it: a call then fails with
    :class:`~rltrain.faults.PeerLost` (a call that used it, never the caller's own death), and
    so does one to a shard that came back and awaits its restore; the guard restores them
    (:class:`rltrain.runtime.guard.ServerGuard`)."""

    def __init__(
        self, layout: ShardLayout, host: Remote, rule: ServerConfig, initial: list[dict]
    ) -> None:
        super().__init__(layout, rule)
        self.host = host
        self.indices = list(range(len(layout.sizes)))
        self.initial = initial  # the shards' state before the first push (no process asked)

    def _keep(self, index: int) -> None:
        self.indices = [index]

    def _submit(self, method: str, args: Sequence[tuple[Any, ...]], start: int = 0) -> list[Any]:
        indices = self.indices[start:]
        return [self.host.call("shard", i, method, *a) for i, a in zip(indices, args, strict=True)]

    def _call_first(self, method: str, *args: Any) -> Any:
        return self._collect(self._submit(method, [args]))[0]

    def _collect(self, handle: list[Any]) -> list[Any]:
        return [self._answer(f) for f in handle]

    def _answer(self, future: cf.Future) -> Any:
        try:
            return future.result()
        except (ProcessLost, ShardFenced) as e:  # the shards are lost or not yet restored
            raise PeerLost(self.host.actor_id, str(e).splitlines()[0]) from None

    def _fresh(self) -> bool:
        """Its first process is not up yet: the shards are the initial ones. Read here, the
        trainer's restore point does not wait for the learner's process to start."""
        return self.host.restarts == 0 and not self.host.up.done()

    def state_dicts(self, tries: int = 200) -> list[dict]:
        return self.initial if self._fresh() else super().state_dicts(tries)

    def stats(self) -> ServerStats:
        return ServerStats(0, 0, 0, 0, 0, 0) if self._fresh() else super().stats()

    def health(self) -> list[tuple[int, bool] | None]:
        """Per shard (version, fenced); None for each while the process is down. Raises
        :class:`RunFailed` once it will not come back."""
        return self._health(self.ask_health(), wait=True) or []

    def ask_health(self) -> cf.Future:
        return self.host.call("health")

    def answered(self, asked: cf.Future) -> list[tuple[int, bool] | None] | None:
        return self._health(asked, wait=False)

    def _health(self, asked: cf.Future, wait: bool) -> list[tuple[int, bool] | None] | None:
        if not wait and not asked.done():
            return None
        try:
            every = asked.result()
        except ProcessLost:
            gone = self.host.gone
            if gone is not None:
                raise RunFailed(
                    f"the learner process that holds the server's shards died and will not "
                    f"restart ({gone}); the run stops at its last checkpoint"
                ) from None
            return [None] * len(self.indices)
        return [every[i] for i in self.indices]

    def join_shard(self, index: int, worker_id: int) -> None:
        self._answer(self.host.call("shard", index, "join", worker_id))

    def kill(self) -> None:
        """Nothing to stop here: the learner's process is one of the run's (it stops them)."""


def start_server(
    init: torch.Tensor,
    optimizer: OptimizerConfig,
    rule: ServerConfig,
    num_workers: int,
    runtime: RuntimeConfig | None = None,
    max_restarts: int = 0,
    record: bool = False,
    sizes: Sequence[int] | None = None,
    device: str = "cpu",
    host: Callable[[tuple], Remote] | None = None,
) -> LocalServer | HostedServer:
    """The shards as objects of this process, or (``host``) in the process that ``host``
    starts with their arguments, a learner's (:mod:`rltrain.rl.learner_host`)."""
    if host is None:
        return local.start_server(
            init, optimizer, rule, num_workers, runtime, max_restarts, record, sizes, device
        )
    layout, shards = make_shards(init, optimizer, rule, num_workers, record, sizes)
    initial = [s.state_dict() for s in shards]  # read here, not from a process still starting
    remote = host((init, optimizer, rule, num_workers, record, sizes, device))
    return HostedServer(layout, remote, rule, initial)


class ServerGuard(guard.ServerGuard):
    """The shard guard: a real one where the shards live in a learner's process (they can be
    lost apart from the trainer), the threads' bookkeeping (:class:`rltrain.runtime.local.
    ServerGuard`) where they are the trainer's own objects."""

    def __new__(cls, server: Any, counters: Any, say: Callable[[str], None]) -> Any:
        if not isinstance(server, HostedServer):
            return local.ServerGuard(server, counters, say)
        return super().__new__(cls)


def wait_any(futures: Sequence[cf.Future], timeout: float) -> list[cf.Future]:
    done, _ = cf.wait(futures, timeout, return_when=cf.FIRST_COMPLETED)
    return list(done)


def get(futures: Sequence[cf.Future]) -> list[Any]:
    return [f.result() for f in futures]


def wait_up(remotes: Sequence[Any], say: Callable[[str], None], patience: float = 20.0) -> None:
    """Wait until every process is up (a constructor that raised raises here)."""
    ups = [r.up for r in remotes if isinstance(r, Remote)]
    _, late = cf.wait(ups, patience)
    if late:
        say(placement_note([r for r in remotes if isinstance(r, Remote) and r.up in late]))
    for f in ups:
        f.result()


def placement_note(waiting: Sequence[Any]) -> str:
    if not waiting:
        return ""
    names = ", ".join(f"{r.role} {r.index}" for r in waiting[:4])
    return f"still starting: {names} (their constructors: env and model set-up)"


def inject(
    action: FaultAction, procs: dict[str, list[Any]], counters: Any, say: Callable[[str], None]
) -> None:
    """Carry out one injected fault on the process it names (if the run has it)."""
    e = action.event
    target = next((r for r in procs.get(e.target, []) if r.index == e.index), None)
    learners = [r for r in procs.get("learner", []) if isinstance(r, Remote)]
    host = ""
    if target is None and e.target == "shard" and learners:
        target = learners[0]  # the shards live in the learner's process: it dies with them
        host = f"shard {e.index}, in the learner's process: "
    if target is None:
        why = {
            "shard": "the shards are objects of the trainer's process (runtime.backend=process)",
            "policy": "the actors act with their own copies in this run (runtime.inference)",
        }.get(e.target)
        if why:
            say(f"injected fault: skipped {action.signal} {e.target} {e.index}: {why}")
        return
    if not isinstance(target, Remote):
        say(
            f"injected fault: skipped {action.signal} {e.target} {e.index}: it is a thread of "
            "the trainer's process (runtime.backend=process)"
        )
        return
    try:
        done = target.signal(action)
    except ProcessLookupError as err:
        done = f"could not {action.signal} {e.target} {e.index}: {err}"
    counters.injected += int(not done.startswith(("skipped", "could not")))
    say(f"injected fault: {host}{done}")


def server_processes(server: Any) -> list[Any]:
    return []  # the shards are objects of this process


def start(cfg: RuntimeConfig, ship: Sequence[str] = ()) -> str:
    """Start the forkserver (if not yet started); what this runtime is, for the log."""
    context()
    local.start(cfg)  # learner threads set the torch thread count of this process
    return DESCRIPTION + ("" if hasattr(os, "memfd_create") else shm_note())


def cluster_cpus() -> float:
    """The cores this process may run on (a container's or taskset's limit, not the host's)."""
    if hasattr(os, "sched_getaffinity"):
        return float(len(os.sched_getaffinity(0)))
    return float(os.cpu_count() or 1)


def free_cpus() -> float:
    return cluster_cpus()


def fit_cpus(cfg: RuntimeConfig, workers: float, shards: int) -> RuntimeConfig:
    return cfg  # processes reserve nothing: the OS shares the cores


def job_record() -> dict[str, Any]:
    return {"backend": "process"}


def shutdown() -> None:
    """Stop every child of the session (the trainer killed them; reap them here)."""
    while _children:
        r = _children.pop()
        r.kill()
        r.process.join(timeout=5)
        for t in r.threads:  # they end at the pipes' EOF: not while Python is finalizing,
            t.join(timeout=5)  # where a thread dropping a tensor aborts the process (C++)
    local.shutdown()
