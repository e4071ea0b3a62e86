"""Synthetic gradients: pipeline stages that update without waiting for the backward pass.

Decoupled Neural Interfaces (Jaderberg et al. 2017, "Decoupled Neural Interfaces using
Synthetic Gradients", ICML): stage s of a model cut into K stages (:mod:`rltrain.supervised.
pipeline`) steps as soon as its forward pass is done, with a gradient that a small model
M_s predicts from its output h_s (DNI), or from h_s and the one-hot label (cDNI, the paper's
conditional variant). When the true gradient dL/dh_s arrives from stage s+1, it trains M_s
by L2 regression (the paper's eq. 1, section 2). Stage s+1 sends back the gradient of its
input as it computed it, which for s+1 < K-1 is itself made from M_{s+1}'s prediction: the
paper's bootstrapping; the last stage sends the true loss's.

The stages are then *update-unlocked* (the paper's term): what the rest of rltrain studies
between workers (a gradient computed at other parameters than those it is applied to), here
between the layers of one model. :func:`decoupled` issues each stage's calls so that no stage
waits for a later one: stage s trains M_s on the true gradients of batch b - delay
(:class:`Decoupled`), which the later stages made while it went on (``staleness``: its
updates since the prediction).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from rltrain.supervised.pipeline import PipelineStage, Stages
from rltrain.supervised.worker import WorkerSpec


class SyntheticGradient(nn.Module):
    """M: activations h [B, *shape] (and, for cDNI, one-hot labels [B, classes]) -> the
    predicted dL/dh [B, *shape]. For vectors a linear map (``hidden`` 0) or one hidden ReLU
    layer; for feature maps [C, H, W] the same with 5x5 convolutions that keep the map's size
    (the labels as constant extra channels), as the paper uses convolutional predictors for
    its CNNs: a linear map of a 10k-element map would hold 10^8 weights. (3x3, the next
    layer's reach in rltrain's CNNs and a ninth of the cost, blew the replica of
    tests/test_synthetic.py up to non-finite updates with one hidden layer.) The output layer
    starts at zero, as in the paper, so the first updates are null, not noise."""

    def __init__(self, shape: Sequence[int], classes: int = 0, hidden: int = 0) -> None:
        super().__init__()
        self.shape, self.classes = tuple(shape), classes
        self.spatial = len(self.shape) == 3
        c = self.shape[0] if self.spatial else math.prod(self.shape)

        def layer(a: int, b: int) -> nn.Conv2d | nn.Linear:
            return nn.Conv2d(a, b, 5, padding=2) if self.spatial else nn.Linear(a, b)

        body: list[nn.Module] = [layer(c + classes, hidden), nn.ReLU()] if hidden else []
        out = layer(hidden or c + classes, c)
        nn.init.zeros_(out.weight)
        if out.bias is not None:
            nn.init.zeros_(out.bias)
        self.net = nn.Sequential(*body, out)

    def forward(self, h: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
        x = h if self.spatial else h.flatten(1)  # [B, C, H, W] or [B, width]
        if self.classes:
            assert y is not None, "cDNI predicts from the labels too"
            # class labels one-hot; a toy problem's real-valued targets as they are
            real = y.is_floating_point()
            onehot = y.view(len(y), -1).to(x.dtype) if real else F.one_hot(y, self.classes)
            onehot = onehot.to(x.dtype)  # [B, classes]
            if self.spatial:
                onehot = onehot[:, :, None, None].expand(-1, -1, *x.shape[2:])
            x = torch.cat([x, onehot], 1)
        return self.net(x).view(len(h), *self.shape)


def gradient_error(predicted: torch.Tensor, true: torch.Tensor) -> tuple[float, float]:
    """(cosine, relative L2 |pred - true| / |true|) of a synthetic gradient, over the batch."""
    p, t = predicted.flatten().double(), true.flatten().double()
    norm = float(t.norm())
    cosine = float(F.cosine_similarity(p, t, dim=0)) if norm > 0 and float(p.norm()) > 0 else 0.0
    return cosine, float((p - t).norm()) / norm if norm > 0 else float(p.norm())


def regress(
    module: SyntheticGradient,
    opt: torch.optim.Optimizer,
    h: torch.Tensor,
    y: torch.Tensor | None,
    true_grad: torch.Tensor,
) -> float:
    """One step of M toward the true gradient: the squared error summed over a sample's
    elements, averaged over the batch (the paper's L2 loss); returns it."""
    loss = (module(h, y) - true_grad).pow(2).flatten(1).sum(1).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return float(loss.detach())


class SyntheticStage(PipelineStage):
    """A stage that is not the last: each micro-batch's forward is followed at once by the
    backward of M's prediction through its layers (its parameter gradient, and its input's
    for the stage before), then M learns from the true gradient when :meth:`learn` brings it.

    ``oracle`` (tests): the prediction is replaced by the true gradient, so the stage steps
    exactly as backprop (the update waits for :meth:`learn`)."""

    def __init__(
        self,
        spec: WorkerSpec,
        in_shape: tuple[int, ...],
        cuts: Sequence[int],
        index: int,
        link_s: float = 0.0,
        conditioned: bool = False,
        hidden: int = 0,
        lr: float = 1e-3,
        oracle: bool = False,
    ) -> None:
        """``in_shape``: the model's input (one sample); ``link_s``: as PipelineStage's;
        ``conditioned``: cDNI; ``hidden``: M's hidden units (0: linear); ``lr``: M's Adam
        rate."""
        if index >= len(cuts) - 2:
            raise ValueError(
                f"stage {index} of {len(cuts) - 1}: the last stage computes the true loss; "
                "a synthetic stage predicts its output's gradient for the stages after it"
            )
        super().__init__(spec, in_shape, cuts, index, link_s)
        classes = spec.num_classes if conditioned else 0
        self.module = SyntheticGradient(self.out_shape, classes, hidden)
        self.module_opt = torch.optim.Adam(self.module.parameters(), lr=lr)
        self.oracle = oracle
        # M predicts the gradient in units of the true gradients' RMS (a running mean of it;
        # 0 until the first comes): Adam's steps are of a fixed size whatever the target's
        # scale, and at ~1e-4 per element a first step of M overshot it 26-fold, and the
        # stage's SGD step on that blew the model up
        self.scale = 0.0
        self.updates = 0  # this stage's exchanges: the clock of staleness
        self._made: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]] = {}
        self._input_grads: dict[int, torch.Tensor | None] = {}
        self.staleness: list[int] = []  # per true gradient: updates since its prediction
        self.errors: list[tuple[float, float]] = []  # per true gradient: gradient_error

    def forward_synthetic(self, mb: int, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Micro-batch ``mb``'s output; its parameter gradient from M's prediction (kept for
        the stage's next exchange) and its input's gradient (:meth:`input_grad`)."""
        if self.oracle:
            return self.forward(mb, x)
        x = x.detach().requires_grad_(self.index > 0)
        out = self.layers(x)
        with torch.no_grad():
            predicted = self.module(out, y) * self.scale
        out.backward(predicted)
        self._input_grads[mb] = x.grad if self.index > 0 else None
        self._made[mb] = (out.detach(), y, predicted, self.updates)
        return self.send(out.detach())

    def input_grad(self, mb: int) -> torch.Tensor | None:
        """d loss / d input of micro-batch ``mb`` as this stage computed it (from M's
        prediction: the stage before learns from it, the paper's bootstrapping)."""
        return self.send(self._input_grads.pop(mb))

    def learn(self, mb: int, true_grad: torch.Tensor) -> torch.Tensor | None:
        """The true d loss / d output of micro-batch ``mb``: one regression step of M toward
        it (counted: staleness, error). Oracle: the backward itself; its input's gradient."""
        if self.oracle:
            return self.backward(mb, true_grad)
        out, y, predicted, made_at = self._made.pop(mb)
        self.staleness.append(self.updates - made_at)
        self.errors.append(gradient_error(predicted, true_grad))
        rms = float(true_grad.pow(2).mean().sqrt())
        self.scale = rms if not self.scale else 0.99 * self.scale + 0.01 * rms
        if self.scale > 0:
            regress(self.module, self.module_opt, out, y, true_grad / self.scale)
        return None

    def exchange(self, worker_id: int, samples: int, timeout: float) -> tuple[int, float]:
        self.updates += 1
        return super().exchange(worker_id, samples, timeout)

    def reset(self) -> None:
        super().reset()
        self._made.clear()
        self._input_grads.clear()

    def trace(self) -> list[tuple[int, float, float]]:
        """Per true gradient so far: (staleness, cosine, relative L2)."""
        return [(s, c, r) for s, (c, r) in zip(self.staleness, self.errors, strict=True)]

    def counters(self) -> dict[str, float | None]:
        """Mean staleness and gradient error of the true gradients seen so far."""
        return synthetic_means([(self.index, *row) for row in self.trace()])


def synthetic_means(rows: Sequence[tuple[int, int, float, float]]) -> dict[str, float | None]:
    """Means of (stage, staleness, cosine, relative L2) rows (WorkerReport.synthetic)."""
    if not rows:
        return {}
    n = len(rows)
    means: dict[str, float | None] = {
        "true_gradients": n,
        "staleness": round(sum(r[1] for r in rows) / n, 3),
        "cosine": round(sum(r[2] for r in rows) / n, 4),
        "relative_l2": round(sum(r[3] for r in rows) / n, 4),
    }
    stages = sorted({r[0] for r in rows})
    for stage in stages if len(stages) > 1 else ():  # each predictor's own (explore114)
        of = synthetic_means([r for r in rows if r[0] == stage])
        means |= {f"{k}_stage{stage}": v for k, v in of.items() if k != "true_gradients"}
    return means


def decoupled(
    stages: Stages,
    x: torch.Tensor,
    y: torch.Tensor,
    micro: int,
    owed: Sequence[tuple[int, int, Any]],
    batch: int,
    oracle: bool = False,
) -> tuple[list[tuple[int, int, Any]], list[Any]]:
    """One minibatch through stages that update on synthetic gradients (all but the last).

    Each micro-batch goes forward through every stage; the last computes the loss and its
    backward. The true gradients this makes are owed to the stages before: ``owed`` (from the
    an earlier call) is paid first, so that no stage's queue holds a call that waits for a
    later stage's work on this batch. Returns what this batch owes, (stage, micro-batch key,
    the gradient's handle) each, and the handles of the calls that paid ``owed`` (nothing
    waits for them here). ``oracle`` (stages built with it): each true gradient goes back at
    once, stage by stage, as backprop (GPipe's backward); nothing is owed."""
    xs, ys = [c.clone() for c in x.chunk(micro)], [c.clone() for c in y.chunk(micro)]
    k = stages.count
    done = [stages.call(s, "learn", key, g) for s, key, g in owed]
    new: list[tuple[int, int, Any]] = []
    for i, (xi, yi) in enumerate(zip(xs, ys, strict=True)):
        key, h = batch * micro + i, xi
        for s in range(k - 1):
            h = stages.call(s, "forward_synthetic", key, h, yi)
        h = stages.call(k - 1, "forward", key, h)
        g = stages.call(k - 1, "loss", key, yi, len(yi) / len(y))
        if oracle:
            for s in reversed(range(k - 1)):
                g = stages.call(s, "learn", key, g)
            done.append(g)
            continue
        new.append((k - 2, key, g))  # the true gradient of stage k-2's output
        for s in range(k - 2):  # stage s+1's input gradient, made from its own M
            new.append((s, key, stages.call(s + 1, "input_grad", key)))
    return new, done


class Decoupled:
    """The :class:`~rltrain.supervised.replica.Schedule` of synthetic-gradient stages:
    :func:`decoupled` batch after batch, the true gradients a batch owes paid ``delay``
    batches later (``model.synthetic_delay``), the last batches' at the end (so the counters
    cover every true gradient).

    Why later than the next batch: stage s's queue runs in order, so a call that learns from
    batch b's true gradient waits until the last stage has computed it. Paid at the next
    batch, it holds stage 0 back to the last stage's pace every batch, with a link's round
    trip on top, which costs the decoupling all it gains (docs/supervised.md). Paid ``delay``
    >= 2 batches later, each stage runs at its own pace, as the paper's update-unlocked stages
    (section 2); the predictors then learn from gradients ``delay`` updates stale."""

    def __init__(self, oracle: bool = False, delay: int = 2) -> None:
        if delay < 1:
            raise ValueError(f"delay={delay}: the true gradient comes one batch later at least")
        self.oracle, self.delay, self.batch = oracle, delay, 0
        self.owed: deque[list[tuple[int, int, Any]]] = deque()  # per batch, oldest first

    @property
    def ahead(self) -> int:
        """The lead runs as far ahead as the payments allow."""
        return self.delay

    def step(self, stages: Stages, x: torch.Tensor, y: torch.Tensor, micro: int) -> list[Any]:
        due = self.owed.popleft() if len(self.owed) >= self.delay else []
        owes, paid = decoupled(stages, x, y, micro, due, self.batch, self.oracle)
        self.owed.append(owes)
        self.batch += 1
        return paid

    def finish(self, stages: Stages) -> None:
        owed = [g for batch in self.owed for g in batch]
        stages.get([stages.call(s, "learn", key, g) for s, key, g in owed])
        self.owed.clear()

    def reset(self) -> None:
        self.owed.clear()  # the true gradients of lost batches: never to come

    def counters(self, stages: Stages) -> tuple[tuple[int, int, float, float], ...]:
        """(stage, staleness, cosine, relative L2) of every true gradient each synthetic
        stage has learned from (:attr:`rltrain.supervised.worker.WorkerReport.synthetic`)."""
        traces = stages.get([stages.call(s, "trace") for s in range(stages.count - 1)])
        return tuple((s, n, c, r) for s, rows in enumerate(traces) for n, c, r in rows)
