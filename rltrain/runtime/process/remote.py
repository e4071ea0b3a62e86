"""The process runtime's names, on the trainer's side (the package :mod:`rltrain.runtime.process`
says what the runtime is): a child process as a :class:`Remote`, its calls in a pool, and the
runtime's start, sizing and shutdown."""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

from rltrain import extensions
from rltrain.driver import Done
from rltrain.faults import FaultAction, ProcessLost
from rltrain.pauses import pause
from rltrain.records import Role
from rltrain.runtime import local
from rltrain.runtime.config import RuntimeConfig
from rltrain.runtime.fault_policy import respond
from rltrain.runtime.local import Pool, cluster_gpus, failed, kill, start_replay
from rltrain.runtime.local import Remote as ThreadRemote
from rltrain.runtime.process import child
from rltrain.runtime.process.faults import inject
from rltrain.runtime.process.forkserver import context, no_main, serve, service_names
from rltrain.runtime.process.forkstart import Process, Semaphore, socket_path
from rltrain.runtime.process.hosted import HostedServer, ServerGuard, start_server
from rltrain.runtime.process.shm import shm_note
from rltrain.runtime.process.stages import stage_lead, stage_link, stages_of

__all__ = [
    "Done",
    "HostedServer",
    "Pool",
    "Remote",
    "Semaphore",
    "ServerGuard",
    "cluster_cpus",
    "cluster_gpus",
    "failed",
    "fit_cpus",
    "free_cpus",
    "get",
    "start",
    "inject",
    "kill",
    "placement_note",
    "job_record",
    "respond",
    "result",
    "server_processes",
    "shutdown",
    "start_replay",
    "start_server",
    "stage_lead",
    "stage_link",
    "stages_of",
    "wait_any",
    "wait_up",
]

DESCRIPTION = "processes on this machine (runtime.backend=process: a forkserver, shared memory)"
IN_TRAINER: tuple[Role, ...] = ("learner",)
"""Roles that are threads of the trainer's process, beside its shards (unless ``own_process``)."""
_children: list[Remote] = []  # every process started (and restarted) in this session


class Remote:
    """A plain class in a process of its own (learners: a thread of this one, see
    :data:`IN_TRAINER`, unless ``own_process``): ``call`` returns a future of the method's
    result; the process runs its calls one at a time, in order. ``max_restarts``: how often a
    dead process is started again (-1: always), its constructor re-run, as Ray does."""

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
        self.role, self.index, self.cpus, self.gpus = role, index, num_cpus, num_gpus
        self.actor_id = f"{role}-{index}"
        self.target, self.args = target, args
        self.max_restarts = max_restarts
        self.restarts = 0
        self.concurrency = max_concurrency
        self.services: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._pending: dict[int, cf.Future] = {}
        self._ending = False  # asked to end by itself (end)
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
        self.process = Process(
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
                (os.getpid(), socket_path()),  # watched: it ends when we do
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
            unseen, self._unseen = self._unseen, None
            if unseen is not None and self._noted < self._deaths:  # (not seen through a probe)
                future.set_exception(unseen)  # the death is this call's to report: nothing sent
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
        calls.close()
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
            was_up = up.done() and up.exception() is None  # (this incarnation came up)
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
                self._unseen = None  # (that it is gone is what the next call must hear)
            elif again and not pending and (was_up or not self._next_call):
                # died idle, or before its first call (killed while building its envs): the
                # next call says so, as Ray's would, and the driver counts the restart then (a
                # death while restarting reaches whoever probes the process: its `up`)
                assert isinstance(failure, ProcessLost)  # (restarted: the death named above)
                self._unseen = failure
        if not up.done():  # whoever waits for it to come up hears of this death
            up.set_exception(failure)
        for f in pending:
            f.set_exception(failure)

    def _may_restart(self) -> bool:
        return self.max_restarts < 0 or self.restarts < self.max_restarts

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

    def end(self) -> None:
        """Up and idle: close its calls' pipe, and it closes its object (an actor's envs, a
        user's may need close(): explore92) and exits. Busy in a call: left to kill."""
        with self._lock:
            self._closing = True
            self._ending = self.up.done() and self.up.exception() is None and not self._pending
        if self._ending:
            with contextlib.suppress(OSError, AttributeError):
                self.calls.sock.shutdown(socket.SHUT_WR)  # (the reader reads on to its end)

    def ended(self, timeout: float) -> bool:
        if self._ending:  # (else not asked to end: killed at once)
            self.process.join(timeout)
        return not self._ending or self.process.exitcode is not None

    def kill(self) -> None:
        """Stop the process now (SIGKILL: a call may be waiting at a barrier); not restarted."""
        with self._lock:
            self._closing = True
        with contextlib.suppress(OSError, ValueError, AttributeError):
            self.process.kill()


def wait_any(futures: Sequence[cf.Future], timeout: float) -> list[cf.Future]:
    return list(cf.wait(futures, timeout, return_when=cf.FIRST_COMPLETED)[0])


def get(futures: Sequence[cf.Future]) -> list[Any]:
    return [f.result() for f in futures]


def result(future: cf.Future) -> Any:
    """The value of a finished call (its process's loss raises :class:`ProcessLost`)."""
    return future.result()


def wait_up(remotes: Sequence[Any], say: Callable[[str], None], patience: float = 20.0) -> None:
    """Wait until every process is up (a constructor that raised raises here)."""
    ups = [r.up for r in remotes if isinstance(r, Remote)]
    _, late = cf.wait(ups, patience)
    if late:
        say(placement_note([r for r in remotes if isinstance(r, Remote) and r.up in late]))
    for r in remotes:
        if isinstance(r, Remote):
            up_or_gone(r)


def up_or_gone(r: Remote) -> int:
    """Its pid once it is up; a death before that which it restarts from is waited out (the
    restart counts at its next call); one it does not restart from raises."""
    while True:
        up = r.up
        try:
            return int(up.result())
        except ProcessLost as e:
            if e.permanent or r.up is up:
                raise


def placement_note(waiting: Sequence[Any]) -> str:
    if not waiting:
        return ""
    names = ", ".join(f"{r.role} {r.index}" for r in waiting[:4])
    what = "data and model" if all(r.role == "worker" for r in waiting) else "env and model"
    return f"still starting: {names} (their constructors: {what} set-up)"


def server_processes(server: Any) -> list[Any]:
    return []  # the shards are objects of this process


def start(cfg: RuntimeConfig, ship: Sequence[str] = ()) -> str:
    """Start the forkserver (if not yet started); what this runtime is, for the log."""
    context()
    local.start(cfg)  # learner threads set the torch thread count of this process
    return DESCRIPTION + ("" if hasattr(os, "memfd_create") else shm_note())


def cluster_cpus() -> float:
    return local.cluster_cpus()


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
