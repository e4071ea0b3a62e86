"""One data-parallel replica of a pipelined model: its lead (:class:`PipelineWorker`) cuts
its data shard's batches into micro-batches and issues each stage's calls in the order of a
:class:`Schedule`, GPipe's (:class:`GPipe`) or synthetic gradients'
(:class:`rltrain.supervised.synthetic.Decoupled`); the stages are
:mod:`rltrain.supervised.pipeline`'s."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from typing import Any, Protocol

import torch

from rltrain.faults import PeerLost, ProcessLost
from rltrain.ps.server import Server
from rltrain.supervised.batches import BatchPlan
from rltrain.supervised.pipeline import BatchLost, Stages, gpipe
from rltrain.supervised.sharding import ShardSource
from rltrain.supervised.worker import WorkerReport, WorkerSpec, inputs, targets


class Schedule(Protocol):
    """How a replica takes a minibatch through its stages: :class:`GPipe`, or
    :class:`rltrain.supervised.synthetic.Decoupled` (synthetic gradients). ``ahead``: batches
    the lead issues before it waits for the oldest one's exchanges (each stage runs its calls
    in order, so this changes no step, only how far a stage may run before the lead)."""

    @property
    def ahead(self) -> int: ...

    def step(self, stages: Stages, x: torch.Tensor, y: torch.Tensor, micro: int) -> list[Any]:
        """Issue one minibatch's calls; the handles the lead confirms with its exchanges."""

    def finish(self, stages: Stages) -> None: ...

    def counters(self, stages: Stages) -> tuple[tuple[int, int, float, float], ...]:
        """What the schedule measured (:attr:`WorkerReport.synthetic`)."""

    def reset(self) -> None:
        """Forget the batches in flight (a stage was lost)."""


class GPipe:
    """:func:`gpipe` for every batch, which the lead waits for: the stages then hold the
    minibatch's exact gradient, and its exchanges go out only then (a batch that a lost stage
    broke pushes nothing)."""

    ahead = 0

    def step(self, stages: Stages, x: torch.Tensor, y: torch.Tensor, micro: int) -> list[Any]:
        stages.get(gpipe(stages, x, y, micro))
        return []

    def finish(self, stages: Stages) -> None:
        pass

    def counters(self, stages: Stages) -> tuple[tuple[int, int, float, float], ...]:
        return ()  # every gradient is the true one

    def reset(self) -> None:
        pass  # nothing outlives a batch


class PipelineWorker:
    """One data-parallel replica of the pipelined model: its data shard in the order a
    :class:`SupervisedWorker` takes it, each batch through the stages, then each stage's
    exchange with its shard (every stage steps once per batch)."""

    def __init__(
        self,
        spec: WorkerSpec,
        data: ShardSource | Any,
        stages: Stages,
        micro: int,
        schedule: Schedule | None = None,
    ) -> None:
        # (no torch thread count set: the lead does no math, and on the process runtime it
        # is a thread of the bench's process, whose count is the bench's)
        self.spec, self.stages, self.micro = spec, stages, micro
        self.schedule = schedule or GPipe()
        if isinstance(data, ShardSource):
            data = data.load()
        self.plan = BatchPlan(inputs(data, spec), targets(data), spec)
        self._begin()

    def _begin(self) -> None:
        """The state of one run: counters, the log, the batches in flight."""
        self.samples, self.restarts, self.lost_batches = 0, 0, 0  # of the run so far
        self.log: list[tuple[float, int, float]] = []  # per batch: (time, samples, loss)
        # the batches issued and not confirmed: (samples, the exchanges, the schedule's calls)
        self.inflight: deque[tuple[int, list[Any], list[Any]]] = deque()

    def run(
        self, servers: Sequence[Server], t0: float | None = None, deadline: float | None = None
    ) -> WorkerReport:
        """Train until the epoch or time budget is spent; ``servers[s]``: stage s's shard.
        (``t0``: when the mode started, as :meth:`SupervisedWorker.run` takes it.)"""
        start = time.time()
        spec, st = self.spec, self.stages
        if deadline is None:
            deadline = start + spec.max_seconds if spec.max_seconds > 0 else float("inf")
        versions = self._recover(servers)  # (a stage lost while starting: restarted)
        # a barrier rule takes one step per version: a restarted replica goes on from there
        skip = min(versions) if spec.update_rule.barrier else 0
        self._begin()
        for b in self.plan.batches(skip, lambda: deadline):
            issuing = 1  # this batch, until it is in flight
            try:
                issued = self.schedule.step(st, b.x, b.y, self.micro)
                # a barrier waits no longer than the budget (a replica that stopped never comes)
                left = deadline - time.time() + 0.5
                timeout = max(0.0, min(spec.server.barrier_timeout_s, left))
                calls = [
                    st.call(s, "exchange", spec.worker_id, len(b.y), timeout)
                    for s in range(st.count)
                ]
                self.inflight.append((len(b.y), calls, issued))
                issuing = 0
                self._confirm(self.schedule.ahead)
            except (ProcessLost, BatchLost, PeerLost) as e:
                self._lost(e, servers, issuing)
        try:
            self._confirm(0)
            self.schedule.finish(st)
        except (
            ProcessLost,
            BatchLost,
            PeerLost,
        ) as e:  # at the end: the batches in flight are lost
            self._lost(e, servers, 0)
        steps = len(self.log)
        return WorkerReport(
            spec.worker_id,
            start,
            time.time(),
            steps,
            self.samples,
            steps,
            tuple(self.log),
            synthetic=self.schedule.counters(st),
            restarts=self.restarts,
            lost_batches=self.lost_batches,
        )

    def _confirm(self, ahead: int) -> None:
        """Wait for the oldest batches' exchanges until ``ahead`` are left in flight; log them."""
        while len(self.inflight) > ahead:
            n, calls, issued = self.inflight[0]
            done = self._settle([*calls, *issued])[: len(calls)]
            self.inflight.popleft()
            self.samples += n
            self.log.append((time.time(), self.samples, done[-1][1]))  # the last stage's loss

    def _settle(self, handles: Sequence[Any]) -> list[Any]:
        """The calls' results. Of their failures, a stage's death (:class:`ProcessLost`) is
        raised before the refusals it caused (:class:`BatchLost`; on Ray :class:`PeerLost`,
        a call whose inputs were the dead stage's results), whatever their order."""
        out: list[Any] = []
        refused: BatchLost | PeerLost | None = None
        for h in handles:
            try:
                out.extend(self.stages.get([h]))
            except (BatchLost, PeerLost) as e:
                refused = refused or e
                out.append(None)
        if refused is not None:
            raise refused
        return out

    def _lost(
        self, e: ProcessLost | BatchLost | PeerLost, servers: Sequence[Server], issuing: int
    ) -> None:
        """A stage died: restarted, every stage pulls its slice again. The batches in flight
        are lost (and the gradients they owed); ``e`` raised if it cannot come back. (A
        :class:`BatchLost` or :class:`PeerLost` alone: the death itself was reported by a
        call not waited for.)
        ``issuing``: 1 if the batch being issued was not in flight yet."""
        if isinstance(e, ProcessLost) and e.permanent:
            raise e
        self.restarts += 1
        self.lost_batches += len(self.inflight) + issuing
        self.inflight.clear()
        self._recover(servers)

    def _connect(self, servers: Sequence[Server]) -> list[int]:
        st = self.stages
        return st.get([st.call(s, "connect", srv) for s, srv in enumerate(servers)])

    def _recover(self, servers: Sequence[Server], tries: int = 5) -> list[int]:
        """At the start, and after a stage's loss: every stage forgets the batch in flight and
        pulls its slice from its shard (a restarted one too, once its constructor has run);
        their versions. The first call to a process that died before it may report that
        death: tried again."""
        st = self.stages
        self.schedule.reset()
        for attempt in range(tries):
            try:
                st.get([st.call(s, "reset") for s in range(st.count)])
                return self._connect(servers)
            except ProcessLost as e:
                if e.permanent or attempt == tries - 1:
                    raise
        raise AssertionError("unreachable")
