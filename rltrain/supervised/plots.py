"""The bench's plots: accuracy (or, for the toy problems, distance to the optimum) against
training time, samples and server updates, one line per mode."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rltrain.charts import pyplot
from rltrain.supervised.config import BenchConfig
from rltrain.supervised.toys import TOY_PROBLEMS

if TYPE_CHECKING:
    from rltrain.supervised.evaluation import Point, Target

X_LABELS = {
    "t": "training time (s)",
    "samples": "training samples (all workers)",
    "updates": "server updates (optimizer steps)",
}


def plot_curves(
    path: Path, curves: dict[str, list[Point]], targets: Sequence[Target], x: str = "t"
) -> bool:
    """One line per mode against ``x`` (a key of :data:`X_LABELS`): test accuracy, or the
    toy problems' distance to the optimum on a log scale. False without matplotlib."""
    plt = pyplot()
    if plt is None:
        return False

    metric = targets[0].metric if targets else "accuracy"
    fig, ax = plt.subplots(figsize=(8, 5), dpi=110)
    for mode, pts in curves.items():
        ys = [getattr(p, metric) for p in pts]
        ax.plot([getattr(p, x) for p in pts], ys, marker=".", label=mode)
    for t in targets:
        ax.axhline(t.value, color="grey", lw=0.8, ls="--")
    if metric == "distance":
        ax.set_yscale("log")
        ax.set_ylabel("|w - w*| / |w0 - w*|")
    else:
        # the interesting part is around the targets; the first seconds' climb is cut off,
        # but never a whole mode that ended below them (its last point stays in sight)
        last = [getattr(pts[-1], metric) for pts in curves.values() if pts]
        last = [v for v in last if math.isfinite(v)]
        low = min((t.value - 0.1 for t in targets), default=0.0)
        ax.set_ylim(max(0.0, min([low, *(v - 0.05 for v in last)])), 1.0)
        ax.set_ylabel("test accuracy")
    ax.set_xlabel(X_LABELS[x])
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def plot_names(cfg: BenchConfig) -> list[str]:
    """The plots a bench writes: accuracy (distance, for the toys) against time and samples,
    and for the toys also against server updates."""
    if cfg.data.dataset in TOY_PROBLEMS:
        return [f"distance_vs_{x}.png" for x in ("time", "samples", "updates")]
    return ["accuracy_vs_time.png", "accuracy_vs_samples.png"]
