"""`rltrain plot --group KEY`: runs grouped by the values of config keys (each group the seeds
of one setting: ``--group server.rule`` puts async runs beside sync runs), so that the tables
give each group's mean ± standard deviation and the plot each group's mean curve."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rltrain.config_keys import flat_keys
from rltrain.curves import Curve, PlotError, run_config
from rltrain.plot_evals import SCORED_BY, eval_records
from rltrain.plot_style import line_style
from rltrain.rundir import RECORDED_BEFORE


@dataclass(frozen=True)
class Group:
    """Runs of one setting: ``label`` (``server.rule=async``) and their indices in the curves."""

    label: str
    members: tuple[int, ...]


def config_value(cfg: dict[str, Any], key: str, run: Path) -> Any:
    """The value of dotted ``key`` in ``run``'s config.yaml: a scalar or a list; a missing
    key, or a section, is a :class:`PlotError` naming what the level above holds."""
    node: Any = cfg
    where = f"{run}/config.yaml"
    for i, part in enumerate(key.split(".")):
        above = ".".join(key.split(".")[:i])
        if not isinstance(node, dict) or part not in node:
            if not isinstance(node, dict):
                raise PlotError(f"--group {key}: {above} is a value in {where}, not a section")
            keys = ", ".join(sorted(node))
            inside = f" in {above} ({above} holds" if above else " (its top-level keys"
            raise PlotError(f"--group {key}: {where} has no {part!r}{inside}: {keys})")
        node = node[part]
    if isinstance(node, dict):
        raise PlotError(
            f"--group {key}: a section of {where}; give one of its keys ({key}."
            f"{(', ' + key + '.').join(sorted(node))})"
        )
    return node


def ran_as(run: Path, key: str, value: Any) -> Any:
    """``value`` of ``key`` as the run ran it: server.rule as its server did, a2c and ppo
    behind a barrier whatever config.yaml says (it keeps the rule as given, and explore85's
    a2c seeds were grouped as async). A config this rltrain cannot load keeps its value."""
    if key != "server.rule":
        return value
    from rltrain.errors import RLTrainError
    from rltrain.rl.config import TrainConfig, load_run_config, server_settings

    try:  # (the value given: one a resume changed it from, too)
        cfg = load_run_config(TrainConfig, run / "config.yaml", [f"server.rule={value}"])
        return server_settings(cfg).rule
    except (RLTrainError, ValueError, OSError):
        return value


def changed_values(run: Path, key: str) -> list[str]:
    """The values ``key`` took over a run's sessions, first to last, where a --resume changed
    it (summary.json's ``resumed_changes``); [] where none did. Such a run is its own group
    (``server.rule=async then sync``): grouped by its last value, an update rule was credited
    with what another one learned (explore98)."""
    try:
        summary = json.loads((run / "summary.json").read_text())
    except (OSError, ValueError):
        return []
    history = summary.get("resumed_changes") if isinstance(summary, dict) else None
    values: list[str] = []
    for session in history if isinstance(history, list) else []:
        said = session.get("changes") if isinstance(session, dict) else None
        for change in said if isinstance(said, list) else []:
            if isinstance(change, str) and change.startswith(f"{key}: ") and " -> " in change:
                old, new = change.removeprefix(f"{key}: ").split(" -> ", 1)
                values = values or [old]
                values.append(new.split(" (")[0])  # (a schedule's note on what it stretches)
    return values


def group_value(run: Path, cfg: dict[str, Any], key: str) -> Any:
    """What a run is grouped under for ``key``: the values a --resume changed it through, or
    its config.yaml's as it ran it."""
    ran = [ran_as(run, key, v) for v in changed_values(run, key)]  # (a2c: sync throughout)
    ran = [v for i, v in enumerate(ran) if i == 0 or v != ran[i - 1]]
    if len(ran) > 1:
        return " then ".join(map(str, ran))
    return ran_as(run, key, config_value(cfg, key, run))


def groups_of(curves: Sequence[Curve], keys: Sequence[str], say: bool = False) -> list[Group]:
    """The curves grouped by their runs' values of ``keys``, in the order first seen; a key
    a run's config.yaml lacks is a :class:`PlotError` naming the run and the key. ``say``:
    a line on stderr for a group whose runs differ in more than their seeds
    (:func:`say_pooled`)."""
    found: dict[str, list[int]] = {}
    for key in keys:
        if not key.strip(" ."):
            raise PlotError(f"--group {key!r}: give a config key, such as server.rule or seed")
    for i, c in enumerate(curves):
        if c.folder is None:
            raise PlotError(f"--group: {c.label} has no run directory to read config.yaml from")
        cfg = run_config(c.folder)
        values = [f"{key}={group_value(c.folder, cfg, key)}" for key in keys]
        found.setdefault(", ".join(values), []).append(i)
    groups = [Group(label, tuple(members)) for label, members in found.items()]
    for g in groups if say else ():
        say_pooled(g, [curves[i].folder for i in g.members], keys)
    return groups


NOT_A_SETTING = (
    "seed",
    "stop.",
    "checkpoint.",
    "eval.",
    "log_every_seconds",
    "runtime.",
    "faults.",
)
"""Config keys in which seeds of one setting may differ: how long, how often and where a run
ran, not what it trained."""


def say_pooled(g: Group, runs: Sequence[Path | None], grouped: Sequence[str] = ()) -> None:
    """A line on stderr where ``g``'s runs differ in a setting (explore111: --group
    server.rule pooled async with async under staleness scale and drop as one rule); not in
    the ``grouped`` keys, which group them as they ran (ppo's server.rule: sync)."""
    flats = [flat_keys(run_config(r)) for r in runs if r is not None]
    skip = (*NOT_A_SETTING, *grouped)
    keys = [k for k in dict.fromkeys(k for f in flats for k in f) if not k.startswith(skip)]
    differ = [k for k in keys if len({str(f.get(k)) for f in flats}) > 1]
    if len(flats) < 2 or not differ:
        return
    said = "; ".join(
        f"{k} {', '.join(dict.fromkeys(str(f.get(k)) for f in flats))}" for k in differ[:3]
    )
    more = f" and {len(differ) - 3} more" if len(differ) > 3 else ""
    print(
        f"rltrain: plot: --group: {g.label} pools runs that differ in {said}{more}; "
        f"--group {differ[0]} too takes them apart",
        file=sys.stderr,
    )


POOLED_ALIKE = ("env.id", "algo.name")
"""Keys whose runs a pooled mean must share (with their evaluations' scoring, for --evals)."""


def say_unlike(curves: Sequence[Curve], what: str) -> None:
    """A line on stderr where runs that ``what`` pools as seeds of one setting differ in
    :data:`POOLED_ALIKE` or in how their last evaluation was scored (explore107: PPO's and
    DQN's CartPole, sticky 0 and 0.25 Pong, pooled without a word); ``--group`` takes them
    apart."""
    signs = [sign(c.folder) for c in curves if c.folder is not None]
    shared = [k for k in dict.fromkeys(k for s in signs for k in s) if all(k in s for s in signs)]
    keys = [k for k in shared if len({str(s[k]) for s in signs}) > 1]  # (a key some runs'
    # records lack, as older ones the Atari keys of Gym envs, is no difference: review87)
    if len(signs) < 2 or not keys:
        return
    said = "; ".join(f"{k} {', '.join(dict.fromkeys(str(s.get(k)) for s in signs))}" for k in keys)
    print(
        f"rltrain: plot: {what}: these runs differ ({said}); --group {keys[0]} takes them apart",
        file=sys.stderr,
    )


def sign(run: Path) -> dict[str, Any]:
    """What a run is for :func:`say_unlike`: its config.yaml's :data:`POOLED_ALIKE`, and its
    last evaluation's scoring (evals.jsonl: :data:`SCORED_BY`, the env's protocol)."""
    try:
        cfg = run_config(run)
    except PlotError:
        return {}
    out: dict[str, Any] = {}
    for key in POOLED_ALIKE:
        section = cfg.get(key.split(".")[0])
        out[key] = section.get(key.split(".")[1]) if isinstance(section, dict) else None
    records = eval_records(run)[0]
    if records:
        last = records[-1]
        out |= {
            ("dqn.eval_" if k == "epsilon" else "eval.") + k: last.get(k, RECORDED_BEFORE.get(k))
            for k in SCORED_BY
        }
        protocol = last.get("protocol")
        if isinstance(protocol, dict):
            out |= {f"env.{k}": v for k, v in protocol.items()}
    return out


def of_runs(n: int, what: str) -> str:
    """What a group's figure is of: ``what`` (a mean, a spread) of its n runs, or its one run."""
    return f"{what} of {n}" if n > 1 else "1 run"


def mean_sd(values: Sequence[float]) -> str:
    """``m +- sd`` (the sample's, n - 1), or the one value."""
    if len(values) == 1:
        return f"{values[0]:.1f}"
    return f"{np.mean(values):.1f} +- {np.std(values, ddof=1):.1f}"


T_975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228)
"""Student's t at 97.5 % for 1..10 degrees of freedom (a two-sided 95 % interval); beyond,
its Cornish-Fisher expansion about 1.96 (2.199 at 11 for 2.201, 2.0422 at 30 for 2.0423)."""


def ci95(samples: np.ndarray) -> np.ndarray:
    """[n, G] values of n runs at G points -> [G] the half-width of the 95 % confidence interval
    of their mean (Student's t: the runs' seeds are a small sample); zeros for one run."""
    n = samples.shape[0]
    if n < 2:
        return np.zeros(samples.shape[1:])
    df = n - 1
    t = T_975[df - 1] if df <= len(T_975) else 1.96 + 2.3724 / df + 2.8227 / df**2
    return t * samples.std(axis=0, ddof=1) / np.sqrt(n)


def mean_curve(
    xs: Sequence[np.ndarray], ys: Sequence[np.ndarray]
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The mean of runs' curves (each [N_i] y against increasing x) on a common grid of 200
    points over the stretch where every run has a drawn (finite) value: ([200] x, [200] mean,
    [200] the half-width of its 95 % confidence interval, :func:`ci95`). None where several
    runs share no such stretch: the grid was one NaN point, nothing was drawn, and the
    legend still named a mean curve (explore101)."""
    spans = [x[np.isfinite(y)] for x, y in zip(xs, ys, strict=True)]
    if any(len(s) == 0 for s in spans):
        return None
    start = max(float(s[0]) for s in spans)
    end = min(float(s[-1]) for s in spans)
    if end < start or (end == start and len(xs) > 1):
        return None
    grid = np.linspace(start, end, 200) if end > start else np.array([end])
    on_grid = np.array([np.interp(grid, x, y) for x, y in zip(xs, ys, strict=True)])  # [n, 200]
    return grid, on_grid.mean(axis=0), ci95(on_grid)


def draw_group_means(
    groups: Sequence[Group],
    curves: Sequence[Curve],
    means: Sequence[np.ndarray],
    axes: tuple[Any, Any],
    unit: float,
    names: Sequence[str],
    handles: list[Any],
) -> list[str]:
    """Draw each group's mean curve (thick) and its band in both panels, where all its runs
    have a value; the legend's names, each saying what was drawn: where a group's runs share
    no stretch of wall time (or frames) no mean is drawn there, which a line says (the
    legend said "mean of 4" of a curve not drawn, explore101). ``handles``: the groups' legend
    lines, set as thick as what was drawn."""
    bands: list[tuple[Any, np.ndarray, np.ndarray, np.ndarray, str]] = []
    out = []
    for k, g in enumerate(groups):
        runs = [curves[i] for i in g.members]
        ys = [means[i] for i in g.members]
        color, dashes = line_style(k)
        drawn = []
        for ax, xs, what in (
            (axes[0], [c.frames for c in runs], "frames"),
            (axes[1], [c.seconds / unit for c in runs], "wall time"),
        ):
            got = mean_curve(xs, ys)
            if got is None:
                print(
                    f"rltrain: plot: --group {g.label}: its runs share no stretch of {what}; "
                    "no mean curve drawn against it",
                    file=sys.stderr,
                )
                continue
            x, y, h = got
            ax.plot(x, y, color=color, ls=dashes, lw=2.4)
            drawn.append(what)
            if len(runs) > 1:  # the 95% interval of the mean, pointwise
                bands.append((ax, x, y - h, y + h, color))
        of = of_runs(len(runs), "mean") + (", 95% CI shaded" if len(runs) > 1 else "")
        if len(drawn) == 1:
            of += f"; against {drawn[0]} only"
        out.append(f"{names[k]} ({of})" if drawn else f"{names[k]} ({len(runs)} runs, no mean)")
        handles[k].set_linewidth(2.4 if drawn else 0.9)  # (as its thick line, or its runs')
    for ax in axes:  # the axes the curves take: 2 seeds' band (t = 12.7) runs
        ax.set_ylim(ax.get_ylim())  # off them, and the curves would be a flat line
    for ax, x, low, high, color in bands:
        ax.fill_between(x, low, high, color=color, alpha=0.15, lw=0)
    return out
