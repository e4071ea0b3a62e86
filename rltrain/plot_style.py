"""How `rltrain plot` tells runs apart: labels that differ (:func:`distinct_labels`), a colour
and line style per run or group (:func:`line_style`), and a legend below the panels that grows
the figure rather than covering the curves (:func:`add_legend`). Nothing here reads a run."""

from __future__ import annotations

import math
import os
import textwrap
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

DASHES: tuple[Any, ...] = ("-", "--", ":", "-.")
"""The line styles of the first 40 runs, one per 10 colours: with colours alone run i and run
i + 10 were one line (explore101)."""
LABEL_CHARS = 60
"""A legend label longer than this is cut in its middle (a 186-character run name squeezed
the panels to a sliver, explore101); the tables and the CSV keep the whole name."""
FIG_WIDTH = 12.0
"""Inches: the two panels side by side."""
PANELS_HEIGHT = 4.5
"""Inches for the panels; the legend and a long title are added below and above."""


def time_axis(seconds_max: float) -> tuple[float, str]:
    """(divisor, label) of the wall-time axis: seconds, minutes or hours."""
    if seconds_max >= 3 * 3600:
        return 3600.0, "wall time (h)"
    if seconds_max >= 3 * 60:
        return 60.0, "wall time (min)"
    return 1.0, "wall time (s)"


def line_style(k: int) -> tuple[str, Any]:
    """(colour, line style) of run or group ``k``: matplotlib's 10 colours, each round of them
    with another style; past the 4 named ones, dash-dot patterns with one more dot each."""
    rounds = k // 10
    dashes = DASHES[rounds] if rounds < len(DASHES) else (0, (6, 2) + (1, 2) * (rounds - 2))
    return f"C{k % 10}", dashes


def _above(name: str, folder: Path | None) -> list[str]:
    """The names of the folders above a run, nearest first, as its label ``name`` was given
    (a link by its own name, ``.`` by the folder's): [] without a folder."""
    if folder is None:
        return []
    path = Path(os.path.normpath(folder.absolute()))
    if path.name != name:  # (. and ..: the label is the folder's real name)
        path = folder.resolve()
    return [p.name for p in path.parents if p.name]


def distinct_labels(names: Sequence[str], folders: Sequence[Path | None]) -> list[str]:
    """Each run's label: its name, with as many of the folders above it (``x/run``,
    ``a/x/run``) as tell it from every other run's: one level left ``a/x/run`` and
    ``b/x/run`` both ``x/run``, and the CSV merged them (explore101). Runs that no folder
    tells apart (no folder given) are numbered."""
    above = [_above(n, f) for n, f in zip(names, folders, strict=True)]
    depth = [0] * len(names)

    def label(i: int) -> str:
        return "/".join([*reversed(above[i][: depth[i]]), names[i]])

    while True:
        labels = [label(i) for i in range(len(names))]
        count = Counter(labels)
        grow = [i for i, x in enumerate(labels) if count[x] > 1 and depth[i] < len(above[i])]
        if not grow:
            break
        for i in grow:  # only the runs that still share a label climb a level
            depth[i] += 1
    seen: Counter[str] = Counter()
    out = []
    for x in labels:
        seen[x] += 1
        out.append(x if seen[x] == 1 else f"{x} ({seen[x]})")
    return out


def shorten(label: str, chars: int) -> str:
    """``label`` cut to ``chars`` with an ellipsis in its middle: a run's name often differs
    from its neighbours' at both ends (the algorithm first, the seed and the date last)."""
    if len(label) <= chars:
        return label
    head = chars // 2
    return f"{label[:head]}…{label[len(label) - (chars - 1 - head) :]}"


def legend_labels(labels: Sequence[str], chars: int = LABEL_CHARS) -> list[str]:
    """``labels`` (each different) shortened (:func:`shorten`), but no further than keeps
    them different: two long names that differ in their middle are cut less."""
    longest = max((len(x) for x in labels), default=0)
    for width in range(chars, longest + 10, 10):
        short = [shorten(x, width) for x in labels]
        if len(set(short)) == len(set(labels)):
            return short
    return list(labels)


def _columns(labels: Sequence[str]) -> int:
    """How many legend columns fit across the figure: a column is the line sample and its
    longest label (about 0.06 inch a character at the legend's small font)."""
    column = 0.8 + 0.06 * max((len(x) for x in labels), default=1)
    return max(1, min(len(labels), int((FIG_WIDTH - 0.4) // column)))


def legend_inches(labels: Sequence[str]) -> float:
    """The height the legend takes below the panels: a row is about 0.19 inch."""
    rows = math.ceil(len(labels) / _columns(labels)) if labels else 0
    return 0.35 + 0.19 * rows if rows else 0.0


def add_legend(fig: Any, handles: Sequence[Any], labels: Sequence[str], title: str | None) -> None:
    """One legend for both panels, below them, and ``title`` above, wrapped: the figure (its
    layout constrained) grows by their height. Inside a panel the legend covered the curves
    and ran off the figure with many runs; a long title ran off both sides (explore101)."""
    title = textwrap.fill(title, 100) if title else None
    room = legend_inches(labels) + (0.25 * (title.count("\n") + 1) if title else 0.0)
    fig.set_size_inches(FIG_WIDTH, PANELS_HEIGHT + room)
    if handles:
        fig.legend(
            handles,
            labels,
            loc="outside lower center",
            ncol=_columns(labels),
            fontsize="small",
            frameon=False,
        )
    if title:
        fig.suptitle(title)
