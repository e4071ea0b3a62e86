"""Model parallelism: the supervised model's layers split over K stage processes (GPipe).

DistBelief's other half (Dean et al. 2012, section 3): a model too large or too slow for one
machine is partitioned, and the partitions pass activations forward and gradients back.
GPipe (Huang et al. 2019) cuts each minibatch into M micro-batches so that stage s works on
micro-batch i while stage s+1 works on micro-batch i-1; the gradients of the M micro-batches
add up to the minibatch's, so the step is exactly the unsplit model's.

Each stage holds its slice of the parameters and exchanges it with its own server shard (the
shards are cut at the stage boundaries), so model parallelism combines with the data-parallel
rules: W replicas of K stages each push to K shards, every shard seeing W pushers.

Plain Python: :class:`PipelineStage` and the replica's lead
(:class:`rltrain.supervised.replica.PipelineWorker`) run in this process in the
tests, and as Ray processes in ``rltrain bench`` (:func:`rltrain.supervised.pipeline_mode.
run_pipeline_mode` places them with
:class:`rltrain.runtime.ray.stages.RayStages`).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence
from typing import Any, Protocol

import torch
from torch import nn
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from rltrain.config import ConfigError
from rltrain.ps.server import Server
from rltrain.records import GradUpdate, Params
from rltrain.supervised.models import DeepLinear, Linear, SmallCNN, SmallResNet
from rltrain.supervised.toys import objective_loss
from rltrain.supervised.worker import (
    WorkerSpec,
    flat_grad,
    make_model,
)


class BatchLost(Exception):
    """A stage's exchange refused: its batch is incomplete because a stage of the replica was
    lost during it (the lead then recovers the replica, as from the loss itself)."""


def layers(model: nn.Module) -> list[nn.Module]:
    """The model as a sequence whose composition is its forward pass, its parameters in
    ``model.parameters()`` order (so the stages' slices concatenate to the flat vector)."""
    if isinstance(model, SmallCNN):
        return [*model.features, *model.head]
    if isinstance(model, SmallResNet):
        return [model.stem, *model.blocks, model.head]
    if isinstance(model, Linear):
        return [model]
    if isinstance(model, DeepLinear):
        return [nn.Flatten(), *model.layers]
    raise ConfigError(f"model.stages: model {type(model).__name__} has no layer sequence")


def split_points(costs: Sequence[float], sizes: Sequence[int], k: int) -> list[int]:
    """Where to cut layers of these ``costs`` (time) and ``sizes`` (parameters) into ``k``
    contiguous stages, each holding parameters (each is a server shard), so that the slowest
    stage is fastest (a pipeline runs at its slowest stage's pace): k + 1 indices from 0."""
    carrying = [i for i, n in enumerate(sizes) if n > 0]
    if k > len(carrying):
        raise ConfigError(
            f"model.stages={k}: the model has {len(carrying)} layer(s) with parameters to cut; "
            f"allowed: 1 to {len(carrying)}"
        )
    n = len(costs)
    cost, size = [0.0], [0]
    for c, s in zip(costs, sizes, strict=True):
        cost.append(cost[-1] + c)
        size.append(size[-1] + s)
    # best[j][i]: (slowest stage, cuts) for layers[:i] in j stages, each holding parameters
    best: list[dict[int, tuple[float, list[int]]]] = [{0: (0.0, [0])}]
    for j in range(1, k + 1):
        row: dict[int, tuple[float, list[int]]] = {}
        for i in range(1, n + 1):
            for h, (worst, cuts) in best[j - 1].items():
                load = cost[i] - cost[h]
                # ties go to the later cut: a layer without parameters (ReLU, pooling) stays
                # with the layer before it
                if h < i and size[i] > size[h] and (i not in row or max(worst, load) <= row[i][0]):
                    row[i] = (max(worst, load), [*cuts, i])
        best.append(row)
    return best[k][n][1]


def layer_costs(seq: Sequence[nn.Module], in_shape: tuple[int, ...], batch: int) -> list[float]:
    """Seconds of each layer's forward pass on a batch (the median of 5): the backward pass
    costs about twice the forward, so the forward's share stands for the whole step's."""
    times: list[list[float]] = [[] for _ in seq]
    with torch.no_grad():
        for _ in range(5):
            h = torch.randn(batch, *in_shape)
            for i, m in enumerate(seq):
                t = time.perf_counter()
                h = m(h)
                times[i].append(time.perf_counter() - t)
    return [sorted(t)[len(t) // 2] for t in times]


def plan_stages(spec: WorkerSpec, in_shape: tuple[int, ...], k: int) -> list[int]:
    """The cut points of ``k`` stages, balanced by the layers' measured time (once, by the
    driver: every stage process must cut the same way)."""
    seq = layers(make_model(spec, in_shape))
    sizes = [sum(p.numel() for p in m.parameters()) for m in seq]
    if k > sum(n > 0 for n in sizes):  # refused before anything is timed
        return split_points([0.0] * len(seq), sizes, k)
    return split_points(layer_costs(seq, in_shape, spec.batch_size), sizes, k)


def stage_sizes(spec: WorkerSpec, in_shape: tuple[int, ...], cuts: Sequence[int]) -> list[int]:
    """Parameters of each stage: the server's shard sizes."""
    seq = layers(make_model(spec, in_shape))
    return [
        sum(p.numel() for m in seq[a:b] for p in m.parameters())
        for a, b in zip(cuts, cuts[1:], strict=False)
    ]


def out_shape(seq: Sequence[nn.Module], in_shape: tuple[int, ...]) -> tuple[int, ...]:
    """The shape of one sample's activations after the layers ``seq`` (run on copies: a
    batch-norm layer's running statistics must not see the probe)."""
    with torch.no_grad():
        h = torch.zeros(2, *in_shape)  # (2: a batch-norm layer needs more than one)
        for m in copy.deepcopy(list(seq)):
            h = m(h)
    return tuple(h.shape[1:])


class PipelineStage:
    """Stage ``index``, layers ``cuts[index]`` to ``cuts[index + 1]``: forward and backward of
    its layers per micro-batch, and its slice's exchange with its server shard. The last stage
    also computes the loss."""

    def __init__(
        self,
        spec: WorkerSpec,
        in_shape: tuple[int, ...],
        cuts: Sequence[int],
        index: int,
        link_s: float = 0.0,
    ) -> None:
        """``link_s``: seconds each activation or gradient this stage sends to another stage
        takes (``model.link_ms``: a slow link, simulated by the sender waiting)."""
        torch.set_num_threads(spec.threads)
        self.spec, self.index, self.link_s = spec, index, link_s
        self.has_next = index < len(cuts) - 2
        seq = layers(make_model(spec, in_shape))
        self.layers = nn.Sequential(*seq[cuts[index] : cuts[index + 1]])
        self.out_shape = out_shape(seq[: cuts[index + 1]], in_shape)  # one sample's output
        self.server: Server | None = None
        self.version = 0
        self.restore_epoch = 0  # of the parameters held (GradUpdate.restore_epoch)
        self._saved: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self._loss = 0.0

    def connect(self, server: Server) -> int:
        """Take this stage's server (its shard alone) and pull from it; its version."""
        self.server = server
        return self._load(server.pull())

    def reset(self) -> None:
        """Forget the batch in flight (a stage of the replica was lost mid-batch): its saved
        activations and its gradient so far."""
        self._saved.clear()
        self.layers.zero_grad(set_to_none=True)
        self._loss = 0.0

    def forward(self, mb: int, x: torch.Tensor) -> torch.Tensor:
        """Micro-batch ``mb``'s activations [b, ...] -> this stage's output (kept for backward)."""
        x = x.detach().requires_grad_(self.index > 0)
        out = self.layers(x)
        self._saved[mb] = (x, out)
        return self.send(out.detach(), self.has_next)

    def send(self, t: Any, to_another: bool = True) -> Any:
        """``t`` as it leaves for another stage, after the link's delay (``link_s``)."""
        if self.link_s and to_another and t is not None:
            time.sleep(self.link_s)
        return t

    def backward(self, mb: int, grad_out: torch.Tensor) -> torch.Tensor | None:
        """d loss / d output of micro-batch ``mb`` -> d loss / d input (None on stage 0);
        the parameter gradients add up over the micro-batches."""
        x, out = self._saved.pop(mb)
        out.backward(grad_out)
        return self.send(x.grad) if self.index > 0 else None

    def loss(self, mb: int, y: torch.Tensor, weight: float) -> Any:
        """Last stage, after its forward of micro-batch ``mb``: the loss times the micro-batch's
        share of the batch, backward; d loss / d input for the stage before."""
        inp, out = self._saved.pop(mb)
        loss = objective_loss(self.spec.objective, out, y) * weight
        loss.backward()
        self._loss += float(loss.detach())
        return self.send(inp.grad) if self.index > 0 else None

    def grad(self) -> tuple[torch.Tensor, float]:
        """(the flat gradient summed since the last call, the loss) and zero them; with the
        objective's L2 term on this stage's slice, as :func:`objective` adds it."""
        g = flat_grad(self.layers).clone()
        if self.spec.l2:
            g += self.spec.l2 * self.values()
        self.layers.zero_grad(set_to_none=True)
        loss, self._loss = self._loss, 0.0
        return g, loss

    def exchange(self, worker_id: int, samples: int, timeout: float) -> tuple[int, float]:
        """Push this step's gradient slice to the shard and load what it returns: (version,
        loss). Barrier rules wait (up to ``timeout`` s) for the shard to step past it.
        Refused (:class:`BatchLost`) for a batch that a lost stage left incomplete: a micro-
        batch forward without its backward, or a restarted stage's calls before it connected
        (on the process runtime, calls that waited for another stage's output reach the new
        process), so that the shard never gets a part of a batch's gradient."""
        if self.server is None:
            raise BatchLost(f"stage {self.index}: restarted in the batch, not connected yet")
        if self._saved:
            raise BatchLost(
                f"stage {self.index}: {len(self._saved)} micro-batch(es) without their backward"
            )
        g, loss = self.grad()
        update = GradUpdate(
            worker_id, self.version, g, samples, {"loss": loss}, restore_epoch=self.restore_epoch
        )
        wait = self.version + 1 if self.spec.update_rule.barrier else 0
        return self._load(self.server.exchange(update, wait, timeout)[1]), loss

    def values(self) -> torch.Tensor:
        return parameters_to_vector(self.layers.parameters()).detach().clone()

    def _load(self, params: Params) -> int:
        vector_to_parameters(params.values, self.layers.parameters())
        self.version, self.restore_epoch = params.version, params.restore_epoch
        return params.version


class Stages(Protocol):
    """K stages of one replica: ``call`` starts a method (its arguments may be the results of
    other calls), ``get`` waits for results. In-process: :class:`LocalStages`."""

    count: int

    def call(self, stage: int, method: str, *args: Any) -> Any: ...

    def get(self, handles: Sequence[Any]) -> list[Any]: ...


class LocalStages:
    """:class:`Stages` in this process: each call runs at once (no overlap; the same math)."""

    def __init__(self, stages: Sequence[PipelineStage]) -> None:
        self.stages, self.count = list(stages), len(stages)

    def call(self, stage: int, method: str, *args: Any) -> Any:
        return getattr(self.stages[stage], method)(*args)

    def get(self, handles: Sequence[Any]) -> list[Any]:
        return list(handles)


def gpipe(stages: Stages, x: torch.Tensor, y: torch.Tensor, micro: int) -> list[Any]:
    """One minibatch through the pipeline: every micro-batch forward, then every one backward
    (GPipe's schedule). Calls are issued without waiting, so with stage processes stage s runs
    micro-batch i while stage s+1 runs i-1. Returns the last backward calls: once they are
    done, the stages hold the minibatch's gradient (a stage's later calls run after them)."""
    # copies: a view would carry the whole batch's storage to each stage process
    xs, ys = [c.clone() for c in x.chunk(micro)], [c.clone() for c in y.chunk(micro)]
    k = stages.count
    for i, xi in enumerate(xs):
        h = xi
        for s in range(k):
            h = stages.call(s, "forward", i, h)
    done = []
    for i in reversed(range(len(xs))):  # the last micro-batch's activations are freshest
        g = stages.call(k - 1, "loss", i, ys[i], len(ys[i]) / len(y))
        for s in reversed(range(k - 1)):
            g = stages.call(s, "backward", i, g)
        done.append(g)
    return done
