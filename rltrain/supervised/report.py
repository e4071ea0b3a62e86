"""A bench's results: each mode's row (:func:`summarize`, from the points of
:mod:`rltrain.supervised.evaluation`) and the outputs written from them.

TensorBoard (one sub-run per mode under ``tb/``), ``results.csv``, ``results.md``,
the plots of :func:`plot_names` and ``summary.json``.
"""

from __future__ import annotations

import csv
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
from torch.utils.tensorboard import SummaryWriter

from rltrain.charts import NO_MATPLOTLIB
from rltrain.config import dump_yaml
from rltrain.faults import FaultCounters
from rltrain.machine import machine, started_at
from rltrain.records import STALENESS_BINS
from rltrain.rundir import write_atomic, write_summary
from rltrain.supervised.config import BenchConfig
from rltrain.supervised.evaluation import Point, targets_of
from rltrain.supervised.mode_keys import RUN_HERE, replicas_text
from rltrain.supervised.modes import MAX_SNAPSHOTS, ModeTrace
from rltrain.supervised.plots import plot_curves, plot_names
from rltrain.supervised.stopped import not_run
from rltrain.supervised.synthetic import synthetic_means
from rltrain.supervised.tables import (
    ModeResult,
    by_mode,
    efficiency_table,
    in_order,
    markdown_table,
    seeds_table,
)

DIVERGED = 1e3
"""A toy run whose final distance to the optimum is above this many times its start diverged."""


def is_diverged(distances: Sequence[float]) -> bool:
    """Whether a toy run diverged, from its distances to the optimum (relative to w0's): its
    final one non-finite or above DIVERGED, or above 1 (farther than it started) and its
    farthest yet (a run climbing away, its blow-up past the budget: 60x its start and
    rising was not flagged)."""
    d = [x for x in distances if not math.isnan(x)]
    return bool(d) and (d[-1] > DIVERGED or 1 < d[-1] >= max(d))


def mode_line(label: str, res: ModeResult) -> str:
    """The line ``rltrain bench`` prints when a mode has been evaluated."""
    reached = ", ".join(
        f"{k} in {v:.1f}s" if v is not None else f"{k} not reached"
        for k, v in res.seconds_to.items()
    )
    score = (
        f"accuracy {res.final_accuracy:.4f}"
        if res.final_distance is None
        else f"distance to the optimum {res.final_distance:.2e}"
    )
    synthetic = (
        f"; synthetic gradients: cosine {res.synthetic['cosine']:.3f}, relative "
        f"L2 {res.synthetic['relative_l2']:.3f}, staleness {res.synthetic['staleness']:.2f}"
        if res.synthetic
        else ""
    )
    faults = FaultCounters(**res.faults)
    return (
        f"{label} {score}{f' ({reached})' if reached else ''}; "
        f"{res.samples_per_s:,.0f} samples/s, {res.updates_applied:,} "
        f"{'parameter pushes' if res.mode == 'average' else 'gradients'} "
        f"applied in {res.steps:,} steps, {res.dropped} dropped{dropped_by(res)}, staleness "
        f"{res.mean_staleness:.2f}{synthetic}{short_rounds(res)}"
        + (f"; faults: {faults.brief()}" if any(res.faults.values()) else "")
        + (f"; {NOTHING_APPLIED}" if not res.updates_applied else "")
    )


def dropped_by(res: ModeResult) -> str:
    """Whose updates were dropped, where some were: ``(worker 2: 10)`` (explore106: a soft_sync
    straggler's shard never trained, and only the total said so)."""
    said = [f"worker {w}: {n:,}" for w, n in res.dropped_by.items() if n]
    return f" ({', '.join(said)})" if said else ""


def short_rounds(res: ModeResult) -> str:
    """sync averages every worker's gradient of a version, but a round that some worker
    left (it reached the budget first, or died) averages those that came: said, so that
    "839 gradients applied in 420 steps" of 2 workers reads as what it is (explore94)."""
    short = res.workers * res.steps - res.updates_applied
    if res.mode != "sync" or short <= 0:
        return ""
    return (
        f" ({short:,} fewer than {res.workers} a step: rounds a worker had left, at the "
        "budget's end or by a fault, averaged the others')"
    )


NOTHING_APPLIED = "no update was applied in the budget: the score is the initial parameters'"
"""(average with a short budget: its workers push every server.average_every local steps)"""


def summarize(cfg: BenchConfig, trace: ModeTrace, points: Sequence[Point]) -> ModeResult:
    last = trace.snapshots[-1].stats
    samples = max(sum(r.samples for r in trace.reports), last.samples)  # (a killed worker's
    # report is lost with it; the server counted its pushes: evaluation.samples_at)
    seconds_to: dict[str, float | None] = {}
    samples_to: dict[str, int | None] = {}
    us_per_sample_to: dict[str, float | None] = {}
    steps_to: dict[str, int | None] = {}
    for target in targets_of(cfg):
        hit = next((p for p in points if target.reached(p)), None)
        seconds_to[target.key] = round(hit.t, 2) if hit else None
        samples_to[target.key] = hit.samples if hit else None
        steps_to[target.key] = hit.updates if hit else None
        per = hit.t / hit.samples * 1e6 if hit and hit.samples else None
        us_per_sample_to[target.key] = None if per is None else round(per, 3)
    final_distance = points[-1].distance
    held = [p for p in points if not math.isnan(p.validation)]  # data.validation's pick
    best = max(held or points, key=lambda p: p.validation if held else p.accuracy, default=None)
    return ModeResult(
        mode=trace.mode,
        workers=trace.workers,
        final_accuracy=points[-1].accuracy,
        best_accuracy=best.accuracy if best is not None else math.nan,
        train_seconds=round(trace.train_s, 2),
        startup_seconds=round(trace.startup_s, 2),
        samples=samples,
        samples_per_s=round(samples / trace.train_s, 1) if trace.train_s > 0 else 0.0,
        updates_applied=last.applied,
        dropped=last.dropped,
        dropped_by={str(w): n for w, n in sorted(last.dropped_by.items())},
        rejected=last.rejected,
        mean_staleness=round(last.mean_staleness, 3),
        seconds_to=seconds_to,
        samples_to=samples_to,
        us_per_sample_to=us_per_sample_to,
        steps_to=steps_to,
        steps=last.version,
        bytes_pushed=last.bytes_pushed,
        bytes_pulled=last.bytes_pulled,
        final_distance=None if math.isnan(final_distance) else final_distance,
        diverged=is_diverged([p.distance for p in points]),
        faults=asdict(trace.faults),
        synthetic=synthetic_means([row for r in trace.reports for row in r.synthetic]),
        seed=cfg.seed,
        best_validation=None if best is None or math.isnan(best.validation) else best.validation,
    )


# ---------------------------------------------------------------------------------------------
# outputs


NO_SERVER = ("baseline", "allreduce")
"""Modes without a parameter server: no update is dropped or refused (their TensorBoard
runs would draw lines of zeros over the other modes')."""
NO_NETWORK = (*NO_SERVER, "hogwild")
"""... and without bytes pushed or pulled (Hogwild's workers share memory)."""


def write_tensorboard(
    tb_dir: Path, cfg: BenchConfig, trace: ModeTrace, points: Sequence[Point], name: str = ""
) -> None:
    """Scalars per snapshot under tb/<name>/ (the mode's; with seeds > 1
    tb/<mode>/seed<seed>/): the step the samples seen, the wall time the bench's start plus
    the training time, the same start for every mode, so that TensorBoard's relative axis is
    the training time and its wall axis a real date (explore110: a fixed epoch of 1e9 put
    every point in 2001, before the files' own header)."""
    writer = SummaryWriter(str(tb_dir / (name or trace.mode)))
    mode = f"mode: {trace.mode}\n"  # (each mode's run says its own: explore110)
    writer.add_text("config", "```\n" + mode + dump_yaml(cfg) + "```")
    base = started_at()
    prev_hist = [0] * STALENESS_BINS
    prev: tuple[float, int] = (0.0, 0)
    for snap, p in zip(trace.snapshots, points, strict=True):
        wall, step = base + p.t, p.samples
        if not math.isnan(p.accuracy):
            writer.add_scalar("supervised/test_accuracy", p.accuracy, step, walltime=wall)
        if not math.isnan(p.distance):
            writer.add_scalar("supervised/distance_to_optimum", p.distance, step, walltime=wall)
        if not math.isnan(p.validation):
            writer.add_scalar("supervised/validation_accuracy", p.validation, step, walltime=wall)
        if not math.isnan(p.train_loss):
            writer.add_scalar("supervised/train_loss", p.train_loss, step, walltime=wall)
        if p.t - prev[0] >= 0.05:  # (not over the ms between the last two: Ray's final pair)
            writer.add_scalar(
                "perf/samples_per_s", (p.samples - prev[1]) / (p.t - prev[0]), step, walltime=wall
            )
            prev = (p.t, p.samples)
        writer.add_scalar("ps/version", snap.stats.version, step, walltime=wall)
        if trace.mode not in NO_SERVER:
            writer.add_scalar("ps/dropped", snap.stats.dropped, step, walltime=wall)
            writer.add_scalar("ps/rejected", snap.stats.rejected, step, walltime=wall)
        if trace.mode not in NO_NETWORK:
            writer.add_scalar("net/bytes_pushed", snap.stats.bytes_pushed, step, walltime=wall)
            writer.add_scalar("net/bytes_pulled", snap.stats.bytes_pulled, step, walltime=wall)
        hist = list(snap.stats.staleness_hist)
        delta = [a - b for a, b in zip(hist, prev_hist, strict=True)]
        _staleness_histogram(writer, delta, step, wall)
        prev_hist = hist
    if trace.faults.total() and points:
        for tag, value in trace.faults.tags().items():
            writer.add_scalar(tag, value, points[-1].samples, walltime=base + points[-1].t)
    _synthetic_curves(writer, cfg, trace, points, base)
    writer.close()


def _synthetic_curves(
    writer: SummaryWriter,
    cfg: BenchConfig,
    trace: ModeTrace,
    points: Sequence[Point],
    base: float,
) -> None:
    """synthetic/stage<s>/{cosine,relative_l2,staleness}: the first replica's, as means over
    windows of its true gradients; step = the samples all replicas had taken by then, wall
    time that of the snapshots' (interpolated by samples), on the other tags' base."""
    seen = [float(p.samples) for p in points] or [0.0]
    at = [p.t for p in points] or [0.0]
    per_mb = cfg.batch_size / cfg.model.micro_batches * cfg.workers
    for stage in sorted({row[0] for r in trace.reports for row in r.synthetic}):
        rows = [row for row in trace.reports[0].synthetic if row[0] == stage]
        window = max(1, len(rows) // 200)  # about 200 points a curve
        for i in range(0, len(rows) - window + 1, window):
            part, step = rows[i : i + window], int((i + window) * per_mb)
            for tag, col in (("staleness", 1), ("cosine", 2), ("relative_l2", 3)):
                value = sum(r[col] for r in part) / len(part)
                wall = base + float(np.interp(step, seen, at))
                writer.add_scalar(f"synthetic/stage{stage}/{tag}", value, step, walltime=wall)


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
    nested: tuple[str, ...] = ("seconds_to", "samples_to", "us_per_sample_to", "steps_to")
    nested += ("faults", "synthetic", "dropped_by")  # (dropped_by_2: worker 2's)
    row = {"mode": r.mode, "seed": r.seed}
    row |= {k: v for k, v in asdict(r).items() if k not in nested}
    for name in nested:
        for key, v in getattr(r, name).items():
            if name == "faults" and key in RL_ONLY_FAULTS:  # (explore106: columns of RL's)
                continue
            row[f"{name}_{key}" if name != "faults" else f"faults_{key}"] = v
    return row


RL_ONLY_FAULTS = ("actor_restarts", "learner_restarts", "policy_restarts")
"""Fault counters of RL training's processes, which a bench has not: not results.csv's."""


def write_csv(path: Path, results: Sequence[ModeResult]) -> None:
    rows = [_flat_row(r) for r in results]  # (in_order by the caller)
    with path.open("w", newline="") as f:
        # every row's columns (a synthetic-gradient mode has columns of its own)
        w = csv.DictWriter(f, fieldnames=list(dict.fromkeys(k for row in rows for k in row)))
        w.writeheader()
        w.writerows({k: ("" if v is None else v) for k, v in row.items()} for row in rows)


def write_markdown(
    path: Path,
    cfg: BenchConfig,
    results: Sequence[ModeResult],
    stopped_by: str = "done",
    failed: Mapping[str, str] | None = None,
    data: Mapping[str, Any] | None = None,
) -> None:
    """results.md; ``stopped_by``: the bench's end (interrupt or fault: say what did not run);
    ``failed``: the runs an error in your code failed, with its line; ``data``: what it
    trained on (summary.json's, whose sizes the title gives: explore100)."""
    w = cfg.optimizer.warmup_steps
    warm = f", warmed up over {w} steps" if w else ""
    sizes = ""
    if data:
        held = f", {data['validation']:,} held out" if data.get("validation") else ""
        sizes = f" ({data['train']:,} train{held} / {data['test']:,} test samples)"
    title = (
        f"# rltrain bench: {cfg.data.dataset}{sizes}, {replicas_text(cfg)}, "
        f"optimizer {cfg.optimizer.name} (lr {cfg.optimizer.lr:g}{warm}), "
        f"batch {cfg.batch_size}\n\n"
    )
    note = (
        "\nSeconds are training time from the first worker step (start-up excluded, reported "
        "in results.csv); accuracy (or distance) is measured on snapshots taken every "
        f"{cfg.eval.every_seconds:g} s, so times are accurate to that interval (a mode that "
        f"took {MAX_SNAPSHOTS} snapshots kept every other one, at twice the interval).\n"
    )
    here = [r.mode for r in results if r.mode in RUN_HERE] if cfg.runtime.address else []
    there = [r.mode for r in results if r.mode not in RUN_HERE]
    if here and there:  # (explore109: the samples/s column compared machines, unsaid)
        note += (
            f"\n**Where they ran**: {', '.join(dict.fromkeys(here))} on the machine the bench "
            f"was started from, {', '.join(dict.fromkeys(there))} on the Ray cluster "
            f"(--address {cfg.runtime.address}): samples/s compares the machines as well as "
            "the rules.\n"
        )
    for name, line in (failed or {}).items():
        note += f"\n**{name} failed**: {line} (its traceback: failure-{name}.log).\n"
    if stopped_by != "done":  # (after the last run's training: in its evaluation, explore106)
        left = not_run(cfg, results)
        what = f"no results for {left}" if left else "every run has its results"
        note += f"\n**Stopped by {stopped_by}**: {what}.\n"
    split = efficiency_table(cfg, results)
    if split:
        split = (
            "\n## Statistical vs hardware efficiency\n\nIs a mode faster because it computes "
            "faster, or because it learns more per sample? Time to the target = samples to it "
            "(statistical efficiency) x seconds per sample (hardware efficiency):\n\n" + split
        )
    table = markdown_table(cfg, results)
    if cfg.seeds > 1:
        title = title.replace("\n\n", f", {cfg.seeds} seeds from {cfg.seed}\n\n", 1)
        table = (
            "## Over the seeds: mean ± standard deviation\n\n(k/n: the mean of the k runs of n "
            "that reached the target)\n\n"
            + seeds_table(cfg, results)
            + "\n## Every run\n\n"
            + table
        )
    write_atomic(path, title + table + note + split)


def write_outputs(
    run_dir: Path,
    cfg: BenchConfig,
    results: Sequence[ModeResult],
    curves: dict[str, list[Point]],
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """results.csv, results.md, the plots and summary.json (``extra``: more of its keys)."""
    results = in_order(cfg, results)
    write_csv(run_dir / "results.csv", results)
    extra = extra or {}
    stopped_by = str(extra.get("stopped_by", "done"))
    md = run_dir / "results.md"
    write_markdown(md, cfg, results, stopped_by, extra.get("failed"), extra.get("data"))
    targets = targets_of(cfg)
    for name in plot_names(cfg) if curves else ():  # (no mode finished: nothing to draw)
        x = name.rsplit("_", 1)[1].removesuffix(".png")
        if not plot_curves(run_dir / name, curves, targets, x="t" if x == "time" else x):
            print(f"rltrain: {NO_MATPLOTLIB}", file=sys.stderr)
            break
    summary = {
        "command": "bench",
        "dataset": cfg.data.dataset,
        "workers": cfg.workers,
        "targets": [t.value for t in targets],
        "target_metric": targets[0].metric if targets else "accuracy",
        "seeds": list(range(cfg.seed, cfg.seed + cfg.seeds)),
        "results": [_json_safe(asdict(r)) for r in results],
        "by_mode": by_mode(cfg, results),  # each mode's mean and std over its seeds
        "curves": {m: [asdict(p) for p in pts] for m, pts in curves.items()},
        **extra,
        "machine": machine(),  # (speeds compare on one machine and load: explore106)
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
