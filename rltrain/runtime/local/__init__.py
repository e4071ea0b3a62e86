"""The in-process backend (``runtime.backend: local``): every process a thread of this one.

The same plain classes, plans and driver loop as on Ray, behind the same names as
:mod:`rltrain.runtime` (the trainer picks one module or the other, :func:`backend`): each
:class:`Remote` is one thread that runs its calls in order, as a Ray actor of concurrency 1
does; the server is :class:`~rltrain.ps.server.LocalServer`, whose shards lock their own
state (a barrier waits on the shard's condition, as in a Ray shard); a rollout goes from
actor to learner as the object itself.

What it saves is Ray's share of a small run: starting Ray and its worker processes, shutting
it down, and a serialised round trip per push and pull.
What it costs: Python runs one thread at a time (torch's kernels release the lock), so a run
uses about one core, and there are no processes to lose, restart or place on other machines.
Sample Factory's serial mode and RLlib's old local mode are the same idea: for small tasks
and for debugging (a breakpoint in an actor stops the run where it is).

Imports neither Ray nor anything that starts it.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import torch

from rltrain.driver import Done, note_answers
from rltrain.faults import FaultAction, PeerLost, ProcessLost, RestorePoint
from rltrain.machine import usable_cores
from rltrain.ps.config import OptimizerConfig, ServerConfig
from rltrain.ps.server import LocalServer
from rltrain.records import Role
from rltrain.runtime.config import RuntimeConfig
from rltrain.runtime.fault_policy import respond
from rltrain.runtime.titles import set_thread_name

__all__ = ["Done", "respond"]  # the contract's names that live elsewhere

DESCRIPTION = "in-process (runtime.backend=local: threads, no Ray)"
CLOSE_WAIT_S = 10.0
"""How long :func:`shutdown` waits for the remotes' threads to close their instances."""
Semaphore = threading.Semaphore  # the threads of one process share any object


@runtime_checkable
class Interruptible(Protocol):
    """A class whose long calls can be ended from another thread (the periodic Evaluator)."""

    def interrupt(self) -> None: ...


class Remote:
    """A plain class in a thread of its own: ``call`` returns a future of the method's result,
    and the thread runs the calls one at a time, in order.

    Built here, in the caller's thread (a constructor that fails, fails the run at once). The
    thread is a daemon: a call still running when the process ends (a worker waiting at a
    barrier for one that failed) does not hold the exit up, as a Ray process would not.
    """

    def __init__(
        self, cls: type, *args: Any, role: Role = "actor", index: int = 0, **placement: Any
    ) -> None:
        """``placement``: what :class:`rltrain.runtime.Remote` asks of Ray (CPUs, GPUs,
        restarts); a thread takes none of it."""
        self.role, self.index, self.cpus = role, index, 0.0
        self.actor_id = f"{role}-{index}"
        self.restarted_by = "nobody"  # a thread is not lost apart from its process
        self.instance = cls(*args)
        self._queue: queue.SimpleQueue[tuple[cf.Future, Any, tuple] | None] = queue.SimpleQueue()
        self._killed = False
        name = f"rltrain-{role}{index}"
        self.thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self.thread.start()
        _remotes.append(self)

    def _serve(self) -> None:
        set_thread_name(self.role, self.index)  # top -H, ps -L: rl actor 3
        while (item := self._queue.get()) is not None:
            future, fn, args = item
            if self._killed or not future.set_running_or_notify_cancel():
                future.cancel()
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as e:  # raised again by Pool.wait, in the driver
                future.set_exception(e)
        close = getattr(self.instance, "close", None)
        if close is not None:  # the envs (an Atari vector's C++ threads)
            close()

    def call(self, method: str, *args: Any) -> cf.Future:
        future: cf.Future = cf.Future()
        self._queue.put((future, getattr(self.instance, method), args))
        return future

    def is_up(self) -> bool:
        return True

    def node(self) -> str | None:
        return None

    def pid(self) -> int:
        return os.getpid()

    def mark_lost(self) -> bool:
        return False

    def end(self) -> None:
        self.kill()

    def ended(self, timeout: float) -> bool:
        """Not waited for here: the thread closes its instance after its call, and
        :func:`shutdown` waits for it (CLOSE_WAIT_S)."""
        return not self.thread.is_alive()

    def kill(self) -> None:
        """Cancel the calls not started yet; the thread closes the instance and ends after
        the call it runs, which ends early if the instance has ``interrupt()`` (a thread
        cannot be killed as a Ray process is)."""
        self._killed = True
        self._queue.put(None)
        if isinstance(self.instance, Interruptible):
            self.instance.interrupt()


class Pool:
    """The calls in flight, one per remote (a thread's :class:`Remote`, or a child process of
    :mod:`rltrain.runtime.process`), and the children being restarted.

    As :class:`rltrain.runtime.Pool` (Ray): a call whose process died gives a ``Done`` with
    ``error=ProcessLost``; the pool then waits for the new process (a remote with ``probe``)
    and reports it ``revived`` (or ``ProcessLost(permanent=True)``). Any other exception is a
    bug, or bad data, and fails the run with its own traceback: a thread has no process to
    lose. ``fetch=False`` calls give their value too (there are no references to pass on: a
    rollout is copied out of shared memory as it arrives).
    """

    def __init__(self) -> None:
        self.calls: dict[cf.Future, tuple[Any, Any, bool]] = {}
        self.probes: dict[cf.Future, Any] = {}
        self.answered: set[int] = set()  # see rltrain.driver.note_answers

    def submit(
        self, remote: Any, method: str, *args: Any, tag: Any = None, fetch: bool = True
    ) -> cf.Future:
        future = remote.call(method, *args)
        self.calls[future] = (remote, tag, fetch)
        return future

    def __len__(self) -> int:
        return len(self.calls) + len(self.probes)

    def watch(self, remote: Any) -> None:
        if hasattr(remote, "probe") and remote not in self.restarting():  # not a thread
            self.probes[remote.probe()] = remote

    def busy(self, remote: Any) -> bool:
        return any(r is remote for r, _, _ in self.calls.values())

    def restarting(self) -> list[Any]:
        return list(self.probes.values())

    def wait(self, timeout: float) -> list[Done]:
        if not self.calls and not self.probes:
            time.sleep(timeout)
            return []
        done, _ = cf.wait([*self.calls, *self.probes], timeout, return_when=cf.FIRST_COMPLETED)
        out = []
        for future in done:
            if future in self.probes:
                remote = self.probes.pop(future)
                error = future.exception()
                out.append(Done(remote, error=error) if error else Done(remote, revived=True))
                if isinstance(error, ProcessLost) and not error.permanent:
                    self.probes[remote.probe()] = remote  # it died again before it was up
                continue
            remote, tag, _ = self.calls.pop(future)
            error = future.exception()
            if isinstance(error, ProcessLost):
                out.append(Done(remote, tag, error=error))
                if not error.permanent:
                    self.probes[remote.probe()] = remote
            elif isinstance(error, PeerLost):  # a process it used died (a learner's shards)
                out.append(Done(remote, tag, error=error))
            elif error is not None:
                raise error
            else:
                out.append(Done(remote, tag, future.result()))
        note_answers(self.answered, out)
        return out


def wait_up(remotes: Sequence[Remote], say: Callable[[str], None], patience: float = 20.0) -> None:
    """Nothing to wait for: a thread's constructor ran in :class:`Remote`."""


def placement_note(waiting: Sequence[Remote]) -> str:
    return ""


def inject(
    action: FaultAction, procs: dict[str, list[Any]], counters: Any, say: Callable[[str], None]
) -> None:
    """Threads cannot be killed or paused (the config refuses faults.events here)."""
    say(f"injected fault: skipped {action.signal} {action.event.target}: threads of one process")


def wait_any(futures: Sequence[cf.Future], timeout: float) -> list[cf.Future]:
    """The futures that are done, waiting up to ``timeout`` seconds for at least one."""
    done, _ = cf.wait(futures, timeout, return_when=cf.FIRST_COMPLETED)
    return list(done)


def get(futures: Sequence[cf.Future]) -> list[Any]:
    return [f.result() for f in futures]


def failed(refs: Sequence[Any]) -> list[str]:
    """Per finished future: "" (a value), "died" (the process that ran it died:
    :class:`~rltrain.faults.ProcessLost`) or "error" (it raised); a value that is no future (a
    rollout handed over as itself) is "", one not finished (or cancelled) "died", as on Ray."""
    out = []
    for ref in refs:
        if not isinstance(ref, cf.Future):
            out.append("")
        elif not ref.done() or ref.cancelled():
            out.append("died")
        else:
            error = ref.exception()
            lost = isinstance(error, ProcessLost)
            out.append("" if error is None else "died" if lost else "error")
    return out


def kill(handle: Any) -> None:
    """Stop a process for good: here a :class:`Remote` (the replay's shards are objects of
    this process, with no handles to stop)."""
    handle.kill()


class ServerGuard:
    """Nothing to guard: the shards live in this process and cannot be lost apart from it.
    Keeps the barrier bookkeeping the trainer asks of :class:`rltrain.runtime.ServerGuard`."""

    POLL_S = 0.25

    def __init__(self, server: LocalServer, counters: Any, say: Any) -> None:
        self.server = server
        self.last_seen = 0
        self.left: set[int] = set()
        # never restored: the shards cannot be lost apart from this process
        self.restored_from: RestorePoint | None = None

    def leave(self, worker_id: int) -> None:
        self.left.add(worker_id)
        self.server.leave(worker_id)

    def back(self, worker_id: int) -> None:
        self.left.discard(worker_id)

    def join(self, worker_id: int) -> None:
        self.server.join(worker_id)

    def remember(self, point: RestorePoint) -> None:
        self.last_seen = max(self.last_seen, point.version)

    def poll(self) -> bool:
        self.last_seen = max(self.last_seen, self.server.stats().version)
        return False

    def check(self) -> bool:
        return False


def start_server(
    init: torch.Tensor,
    optimizer: OptimizerConfig,
    server: ServerConfig,
    num_workers: int,
    runtime: RuntimeConfig | None = None,
    max_restarts: int = 0,
    record: bool = False,
    sizes: Sequence[int] | None = None,
    device: str = "cpu",
) -> LocalServer:
    """The shards as objects of this process (``runtime`` and ``max_restarts``, Ray's placement
    and restarts, unused; ``record``: each logs the pushes it receives), on ``device`` (a GPU
    learner's, see ``server.device``)."""
    return LocalServer(init, optimizer, server, num_workers, record, sizes, device)


def start_replay(cls: type, args: Sequence[tuple[Any, ...]], *_: Any) -> Any:
    """The replay shards as objects of this process (:class:`rltrain.replay.local.LocalReplay`;
    the Ray backend's concurrency and restarts unused)."""
    from rltrain.replay.local import LocalReplay

    return LocalReplay([cls(*a) for a in args])


def server_processes(server: LocalServer) -> list[Remote]:
    return []  # the shards are objects of this process


_threads_before: list[int] = []  # torch's thread count, restored when the run ends


_cpu_limit = [0]  # runtime.num_cpus of the run started (0: every core)


def start(cfg: RuntimeConfig, ship: Sequence[str] = ()) -> str:
    # actors and learners set torch's (process-wide) thread count as they are built
    _threads_before.append(torch.get_num_threads())
    _cpu_limit[0] = cfg.num_cpus
    return DESCRIPTION


def cluster_cpus() -> float:
    """The cores this process may run on (a container's or taskset's limit, not the host's),
    at most runtime.num_cpus: what ``actors: auto`` sizes a run to."""
    cores = usable_cores()
    return float(min(cores, _cpu_limit[0] or cores))


def free_cpus() -> float:
    return cluster_cpus()


def cluster_gpus() -> float:
    return float(torch.cuda.device_count())


def fit_cpus(cfg: RuntimeConfig, workers: float, shards: int) -> RuntimeConfig:
    return cfg  # threads reserve nothing


def job_record() -> dict[str, Any]:
    return {"backend": "local"}


_remotes: list[Remote] = []
"""The remotes started and not yet joined by :func:`shutdown`."""


def shutdown() -> None:
    """End the remotes' threads, waiting up to :data:`CLOSE_WAIT_S` for them to close their
    instances (a daemon thread still closing an Atari vector env as Python exits, or one
    never closed, aborts the process in C++: "terminate called without an active
    exception"); give the process back the torch thread count it had."""
    deadline = time.monotonic() + CLOSE_WAIT_S
    while _remotes:
        remote = _remotes.pop()
        remote.kill()  # again, for one the trainer did not kill: its thread ends once
        remote.thread.join(max(0.0, deadline - time.monotonic()))
    if _threads_before:
        torch.set_num_threads(_threads_before.pop())
    _cpu_limit[0] = 0  # (the next run's start sets its own)
