"""`rltrain plot --csv FILE`: the curves the plot draws as one table, for pandas, R or a
spreadsheet: a row per episode (its frames, running seconds, raw return and the mean the plot
draws) and per evaluation during training, of every run given (rewound episodes dropped, as
the plot drops them; a run with evaluations and no episode yet, its evaluations)."""

from __future__ import annotations

import csv
import math
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from rltrain.curves import Curve, PlotError
from rltrain.plot_groups import Group

COLUMNS = ("run", "group", "kind", "frames", "seconds", "return", "mean_return", "window")


def write_curves_csv(
    path: Path, curves: Sequence[Curve], means: Sequence[np.ndarray], groups: Sequence[Group]
) -> None:
    """``path``: a row per episode (kind ``episode``: ``return`` its raw score, ``mean_return``
    the mean of its run's last ``window`` episodes, empty before a full window) and per
    evaluation (kind ``eval``: ``mean_return`` the mean score of its games); ``group`` is the
    run's ``--group`` label, empty without one. A run evaluated before its first episode
    ended has its eval rows alone. Runs must have labels of their own: the ``run`` column is
    all that tells their rows apart (two ``x/run`` were merged into one, explore101)."""
    twice = sorted(x for x, n in Counter(c.label for c in curves).items() if n > 1)
    if twice:  # (:func:`rltrain.plot.unique_labels` gives each its own; this says if not)
        raise PlotError(f"--csv {path}: runs share the label {', '.join(twice)}: not written")
    label = {i: g.label for g in groups for i in g.members}
    try:
        with path.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(COLUMNS)
            for i, c in enumerate(curves):
                g = label.get(i, "")
                for frames, secs, ret, mean in zip(
                    c.frames, c.seconds, c.returns, means[i], strict=True
                ):
                    shown = "" if math.isnan(mean) else f"{mean:.6g}"
                    w.writerow(
                        [
                            c.label,
                            g,
                            "episode",
                            int(frames),
                            f"{secs:.3f}",
                            f"{ret:.6g}",
                            shown,
                            c.window,
                        ]
                    )
                for frames, secs, mean in zip(*c.evals, strict=True):
                    w.writerow(
                        [c.label, g, "eval", int(frames), f"{secs:.3f}", "", f"{mean:.6g}", ""]
                    )
    except OSError as e:
        raise PlotError(f"--csv {path}: cannot write it ({e.strerror or e})") from None
