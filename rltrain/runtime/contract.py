"""The runtime contract: what the trainer, the plans and the bench ask of a runtime.

Every registered runtime satisfies it (:mod:`rltrain.runtime.registry`): the built-ins are
:mod:`rltrain.runtime.ray` (Ray processes, a cluster or one machine),
:mod:`rltrain.runtime.process` (OS processes of one machine) and :mod:`rltrain.runtime.local`
(threads of one process). :func:`rltrain.runtime.backend` returns one of them; callers hold it
as a :class:`Runtime`. ``tests/test_runtime_contract.py`` checks each registered runtime
against these Protocols, names and signatures, so a member added to one runtime and not the
others fails there, not in a user's run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from rltrain.driver import Done
from rltrain.faults import FaultAction, PusherRule, RestorePoint
from rltrain.records import Role, Verdict
from rltrain.runtime.config import RuntimeConfig

Say = Callable[[str], None]


class RemoteProcess(Protocol):
    """A plain class placed somewhere (a Ray process, an OS process, a thread): its calls run
    one at a time, in order."""

    role: Role
    index: int
    actor_id: str
    cpus: float
    restarted_by: str
    """Who restarts it after a crash, for the log ("Ray", "the trainer")."""

    def call(self, method: str, *args: Any) -> Any:
        """Start ``method(*args)`` there; a future of its result."""

    def is_up(self) -> bool:
        """Whether it has started (without waiting)."""

    def node(self) -> str | None:
        """The node it runs on, once known (None: this machine)."""

    def pid(self) -> int:
        """Its process id (waits until it is up)."""

    def mark_lost(self) -> bool:
        """Note that this incarnation died; False if already noted."""

    def end(self) -> None:
        """Ask it to end after its current call, closing its object (an actor's envs)."""

    def ended(self, timeout: float) -> bool:
        """Wait at most ``timeout`` seconds for it to end after :meth:`end`; whether it has."""

    def kill(self) -> None:
        """Stop it for good."""


class CallPool(Protocol):
    """The calls in flight, one per process, their results, losses and revivals."""

    calls: dict[Any, Any]
    answered: set[int]  # the id() of each remote whose process has returned a call

    def submit(
        self, remote: Any, method: str, *args: Any, tag: Any = None, fetch: bool = True
    ) -> Any: ...

    def __len__(self) -> int: ...

    def watch(self, remote: Any) -> None:
        """Report ``remote`` once it is back (it was found dead some other way)."""

    def busy(self, remote: Any) -> bool: ...

    def restarting(self) -> list[Any]: ...

    def wait(self, timeout: float) -> list[Done]:
        """Finished calls, lost processes and revived ones, waiting up to ``timeout``."""


class Guard(Protocol):
    """Watches the server's shards (restores them all when one is lost) and keeps the
    barrier's bookkeeping of lost workers."""

    POLL_S: float
    last_seen: int
    left: set[int]
    restored_from: RestorePoint | None
    """The restore point of the last restore of the shards (None: none restored them)."""

    def leave(self, worker_id: int) -> None: ...

    def back(self, worker_id: int) -> None:
        """A worker that left was restarted: no restore tells the shards it left."""

    def join(self, worker_id: int) -> None: ...

    def remember(self, point: Any) -> None: ...

    def poll(self) -> bool: ...

    def check(self) -> bool: ...


class Runtime(Protocol):
    """A runtime module, as the trainer and the bench use it."""

    Remote: Callable[..., RemoteProcess]
    Pool: Callable[[], CallPool]
    ServerGuard: Callable[[Any, Any, Say], Guard]
    Semaphore: Callable[[int], Any]
    """A semaphore its processes share (given to them when they start): the batched policy's
    slots (:class:`rltrain.rl.inference.ActSlots`)."""

    def start(self, cfg: RuntimeConfig, ship: Sequence[str] = ()) -> str:
        """Start the runtime; a line saying what it is."""

    def shutdown(self) -> None: ...

    def cluster_cpus(self) -> float: ...

    def cluster_gpus(self) -> float: ...

    def free_cpus(self) -> float: ...

    def fit_cpus(self, cfg: RuntimeConfig, workers: float, shards: int) -> RuntimeConfig: ...

    def job_record(self) -> dict[str, Any]:
        """summary.json's "runtime": the backend, the job, the nodes."""

    def start_server(
        self, init: Any, optimizer: Any, server: Any, num_workers: int, *args: Any, **kwargs: Any
    ) -> Any:
        """The parameter server's shards, started; the rest is each runtime's own (its config,
        ``max_restarts``, ``record``, ``sizes``, ``device``; the process runtime's ``host``)."""

    def start_replay(self, cls: type, args: Sequence[tuple[Any, ...]], *rest: Any) -> Any: ...

    def server_processes(self, server: Any) -> list[Any]: ...

    def respond(
        self,
        d: Done,
        rule: PusherRule,
        on_worker_loss: str,
        server: Any,
        guard: Any,
        counters: Any,
        say: Say,
    ) -> Verdict: ...

    def inject(
        self, action: FaultAction, procs: dict[str, list[Any]], counters: Any, say: Say
    ) -> None: ...

    def wait_up(self, remotes: Sequence[Any], say: Say, patience: float = 20.0) -> None: ...

    def placement_note(self, waiting: Sequence[Any]) -> str: ...

    def wait_any(self, futures: Sequence[Any], timeout: float) -> list[Any]: ...

    def get(self, futures: Sequence[Any]) -> list[Any]: ...

    def failed(self, refs: Sequence[Any]) -> list[str]:
        """Per finished future: "" (a value), "died" (the process that ran it died) or
        "error" (it raised); for the rare failure path only."""

    def kill(self, handle: Any) -> None:
        """Stop a process of the runtime's for good (a replay shard's, at the run's end)."""


MEMBERS: dict[str, type] = {"Remote": RemoteProcess, "Pool": CallPool, "ServerGuard": Guard}
"""The classes of a runtime module and the Protocol each satisfies."""
