"""The wire format and placement of the parameter server and the replay memory as Ray processes.

Tensors cross Ray as numpy arrays (zero-copy pickle-5 buffers); a pull's parameters go into
the object store once per version (the fan-out).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Any, cast

import numpy as np
import ray
import torch
from ray.actor import ActorClass
from ray.exceptions import ActorDiedError, GetTimeoutError, RayActorError

import rltrain.runtime.ray.head as head
from rltrain.faults import RunFailed
from rltrain.ps.config import OptimizerConfig, ServerConfig
from rltrain.ps.server import ShardedServer, ShardLayout
from rltrain.ps.shard import ParameterShard
from rltrain.records import GradUpdate, Params, PushResult, tensor_of
from rltrain.runtime.config import RuntimeConfig
from rltrain.runtime.ray.errors import result
from rltrain.runtime.ray.remote import Remote, reconstructed, titled

FANOUT_MIN_BYTES = 1 << 20
"""Below this a pulled slice travels inline: for a small network the object store's put and
get cost more than the values' copy, and an actor pulls often; above it (a Nature CNN's
6.7 MB) a version goes through the store once and every actor that pulls it shares it."""


class WireShard(ParameterShard):
    """A shard whose tensors cross Ray as numpy arrays.

    Ray serialises numpy arrays as zero-copy pickle-5 buffers, where a torch tensor goes
    through torch's own reduction and its storage's bookkeeping.

    When Ray restarts a shard whose process died, the constructor runs again with the initial
    parameters: the shard then fences itself until the driver restores it from a checkpoint.
    """

    def __init__(self, *args: Any) -> None:
        # One torch thread: a shard's optimizer steps are small, and on cores the actors
        # keep busy an OpenMP team waits for its threads far longer than the work takes.
        torch.set_num_threads(1)
        super().__init__(*args)
        self._shared: tuple[tuple[int, int], Any] | None = None  # (version, generation), ref
        self.puts = 0
        if reconstructed():
            self.fence()

    def push(self, update: GradUpdate, decided: PushResult | None = None) -> PushResult:
        return super().push(_decoded(update), decided)

    def set_values(self, values: Any) -> None:
        super().set_values(to_tensor(values))

    def exchange(
        self,
        update: GradUpdate | None,
        wait_version: int,
        timeout: float,
        decided: PushResult | None = None,
        live: bool = False,
    ) -> tuple[PushResult, Params]:
        update = None if update is None else _decoded(update)
        result, p = super().exchange(update, wait_version, timeout, decided, live)
        return result, _on_wire(p, p.values.numpy())

    def pull(self, newer_than: int | None = None) -> Params | None:
        """Fan-out: the values of a version go into Ray's object store once (``ray.put``), and
        every puller gets a reference to that one object, read from shared memory on its node,
        instead of a copy sent to each. The previous version's object is freed once no puller
        holds it. Slices under ``FANOUT_MIN_BYTES`` travel inline with the reply instead."""
        p = super().pull(newer_than)
        if p is None:
            return None
        values = p.values.numpy()
        if values.nbytes < FANOUT_MIN_BYTES:
            return _on_wire(p, values)
        key = (p.version, self._generation)  # a restore may repeat a version number
        if self._shared is None or self._shared[0] != key:
            self._shared = (key, ray.put(values))
            self.puts += 1
        return _on_wire(p, self._shared[1])

    def fanout_puts(self) -> int:
        """How many parameter objects this shard has put in the object store (tests)."""
        return self.puts


def _on_wire(p: Params, values: Any) -> Params:
    """``p`` with its values as they cross Ray: a numpy array, or the object store's reference
    to one, where :class:`Params` declares the tensor the puller makes of them."""
    return dataclasses.replace(p, values=cast(torch.Tensor, values))


def _decoded(update: GradUpdate) -> GradUpdate:
    return dataclasses.replace(update, values=to_tensor(update.values))


def to_tensor(values: Any) -> torch.Tensor:
    return tensor_of(values) if isinstance(values, np.ndarray) else values


class RayServer(ShardedServer):
    """The parameter server as Ray processes: one threaded Ray process per shard.

    Barrier rules run threaded processes (``max_concurrency``) so that a worker blocked at a
    barrier (``wait_for_version``) does not stop other workers' pushes from being served;
    ``async`` shards run one call at a time, which keeps each worker's calls in order.
    """

    def __init__(
        self, layout: ShardLayout, shards: Sequence[Remote], server: ServerConfig | None = None
    ) -> None:
        super().__init__(layout, server)
        self.shards = list(shards)
        self.handles = [r.handle for r in shards]

    def _keep(self, index: int) -> None:
        self.shards, self.handles = [self.shards[index]], [self.handles[index]]

    def _submit(self, method: str, args: Sequence[tuple[Any, ...]], start: int = 0) -> list[Any]:
        head.check()
        handles = self.handles[start:]
        return [getattr(h, method).remote(*a) for h, a in zip(handles, args, strict=True)]

    def _call_first(self, method: str, *args: Any) -> Any:
        head.check()
        return result(getattr(self.handles[0], method).remote(*args))

    def _collect(self, handle: list[Any]) -> list[Any]:
        return [result(ref) for ref in handle]  # a dead shard: ProcessLost, not a Ray error

    def _encode(self, values: torch.Tensor) -> Any:
        return values.detach().cpu().numpy()  # a GPU learner's gradient, too

    def _decode(self, values: Any) -> torch.Tensor:
        if isinstance(values, ray.ObjectRef):  # a pull's fan-out: one object per version
            values = result(values)
        return to_tensor(values)

    def health(self, timeout: float = 2.0) -> list[tuple[int, bool] | None]:
        """Per shard (version, fenced); None where the shard is dead or restarting, and
        (-1, False) where it is alive but did not answer in time (busy, or paused).

        Raises :class:`RunFailed` for a shard that will not restart.
        """
        return [
            shard_health(r, ref, timeout)
            for r, ref in zip(self.shards, self.ask_health(), strict=True)
        ]

    def ask_health(self) -> list[Any]:
        head.check()
        return [h.health.remote() for h in self.handles]

    def answered(self, asked: list[Any]) -> list[tuple[int, bool] | None] | None:
        """The health asked for, once every shard has answered (None before)."""
        ready, _ = head.guarded(ray.wait)(asked, num_returns=len(asked), timeout=0)
        if len(ready) < len(asked):
            return None
        return [shard_health(r, ref, 0) for r, ref in zip(self.shards, asked, strict=True)]

    def join_shard(self, index: int, worker_id: int) -> None:
        result(self.shards[index].call("join", worker_id))

    def kill(self) -> None:
        for r in self.shards:
            r.kill()


def start_server(
    init: torch.Tensor,
    optimizer: OptimizerConfig,
    server: ServerConfig,
    num_workers: int,
    runtime: RuntimeConfig,
    max_restarts: int = 0,
    record: bool = False,
    sizes: Sequence[int] | None = None,
    device: str = "cpu",
) -> RayServer:
    """One :class:`ParameterShard` process per shard, parameters split by size (or into
    ``sizes``); ``record``: each logs the pushes it receives (``server.record``, fetched with
    ``push_log``). ``device``: unused, a shard process of Ray's keeps its values on the CPU.

    A shard is constructed with its size alone and given its initial values by a call: Ray
    keeps a constructor's arguments to re-run it on a restart, and arguments of more than
    100 KB would live in the object store, lost with the node that holds them (ray#53727). A
    restarted shard starts fenced and is restored from the last restore point anyway.
    """
    layout = ShardLayout(init.numel(), server.shards, sizes)
    pieces = layout.split(init)
    shards = [
        Remote(
            WireShard,
            int(piece.numel()),
            optimizer,
            server,
            num_workers,
            i,
            record,
            role="shard",
            index=i,
            num_cpus=runtime.server_cpus,
            max_restarts=max_restarts,
            max_concurrency=server.update_rule.max_concurrency(num_workers),
        )
        for i, piece in enumerate(pieces)
    ]
    for shard, piece in zip(shards, pieces, strict=True):
        result(shard.handle.set_values.remote(piece.numpy()))
    return RayServer(layout, shards, server)


def server_processes(server: RayServer) -> list[Remote]:
    """The server's shard processes (the trainer watches and kills them with the others)."""
    return list(server.shards)


class RayReplay:
    """Replay-memory shards as Ray processes, behind the same methods as ``LocalReplay``.

    ``add`` waits for the shard (back-pressure: actors cannot outrun the memory);
    ``update_priorities`` does not (a learner need not wait for bookkeeping).
    """

    def __init__(self, handles: Sequence[Any]) -> None:
        self.handles = list(handles)

    def add(self, shard: int, block: Any) -> None:
        result(self.handles[shard].add.remote(block))

    def sample(self, shard: int, batch_size: int, batches: int = 1) -> Any:
        return result(self.handles[shard].sample.remote(batch_size, batches))

    def update_priorities(self, shard: int, indices: Any, priorities: Any) -> None:
        self.handles[shard].update_priorities.remote(indices, priorities)

    def sizes(self) -> list[int]:
        head.check()
        return [result(h.stats.remote())["size"] for h in self.handles]

    def actor_ids(self) -> list[str]:
        """The Ray id of each shard (hex), as :class:`ProcessLost` names a dead one."""
        return [h._actor_id.hex() for h in self.handles]

    def nbytes(self) -> int:
        head.check()
        return sum(result(h.stats.remote())["nbytes"] for h in self.handles)


def start_replay(
    cls: type, args: Sequence[tuple[Any, ...]], max_concurrency: int, max_restarts: int = 0
) -> RayReplay:
    """One replay process per shard; threaded so that sampling and adding overlap.

    A replay shard that Ray restarts comes back empty (the memory is not checkpointed).
    """

    def process(index: int) -> ActorClass[Any]:
        return ray.remote(titled(cls, "replay", index)).options(
            num_cpus=0,
            max_concurrency=max_concurrency,
            max_restarts=max_restarts,
            max_task_retries=0,
        )

    return RayReplay([process(i).remote(*a) for i, a in enumerate(args)])


@head.guarded  # (a Ray Client's lost head: ConnectionError, a crash before: explore99)
def shard_health(shard: Remote, ref: Any, timeout: float) -> tuple[int, bool] | None:
    try:
        version, fenced = ray.get(ref, timeout=timeout)
        return int(version), bool(fenced)
    except ActorDiedError as e:
        head.confirm()  # the head gone: the cluster's loss, not the shard's (explore109)
        raise RunFailed(
            f"server shard {shard.index} died and Ray will not restart it ({died_why(e)}); "
            "the run stops at its last checkpoint"
        ) from None
    except RayActorError:  # restarting; or gone with the cluster's head (which the guard
        head.check()  # would otherwise wait two minutes for)
        return None
    except GetTimeoutError:
        return (-1, False)


def died_why(e: ActorDiedError) -> str:
    """Ray's cause of an actor's death in a few words: the first line of its message that is
    neither its standard first line nor one of its tab-indented fields (class, id, pid, ip);
    Ray's ``max_restarts`` spent where it gives none. (explore109: a head stopped by SIGTERM
    was said to have spent restarts that never happened.)"""
    lines = re.sub(r"\x1b\[[0-9;]*m", "", str(e)).splitlines() or [""]  # (Ray's colours)
    if lines[0] != ActorDiedError.BASE_ERROR_MSG:  # its constructor raised: what it raised,
        raised = next((x.strip() for x in reversed(lines) if x.strip()), "")  # (the last line)
        return f"its constructor raised {raised}"
    told = [x.strip() for x in lines[1:] if x.strip() and not x.startswith("\t")]
    if not told:
        return "its restarts spent: faults.max_restarts"
    first = told[0]
    return first if len(first) <= 200 else first[:197] + "..."
