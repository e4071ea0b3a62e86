"""Evaluating a bench's snapshots: test accuracy (or a toy problem's distance to its optimum)
of every snapshot of a mode, and the targets whose time to reach the report gives."""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.nn.utils import vector_to_parameters

from rltrain import signals
from rltrain.progress import Progress
from rltrain.rundir import write_atomic_with
from rltrain.supervised.config import BenchConfig
from rltrain.supervised.models import linear_map
from rltrain.supervised.modes import ModeTrace, initial_params, worker_specs
from rltrain.supervised.splits import SplitDataset
from rltrain.supervised.toys import TOY_PROBLEMS, relative_distance
from rltrain.supervised.worker import inputs, make_model, targets


@dataclass(frozen=True)
class Point:
    """One evaluated snapshot."""

    t: float
    samples: int
    accuracy: float  # nan where the problem has no classes (toy_quadratic)
    train_loss: float
    updates: int = 0  # the server's version: optimizer steps so far
    distance: float = math.nan  # |w - w*| / |w0 - w*| (toy problems; nan elsewhere)
    validation: float = math.nan  # accuracy on the held-out training samples (data.validation)


@dataclass(frozen=True)
class Target:
    """A level whose time, samples and updates to reach are reported: a test accuracy to
    reach or exceed (eval.targets), or a relative distance to the optimum to reach or go
    below (eval.distance_targets, the toy problems)."""

    metric: str  # accuracy | distance
    value: float

    @property
    def key(self) -> str:
        return f"{100 * self.value:g}%" if self.metric == "accuracy" else f"dist {self.value:g}"

    def reached(self, p: Point) -> bool:
        if self.metric == "accuracy":
            return p.accuracy >= self.value
        return p.distance <= self.value


def targets_of(cfg: BenchConfig) -> list[Target]:
    if cfg.data.dataset in TOY_PROBLEMS:
        return [Target("distance", v) for v in cfg.eval.distance_targets]
    return [Target("accuracy", v) for v in cfg.eval.targets]


@torch.no_grad()
def accuracy(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, batch: int = 1000) -> float:
    """Top-1 accuracy of ``model`` on inputs ``x`` [N, ...] and labels ``y`` [N]: int64 class
    labels (argmax of the outputs), or float 0/1 labels of a single logit (its sign)."""
    model.eval()
    correct = 0
    for i in range(0, len(y), batch):
        out, labels = model(x[i : i + batch]), y[i : i + batch]
        guess = out.argmax(1) if labels.dtype == torch.int64 else (out.squeeze(1) > 0).float()
        correct += int((guess == labels).sum())
    return correct / max(1, len(y))


def samples_at(trace: ModeTrace, t: float) -> int:
    """Samples all workers had processed by time ``t`` (from their step logs). A worker
    killed mid-call takes its log with it: then the server's count of the samples its
    updates covered (``ServerStats.samples``, which a killed worker's pushes are in) is the
    larger, and the one a point takes."""
    total = 0
    for r in trace.reports:
        times = [row[0] for row in r.log]
        i = bisect.bisect_right(times, t)
        total += r.log[i - 1][1] if i else 0
    return total


def loss_between(trace: ModeTrace, t0: float, t1: float) -> float:
    """Mean training-batch loss over all workers' steps in (t0, t1]."""
    losses = [loss for r in trace.reports for t, _, loss in r.log if t0 < t <= t1]
    return sum(losses) / len(losses) if losses else math.nan


def eval_subset(
    cfg: BenchConfig, x: torch.Tensor, y: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``eval.test_samples`` test samples every snapshot is scored on: a random subset
    drawn under the run's seed, the same for every mode. Not the first N: MNIST's first 5,000
    test images are the cleaner, easier half (LeCun's MNIST page), so a prefix scores high."""
    n = cfg.eval.test_samples
    if not n or n >= len(y):
        return x, y
    idx = torch.randperm(len(y), generator=torch.Generator().manual_seed(cfg.seed))[:n]
    return x[idx], y[idx]


def end_to_end(model: torch.nn.Module) -> torch.Tensor:
    """A toy problem's w: the model's linear map (:func:`rltrain.supervised.models.linear_map`)."""
    w = linear_map(model)
    assert w is not None, "a toy problem's model is linear"
    return w


HURRIED = 8
"""Snapshots evaluated after a Ctrl-C (the bench's first defers it to the evaluation's end:
the mode has trained, and keeps its results)."""


def _order(n: int, hurry: Callable[[], bool]) -> Iterator[int]:
    """0 .. n-1; once ``hurry()``, HURRIED of those left, evenly spaced, the last included."""
    i = 0
    while i < n:
        yield i
        if hurry():
            left = n - 1 - i
            m = min(HURRIED, left)
            yield from (i + round(left * (k + 1) / m) for k in range(m))
            return
        i += 1


def evaluate(
    cfg: BenchConfig,
    data: SplitDataset,
    trace: ModeTrace,
    on_progress: Callable[[int, int], None] = lambda i, n: None,
    hurry: Callable[[], bool] = lambda: False,
    save_to: Path | None = None,
) -> tuple[ModeTrace, list[Point]]:
    """Test accuracy of every snapshot of a mode (nan for regression), and for the toy
    problems its relative distance to the optimum. Once ``hurry()`` (a Ctrl-C), only
    :data:`HURRIED` more of them, spread to the last: the mode keeps its results, with a
    coarser curve, in seconds. Returns the trace with the snapshots evaluated, and theirs.
    ``save_to``: where the last snapshot's model is saved (:func:`save_model`; not where
    ``eval.save_models`` is false)."""
    spec = worker_specs(cfg, "baseline", data, 1)[0]
    x, y = eval_subset(cfg, inputs(data.test, spec), targets(data.test))
    held = data.validation
    vx, vy = (inputs(held, spec), targets(held)) if held is not None else (None, None)
    model = make_model(spec, x.shape[1:])
    classes = data.objective != "squared"
    start = initial_params(cfg, data)
    start_map = None
    if data.optimum is not None:  # a toy problem: distances of the end-to-end map
        vector_to_parameters(start, model.parameters())
        start_map = end_to_end(model)
    points, prev_t, kept = [], -1.0, []
    for i in _order(len(trace.snapshots), hurry):
        snap = trace.snapshots[i]
        kept.append(snap)
        vector_to_parameters(snap.params, model.parameters())
        acc = accuracy(model, x, y) if classes else math.nan
        dist = math.nan
        # a toy problem (a factored map's product)
        if start_map is not None and data.optimum is not None:
            dist = relative_distance(end_to_end(model), data.optimum, start_map)
            dist = dist if math.isfinite(dist) else math.inf  # non-finite parameters: diverged
        loss = loss_between(trace, prev_t, snap.t)
        seen = max(samples_at(trace, snap.t), snap.stats.samples)  # (see samples_at)
        val = accuracy(model, vx, vy) if vx is not None and vy is not None else math.nan
        points.append(Point(snap.t, seen, acc, loss, snap.stats.version, dist, val))
        prev_t = snap.t
        on_progress(i + 1, len(trace.snapshots))
    if save_to is not None and cfg.eval.save_models:
        save_model(save_to, model, trace, spec, tuple(x.shape[1:]))
    return dataclasses.replace(trace, snapshots=tuple(kept)), points


def save_model(
    path: Path, model: torch.nn.Module, trace: ModeTrace, spec: Any, in_shape: tuple[int, ...]
) -> None:
    """The mode's final model (its last snapshot's parameters) as a ``state_dict`` with what
    rebuilds and feeds it (explore106: a bench kept no trained model to inspect):
    ``build_model(saved["model"], saved["in_shape"], saved["num_classes"])`` of
    :mod:`rltrain.supervised.models`, its inputs normalised by ``mean`` and ``std``."""
    last = trace.snapshots[-1]
    vector_to_parameters(last.params, model.parameters())
    state = {
        "state_dict": model.state_dict(),
        "mode": trace.mode,
        "model": spec.model,
        "in_shape": in_shape,
        "num_classes": spec.num_classes,
        "mean": tuple(spec.mean),
        "std": tuple(spec.std),
        "version": last.stats.version,
        "seconds": last.t,
    }
    path.parent.mkdir(exist_ok=True)
    write_atomic_with(path, lambda f: torch.save(state, f))


def progress_hooks(prog: Progress) -> tuple[Callable[[int, int], None], Callable[[], bool]]:
    """The progress line's updates while a mode's snapshots are evaluated (``k`` of ``n``),
    and whether a Ctrl-C came meanwhile (:func:`rltrain.signals.pending`), said once with the
    snapshots still to evaluate (it said 8 where 4 were left)."""
    at, said = [0, 0], [False]

    def on_progress(k: int, n: int) -> None:
        at[:] = [k, n]
        prog.update(k / n, f"evaluating {k}/{n}")

    def hurry() -> bool:
        if signals.pending() and not said[0]:
            said[0] = True
            more = min(HURRIED, at[1] - at[0])
            prog.note(
                f"Ctrl-C: {more} more snapshot{'s' * (more != 1)} for its results (again: at once)"
            )
        return signals.pending()

    return on_progress, hurry
