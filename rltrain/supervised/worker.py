"""A supervised worker: trains on its data shard through a parameter server.

Plain Python: the Ray runtime wraps it as an actor, Hogwild runs it in a forked process, and
tests run it in this process. To the server it is the same thing as an RL learner: it pushes
:class:`GradUpdate` records and pulls :class:`Params`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from rltrain.faults import FaultEvent, Slowdown
from rltrain.ps.config import OptimizerConfig, ServerConfig
from rltrain.ps.optim import make_optimizer
from rltrain.ps.rules import UpdateRule
from rltrain.ps.server import Server
from rltrain.records import BatchId, GradUpdate, Params
from rltrain.supervised.batches import Batch, BatchPlan, GradSum
from rltrain.supervised.datasets import ArrayDataset
from rltrain.supervised.models import build_model
from rltrain.supervised.sharding import ShardSource
from rltrain.supervised.splits import VectorDataset
from rltrain.supervised.toys import objective_loss


@dataclass(frozen=True)
class WorkerSpec:
    """Everything one worker needs besides its data shard and the server."""

    worker_id: int
    server: ServerConfig  # the server's settings; server.rule names the update rule
    optimizer: OptimizerConfig  # the local optimizer of the `average` rule
    model: str
    num_classes: int
    mean: tuple[float, ...]  # per-channel image normalisation (empty for vector data)
    std: tuple[float, ...]
    batch_size: int
    max_epochs: int  # 0 = no epoch limit
    max_seconds: float  # 0 = no time limit
    seed: int
    threads: int = 1
    faults: tuple[FaultEvent, ...] = ()  # injected `slow` events (a straggler)
    steps_per_epoch: int = 0  # 0 = every full batch of the shard; else at most this many
    objective: str = "cross_entropy"  # or squared / logistic (the toy problems)
    l2: float = 0.0  # l2/2 |w|^2 added to the objective
    update: UpdateRule | None = None
    """The update rule object (None: the one registered as ``server.rule``). It travels with the
    spec, so a rule registered only in the driver's process also runs in a worker process."""

    @property
    def update_rule(self) -> UpdateRule:
        """Which loop the worker runs: on arrival (async), barrier (sync/soft_sync) or
        parameter averaging."""
        return self.update if self.update is not None else self.server.update_rule


@dataclass(frozen=True)
class WorkerReport:
    """What a worker did; ``log`` rows are (unix time, cumulative samples, batch loss)."""

    worker_id: int
    start_time: float
    end_time: float
    steps: int
    samples: int
    pushes: int
    log: tuple[tuple[float, int, float], ...]
    synthetic: tuple[tuple[int, int, float, float], ...] = ()
    """Synthetic-gradient stages: per true gradient, in arrival order, (stage, staleness in
    the stage's updates, cosine and relative L2 error of the prediction it trained)."""
    restarts: int = 0  # pipeline replicas: stage processes lost and restarted
    lost_batches: int = 0  # pipeline replicas: batches in flight when a stage was lost


def normalize(
    images: torch.Tensor, mean: tuple[float, ...], std: tuple[float, ...]
) -> torch.Tensor:
    """uint8 [N, C, H, W] -> float32 standardised per channel."""
    m = torch.tensor(mean).view(1, -1, 1, 1)
    s = torch.tensor(std).view(1, -1, 1, 1)
    return (images.float().div_(255.0) - m) / s


def inputs(data: ArrayDataset | VectorDataset, spec: WorkerSpec) -> torch.Tensor:
    """The model's float inputs: standardised images [N, C, H, W], or the vectors [N, D]."""
    if isinstance(data, VectorDataset):
        return data.x
    return normalize(data.images, spec.mean, spec.std)


def targets(data: ArrayDataset | VectorDataset) -> torch.Tensor:
    """[N] class labels (int64) or real targets (float32)."""
    return data.y if isinstance(data, VectorDataset) else data.labels


def make_model(spec: WorkerSpec, in_shape: tuple[int, ...]) -> nn.Module:
    torch.manual_seed(spec.seed)  # every replica starts from the same parameters
    return build_model(spec.model, tuple(in_shape), spec.num_classes)


def objective(spec: WorkerSpec, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The training loss of a batch, with the objective's own L2 term (toy_logistic)."""
    loss = objective_loss(spec.objective, model(x), y)
    if spec.l2:
        loss = loss + 0.5 * spec.l2 * sum(p.pow(2).sum() for p in model.parameters())
    return loss


def flat_grad(model: nn.Module) -> torch.Tensor:
    """[P] concatenated gradients, in ``model.parameters()`` order (zeros where unused)."""
    return torch.cat(
        [
            (p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
            for p in model.parameters()
        ]
    )


WorkerData = ArrayDataset | VectorDataset | ShardSource
"""A worker's data shard, or where it loads it from."""


class SupervisedWorker:
    """The objective (cross-entropy, or a toy problem's) on a data shard, pushing to and
    pulling from a :class:`Server`."""

    steps_locally: ClassVar[bool] = False  # each worker steps an optimizer of its own

    def __init__(self, spec: WorkerSpec, data: WorkerData, standalone: bool = False) -> None:
        """``standalone``: the worker will :meth:`run_standalone` (the baseline)."""
        torch.set_num_threads(spec.threads)  # N processes on N cores must not fight
        self.spec = spec
        if isinstance(data, ShardSource):
            data = data.load()
        self.x = inputs(data, spec)  # [N, C, H, W] or [N, D]
        self.y = targets(data)  # [N]
        self.plan = BatchPlan(self.x, self.y, spec)
        self.model = make_model(spec, self.x.shape[1:])
        # the local optimizer of the baseline, `average` and allreduce, built here: a process's
        # first takes 1-1.5 s (torch.optim's first call imports torch._dynamo), start-up, not
        # training; a worker whose server applies its gradients builds none
        self._opt: torch.optim.Optimizer | None = None
        if standalone or self.steps_locally or spec.update_rule.pushes_parameters:
            self._opt = self._local_opt
        self.samples = 0
        self.steps = 0
        self.pushes = 0
        self.restore_epoch = 0  # of the parameters held (GradUpdate.restore_epoch)
        self._log: list[tuple[float, int, float]] = []
        self._deadline = float("inf")
        self._slow = Slowdown(spec.faults, spec.worker_id)
        self._skip = 0  # batches of the epoch plan already done (a restarted worker)

    @property
    def _local_opt(self) -> torch.optim.Optimizer:
        if self._opt is None:
            self._opt = make_optimizer(self.model.parameters(), self.spec.optimizer)
        return self._opt

    # --- the loops ------------------------------------------------------------------------

    def run(
        self,
        server: Server,
        t0: float | None = None,
        deadline: float | None = None,
        pushed: int = 0,
    ) -> WorkerReport:
        """Train through ``server`` until the epoch or time budget is spent.

        ``t0`` is when the mode started (injected slowdowns count from it) and ``deadline``
        when it ends; a worker restarted mid-run is given the same two, so it works only for
        the time left. It also resumes its epoch plan where its predecessor's pushes ended
        (after the ``pushed`` samples the server counted of its id, dropped ones included,
        :attr:`ServerStats.samples_by`), so that it does not train its share again. (Barrier
        rules skipped to the server's version, so that every worker took as many steps: a
        warm start's late workers then skipped as many batches of their share as worker 0
        had trained alone. A worker that has finished its share leaves the barriers.)
        """
        start = self._start(t0, deadline)
        self._skip = pushed // self.spec.batch_size  # (every batch of the plan is whole)
        rule = self.spec.update_rule
        if rule.pushes_parameters:
            self._run_average(server)
        elif rule.barrier:
            self._run_barrier(server)
        else:
            self._run_async(server)
        return self._report(start)

    def run_standalone(self, on_step: Callable[[], None] = lambda: None) -> WorkerReport:
        """The plain single-process PyTorch loop (the benchmark's baseline): no server at all."""
        start = self._start()
        opt = self._local_opt
        for b in self._batches():
            self._backward(b.x, b.y)
            opt.step()
            on_step()
        return self._report(start)

    def stop(self) -> None:
        """End :meth:`run` after the current step, or at once if it has not begun (a worker
        removed mid-run; called from another thread: Ray runs a supervised worker with a
        second slot for it)."""
        self._stopped = True
        self._deadline = 0.0

    def _start(self, t0: float | None = None, deadline: float | None = None) -> float:
        start = time.time()
        self._slow.start(t0 or start)
        if deadline is None:
            deadline = start + self.spec.max_seconds if self.spec.max_seconds > 0 else float("inf")
        self._deadline = 0.0 if getattr(self, "_stopped", False) else deadline
        return start

    def _report(self, start: float) -> WorkerReport:
        return WorkerReport(
            self.spec.worker_id,
            start,
            time.time(),
            self.steps,
            self.samples,
            self.pushes,
            tuple(self._log),
        )

    def _run_async(self, server: Server) -> None:
        """Downpour SGD (Dean et al. 2012): pull every n_fetch steps, push every n_push steps.

        Between pushes the gradients are averaged, as one larger batch; the update carries the
        oldest version they were computed from (n_fetch < n_push pulls between two pushes).
        """
        settings = self.spec.server
        version = self._load(server.pull())
        acc = GradSum()
        pending = None  # an exchange in flight (settings.pipeline): its parameters come next
        for b in self._batches():
            loss = self._backward(b.x, b.y)
            acc.add(flat_grad(self.model), len(b.y), BatchId(b.epoch, b.position, version))
            push, fetch = self.steps % settings.n_push == 0, self.steps % settings.n_fetch == 0
            if not (push or fetch):
                continue
            update = None
            if push:
                update, acc = self._update(acc.oldest, acc, loss), GradSum()
            if pending is not None:  # settle the previous round trip before the next call
                version = self._load(pending()[1])
                pending = None
            if update is None:
                version = self._load(server.pull())
            elif not fetch:
                server.push(update)
            elif settings.pipeline:
                pending = server.exchange_begin(update)
            else:
                version = self._load(server.exchange(update)[1])
        if pending is not None:
            pending()
        if acc.batches:  # steps since the last push: their work is not thrown away
            server.push(self._update(acc.oldest, acc, loss))

    def _run_barrier(self, server: Server) -> None:
        """sync / soft_sync: push the gradient of version v, wait until the server steps past v."""
        version = self._load(server.pull())
        for b in self._batches():
            loss = self._backward(b.x, b.y)
            acc = GradSum()  # one batch: its mean is its gradient (x / 1 == x exactly)
            acc.add(flat_grad(self.model), len(b.y), BatchId(b.epoch, b.position, version))
            update = self._update(version, acc, loss)
            version = self._load(server.exchange(update, version + 1, self._barrier_timeout())[1])

    def _run_average(self, server: Server) -> None:
        """Parameter averaging: local optimizer steps, then push parameters every k steps."""
        opt = self._local_opt
        k = self.spec.server.average_every
        version = self._load(server.pull())
        since, loss = 0, math.nan

        def average() -> int:  # push this replica's parameters, load the average
            params = parameters_to_vector(self.model.parameters()).detach()
            self.pushes += 1
            update = GradUpdate(
                self.spec.worker_id,
                version,
                params,
                since,
                {"loss": loss},
                restore_epoch=self.restore_epoch,
            )
            return self._load(server.exchange(update, version + 1, self._barrier_timeout())[1])

        for b in self._batches():
            opt.zero_grad(set_to_none=True)
            loss = self._backward(b.x, b.y)
            opt.step()
            since += len(b.y)
            if self.steps % k == 0:
                version, since = average(), 0
        if since and time.time() < self._deadline:  # epochs done, not time: every worker
            average()  # took as many steps, so all push this last round of (steps mod k)

    # --- pieces -----------------------------------------------------------------------------

    def gradient(self, params: torch.Tensor, batch: BatchId) -> tuple[torch.Tensor, float, int]:
        """(flat gradient, loss, samples) of a logged batch on ``params`` (``rltrain reapply``):
        the computation :meth:`run` made for it, with the same model, objective and data."""
        self._load(Params(batch.version, params))
        x, y = self.plan.batch(batch.epoch, batch.position)
        loss = self._backward(x, y)
        return flat_grad(self.model), loss, len(y)

    def _batches(self) -> Iterator[Batch]:
        """Shuffled minibatches, until the epoch or time budget runs out."""
        return self.plan.batches(self._skip, lambda: self._deadline)

    def _backward(self, x: torch.Tensor, y: torch.Tensor) -> float:
        t = time.perf_counter()
        for p in self.model.parameters():
            p.grad = None
        loss = objective(self.spec, self.model, x, y)
        loss.backward()
        self._slow.stretch(time.perf_counter() - t)  # an injected straggler
        self.steps += 1
        self.samples += len(y)
        value = float(loss.detach())
        self._log.append((time.time(), self.samples, value))
        return value

    def _load(self, params: Params) -> int:
        """Copy pulled parameters into the local model; returns their version."""
        with torch.no_grad():
            vector_to_parameters(params.values, self.model.parameters())
        self.restore_epoch = params.restore_epoch  # of the parameters held
        return params.version

    def _update(self, version: int, acc: GradSum, loss: float) -> GradUpdate:
        self.pushes += 1
        return acc.to_update(self.spec.worker_id, version, loss, self.restore_epoch)

    def _barrier_timeout(self) -> float:
        left = self._deadline - time.time()
        return max(0.0, min(self.spec.server.barrier_timeout_s, left + 0.5))
