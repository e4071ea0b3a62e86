"""`rltrain plot --group KEY`: runs grouped by the values of config keys (each group the seeds
of one setting: ``--group server.rule`` puts async runs beside sync runs), so that the tables
give each group's mean ± standard deviation and the plot each group's mean curve."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rltrain.curves import Curve, PlotError, run_config


@dataclass(frozen=True)
class Group:
    """Runs of one setting: ``label`` (``server.rule=async``) and their indices in the curves."""

    label: str
    members: tuple[int, ...]


def config_value(cfg: dict[str, Any], key: str) -> Any:
    """The value of dotted ``key`` in a run's config.yaml (a KeyError for a missing one)."""
    node: Any = cfg
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            raise KeyError(part)
        node = node[part]
    return node


def groups_of(curves: Sequence[Curve], keys: Sequence[str]) -> list[Group]:
    """The curves grouped by their runs' values of ``keys``, in the order first seen; a key
    a run's config.yaml lacks is a :class:`PlotError` naming the run and the key."""
    found: dict[str, list[int]] = {}
    for i, c in enumerate(curves):
        if c.folder is None:
            raise PlotError(f"--group: {c.label} has no run directory to read config.yaml from")
        cfg = run_config(c.folder)
        values = []
        for key in keys:
            try:
                values.append(f"{key}={config_value(cfg, key)}")
            except KeyError:
                top = ", ".join(sorted(cfg)[:12])
                raise PlotError(
                    f"--group {key}: no such key in {c.folder}/config.yaml (its sections: {top}; "
                    "`rltrain options train` lists every key)"
                ) from None
        found.setdefault(", ".join(values), []).append(i)
    return [Group(label, tuple(members)) for label, members in found.items()]


def mean_sd(values: Sequence[float]) -> str:
    """``m +- sd`` (the sample's, n - 1), or the one value."""
    if len(values) == 1:
        return f"{values[0]:.1f}"
    return f"{np.mean(values):.1f} +- {np.std(values, ddof=1):.1f}"


def mean_curve(xs: Sequence[np.ndarray], ys: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The mean of runs' curves (each [N_i] y against increasing x) on a common grid of 200
    points up to the shortest run's end, where every run has a value: ([200] x, [200] y)."""
    end = min(float(x[-1]) for x in xs)
    start = max(float(x[0]) for x in xs)
    grid = np.linspace(start, end, 200) if end > start else np.array([end])
    return grid, np.mean([np.interp(grid, x, y) for x, y in zip(xs, ys, strict=True)], axis=0)
