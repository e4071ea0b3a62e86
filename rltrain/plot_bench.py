"""``rltrain plot`` of ``rltrain bench`` runs: each run's modes on one chart, so that benches
of other settings (2 workers against 4, another learning rate) compare (explore106: a bench's
own plots are of one run, and ``rltrain plot`` refused a bench run)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rltrain.curves import PlotError

BENCH_PNG = "bench_runs.png"
"""What ``rltrain plot`` writes for bench runs, where no ``--out`` names a file: in the one
run's folder, or here for several (a bench's own plots keep their names)."""


def bench_summary(run_dir: Path) -> dict[str, Any] | None:
    """A bench run's summary.json, or None where ``run_dir`` is not a bench run's folder."""
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    return summary if isinstance(summary, dict) and summary.get("command") == "bench" else None


def plot_bench_runs(
    run_dirs: Sequence[Path], out: Path | None, title: str | None, unread: Sequence[str]
) -> tuple[Path | None, str]:
    """Every bench run's curves on one chart of test accuracy (a toy problem's distance to the
    optimum) against training seconds, one line per run and mode, and a table of each one's
    final figure; ``unread``: the flags of train runs given (refused: a bench has no episodes).
    """
    from rltrain.supervised.evaluation import Point, Target
    from rltrain.supervised.plots import SEED, plot_curves

    if unread:
        raise PlotError(f"{', '.join(unread)}: for `rltrain train` runs; these are bench runs")
    summaries = []
    for run in run_dirs:
        summary = bench_summary(run)
        if summary is None:
            raise PlotError(
                f"{run}: not a `rltrain bench` run; plot bench runs and train runs apart"
            )
        summaries.append(summary)
    metrics = {s.get("target_metric", "accuracy") for s in summaries}
    if len(metrics) > 1:
        raise PlotError("these benches score accuracy and a toy's distance: plot them apart")
    metric = metrics.pop()
    names = [run.name or str(run) for run in run_dirs]
    curves: dict[str, list[Point]] = {}
    rows = [f"| run | mode | seed | final {metric} | seconds |", "|---|---|---|---|---|"]
    for name, summary in zip(names, summaries, strict=True):
        for key, points in summary.get("curves", {}).items():
            mode, _, seed = key.partition(SEED)
            pts = [Point(**p) for p in points]
            curves[f"{mode} ({name}){SEED}{seed}" if seed else f"{mode} ({name})"] = pts
            if pts:
                final = getattr(pts[-1], metric)
                rows.append(f"| {name} | {mode} | {seed or '-'} | {final:.4g} | {pts[-1].t:.1f} |")
    if not curves:
        raise PlotError(f"{', '.join(names)}: no mode of these benches finished")
    targets = [Target(metric, v) for v in summaries[0].get("targets", [])]
    from rltrain.plot import out_format

    png = out if out is not None else (run_dirs[0] if len(run_dirs) == 1 else Path()) / BENCH_PNG
    png = png / BENCH_PNG if png.is_dir() else png if png.suffix else png.with_suffix(".png")
    out_format(png)
    if not plot_curves(png, curves, targets, title=title):
        return None, "\n".join(rows)
    return png, "\n".join(rows)


def plot_any(
    runs: Sequence[Path],
    out: Path | None = None,
    title: str | None = None,
    smooth: int | None = None,
    marks: Sequence[float] = (),
    evals: bool = False,
    group: Sequence[str] = (),
    csv: Path | None = None,
) -> tuple[Path | None, str]:
    """``rltrain plot`` and :func:`rltrain.plot_runs`: bench runs side by side (the train runs'
    options said unread), else train runs' curves (:func:`rltrain.plot.plot_runs`); the
    image's path (None without matplotlib) and the tables asked for."""
    from rltrain.plot import plot_runs

    how = (smooth, marks, evals, group, csv)
    if any(bench_summary(r) is not None for r in runs):  # (bench runs compared: explore106)
        flags = ("--smooth", "--marks", "--evals", "--group", "--csv")
        given = [flag for flag, v in zip(flags, how, strict=True) if v]
        return plot_bench_runs(runs, out, title, given)
    return plot_runs(runs, out, title, smooth, marks, evals, group, csv)


def out_path(text: str) -> Path:
    """``--out`` (or ``out=``) as a path; one that ends in a slash names a folder, which must
    exist (``nodir/`` wrote ``nodir.png``)."""
    out = Path(text).expanduser()
    if text.endswith(("/", os.sep)) and not out.is_dir():
        raise PlotError(f"--out {text}: no such folder (give one that exists, or a file)")
    return out
