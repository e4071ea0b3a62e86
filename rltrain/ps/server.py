"""The client side of the sharded parameter server: split pushes, join pulls.

:class:`ShardedServer` holds the logic; subclasses only say how to call every shard
(``LocalServer``: plain objects in this process; ``rltrain.runtime.RayServer``: Ray processes).
Workers see the same four methods either way (:class:`Server`).
"""

from __future__ import annotations

import copy
import dataclasses
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np
import torch

from rltrain.config import ConfigError
from rltrain.ps.compression import ErrorFeedback
from rltrain.ps.config import OptimizerConfig, ServerConfig, decides_per_update
from rltrain.ps.shard import ParameterShard
from rltrain.records import (
    GradUpdate,
    Params,
    PushRecord,
    PushResult,
    ServerStats,
    check_update,
)


class Server(Protocol):
    """What a worker or learner needs from a parameter server."""

    def push(self, update: GradUpdate) -> PushResult: ...
    def pull(self, have: Params | None = None) -> Params: ...
    def exchange(
        self, update: GradUpdate, wait_version: int = 0, timeout: float = 0.0
    ) -> tuple[PushResult, Params]: ...
    def exchange_begin(
        self, update: GradUpdate, wait_version: int = 0, timeout: float = 0.0
    ) -> Callable[[], tuple[PushResult, Params]]: ...
    def wait_for_version(self, version: int, timeout: float) -> bool: ...
    def stats(self) -> ServerStats: ...


class ShardLayout:
    """Contiguous split of a flat vector of ``numel`` values into ``num_shards`` pieces by size."""

    def __init__(self, numel: int, num_shards: int, sizes: Sequence[int] | None = None) -> None:
        """``sizes``: the pieces' sizes, when they follow something else (pipeline stages)."""
        if not 1 <= num_shards <= numel:
            raise ConfigError(
                f"server.shards={num_shards}: must be between 1 and the parameter count {numel}"
            )
        if sizes is None:
            sizes = [len(a) for a in np.array_split(np.arange(numel), num_shards)]
        if len(sizes) != num_shards or sum(sizes) != numel or min(sizes) < 1:
            raise ValueError(
                f"shard sizes {list(sizes)} do not split {numel} values {num_shards} ways"
            )
        self.numel = numel
        self.sizes = list(sizes)

    def split(self, flat: torch.Tensor) -> list[torch.Tensor]:
        return list(torch.split(flat.reshape(-1), self.sizes))

    def join(self, pieces: Sequence[torch.Tensor]) -> torch.Tensor:
        if len(pieces) == 1:  # (a cat would copy the one piece: 6.8 MB a pull for Pong)
            return pieces[0].reshape(-1)
        return torch.cat([p.reshape(-1) for p in pieces])


class ShardedServer(ABC):
    """Parameter-server client over N shards; each update is checked once, as a whole.

    A NaN in one shard's slice must not let the other shards apply theirs, so the whole
    update is validated here and, if bad, every shard only counts the rejection.
    """

    def __init__(self, layout: ShardLayout, server: ServerConfig | None = None) -> None:
        self.layout = layout
        kind = "none" if server is None else server.compression
        # one per process: each Ray worker holds its own copy of the client, so the residuals
        # are per pusher (and keyed by worker id where pushers share one, in-process)
        self._feedback = None if kind == "none" else ErrorFeedback(kind, server.topk_fraction)  # type: ignore[union-attr]
        # shard 0 decides each update once for every shard (see ParameterShard.push)
        self.coordinated = server is not None and decides_per_update(server)

    def part(self, index: int) -> ShardedServer:
        """A client of shard ``index`` alone, as if it were the whole server (a pipeline
        stage exchanges its slice of the parameters with its own shard)."""
        one = copy.copy(self)
        one.layout = ShardLayout(self.layout.sizes[index], 1)
        one.coordinated = False  # one shard decides alone
        one._feedback = copy.deepcopy(self._feedback)  # its own compression residuals
        one._keep(index)
        return one

    @abstractmethod
    def _keep(self, index: int) -> None:
        """Talk to shard ``index`` alone from now on (see :meth:`part`)."""

    @abstractmethod
    def _submit(self, method: str, args: Sequence[tuple[Any, ...]], start: int = 0) -> Any:
        """Start ``method`` on every shard i >= ``start`` with ``*args[i - start]``; returns a
        handle for _collect."""

    @abstractmethod
    def _collect(self, handle: Any) -> list[Any]:
        """The results of a _submit, in shard order (waits for them)."""

    def _call(
        self, method: str, args: Sequence[tuple[Any, ...]], skip_first: bool = False
    ) -> list[Any]:
        return self._collect(self._submit(method, args, 1 if skip_first else 0))

    @abstractmethod
    def _call_first(self, method: str, *args: Any) -> Any:
        """``method(*args)`` on shard 0 alone; its result."""

    def _encode(self, values: torch.Tensor) -> Any:
        """How a tensor travels to a shard (a transport may prefer another type)."""
        return values

    def _decode(self, values: Any) -> torch.Tensor:
        return values

    def _check(self, update: GradUpdate) -> str:
        """Why the whole update is refused, or "": several shards check it here, before it is
        split (one shard checks its update itself, and a second pass over a large gradient
        would cost a sixth of an optimizer step)."""
        v = update.values
        if len(self.layout.sizes) == 1 and v.dim() == 1 and v.numel() == self.layout.numel:
            return ""
        return check_update(v, self.layout.numel, update.version, update.version, update.finite)

    def push(self, update: GradUpdate) -> PushResult:
        reason = self._check(update)
        if reason:
            args = [(reason, update.num_samples)] * len(self.layout.sizes)
            return self._call("reject", args)[0]
        parts = self._split(update)
        if self.coordinated:
            first: PushResult = self._call_first("push", parts[0])
            self._call("push", [(u, first) for u in parts[1:]], skip_first=True)
            return first
        results: list[PushResult] = self._call("push", [(u,) for u in parts])
        return results[0]

    def pull(self, have: Params | None = None) -> Params:
        """The latest parameters. With ``have`` (what the caller holds), parameters travel only
        when a new version exists: shards still at its version send nothing (their slice is
        taken from ``have``), and ``have`` itself comes back when no shard has moved.

        (A shard restored from a checkpoint that then comes back to exactly ``have.version``
        is taken as unchanged until its next step.)"""
        since = None if have is None else have.version
        parts: list[Params | None] = self._call("pull", [(since,)] * len(self.layout.sizes))
        if have is None:
            return self._join(parts)  # type: ignore[arg-type]
        if all(p is None for p in parts):
            return have
        held = self.layout.split(have.values)
        return self._join(
            [
                p if p is not None else Params(have.version, held[i], have.norm, have.restore_epoch)
                for i, p in enumerate(parts)
            ]
        )

    def exchange(
        self, update: GradUpdate, wait_version: int = 0, timeout: float = 0.0
    ) -> tuple[PushResult, Params]:
        """Push, optionally wait for ``wait_version`` (a barrier), then pull, in one round trip."""
        return self.exchange_begin(update, wait_version, timeout)()

    def exchange_begin(
        self, update: GradUpdate, wait_version: int = 0, timeout: float = 0.0, live: bool = False
    ) -> Callable[[], tuple[PushResult, Params]]:
        """Start an exchange; the returned function waits for and returns its result.

        Lets a worker compute its next gradient while the round trip is in flight. ``live``:
        the parameters that come back are the shard's own buffer, not a copy (a caller that
        holds views of it: :meth:`LocalServer.live_values`).
        """
        reason = self._check(update)
        if reason:  # refused: it waits for nothing, as a shard's refused update does
            out = (self.push(update), self.pull())
            return lambda: out
        parts = self._split(update)
        if self.coordinated:  # shard 0 decides first; then all wait and pull together
            first: PushResult = self._call_first("push", parts[0])
            args: list[tuple[Any, ...]] = [(None, wait_version, timeout, first)]
            args += [(u, wait_version, timeout, first) for u in parts[1:]]
        else:
            args = [
                (u, wait_version, timeout, None, True) if live else (u, wait_version, timeout)
                for u in parts
            ]
        handle = self._submit("exchange", args)

        def finish() -> tuple[PushResult, Params]:
            parts: list[tuple[PushResult, Params]] = self._collect(handle)
            return parts[0][0], self._join([params for _, params in parts])

        return finish

    def _split(self, update: GradUpdate) -> list[GradUpdate]:
        u = update  # the normalisation statistics live on shard 0 only
        finite = self._verdict(u.finite)
        return [
            dataclasses.replace(
                u, values=self._wire(u.worker_id, i, p), norm=None if i else u.norm, finite=finite
            )
            for i, p in enumerate(self.layout.split(u.values))
        ]

    def _verdict(self, finite: bool | torch.Tensor) -> bool | torch.Tensor:
        """A sender's finiteness verdict as it travels: read here, where it crosses to another
        process (a GPU tensor would not unpickle where there is no GPU; the round trip waits
        anyway). Shards of this process take it unread (:class:`LocalServer`)."""
        return bool(finite)

    def _wire(self, worker: int, shard: int, values: torch.Tensor) -> Any:
        """A slice as it travels: compressed with error feedback (server.compression), or as
        the transport prefers."""
        if self._feedback is None:
            return self._encode(values)
        return self._feedback(worker, shard, values)

    def _join(self, parts: Sequence[Params]) -> Params:
        values = self.layout.join([self._decode(p.values) for p in parts])
        restore_epoch = min(
            p.restore_epoch for p in parts
        )  # read mid-restore: its pushes are dropped
        return Params(min(p.version for p in parts), values, parts[0].norm, restore_epoch)

    def set_lr_factor(self, factor: float) -> None:
        """Multiply every shard's base learning rate by ``factor`` (a schedule's value now)."""
        self._call("set_lr_factor", [(factor,)] * len(self.layout.sizes))

    def wait_for_version(self, version: int, timeout: float) -> bool:
        return all(self._call("wait_for_version", [(version, timeout)] * len(self.layout.sizes)))

    def stats(self) -> ServerStats:
        """Shard 0's counters (every shard sees every push) and the slowest shard's version."""
        parts: list[ServerStats] = self._call("stats", [()] * len(self.layout.sizes))
        first = parts[0]
        return ServerStats(
            version=min(s.version for s in parts),
            applied=first.applied,
            dropped=first.dropped,
            rejected=max(s.rejected for s in parts),
            samples=first.samples,
            staleness_sum=first.staleness_sum,
            staleness_hist=first.staleness_hist,
            last_reject=next((s.last_reject for s in parts if s.last_reject), ""),
            bytes_pushed=sum(s.bytes_pushed for s in parts),
            bytes_pulled=sum(s.bytes_pulled for s in parts),
            zero_steps=first.zero_steps,
            samples_by=first.samples_by,
            dropped_by=first.dropped_by,
        )

    def leave(self, worker_id: int) -> None:
        """A worker is lost: no barrier waits for it until it pushes again."""
        if not self.coordinated:
            self._call("leave", [(worker_id,)] * len(self.layout.sizes))
            return
        count = self._call_first("leave", worker_id)  # shard 0 decides whether a step is due
        self._call("leave", [(worker_id, count)] * (len(self.layout.sizes) - 1), skip_first=True)

    def join(self, worker_id: int) -> None:
        """A worker added mid-run: every barrier now counts one more."""
        self._call("join", [(worker_id,)] * len(self.layout.sizes))

    def health(self) -> list[tuple[int, bool] | None]:
        """Per shard: (version, fenced), or None for a shard that does not answer."""
        return self._call("health", [()] * len(self.layout.sizes))

    def state_dicts(self, tries: int = 200) -> list[dict]:
        """Every shard's state; coordinated shards' at one version. Shard 0 steps a moment
        before the others take its decision, and states read in between would be restored
        (checkpoint, restore point) at different versions, every push then refused as stale:
        they are read again until they agree (the gap is one round trip; after ``tries``
        reads 5 ms apart, as they are)."""
        for _ in range(tries):
            states = self._call("state_dict", [()] * len(self.layout.sizes))
            if not self.coordinated or len({int(s["version"]) for s in states}) == 1:
                break
            time.sleep(0.005)
        return states

    def push_log(self) -> list[PushRecord]:
        """Shard 0's log of the pushes (``server.record``; every shard sees every push)."""
        return self._call_first("push_log")

    def load_state_dicts(self, states: Sequence[dict], restore_epoch: int | None = None) -> None:
        """Every shard's state; ``restore_epoch``: a restore's number (see
        ``GradUpdate.restore_epoch``)."""
        if len(states) != len(self.layout.sizes):
            raise ValueError(
                f"checkpoint has {len(states)} shards, server has {len(self.layout.sizes)}"
            )
        self._call("load_state_dict", [(s, restore_epoch) for s in states])


def make_shards(
    init: torch.Tensor,
    optimizer: OptimizerConfig,
    server: ServerConfig,
    num_workers: int,
    record: bool = False,
    sizes: Sequence[int] | None = None,
    device: str | torch.device = "cpu",
) -> tuple[ShardLayout, list[ParameterShard]]:
    """Split ``init`` by size (or into ``sizes``) and build one plain shard per piece
    (``record``: logging pushes) on ``device``."""
    layout = ShardLayout(init.numel(), server.shards, sizes)
    shards = [
        ParameterShard(piece, optimizer, server, num_workers, i, record, device)
        for i, piece in enumerate(layout.split(init))
    ]
    return layout, shards


class LocalServer(ShardedServer):
    """All shards in this process: the in-process twin of the Ray server."""

    def __init__(
        self,
        init: torch.Tensor,
        optimizer: OptimizerConfig,
        server: ServerConfig,
        num_workers: int,
        record: bool = False,
        sizes: Sequence[int] | None = None,
        device: str | torch.device = "cpu",
    ) -> None:
        layout, self.shards = make_shards(
            init, optimizer, server, num_workers, record, sizes, device
        )
        super().__init__(layout, server)

    def _keep(self, index: int) -> None:
        self.shards = [self.shards[index]]

    def _verdict(self, finite: bool | torch.Tensor) -> bool | torch.Tensor:
        return finite  # the shard beside the sender may step with it unread

    def live_values(self, device: torch.device) -> torch.Tensor | None:
        """The one shard's own parameter buffer, where a learner on ``device`` may make its
        model's parameters views of it (:meth:`ParameterShard.live_values`): one shard, on
        that device, with one pusher (a second would change the parameters under the first
        one's forward pass). None where it may not."""
        if len(self.shards) != 1 or self.coordinated:
            return None
        shard = self.shards[0]
        if shard.device != device or shard.num_workers != 1:
            return None
        return shard.live_values()

    def kill(self) -> None:
        """Nothing to stop: the shards are objects of this process (as RayServer.kill)."""

    def _submit(self, method: str, args: Sequence[tuple[Any, ...]], start: int = 0) -> list[Any]:
        return [getattr(s, method)(*a) for s, a in zip(self.shards[start:], args, strict=True)]

    def _call_first(self, method: str, *args: Any) -> Any:
        return getattr(self.shards[0], method)(*args)

    def _collect(self, handle: list[Any]) -> list[Any]:
        return handle
