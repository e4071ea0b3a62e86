"""Placement: a plain class as a Ray process (:class:`Remote`), and signals to its process."""

from __future__ import annotations

import functools
import inspect
import os
import signal
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any, cast

import ray
from ray.actor import ActorHandle
from ray.exceptions import ActorDiedError, RayActorError

import rltrain.runtime.ray.head as head
from rltrain.faults import FaultAction, RunFailed
from rltrain.pauses import pause
from rltrain.records import Role
from rltrain.runtime.ray.errors import creation_error, first_line, get_watched
from rltrain.runtime.ray.startup import free_cpus, node_cpus
from rltrain.runtime.titles import title_of
from rltrain.runtime.trim import keep_trimmed


def is_ray_worker(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read()
        return b"ray::" in cmdline or b"default_worker" in cmdline
    except OSError:
        return os.path.exists(f"/proc/{pid}") or not os.path.isdir("/proc")


def reconstructed() -> bool:
    """Inside a Ray process: whether Ray restarted it (this is not the process its
    constructor first ran in)."""
    with warnings.catch_warnings():  # deprecated in Ray 2.x, with no replacement yet
        warnings.simplefilter("ignore")
        return bool(ray.get_runtime_context().was_current_actor_reconstructed)


@functools.cache  # (one class per title: Ray exports a class once, not per process placed)
def titled(cls: type, role: str, index: int) -> type:
    """``cls`` under the name ``rltrain: actor 3``. Ray titles its process after the class
    (``ray::<class>`` between calls, ``ray::<class>.<method>`` during one, rewritten on every
    call, so a ``setproctitle`` of ours would not last): ``ps`` and ``top`` then show
    ``ray::rltrain: actor 3``, and Ray's dashboard and log prefixes the same name."""
    title = title_of(role, index)

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        keep_trimmed()  # every process of a run (rltrain.runtime.trim)
        cls.__init__(self, *args, **kwargs)  # type: ignore[misc]

    # (Ray checks a constructor's arguments against this signature as it places the actor:
    # the class's own, not (*args, **kwargs), so a wrong call fails here, not in the process)
    __init__.__signature__ = inspect.signature(cls.__init__)  # type: ignore[attr-defined,misc]

    # (not importable by this name, so cloudpickle sends the subclass by value and ``cls``
    # by reference)
    attrs = {"__module__": cls.__module__, "__qualname__": title, "__init__": __init__}
    return type(title, (cls,), attrs)


def whereabouts(_instance: Any) -> tuple[int, str, bool]:
    """Run inside a Ray process (``__ray_call__``): its process id, its node, and whether Ray
    restarted it."""
    return os.getpid(), ray.get_runtime_context().get_node_id(), reconstructed()


def noop(_instance: Any) -> None:
    """Run inside a Ray process (``__ray_call__``): nothing; that it runs is the answer."""


class Remote:
    """A plain class running as a Ray process: ``call`` returns a future, ``get`` waits for it.

    ``role`` and ``index`` name it for fault handling (actor 0, learner 1, shard 0, ...).
    ``max_restarts`` > 0 lets Ray restart its process after a crash (re-running the
    constructor with the same arguments); a call in flight at the crash fails at once
    (``max_task_retries=0``) so the driver sees the loss and decides, rather than Ray re-running
    work that may already have pushed its gradients.
    """

    restarted_by = "Ray"

    def __init__(
        self,
        cls: type,
        *args: Any,
        role: Role = "actor",
        index: int = 0,
        num_cpus: float = 1.0,
        num_gpus: float = 0.0,
        max_restarts: int = 0,
        max_concurrency: int = 1,
    ) -> None:
        self.role, self.index, self.cpus, self.gpus = role, index, num_cpus, num_gpus
        # (Ray's annotation, a handle or the class itself, is looser than the value: a handle)
        self.handle = cast(
            "ActorHandle[Any]",
            ray.remote(titled(cls, role, index))
            .options(
                num_cpus=num_cpus,
                num_gpus=num_gpus,
                max_restarts=max_restarts,
                max_task_retries=0,
                max_concurrency=max_concurrency,
            )
            .remote(*args),
        )
        self.actor_id = self.handle._actor_id.hex()
        self._where: Any = self.probe()
        self._noted = False  # this incarnation's death has been counted
        self._pid: int | None = None  # the last process id a probe answered
        self._noted_pid: int | None = None  # ... when the death was counted (not a new one)
        self._answered = False  # a call of this process has finished

    def call(self, method: str, *args: Any) -> Any:
        head.check()  # (a lost cluster's process: a Ray Client session raises a bare Exception)
        return getattr(self.handle, method).remote(*args)

    def probe(self) -> Any:
        """A future of (pid, node) that resolves once the process is up (after a restart too)."""
        self._where = self.handle.__ray_call__.remote(whereabouts)
        return self._where

    def answers(self, timeout: float) -> bool:
        """Whether the process runs a no-op call within ``timeout`` seconds (the hang watch
        asks a shard before it takes the calls waiting on it for hung); a dead one answers
        (its call fails at once: its loss is handled as such)."""
        ref = self.handle.__ray_call__.remote(noop)
        ready, _ = ray.wait([ref], timeout=timeout)
        return bool(ready)

    def restarted_unseen(self) -> bool:
        """Whether the first call to finish ran in a process Ray had restarted before it (killed
        while its constructor ran): Ray queues the calls and runs them on the new process, so
        no call fails and the death would go uncounted. True once, for that first call."""
        if self._answered:
            return False
        self._answered = True
        return self.is_up() and bool(self._where[2])  # (its probe went before any call)

    def came_back(self, where: tuple[int, str, bool]) -> None:
        """A probe answered after a restart: the new process's (pid, node). Its next death is
        a new one."""
        self._where = where
        self._pid = int(where[0])
        self._noted = False

    def is_up(self) -> bool:
        """Whether the process id is known (the process has started), without waiting."""
        if isinstance(self._where, tuple):
            return True
        if head.gone():  # (nothing to ask: a Ray Client session would start a new Ray)
            return False
        ready, _ = ray.wait([self._where], timeout=0)
        if not ready:
            return False
        try:
            self.pid()
        except RayActorError:  # it died meanwhile: ask again
            self.probe()
            return False
        return True

    def node(self) -> str | None:
        """The id of the Ray node this process runs on, once known (without waiting: a probe
        that has answered is read, as a shard's is never read otherwise)."""
        return str(self._where[1]) if self.is_up() else None

    def pid(self) -> int:
        """The process id (waits for the process to be up)."""
        if not isinstance(self._where, tuple):
            self._where = get_watched(self._where)
            self._pid = int(self._where[0])
        return int(self._where[0])

    def node_ip(self) -> str:
        """The address of the node this process runs on, as Ray's nodes reach each other
        (waits for the process to be up)."""
        self.pid()
        node = self._where[1]
        head.check()  # (Ray's node table is the head's: it blocks where the head is gone)
        return next(str(n["NodeManagerAddress"]) for n in ray.nodes() if n["NodeID"] == node)

    def mark_lost(self) -> bool:
        """Note that this incarnation died; False if that was already noted (one death can
        show up more than once: its call fails, and so do calls that used its results or were
        sent while Ray restarted it)."""
        if self._noted and not isinstance(self._where, tuple):
            ready, _ = ray.wait([self._where], timeout=0)
            if ready:  # the probe sent after the death has answered: is it back since?
                try:
                    self._where = ray.get(self._where)
                    self._pid = int(self._where[0])
                    # the process that was already back when the death was counted (killed
                    # in its constructor, restarted before its first call) is no new death
                    self._noted = self._pid == self._noted_pid
                except RayActorError:
                    self.probe()  # sent while it was restarting: ask again
        if self._noted:
            return False
        self._noted, self._noted_pid = True, self._pid
        self.probe()
        return True

    def signal(self, action: FaultAction) -> str:
        """Kill or pause this process (an injected fault); returns what was done."""
        if not self.is_up():
            return f"skipped {action.signal} {self.role} {self.index}: it is not up"
        pid = self.pid()
        local = self._where[1] == ray.get_runtime_context().get_node_id()
        if local and not is_ray_worker(pid):  # restarted unseen: never signal a stranger
            self.probe()
            return f"skipped {action.signal} {self.role} {self.index}: pid {pid} is gone"
        if local and action.signal == "kill":
            os.kill(pid, signal.SIGKILL)
            return f"kill {self.role} {self.index} (pid {pid})"
        if local:
            pause(pid, action.event.seconds)
            return f"pause {self.role} {self.index} (pid {pid}) for {action.event.seconds:g}s"
        if action.signal == "kill":  # another machine: Ray kills it there, and restarts it
            ray.kill(self.handle, no_restart=False)
            return f"kill {self.role} {self.index} (on another node, through Ray)"
        return f"skipped {action.signal} {self.role} {self.index}: it runs on another node"

    def end(self) -> None:
        """Nothing: Ray's kill ends a process without its object's close."""

    def ended(self, timeout: float) -> bool:
        return True

    def kill(self) -> None:
        if not head.gone():  # (it went with the cluster)
            ray.kill(self.handle)


def placement_note(waiting: Sequence[Remote]) -> str:
    """One line on processes Ray has not started yet: slow imports, or no node with room."""
    if not waiting:
        return ""
    names = ", ".join(
        f"{r.role} {r.index} ({r.cpus:g} CPU{f', {r.gpus:g} GPU' if r.gpus else ''})"
        for r in waiting[:4]
    )
    names += f" and {len(waiting) - 4} more" if len(waiting) > 4 else ""
    cpus = node_cpus()
    nodes = ", ".join(f"{c:g}" for c in cpus)
    said = f"waiting for Ray to start {names}; the cluster's nodes have {nodes} CPUs, "
    said += f"{free_cpus():g} free"
    largest = max(cpus, default=0.0)
    if all(r.cpus <= largest for r in waiting):  # (Ray places GPUs the same way, but a
        # node's GPUs are not told here: read as fitting)
        return said + (
            ": each fits on a node, so it is still starting (its imports, on a busy machine) "
            "or waits for CPUs other processes hold"
        )
    return said + (
        ": a process that fits on no node waits until one joins (add a node, or lower "
        "actors/workers)"
    )


def Semaphore(value: int = 0) -> Any:  # noqa: N802 - the runtimes' name for the factory
    """Refused: Ray's processes share no memory (``runtime.inference: server``, the one user,
    is refused on Ray before a run starts: :func:`rltrain.rl.run.placement.inference_device`)."""
    raise RuntimeError("Ray's processes share no semaphores: runtime.inference=server is local")


def wait_up(remotes: Sequence[Remote], say: Callable[[str], None], patience: float = 20.0) -> None:
    """Wait until every process has started; after ``patience`` seconds, say once which have
    not (a process too large for any node waits for one silently in Ray). Waits a second at
    a time, asking the cluster's head between: a lost cluster's processes never start, and
    Ray would wait for them until it ends the driver."""
    probes = {id(r): r._where for r in remotes if not isinstance(r._where, tuple)}
    late, said, start = list(probes.values()), False, time.monotonic()
    while late:
        head.check()
        _, late = ray.wait(late, num_returns=len(late), timeout=1.0)
        if late and not said and time.monotonic() - start >= patience:
            said = True
            say(placement_note([r for r in remotes if probes.get(id(r)) in late]))
    for r in remotes:
        try:
            r.pid()
        except ActorDiedError as e:  # its constructor raised (a dataset a node lacks, ...)
            if not e.actor_init_failed:
                raise
            why = creation_error(str(e))
            raise RunFailed(f"{r.role} {r.index} could not start: {why}") from None


def inject(
    action: FaultAction, procs: dict[str, list[Remote]], counters: Any, say: Callable[[str], None]
) -> None:
    """Carry out one injected fault on the process it names (if the run has it)."""
    e = action.event
    target = next((r for r in procs.get(e.target, []) if r.index == e.index), None)
    if target is None:
        return
    try:
        done = target.signal(action)
    except (ProcessLookupError, RayActorError) as err:
        done = f"could not {action.signal} {e.target} {e.index}: {first_line(err)}"
    counters.injected += int(not done.startswith(("skipped", "could not")))
    say(f"injected fault: {done}")
