"""The server's shards in a learner's process, as the process runtime's trainer and children
reach them (:mod:`rltrain.rl.learner_host`: the learner's side), and the guard that restores
them when that process dies. Imports neither Ray nor anything that starts it."""

from __future__ import annotations

import concurrent.futures as cf
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from rltrain.faults import PeerLost, ProcessLost, RunFailed, ShardFenced
from rltrain.ps.config import OptimizerConfig, ServerConfig
from rltrain.ps.server import LocalServer, ShardedServer, ShardLayout
from rltrain.records import ServerStats
from rltrain.runtime import guard, local
from rltrain.runtime.config import RuntimeConfig

if TYPE_CHECKING:
    from rltrain.runtime.process import Remote


class HostedServer(ShardedServer):
    """The server's shards in a learner's process (:class:`rltrain.rl.learner_host.
    LearnerHost`), as the trainer and the other processes reach them: each shard call is a
    call to that process, answered by one of its threads beside the learner's ``learn``.

    When that process dies its shards die with it: a call then fails with
    :class:`~rltrain.faults.PeerLost` (a call that used it, never the caller's own death), and
    so does one to a shard that came back and awaits its restore; the guard restores them
    (:class:`rltrain.runtime.guard.ServerGuard`)."""

    def __init__(self, layout: ShardLayout, host: Remote, server: ServerConfig) -> None:
        super().__init__(layout, server)
        self.host = host
        self.indices = list(range(len(layout.sizes)))

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
        """Its first process is not up yet: the shards are the initial ones, and the trainer
        (its restore point, its first statistics) does not wait for the process to start."""
        return self.host.restarts == 0 and not self.host.up.done()

    def set_lr_factor(self, factor: float) -> None:
        """Sent, not waited for: the trainer's first is sent before the learner's process is
        up, and the actors must not wait for that (its calls are taken in order; one lost
        with the process is sent again after the restore, see ``LRSender``)."""
        self._submit("set_lr_factor", [(factor,)] * len(self.indices))

    def state_dicts(self, tries: int = 200) -> list[dict]:
        """Every shard's state; none (``[]``: the state they are built in, which a restarted
        process holds again) while the first process is not up."""
        return [] if self._fresh() else super().state_dicts(tries)

    def load_state_dicts(self, states: Sequence[dict], restore_epoch: int | None = None) -> None:
        if states:
            super().load_state_dicts(states, restore_epoch)
        else:  # the restore point of a run's start: the shards as the process builds them
            self._answer(self.host.call("rebuilt", restore_epoch))

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
        except ProcessLost as e:
            if e.permanent:  # its restarts are spent, or it could not restart
                raise RunFailed(
                    f"the learner process that holds the server's shards died and will not "
                    f"restart ({e}); the run stops at its last checkpoint"
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
    server: ServerConfig,
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
            init, optimizer, server, num_workers, runtime, max_restarts, record, sizes, device
        )
    layout = ShardLayout(init.numel(), server.shards, sizes)  # (no optimizer built here: the
    remote = host((init, optimizer, server, num_workers, record, sizes, device))  # first costs
    return HostedServer(layout, remote, server)  # 1-3 s of imports, the learner's to pay)


class ServerGuard(guard.ServerGuard):
    """The shard guard: a real one where the shards live in a learner's process (they can be
    lost apart from the trainer), the threads' bookkeeping (:class:`rltrain.runtime.local.
    ServerGuard`) where they are the trainer's own objects."""

    def __new__(cls, server: Any, counters: Any, say: Callable[[str], None]) -> Any:
        if not isinstance(server, HostedServer):
            return local.ServerGuard(server, counters, say)
        return super().__new__(cls)
