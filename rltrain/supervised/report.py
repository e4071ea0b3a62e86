"""Evaluate a bench's snapshots and write its outputs.

TensorBoard (one sub-run per mode under ``tb/``), ``results.csv``, ``results.md``,
the plots of :func:`plot_names` and ``summary.json``.
"""

from __future__ import annotations

import bisect
import csv
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.nn.utils import vector_to_parameters
from torch.utils.tensorboard import SummaryWriter

from rltrain.config import to_dict
from rltrain.records import STALENESS_BINS
from rltrain.rundir import write_atomic, write_summary
from rltrain.supervised.config import BenchConfig
from rltrain.supervised.datasets import SplitDataset
from rltrain.supervised.modes import ModeTrace, initial_params, worker_specs
from rltrain.supervised.plots import plot_curves, plot_names
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


DIVERGED = 1e3
"""A toy run whose final distance to the optimum is above this many times its start diverged."""


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


@dataclass(frozen=True)
class ModeResult:
    """One row of results.csv / results.md."""

    mode: str
    workers: int
    final_accuracy: float
    best_accuracy: float  # the best snapshot's, chosen on the test set: optimistic
    train_seconds: float
    startup_seconds: float
    samples: int
    samples_per_s: float
    updates_applied: int
    dropped: int
    rejected: int
    mean_staleness: float
    seconds_to: dict[str, float | None] = field(default_factory=dict)
    samples_to: dict[str, int | None] = field(default_factory=dict)
    us_per_sample_to: dict[str, float | None] = field(default_factory=dict)
    """Hardware efficiency: training microseconds per sample until each target was reached
    (seconds_to = samples_to x us_per_sample_to / 1e6, exactly)."""
    updates_to: dict[str, int | None] = field(default_factory=dict)
    """Server versions (optimizer steps) until each target was reached."""
    bytes_pushed: int = 0  # update values the shards received, as they travelled
    bytes_pulled: int = 0  # parameter values the shards sent
    final_distance: float | None = None  # toy problems: |w - w*| / |w0 - w*| at the end
    diverged: bool = False  # toy problems: the distance ended above DIVERGED (or non-finite)
    faults: dict[str, int] = field(default_factory=dict)  # FaultCounters of the mode


# ---------------------------------------------------------------------------------------------
# evaluation


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
    """Samples all workers had processed by time ``t`` (from their step logs)."""
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


def evaluate(
    cfg: BenchConfig,
    data: SplitDataset,
    trace: ModeTrace,
    on_progress: Callable[[int, int], None] = lambda i, n: None,
) -> list[Point]:
    """Test accuracy of every snapshot of a mode (nan for regression), and for the toy
    problems its relative distance to the optimum."""
    spec = worker_specs(cfg, "baseline", data, 1)[0]
    x, y = eval_subset(cfg, inputs(data.test, spec), targets(data.test))
    model = make_model(spec, x.shape[1:])
    classes = data.objective != "squared"
    start = initial_params(cfg, data)
    points, prev_t = [], -1.0
    for i, snap in enumerate(trace.snapshots):
        vector_to_parameters(snap.params, model.parameters())
        acc = accuracy(model, x, y) if classes else math.nan
        dist = math.nan
        if data.optimum is not None:
            dist = relative_distance(snap.params, data.optimum, start)
            dist = dist if math.isfinite(dist) else math.inf  # non-finite parameters: diverged
        loss = loss_between(trace, prev_t, snap.t)
        points.append(Point(snap.t, samples_at(trace, snap.t), acc, loss, snap.stats.version, dist))
        prev_t = snap.t
        on_progress(i + 1, len(trace.snapshots))
    return points


def summarize(cfg: BenchConfig, trace: ModeTrace, points: Sequence[Point]) -> ModeResult:
    last = trace.snapshots[-1].stats
    samples = sum(r.samples for r in trace.reports)
    seconds_to: dict[str, float | None] = {}
    samples_to: dict[str, int | None] = {}
    us_per_sample_to: dict[str, float | None] = {}
    updates_to: dict[str, int | None] = {}
    for target in targets_of(cfg):
        hit = next((p for p in points if target.reached(p)), None)
        seconds_to[target.key] = round(hit.t, 2) if hit else None
        samples_to[target.key] = hit.samples if hit else None
        updates_to[target.key] = hit.updates if hit else None
        per = hit.t / hit.samples * 1e6 if hit and hit.samples else None
        us_per_sample_to[target.key] = None if per is None else round(per, 3)
    final_distance = points[-1].distance
    return ModeResult(
        mode=trace.mode,
        workers=trace.workers,
        final_accuracy=points[-1].accuracy,
        best_accuracy=max((p.accuracy for p in points), default=math.nan),
        train_seconds=round(trace.train_s, 2),
        startup_seconds=round(trace.startup_s, 2),
        samples=samples,
        samples_per_s=round(samples / trace.train_s, 1) if trace.train_s > 0 else 0.0,
        updates_applied=last.applied,
        dropped=last.dropped,
        rejected=last.rejected,
        mean_staleness=round(last.mean_staleness, 3),
        seconds_to=seconds_to,
        samples_to=samples_to,
        us_per_sample_to=us_per_sample_to,
        updates_to=updates_to,
        bytes_pushed=last.bytes_pushed,
        bytes_pulled=last.bytes_pulled,
        final_distance=None if math.isnan(final_distance) else final_distance,
        diverged=final_distance > DIVERGED,
        faults=asdict(trace.faults),
    )


# ---------------------------------------------------------------------------------------------
# outputs


def write_tensorboard(
    tb_dir: Path, cfg: BenchConfig, trace: ModeTrace, points: Sequence[Point]
) -> None:
    """Scalars per snapshot (step = samples seen, wall time = training time) under tb/<mode>/."""
    writer = SummaryWriter(str(tb_dir / trace.mode))
    writer.add_text("config", "```\n" + repr(to_dict(cfg)) + "\n```")
    base = 1_000_000_000.0  # a fixed epoch: TensorBoard's 'relative' axis then shows training time
    prev_hist = [0] * STALENESS_BINS
    prev: tuple[float, int] = (0.0, 0)
    for snap, p in zip(trace.snapshots, points, strict=True):
        wall, step = base + p.t, p.samples
        if not math.isnan(p.accuracy):
            writer.add_scalar("supervised/test_accuracy", p.accuracy, step, walltime=wall)
        if not math.isnan(p.distance):
            writer.add_scalar("supervised/distance_to_optimum", p.distance, step, walltime=wall)
        if not math.isnan(p.train_loss):
            writer.add_scalar("supervised/train_loss", p.train_loss, step, walltime=wall)
        if p.t > prev[0]:
            writer.add_scalar(
                "perf/samples_per_s", (p.samples - prev[1]) / (p.t - prev[0]), step, walltime=wall
            )
        writer.add_scalar("ps/version", snap.stats.version, step, walltime=wall)
        writer.add_scalar("ps/dropped", snap.stats.dropped, step, walltime=wall)
        writer.add_scalar("ps/rejected", snap.stats.rejected, step, walltime=wall)
        writer.add_scalar("net/bytes_pushed", snap.stats.bytes_pushed, step, walltime=wall)
        writer.add_scalar("net/bytes_pulled", snap.stats.bytes_pulled, step, walltime=wall)
        hist = list(snap.stats.staleness_hist)
        delta = [a - b for a, b in zip(hist, prev_hist, strict=True)]
        _staleness_histogram(writer, delta, step, wall)
        prev_hist, prev = hist, (p.t, p.samples)
    if trace.faults.total() and points:
        for tag, value in trace.faults.tags().items():
            writer.add_scalar(tag, value, points[-1].samples, walltime=base + points[-1].t)
    writer.close()


def _staleness_histogram(writer: SummaryWriter, counts: list[int], step: int, wall: float) -> None:
    """Staleness of the updates applied since the last snapshot, as a TensorBoard histogram."""
    num = sum(counts)
    if num <= 0:
        return
    values = range(len(counts))
    used = [i for i, c in enumerate(counts) if c]
    writer.add_histogram_raw(
        "ps/staleness",
        min=float(used[0]),
        max=float(used[-1]),
        num=num,
        sum=float(sum(v * c for v, c in zip(values, counts, strict=True))),
        sum_squares=float(sum(v * v * c for v, c in zip(values, counts, strict=True))),
        bucket_limits=[v + 0.5 for v in values],
        bucket_counts=counts,
        global_step=step,
        walltime=wall,
    )


def _flat_row(r: ModeResult) -> dict[str, Any]:
    nested = ("seconds_to", "samples_to", "us_per_sample_to", "updates_to", "faults")
    row = {k: v for k, v in asdict(r).items() if k not in nested}
    for name in nested:
        for key, v in getattr(r, name).items():
            row[f"{name}_{key}" if name != "faults" else f"faults_{key}"] = v
    return row


def write_csv(path: Path, results: Sequence[ModeResult]) -> None:
    rows = [_flat_row(r) for r in results]
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows({k: ("" if v is None else v) for k, v in row.items()} for row in rows)


def markdown_table(cfg: BenchConfig, results: Sequence[ModeResult]) -> str:
    keys = [t.key for t in targets_of(cfg)]
    toy = cfg.data.dataset in TOY_PROBLEMS
    first = ["final dist"] if toy else []
    first += [] if cfg.data.dataset == "toy_quadratic" else ["final acc"]
    head = ["mode", *first, *[f"s to {k}" for k in keys], *[f"samples to {k}" for k in keys]]
    head += [f"updates to {k}" for k in keys] if toy else []
    head += ["samples/s", "updates", "dropped", "rejected", "mean staleness", "MB pushed"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def fmt(v: float | int | None, spec: str) -> str:
        return "not reached" if v is None else format(v, spec)

    for r in results:
        cells = [r.mode]
        cells += (["diverged"] if r.diverged else [fmt(r.final_distance, ".2e")]) if toy else []
        cells += [] if cfg.data.dataset == "toy_quadratic" else [f"{r.final_accuracy:.4f}"]
        cells += [fmt(r.seconds_to[k], ".1f") for k in keys]
        cells += [fmt(r.samples_to[k], ",") for k in keys]
        cells += [fmt(r.updates_to[k], ",") for k in keys] if toy else []
        cells += [f"{r.samples_per_s:,.0f}", f"{r.updates_applied:,}", str(r.dropped)]
        cells += [str(r.rejected), f"{r.mean_staleness:.2f}", f"{r.bytes_pushed / 1e6:,.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def efficiency_table(cfg: BenchConfig, results: Sequence[ModeResult]) -> str:
    """Time to the first target split into statistical and hardware efficiency, each against
    the reference mode (``baseline`` if it ran, else the first): time ratio = samples ratio x
    speed ratio, exactly, since seconds_to = samples_to x seconds per sample."""
    if not results or not targets_of(cfg):
        return ""
    key = targets_of(cfg)[0].key
    ref = next((r for r in results if r.mode == "baseline"), results[0])
    head = [
        "mode",
        f"s to {key}",
        f"samples to {key} (statistical)",
        "us/sample (hardware)",
        f"speed-up vs {ref.mode}",
        "= fewer samples",
        "x faster samples",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    rs, rn, ru = ref.seconds_to[key], ref.samples_to[key], ref.us_per_sample_to[key]
    for r in results:
        s, n, u = r.seconds_to[key], r.samples_to[key], r.us_per_sample_to[key]
        if None in (s, n, u, rs, rn, ru):
            cells = [r.mode, "not reached" if s is None else f"{s:.1f}", "", "", "", "", ""]
        else:
            cells = [r.mode, f"{s:.1f}", f"{n:,}", f"{u:.1f}"]
            cells += [f"{rs / s:.2f}x", f"{rn / n:.2f}", f"{ru / u:.2f}"]  # type: ignore[operator]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_markdown(path: Path, cfg: BenchConfig, results: Sequence[ModeResult]) -> None:
    title = (
        f"# rltrain bench: {cfg.data.dataset}, {cfg.workers} workers, "
        f"optimizer {cfg.optimizer.name} (lr {cfg.optimizer.lr:g}), batch {cfg.batch_size}\n\n"
    )
    note = (
        "\nSeconds are training time from the first worker step (start-up excluded, reported "
        "in results.csv); accuracy (or distance) is measured on snapshots taken every "
        f"{cfg.eval.every_seconds:g} s, so times are accurate to that interval.\n"
    )
    split = efficiency_table(cfg, results)
    if split:
        split = (
            "\n## Statistical vs hardware efficiency\n\nIs a mode faster because it computes "
            "faster, or because it learns more per sample? Time to the target = samples to it "
            "(statistical efficiency) x seconds per sample (hardware efficiency):\n\n" + split
        )
    write_atomic(path, title + markdown_table(cfg, results) + note + split)


def write_outputs(
    run_dir: Path,
    cfg: BenchConfig,
    results: Sequence[ModeResult],
    curves: dict[str, list[Point]],
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """results.csv, results.md, the plots and summary.json (``extra``: more of its keys)."""
    write_csv(run_dir / "results.csv", results)
    write_markdown(run_dir / "results.md", cfg, results)
    targets = targets_of(cfg)
    for name in plot_names(cfg):
        x = name.rsplit("_", 1)[1].removesuffix(".png")
        plot_curves(run_dir / name, curves, targets, x="t" if x == "time" else x)
    summary = {
        "command": "bench",
        "dataset": cfg.data.dataset,
        "workers": cfg.workers,
        "targets": [t.value for t in targets],
        "target_metric": targets[0].metric if targets else "accuracy",
        "results": [_json_safe(asdict(r)) for r in results],
        "curves": {m: [asdict(p) for p in pts] for m, pts in curves.items()},
        **(extra or {}),
    }
    summary = _json_safe(summary)
    write_summary(run_dir, summary)
    return summary


def _json_safe(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _json_safe(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_json_safe(x) for x in v]
    return v
