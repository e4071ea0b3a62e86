"""The bench's plots: accuracy (or, for the toy problems, distance to the optimum) against
training time, samples and server updates, one line per run (a mode's seeds in one colour)."""

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
    path: Path,
    curves: dict[str, list[Point]],
    targets: Sequence[Target],
    x: str = "t",
    title: str | None = None,
) -> bool:
    """One line per run (``curves``: by :func:`run_name`) against ``x`` (a key of
    :data:`X_LABELS`): test accuracy, or the toy problems' distance to the optimum on a log
    scale. False without matplotlib."""
    plt = pyplot()
    if plt is None:
        return False

    metric = targets[0].metric if targets else "accuracy"
    fig, ax = plt.subplots(figsize=(8, 5), dpi=110)
    modes = list(dict.fromkeys(mode_of(k) for k in curves))
    runs = {m: sum(mode_of(k) == m for k in curves) for m in modes}
    for key, pts in curves.items():  # a mode's seeds: one colour, one legend entry
        mode = mode_of(key)
        first = key == next(k for k in curves if mode_of(k) == mode)
        label = (mode if runs[mode] == 1 else f"{mode} ({runs[mode]} seeds)") if first else None
        colour = f"C{modes.index(mode) % 10}"
        ys = [getattr(p, metric) for p in pts]
        marker = "." if runs[mode] == 1 else None
        ax.plot([getattr(p, x) for p in pts], ys, marker=marker, color=colour, label=label)
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
    if title:
        ax.set_title(title)
    ax.grid(alpha=0.3)
    if curves:  # (none: every mode failed)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


SEED = " seed "
"""Between a mode and its seed in a run's name (:func:`run_name`)."""


def run_name(mode: str, seed: int, seeds: int) -> str:
    """A run's name in the progress lines and the plots: its mode, and its seed when each
    mode runs ``seeds`` > 1 times."""
    return mode if seeds == 1 else f"{mode}{SEED}{seed}"


def mode_of(name: str) -> str:
    """The mode of a run's name (:func:`run_name`)."""
    return name.split(SEED, 1)[0]


def plot_names(cfg: BenchConfig) -> list[str]:
    """The plots a bench writes: accuracy (distance, for the toys) against time and samples,
    and for the toys also against server updates."""
    if cfg.data.dataset in TOY_PROBLEMS:
        return [f"distance_vs_{x}.png" for x in ("time", "samples", "updates")]
    return ["accuracy_vs_time.png", "accuracy_vs_samples.png"]
