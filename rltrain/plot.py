"""`rltrain plot`: learning curves of RL runs, read from their TensorBoard event files.

A run's trainer (:mod:`rltrain.rl.run.tblog`) writes every finished episode's raw score as the
scalar ``episode/return`` with the run's env-step count as its step. This module reads those
scalars back (:func:`read_curve`) and draws episode return against frames and against wall
time, one line per run (:func:`draw`), so runs can be compared by sample cost and by time.

Frames are env steps x ``env.frame_skip`` for Atari ids (each agent step is that many
emulator frames) and env steps for every other id, as the run's ``summary.json`` counts
``env_frames``. Wall time is the time the run was running: each event's time since the run's
first event, less the downtime between a stopped run and its ``--resume``, which writes on
into the same ``tb/`` folder: the time from one session's last event to the next session's
``session/start`` mark (:func:`running_seconds`); the episodes the stopped run logged after
the checkpoint it resumed from are dropped (:func:`after_rewinds`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from rltrain.charts import pyplot
from rltrain.errors import RLTrainError

RETURN_TAG = "episode/return"
"""The scalar tag of episode scores, as :class:`rltrain.rl.run.tblog.TrainLogger` writes it."""
EVAL_TAG = "eval/mean_return"
"""The mean score of each evaluation during training (``eval.every_steps``), drawn as dots."""
TB_DIR = "tb"
SESSION_TAG = "session/start"
"""Written first by each session of a run (:data:`rltrain.rl.run.tblog.SESSION_TAG`)."""
HEARTBEAT_TAG = "perf/env_fps"
"""A scalar a live run writes every ``log_every_seconds``: in a run written before sessions
were marked, silences of more than ``DOWNTIME_S`` in it are taken for downtime."""
DOWNTIME_S = 120.0


class PlotError(RLTrainError):
    """A run that cannot be plotted (not a run directory, no events, no episodes yet)."""


@dataclass(frozen=True)
class Curve:
    """One run's episode returns, in the order they were logged."""

    label: str
    """The run directory's name."""
    frames: np.ndarray
    """[N] emulator frames (env steps x frame skip; env steps for non-Atari ids)."""
    seconds: np.ndarray
    """[N] wall-clock seconds since the run's first TensorBoard event."""
    returns: np.ndarray
    """[N] raw episode scores."""
    evals: tuple[np.ndarray, np.ndarray, np.ndarray] = (np.zeros(0), np.zeros(0), np.zeros(0))
    """The evaluations during training, if any: ([E] frames, [E] seconds, [E] mean scores)."""
    eval_every: int = 0
    """Frames between evaluations (``eval.every_steps`` x frame skip; 0: not known)."""


def run_config(run_dir: Path) -> dict[str, Any]:
    """A run's ``config.yaml`` as plain YAML, not the typed config, so that runs written by an
    older rltrain (other options) still plot."""
    path = run_dir / "config.yaml"
    try:
        cfg = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise PlotError(
            f"{run_dir}: not a run directory (no config.yaml in it); give a folder written by "
            "`rltrain train`"
        ) from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise PlotError(f"{path}: cannot read it ({' '.join(str(e).split())})") from None
    return cfg if isinstance(cfg, dict) else {}


def _section(cfg: dict[str, Any], key: str) -> dict[str, Any]:
    value = cfg.get(key)
    return value if isinstance(value, dict) else {}


def frames_per_step(run_dir: Path, cfg: dict[str, Any] | None = None) -> int:
    """Emulator frames per env step of a run: its ``env.frame_skip`` for Atari ids, else 1
    (``cfg``: its :func:`run_config`, if already read)."""
    env = _section(run_config(run_dir) if cfg is None else cfg, "env")
    from rltrain.envs.atari import is_atari_v5  # imports ale-py: only when a run is read

    if not is_atari_v5(str(env.get("id", ""))):
        return 1
    skip = env.get("frame_skip", 4)  # EnvConfig's default
    if not isinstance(skip, int) or isinstance(skip, bool) or skip < 1:
        raise PlotError(
            f"{run_dir / 'config.yaml'}: env.frame_skip={skip!r} is not a whole number >= 1"
        )
    return skip


def eval_every_steps(cfg: dict[str, Any]) -> int:
    """Env steps between a run's evaluations during training (its :func:`run_config`'s
    ``eval.every_steps``; 0: none or unknown)."""
    every = _section(cfg, "eval").get("every_steps", 0)
    if not isinstance(every, int) or isinstance(every, bool) or every < 1:
        return 0
    return every


def read_curve(run_dir: Path) -> Curve:
    """A run's ``episode/return`` scalars from every event file in ``run_dir/tb``."""
    from tensorboard.backend.event_processing import event_accumulator as ea

    if not run_dir.is_dir():
        why = "it is a file" if run_dir.exists() else "it does not exist"
        raise PlotError(f"{run_dir}: not a run directory ({why})")
    cfg = run_config(run_dir)  # read once
    skip = frames_per_step(run_dir, cfg)
    tb = run_dir / TB_DIR
    if not any(tb.glob("*tfevents*")):
        bench = any(tb.glob("*/*tfevents*")) and (run_dir / "results.md").is_file()
        raise PlotError(
            f"{run_dir}: a `rltrain bench` run (one TensorBoard run per mode in {tb}): its "
            f"results are in {run_dir / 'results.md'}; tensorboard --logdir {tb} shows them"
            if bench
            else f"{run_dir}: no TensorBoard events in {tb}; has `rltrain train` started there?"
        )
    # size_guidance 0 keeps every scalar (the default samples 10,000 of them); the rest is
    # not needed
    keep = {ea.SCALARS: 0, ea.TENSORS: 1, ea.HISTOGRAMS: 1, ea.IMAGES: 1, ea.AUDIO: 1}
    acc = ea.EventAccumulator(str(tb), size_guidance=keep)
    acc.Reload()
    if RETURN_TAG not in acc.Tags().get(ea.SCALARS, []):
        raise PlotError(f"{run_dir}: no {RETURN_TAG} in {tb} yet (no episode has ended)")
    start = acc.FirstEventTimestamp()
    tags = acc.Tags().get(ea.SCALARS, [])

    def stamps(*names: str) -> np.ndarray:
        """The wall times of every event of these scalar tags."""
        found = [e.wall_time for t in names if t in tags for e in acc.Scalars(t)]
        return np.array(found, dtype=np.float64)

    sessions = stamps(SESSION_TAG)
    # marked sessions: every event, so that each one's last is known; else the heartbeat
    beats = stamps(*tags) if len(sessions) else stamps(HEARTBEAT_TAG)

    def series(tag: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(frames, running seconds, values) of one scalar tag, rewinds dropped."""
        events = acc.Scalars(tag) if tag in tags else []
        steps = np.array([e.step for e in events], dtype=np.int64)
        keep = after_rewinds(steps)
        times = np.array([e.wall_time for e in events], dtype=np.float64)
        values = np.array([e.value for e in events], dtype=np.float64)
        seconds = running_seconds(times, beats, start, sessions)
        return steps[keep] * skip, seconds[keep], values[keep]

    frames, seconds, returns = series(RETURN_TAG)
    evals = series(EVAL_TAG)
    return Curve(
        run_dir.resolve().name, frames, seconds, returns, evals, eval_every_steps(cfg) * skip
    )


def running_seconds(
    times: np.ndarray, beats: np.ndarray, start: float, sessions: np.ndarray | None = None
) -> np.ndarray:
    """Seconds the run was running up to each of ``times`` (wall-clock stamps): the time
    since ``start`` less the downtime between its sessions. ``sessions``: the stamps of the
    ``session/start`` marks; the time from each mark back to the event before it (among
    ``beats``, ``times`` and the marks) is downtime, however short or long. Before the first
    mark (a run begun by an older rltrain, which wrote none) every stretch of more than
    ``DOWNTIME_S`` without an event is taken for downtime instead (a live run writes
    ``perf/`` scalars, ``beats``, every ``log_every_seconds``)."""
    marks = np.zeros(0) if sessions is None else np.asarray(sessions, dtype=np.float64)
    stamps = np.sort(np.concatenate([beats, times, marks, [start]]))
    gaps, after = np.diff(stamps), stamps[1:]
    first = marks.min() if len(marks) else np.inf
    unmarked = (gaps > DOWNTIME_S) & (after < first)
    idle = np.where(np.isin(after, marks) | unmarked, gaps, 0.0)
    downtime = np.concatenate([[0.0], np.cumsum(idle)])  # [len(stamps)] before each stamp
    before = downtime[np.searchsorted(stamps, times, side="right") - 1]
    return times - start - before


def after_rewinds(steps: np.ndarray) -> np.ndarray:
    """Indices of the points to keep when the step count goes back: a run resumed from a
    checkpoint counts on from the checkpoint's env steps, so the episodes its stopped
    predecessor logged after that checkpoint were never counted and are dropped (as
    TensorBoard does: a resumed run's writer purges the steps after its checkpoint's). Equal
    steps are kept: the episodes that end in one batch are logged at one step."""
    kept: list[int] = []
    for i, step in enumerate(steps):
        while kept and steps[kept[-1]] > step:
            kept.pop()
        kept.append(i)
    return np.array(kept, dtype=np.int64)


def moving_mean(values: np.ndarray, window: int) -> np.ndarray:
    """[N] mean of the last ``window`` values at each point (fewer at the start): the mean
    return that the live line and ``stop.mean_return`` use."""
    sums = np.cumsum(np.concatenate([[0.0], values]))
    ends = np.arange(1, len(values) + 1)
    starts = np.maximum(ends - window, 0)
    return (sums[ends] - sums[starts]) / (ends - starts)


@dataclass(frozen=True)
class Reached:
    """When a run's mean return (over a full window of episodes) first reached a mark."""

    mark: float
    seconds: float | None  # running seconds (downtime left out); None: not reached
    frames: float | None


def time_to_marks(c: Curve, marks: Sequence[float], window: int = 20) -> list[Reached]:
    """For each mark, the first episode at which the mean of the last ``window`` episodes is
    at least the mark, counted as ``stop.mean_return`` counts it: only once ``window``
    episodes have ended (an early lucky episode is not a mean)."""
    mean = moving_mean(c.returns, window)
    full = np.arange(len(mean)) >= window - 1
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


def _count(n: float) -> str:
    """1234567 as 1.23M, 45600 as 45.6k: frames as the tables write them."""
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= div:
            return f"{n / div:.3g}{unit}"
    return f"{n:.3g}"


def _duration(seconds: float, unit: float) -> str:
    """``seconds`` in the table's ``unit`` (:func:`_time_axis`'s divisor)."""
    if unit == 3600.0:
        return f"{seconds / 3600:.2f} h"
    return f"{seconds / 60:.1f} min" if unit == 60.0 else f"{seconds:.0f} s"


def marks_table(curves: Sequence[Curve], marks: Sequence[float], window: int = 20) -> str:
    """A Markdown table, one row per run: its frames/s (frames of the last episode over the
    running time to it), the wall time and frames at which the mean of the last ``window``
    episodes first reached each mark, and where it ended: the mean of its last ``window``
    episodes, or of all of them when it has fewer (the header says how many; where the runs
    differ, "up to" ``window``, and each run with fewer says its count)."""
    unit, _ = _time_axis(max(float(c.seconds.max()) for c in curves))
    head = [f"{m:+g}" for m in marks]
    counts = {min(window, len(c.returns)) for c in curves}  # a run may have fewer episodes
    mixed = len(counts) > 1
    of = f"up to {window}" if mixed else f"{min(counts)}"
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
            for r in time_to_marks(c, marks, window)
        ]
        last, n = moving_mean(c.returns, window)[-1], min(window, len(c.returns))
        end = f"{last:.1f}" + (f" (of {n})" if mixed and n < window else "")
        end += f" at {_duration(float(c.seconds[-1]), unit)}, {_count(c.frames[-1])}"
        lines.append(f"| {c.label} | {_count(rate)} | {' | '.join(cells)} | {end} |")
    return "\n".join(lines)


def evals_table(curves: Sequence[Curve]) -> str:
    """A Markdown table of the evaluations during training (``eval/mean_return``): one row
    per evaluation (its frames, rounded down to the run's ``eval.every_steps``: an evaluation
    runs at the first batch past each multiple), one column per run (the mean score of its
    games) and, for several runs, their mean and standard deviation where every run was
    evaluated: seeds of one setting give that setting's curve and its spread."""
    rows: dict[int, dict[int, float]] = {}
    for i, c in enumerate(curves):
        frames, _, means = c.evals
        for f, m in zip(frames.tolist(), means.tolist(), strict=True):
            at = int(f) // c.eval_every * c.eval_every if c.eval_every else int(f)
            rows.setdefault(at, {})[i] = float(m)  # a resume's re-evaluation: the last
    if not rows:
        raise PlotError(
            "--evals: no evaluations during training in "
            f"{', '.join(c.label for c in curves)} (eval/mean_return; set eval.every_steps)"
        )
    several = len(curves) > 1
    head = [c.label for c in curves] + ([f"mean +- sd of {len(curves)}"] if several else [])
    lines = [f"| frames | {' | '.join(head)} |", "|---" * (len(head) + 1) + "|"]
    for at in sorted(rows):
        got = rows[at]
        cells = [f"{got[i]:.1f}" if i in got else "-" for i in range(len(curves))]
        if several:
            every = [got[i] for i in range(len(curves)) if i in got]
            full = len(every) == len(curves)
            cells.append(f"{np.mean(every):.1f} +- {np.std(every, ddof=1):.1f}" if full else "-")
        lines.append(f"| {_count(at)} | {' | '.join(cells)} |")
    return "\n".join(lines)


def _time_axis(seconds_max: float) -> tuple[float, str]:
    """(divisor, label) of the wall-time axis: seconds, minutes or hours."""
    if seconds_max >= 3 * 3600:
        return 3600.0, "wall time (h)"
    if seconds_max >= 3 * 60:
        return 60.0, "wall time (min)"
    return 1.0, "wall time (s)"


def draw(
    curves: Sequence[Curve], out: Path, title: str | None = None, window: int = 20
) -> Path | None:
    """Write a PNG with two panels, return vs frames and return vs wall time; per run the
    raw returns faintly and their moving mean over ``window`` episodes as a line. None
    without matplotlib."""
    plt = pyplot()
    if plt is None:
        return None
    from matplotlib.ticker import EngFormatter

    fig, (by_frames, by_time) = plt.subplots(1, 2, figsize=(12, 4.5), dpi=110, sharey=True)
    unit, time_label = _time_axis(max(float(c.seconds.max()) for c in curves))
    for i, c in enumerate(curves):
        color = f"C{i % 10}"
        mean = moving_mean(c.returns, window)
        for ax, x in ((by_frames, c.frames), (by_time, c.seconds / unit)):
            if window > 1:
                ax.plot(x, c.returns, color=color, lw=0.6, alpha=0.25)
            ax.plot(x, mean, color=color, lw=1.6, label=c.label)
        e_frames, e_seconds, e_means = c.evals
        for ax, x in ((by_frames, e_frames), (by_time, e_seconds / unit)):
            if len(x):  # the evaluations during training: dots on the run's line
                ax.plot(x, e_means, "o", color=color, ms=4, mfc="white", label=f"{c.label} eval")
    by_frames.set_xlabel("frames")
    by_frames.xaxis.set_major_formatter(EngFormatter())  # 2M, not 2 x 1e6
    by_time.set_xlabel(time_label)
    ylabel = "episode return" + (f" (mean of last {window})" if window > 1 else "")
    by_frames.set_ylabel(ylabel)
    for ax in (by_frames, by_time):
        ax.grid(alpha=0.3)
    by_frames.legend(loc="best", fontsize="small")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    try:
        fig.savefig(out, format="png")
    except OSError as e:
        raise PlotError(f"cannot write {out}: {e.strerror or e}") from None
    finally:
        plt.close(fig)
    return out


def default_output(run_dirs: Sequence[Path]) -> Path:
    """``RUN/returns.png`` for one run, ``./returns.png`` for several."""
    return run_dirs[0] / "returns.png" if len(run_dirs) == 1 else Path("returns.png")


def plot_runs(
    run_dirs: Sequence[Path],
    out: Path | None = None,
    title: str | None = None,
    window: int = 20,
    marks: Sequence[float] = (),
    evals: bool = False,
) -> tuple[Path | None, str]:
    """Read every run (all errors before anything is drawn) and write the PNG; its path (None
    without matplotlib), and the tables asked for ("" for none): with ``marks`` the
    time-to-score table (:func:`marks_table`), with ``evals`` the evaluations'
    (:func:`evals_table`)."""
    curves = [read_curve(d) for d in run_dirs]
    tables = [marks_table(curves, marks, window)] if marks else []
    tables += [evals_table(curves)] if evals else []
    png = draw(curves, out if out is not None else default_output(run_dirs), title, window)
    return png, "\n\n".join(tables)
