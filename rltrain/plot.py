"""`rltrain plot`: learning curves of RL runs (:mod:`rltrain.curves` reads them) drawn
against frames and against wall time, one line per run (:func:`draw`), so runs can be
compared by sample cost and by time; with the time-to-score and evaluation tables.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from rltrain.charts import pyplot
from rltrain.curves import Curve, NoEpisodesYet, PlotError, read_curve
from rltrain.plot_evals import scoring_notes
from rltrain.plot_groups import Group, draw_group_means, groups_of, mean_sd, of_runs, say_unlike
from rltrain.plot_style import (
    FIG_WIDTH,
    PANELS_HEIGHT,
    add_legend,
    distinct_labels,
    legend_labels,
    line_style,
    time_axis,
)


def moving_mean(values: np.ndarray, window: int) -> np.ndarray:
    """[N] mean of the last ``window`` values at each point (fewer at the start): the mean
    return that the live line and ``stop.mean_return`` use."""
    bad = ~np.isfinite(values)  # a NaN/inf score spoils the windows it is in, not the rest
    sums = np.cumsum(np.concatenate([[0.0], np.where(bad, 0.0, values)]))
    bads = np.cumsum(np.concatenate([[0], bad]))
    ends = np.arange(1, len(values) + 1)
    starts = np.maximum(ends - window, 0)
    means = (sums[ends] - sums[starts]) / (ends - starts)
    return np.where(bads[ends] > bads[starts], np.nan, means)


@dataclass(frozen=True)
class Reached:
    """When a run's mean return (over a full window of episodes) first reached a mark."""

    mark: float
    seconds: float | None  # running seconds (downtime left out); None: not reached
    frames: float | None


def time_to_marks(c: Curve, marks: Sequence[float]) -> list[Reached]:
    """For each mark, the first episode at which the mean of the last ``c.window`` episodes
    is at least the mark, counted as ``stop.mean_return`` counts it: only once ``window``
    episodes have ended, and every env has ended a game since its session (or a restarted
    actor) began, as ``c.judged`` says (a round's first games to end are its shortest:
    :class:`rltrain.rl.rollout.FirstRound`)."""
    window = c.window
    mean = moving_mean(c.returns, window)
    full = np.arange(len(mean)) >= window - 1
    # the stop looks after each batch of steps, at the mean of its last episode: not between
    # episodes that ended at one step (a mark was 0.7k frames early there, explore83)
    full &= np.r_[c.frames[1:] != c.frames[:-1], True]
    if c.judged is not None:
        full &= c.judged
    out = []
    for m in marks:
        hit = np.flatnonzero(full & (mean >= m))
        i = int(hit[0]) if len(hit) else None
        out.append(
            Reached(m, None, None)
            if i is None
            else Reached(m, float(c.seconds[i]), float(c.frames[i]))
        )
    return out


def _count(n: float, digits: int = 3) -> str:
    """1234567 as 1.23M, 45600 as 45.6k: frames as the tables write them."""
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= div:
            return f"{n / div:.{digits}g}{unit}"
    return f"{n:.{digits}g}"


def _duration(seconds: float, unit: float) -> str:
    """``seconds`` in the table's ``unit`` (:func:`~rltrain.plot_style.time_axis`'s divisor)."""
    if unit == 3600.0:
        return f"{seconds / 3600:.2f} h"
    return f"{seconds / 60:.1f} min" if unit == 60.0 else f"{seconds:.0f} s"


def marks_table(
    curves: Sequence[Curve], marks: Sequence[float], groups: Sequence[Group] = ()
) -> str:
    """A Markdown table, one row per run: its frames/s (frames of the last episode over the
    running time to it), the wall time and frames at which the mean of the last ``window``
    episodes (each run's) first reached each mark, and where it ended: the mean of its last
    ``window`` episodes, or of all of them when it has fewer (the header says how many; where
    the runs differ, "up to" the largest, and each run that differs says its count)."""
    unit, _ = time_axis(max(float(c.seconds.max()) for c in curves))
    head = [f"{m:+g}" for m in marks]
    counts = {min(c.window, len(c.returns)) for c in curves}  # a run may have fewer episodes
    mixed = len(counts) > 1
    of = f"up to {max(counts)}" if mixed else f"{min(counts)}"
    lines = [
        f"| run | frames/s | {' | '.join(head)} | last (mean of {of}) |",
        "|---" * (len(marks) + 3) + "|",
    ]
    for c in curves:
        rate = c.frames[-1] / c.seconds[-1] if c.seconds[-1] > 0 else float("nan")
        cells = [
            f"{_duration(r.seconds, unit)}, {_count(r.frames)}"
            if r.seconds is not None and r.frames is not None
            else "not reached"
            for r in time_to_marks(c, marks)
        ]
        last, n = moving_mean(c.returns, c.window)[-1], min(c.window, len(c.returns))
        end = f"{last:.1f}" + (f" (of {n})" if mixed and n < max(counts) else "")
        end += f" at {_duration(float(c.seconds[-1]), unit)}, {_count(c.frames[-1])}"
        lines.append(f"| {c.label} | {_count(rate)} | {' | '.join(cells)} | {end} |")
    lines += [_group_marks(g, [curves[i] for i in g.members], marks, unit) for g in groups]
    return "\n".join(lines)


def _group_marks(g: Group, curves: Sequence[Curve], marks: Sequence[float], unit: float) -> str:
    """A group's row of the marks table: per mark the mean wall time and the frames' mean +-
    sd over its runs that reached it (k/n when only k of n did); its mean last score."""
    rates = [c.frames[-1] / c.seconds[-1] for c in curves if c.seconds[-1] > 0]
    reached = [time_to_marks(c, marks) for c in curves]
    cells = []
    for k in range(len(marks)):
        hit = [r[k] for r in reached if r[k].seconds is not None and r[k].frames is not None]
        if not hit:
            cells.append("not reached")
            continue
        frames = [float(r.frames) for r in hit]  # type: ignore[arg-type]
        seconds = float(np.mean([r.seconds for r in hit]))
        spread = f" +- {_count(float(np.std(frames, ddof=1)))}" if len(hit) > 1 else ""
        some = f" ({len(hit)}/{len(curves)})" if len(hit) < len(curves) else ""
        cells.append(f"{_duration(seconds, unit)}, {_count(float(np.mean(frames)))}{spread}{some}")
    last = mean_sd([float(moving_mean(c.returns, c.window)[-1]) for c in curves])
    rate = _count(float(np.mean(rates))) if rates else "-"
    runs = f"{len(curves)} runs" if len(curves) > 1 else "1 run"
    return f"| **{g.label}** ({runs}) | {rate} | {' | '.join(cells)} | {last} |"


def evals_table(curves: Sequence[Curve], groups: Sequence[Group] = ()) -> str:
    """A Markdown table of the evaluations during training (``eval/mean_return``): one row
    per evaluation (its frames, rounded down to the run's ``eval.every_steps``: an evaluation
    runs at the first batch past each multiple; the final one at a stop between two
    multiples, at its own frames), one column per run (the mean score of its games) and, for
    several runs, their mean and standard deviation where every run was evaluated: seeds of
    one setting give that setting's curve and its spread."""
    rows: dict[int, dict[int, float]] = {}
    stops: set[int] = set()  # rows at a stop's own frames
    for i, c in enumerate(curves):
        frames, _, means = c.evals
        seen: dict[int, int] = {}  # row -> the frames of the evaluation in it
        for f, m in zip(frames.tolist(), means.tolist(), strict=True):
            # a scheduled one's row is its multiple of eval.every_steps (it lands just after);
            # a stop's before the first multiple keeps its own frames (not row 0)
            at = int(f) // c.eval_every * c.eval_every if 0 < c.eval_every <= f else int(f)
            if int(f) in c.eval_stops or seen.setdefault(at, int(f)) != int(f):  # a stop's
                at = int(f)
                stops.add(at)
            rows.setdefault(at, {})[i] = float(m)  # a resume's re-evaluation: the last
    if not rows:
        raise PlotError(
            "--evals: no evaluations during training in "
            f"{', '.join(c.label for c in curves)} (eval/mean_return; set eval.every_steps)"
        )
    # the spread over every run (seeds of one setting), or over each group's (--group)
    pooled = [Group(f"mean +- sd of {len(curves)}", tuple(range(len(curves))))]
    spreads = list(groups) or (pooled if len(curves) > 1 else [])
    head = [c.label for c in curves]
    spread = [f"{g.label} ({of_runs(len(g.members), 'mean +- sd')})" for g in spreads]
    head += spread if groups else [g.label for g in spreads]
    lines = [f"| frames | {' | '.join(head)} |", "|---" * (len(head) + 1) + "|"]
    for at in sorted(rows):
        got = rows[at]
        cells = [f"{got[i]:.1f}" if i in got else "-" for i in range(len(curves))]
        for g in spreads:  # where every run of the group has a value
            full = all(i in got for i in g.members)
            cells.append(mean_sd([got[i] for i in g.members]) if full else "-")
        label = f"{_count(at, 4)} (stop)" if at in stops else _count(at)
        lines.append(f"| {label} | {' | '.join(cells)} |")
    # each run's stop evaluation in one row, where their own rows part them (explore111)
    ends = [(i, c.evals) for i, c in enumerate(curves) if len(c.evals[0])]
    last = {i: float(e[2][-1]) for i, e in ends if int(e[0][-1]) in curves[i].eval_stops}
    if len({r for r in stops if rows[r].keys() & last}) > 1 and spreads:
        cells = [f"{last[i]:.1f}" if i in last else "-" for i in range(len(curves))]
        cells += [
            mean_sd(v) if (v := [last[i] for i in g.members if i in last]) else "-" for g in spreads
        ]
        lines.append(f"| each run's stop | {' | '.join(cells)} |")
    return "\n".join(lines)


def draw(
    curves: Sequence[Curve], out: Path, title: str | None = None, groups: Sequence[Group] = ()
) -> Path | None:
    """Write a PNG with two panels, return vs frames and return vs wall time; per run the
    raw returns faintly and their moving mean over its ``window`` episodes as a line (from
    its first full window), each run (or group) a colour and line style of its own
    (:func:`rltrain.plot_style.line_style`); one legend below the panels. With ``groups``, a
    colour per group: its runs' means thin, and their mean as a thick line. None without
    matplotlib."""
    plt = pyplot()
    if plt is None:
        return None
    from matplotlib.lines import Line2D
    from matplotlib.ticker import EngFormatter

    names = legend_labels([g.label for g in groups] if groups else [c.label for c in curves])
    fig = plt.figure(figsize=(FIG_WIDTH, PANELS_HEIGHT), dpi=110, layout="constrained")
    by_frames, by_time = fig.subplots(1, 2, sharey=True)
    unit, time_label = time_axis(max(float(c.seconds.max()) for c in curves))
    group_of = {i: k for k, g in enumerate(groups) for i in g.members}
    means = [full_window_mean(c) for c in curves]
    for i, c in enumerate(curves):
        color, dashes = line_style(group_of.get(i, i))
        for ax, x in ((by_frames, c.frames), (by_time, c.seconds / unit)):
            if c.window > 1 and not groups:
                ax.plot(x, c.returns, color=color, lw=0.6, alpha=0.25)
            ax.plot(x, means[i], color=color, ls=dashes, lw=0.9 if groups else 1.6)
        e_frames, e_seconds, e_means = c.evals
        for ax, x in ((by_frames, e_frames), (by_time, e_seconds / unit)):
            if len(x):  # the evaluations during training: dots on the run's line
                ax.plot(x, e_means, "o", color=color, ms=4, mfc="white")
    handles = [Line2D([], [], color=c, ls=d, lw=1.6) for c, d in map(line_style, range(len(names)))]
    if groups:
        names = draw_group_means(groups, curves, means, (by_frames, by_time), unit, names, handles)
    if any(len(c.evals[0]) for c in curves):  # one entry, the dots in their run's colour (a
        # group's went with its first run, which may have had no evaluation: explore101)
        handles.append(Line2D([], [], color="grey", marker="o", ms=4, mfc="white", ls=""))
        names.append("evaluations during training")
    by_frames.set_xlabel("frames")
    by_frames.xaxis.set_major_formatter(EngFormatter())  # 2M, not 2 x 1e6
    by_time.set_xlabel(time_label)
    windows = sorted({c.window for c in curves})
    last = "/".join(map(str, windows))
    ylabel = "episode return" + (f" (mean of last {last})" if windows != [1] else "")
    by_frames.set_ylabel(ylabel)
    for ax in (by_frames, by_time):
        ax.grid(alpha=0.3)
    add_legend(fig, handles, names, title)
    try:
        fig.savefig(out, format=out_format(out))
    except OSError as e:
        raise PlotError(f"cannot write {out}: {e.strerror or e}") from None
    finally:
        plt.close(fig)
    return out


def full_window_mean(c: Curve) -> np.ndarray:
    """[N] the moving mean drawn for a run: NaN (not drawn) before its first full window of
    ``c.window`` episodes, as the y-axis names it (a run with fewer episodes: from its first)."""
    mean = moving_mean(c.returns, c.window)
    start = c.window - 1 if len(mean) >= c.window else 0
    return np.where(np.arange(len(mean)) >= start, mean, np.nan)


FORMATS = ("png", "svg", "pdf")
"""What ``--out``'s suffix may ask for (matplotlib writes each without a further package)."""


def out_format(out: Path) -> str:
    """The image format ``out``'s suffix names; another is a :class:`PlotError` (an .svg file
    held PNG bytes)."""
    fmt = out.suffix.lower().removeprefix(".")
    if fmt not in FORMATS:
        allowed = ", ".join(f".{f}" for f in FORMATS)
        raise PlotError(f"--out {out}: the suffix names the image format; use {allowed}")
    return fmt


def once_each(run_dirs: Sequence[Path]) -> list[Path]:
    """The runs, each once (``r1 r1/``, overlapping globs): a run given twice would count as
    two seeds in --evals' mean and spread. Says which were given twice."""
    seen: dict[Path, Path] = {}
    for d in run_dirs:
        key = d.resolve() if d.exists() else d
        if key in seen:
            again = "given twice" if str(d) == str(seen[key]) else f"is {seen[key]} again"
            print(f"rltrain: plot: {d} {again}: read once", file=sys.stderr)
        seen.setdefault(key, d)
    return list(seen.values())


def unique_labels(curves: Sequence[Curve]) -> list[Curve]:
    """Curves whose labels (their folders' names) repeat, labelled with as many folders above
    them as tell them apart (``a/x/run``, ``b/x/run``), so that the legend, the tables and
    the CSV tell them apart (:func:`rltrain.plot_style.distinct_labels`)."""
    labels = distinct_labels([c.label for c in curves], [c.folder for c in curves])
    return [replace(c, label=x) for c, x in zip(curves, labels, strict=True)]


def _read_runs(
    run_dirs: Sequence[Path], evals_too: bool
) -> tuple[list[Curve], list[bool], list[NoEpisodesYet]]:
    """Every run's curve, whether it has episodes (else, with ``evals_too``, its evaluations
    alone, for the --evals table and the CSV), and the errors of the runs without episodes."""
    read, ended, early = [], [], []
    for d in run_dirs:
        try:
            read.append(read_curve(d))
            ended.append(True)
        except NoEpisodesYet as e:  # beside runs that have curves: left out, said
            kept = None
            if evals_too:  # its evaluations, if any, still make its column and its rows
                with contextlib.suppress(NoEpisodesYet):
                    kept = read_curve(d, evals_only=True)
            if kept is not None:  # (said so: review 85)
                read.append(kept)
                ended.append(False)
                e = NoEpisodesYet(f"{e}: its evaluations are kept (tables, --csv)")
            early.append(e)
    return read, ended, early


def default_output(run_dirs: Sequence[Path]) -> Path:
    """``RUN/returns.png`` for one run, ``./returns.png`` for several."""
    return run_dirs[0] / "returns.png" if len(run_dirs) == 1 else Path("returns.png")


def plot_runs(
    run_dirs: Sequence[Path],
    out: Path | None = None,
    title: str | None = None,
    window: int | None = None,
    marks: Sequence[float] = (),
    evals: bool = False,
    group: Sequence[str] = (),
    csv: Path | None = None,
) -> tuple[Path | None, str]:
    """Read every run (all errors before anything is drawn; a run without episodes yet is
    left out beside others, with a line) and write the PNG; its path (None
    without matplotlib), and the tables asked for ("" for none): with ``marks`` the
    time-to-score table (:func:`marks_table`), with ``evals`` the evaluations'
    (:func:`evals_table`). ``window``: the episodes of every run's mean (None: each run's
    own, :func:`run_window`). ``group``: config keys whose values group the runs
    (:mod:`rltrain.plot_groups`); ``csv``: a file for the curves as a table
    (:mod:`rltrain.plot_csv`)."""
    if out is not None:  # (checked before any run is read)
        out = out / "returns.png" if out.is_dir() else out  # (it wrote FOLDER.png beside it)
        out = out if out.suffix else out.with_name(f"{out.name}.png")  # (a PNG without .png)
        out_format(out)
    if csv is not None and out is not None and csv.absolute() == out.absolute():
        raise PlotError(f"--csv {csv}: the image (--out) goes there too; give them two names")
    run_dirs = once_each(run_dirs)
    read, ended, early = _read_runs(run_dirs, evals_too=evals or csv is not None)
    if early and not any(ended) and not read:  # nothing to draw, tabulate or write
        said = f"; --csv {csv}: not written" if csv is not None else ""
        raise NoEpisodesYet(f"{early[0]}{said}")
    for why in early:
        print(f"rltrain: plot: left out {why}", file=sys.stderr)
    if window is not None:
        read = [replace(c, window=window) for c in read]
    for c in (c for c in read if window and 0 < len(c.returns) < window):  # (explore107)
        print(
            f"rltrain: plot: --smooth {window}: {c.label} has {len(c.returns):,} episodes: drawn"
            " as the mean of all so far, not judged by --marks",
            file=sys.stderr,
        )
    evaluated = unique_labels(read)  # (over every run read: the plot, tables and CSV agree)
    curves = [c for c, has in zip(evaluated, ended, strict=True) if has]
    if not curves and (marks or out is not None):  # only evaluations: nothing to draw
        asked = " and ".join(f for f, on in (("--marks", marks), ("--out", out)) if on)
        print(f"rltrain: plot: {asked}: no episode has ended in these runs", file=sys.stderr)
    groups = groups_of(curves, group, say=True) if group else []
    tables = [marks_table(curves, marks, groups)] if marks and curves else []
    if evals:  # beside runs evaluated, one never evaluated is left out of the table, said
        shown = [c for c in evaluated if len(c.evals[0])]
        left = [c.label for c in evaluated if not len(c.evals[0])]
        if not shown:
            evals_table(evaluated)  # its one-line error: none was evaluated
        if left:
            print(
                f"rltrain: plot: --evals: no evaluations during training in {', '.join(left)} "
                "(eval/mean_return; set eval.every_steps)",
                file=sys.stderr,
            )
        for c in shown:  # (a resume that changed eval.* or the protocol: scores on two scales)
            for note in scoring_notes(c.folder, c.label) if c.folder is not None else []:
                print(f"rltrain: plot: --evals: {note}", file=sys.stderr)
        if not group:  # (their mean +- sd: the seeds of one setting)
            say_unlike(shown, "--evals' mean +- sd")
        tables.append(evals_table(shown, groups_of(shown, group) if group else []))
    if csv is not None:  # every run read: one evaluated before its first episode ended
        from rltrain.plot_csv import write_curves_csv  # has its eval rows (explore101)

        same = len(evaluated) == len(curves) or not group
        kept = groups if same else groups_of(evaluated, group)
        write_curves_csv(csv, evaluated, [full_window_mean(c) for c in evaluated], kept)
    png = None
    if curves:  # (only evaluations: the table alone)
        png = draw(curves, out if out is not None else default_output(run_dirs), title, groups)
    return png, "\n\n".join(tables)
