"""A run's learning curve, read back from its TensorBoard event files (``rltrain plot``).

A run's trainer (:mod:`rltrain.rl.run.tblog`) writes every finished episode's raw score as the
scalar ``episode/return`` with the run's env-step count as its step. :func:`read_curve` reads
those scalars back, with the evaluations during training, as one :class:`Curve`.

Frames are env steps x ``env.frame_skip`` for Atari ids (each agent step is that many
emulator frames) and env steps for every other id, as the run's ``summary.json`` counts
``env_frames``. Wall time is the time the run was running: each event's time since the run's
first event, less the downtime between a stopped run and its ``--resume``, which writes on
into the same ``tb/`` folder: the time from one session's last event to the next session's
``session/start`` mark (:func:`running_seconds`); the episodes the stopped run logged after
the checkpoint it resumed from are dropped (:func:`after_rewinds`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from shlex import quote
from typing import Any

import numpy as np
import yaml

from rltrain.errors import RLTrainError
from rltrain.plot_evals import stop_evaluations
from rltrain.rundir import sized_actors

RETURN_TAG = "episode/return"
"""The scalar tag of episode scores, as :class:`rltrain.rl.run.tblog.TrainLogger` writes it."""
EVAL_TAG = "eval/mean_return"
"""The mean score of each evaluation during training (``eval.every_steps``), drawn as dots."""
TB_DIR = "tb"
SESSION_TAG = "session/start"
"""Written first by each session of a run (:data:`rltrain.rl.run.tblog.SESSION_TAG`)."""
SETTLED_TAG = "session/settled"
"""A session's round at its first result (0 while envs are in their first game; since
session 58), then 1 where every env has ended a game and 0 where a restarted actor's envs
start theirs (:data:`rltrain.rl.run.tblog.SETTLED_TAG`)."""
HEARTBEAT_TAG = "perf/env_fps"
"""A scalar a live run writes every ``log_every_seconds``: in a run written before sessions
were marked, silences of more than ``DOWNTIME_S`` in it are taken for downtime."""
DOWNTIME_S = 120.0


class PlotError(RLTrainError):
    """A run that cannot be plotted (not a run directory, no events, no episodes yet)."""


class NoEpisodesYet(PlotError):
    """A run that has no episode yet: beside other runs it is left out, with a line."""


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
    window: int = 20
    """Episodes in the training mean, as the run's stop counts them (:func:`run_window`)."""
    judged: np.ndarray | None = None
    """[N] whether the score stop judged the mean at each episode: its session's every env
    had ended a game, or an older rltrain wrote it (:func:`settled_episodes`); None: a run
    with no ``session/settled`` event, judged at every one."""
    folder: Path | None = None
    """The run directory, as given."""
    eval_stops: frozenset[int] = frozenset()
    """Frames of the evaluations made as a run stopped (evals.jsonl's ``at_stop``)."""


def run_config(run_dir: Path) -> dict[str, Any]:
    """A run's ``config.yaml`` as plain YAML, not the typed config, so that runs written by an
    older rltrain (other options) still plot."""
    path = run_dir / "config.yaml"
    try:
        cfg = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        from rltrain.launch import run_dir_arg

        try:  # (its one line: what the folder is, or holds)
            run_dir_arg(str(run_dir), "")
        except RLTrainError as e:
            raise PlotError(str(e)) from None
        raise PlotError(f"{run_dir}: not a run directory (no config.yaml in it)") from None
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
    from rltrain.envs.atari import is_atari  # imports ale-py: only when a run is read

    wrappers = env.get("wrappers") or ()
    if not is_atari(str(env.get("id", "")), wrappers if isinstance(wrappers, list) else ()):
        return 1
    skip = env.get("frame_skip", 4)  # EnvConfig's default
    if not isinstance(skip, int) or isinstance(skip, bool) or skip < 1:
        raise PlotError(
            f"{run_dir / 'config.yaml'}: env.frame_skip={skip!r} is not a whole number >= 1"
        )
    return skip


def _whole(value: Any, default: int) -> int:
    """``value`` if a YAML whole number >= 1, else ``default``."""
    ok = isinstance(value, int) and not isinstance(value, bool) and value > 0
    return value if ok else default


def eval_every_steps(cfg: dict[str, Any]) -> int:
    """Env steps between a run's evaluations during training (its :func:`run_config`'s
    ``eval.every_steps``; 0: none or unknown)."""
    return _whole(_section(cfg, "eval").get("every_steps"), 0)


def run_summary(run_dir: Path) -> dict[str, Any]:
    """A run's summary.json, or {} where it has none yet (a live or killed first session)."""
    with contextlib.suppress(OSError, ValueError):
        loaded = json.loads((run_dir / "summary.json").read_text())
        return loaded if isinstance(loaded, dict) else {}
    return {}


def run_window(run_dir: Path, cfg: dict[str, Any], summary: dict[str, Any] | None = None) -> int:
    """The episodes of a run's training mean as its stop counts them: summary.json's
    ``mean_window``, else ``stop.window``, at least as many as the envs
    (:func:`rltrain.rl.config.train.episode_window`), ``actors: auto`` as the last session
    sized it (summary.json, or the note a live session adds to config.yaml); ``summary``:
    :func:`run_summary`, where the caller has read it."""
    from rltrain.rl.config.sections import episode_window

    summary = run_summary(run_dir) if summary is None else summary
    if window := _whole(summary.get("mean_window"), 0):
        return window
    actors = _whole(cfg.get("actors"), 0) or _whole(summary.get("actors"), 0)
    actors = actors or sized_actors(run_dir)
    envs = actors * _whole(_section(cfg, "env").get("num_envs"), 8)  # (EnvConfig's default)
    return episode_window(_whole(_section(cfg, "stop").get("window"), 20), envs)


def read_curve(run_dir: Path, evals_only: bool = False) -> Curve:
    """A run's ``episode/return`` scalars from every event file in ``run_dir/tb``.
    ``evals_only``: a run with evaluations (``eval/mean_return``) but no episode yet is a
    curve of no episodes, not a :class:`NoEpisodesYet` (``rltrain plot --evals``)."""
    from tensorboard.backend.event_processing import event_accumulator as ea

    if not run_dir.is_dir():
        why = "it is a file" if run_dir.exists() else "it does not exist"
        raise PlotError(f"{run_dir}: not a run directory ({why})")
    cfg, summary = run_config(run_dir), run_summary(run_dir)  # read once
    skip = frames_per_step(run_dir, cfg)
    tb = run_dir / TB_DIR
    if not any(tb.glob("*tfevents*")):
        bench = any(tb.glob("*/*tfevents*")) and (run_dir / "results.md").is_file()
        raise PlotError(
            f"{run_dir}: a `rltrain bench` run (one TensorBoard run per mode in {tb}): its "
            f"results are in {run_dir / 'results.md'}; tensorboard --logdir "
            f"{quote(str(tb))} shows them"
            if bench
            else f"{run_dir}: no TensorBoard events in {tb}; has `rltrain train` started there?"
        )
    # size_guidance 0 keeps every scalar (the default samples 10,000 of them); the rest is
    # not needed
    keep = {ea.SCALARS: 0, ea.TENSORS: 1, ea.HISTOGRAMS: 1, ea.IMAGES: 1, ea.AUDIO: 1}
    acc = ea.EventAccumulator(str(tb), size_guidance=keep)
    cuts = _reload(acc)
    try:
        acc.FirstEventTimestamp()
    except ValueError:  # not even the file version event: emptied or overwritten
        raise PlotError(
            f"{run_dir}: the event files in {tb} hold no readable event (empty or damaged)"
        ) from None
    if RETURN_TAG not in acc.Tags().get(ea.SCALARS, []) and not (
        evals_only and EVAL_TAG in acc.Tags().get(ea.SCALARS, [])
    ):
        if loss := _loss_note(
            run_dir, 0, cuts, summary
        ):  # (not "no episode has ended": explore101;
            raise NoEpisodesYet(loss)  # beside other runs, left out as such a run is)
        raise NoEpisodesYet(f"{run_dir}: no {RETURN_TAG} in {tb} yet (no episode has ended)")
    start = acc.FirstEventTimestamp()
    tags = acc.Tags().get(ea.SCALARS, [])

    def stamps(*names: str) -> np.ndarray:
        """The wall times of every event of these scalar tags."""
        found = [e.wall_time for t in names if t in tags for e in acc.Scalars(t)]
        return np.array(found, dtype=np.float64)

    sessions = stamps(SESSION_TAG)
    # marked sessions: every event, so that each one's last is known; else the heartbeat
    beats = stamps(*tags) if len(sessions) else stamps(HEARTBEAT_TAG)

    def events(tag: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(steps, wall times, values) of one scalar tag's every event."""
        found = acc.Scalars(tag) if tag in tags else []
        steps = np.array([e.step for e in found], dtype=np.int64)
        times = np.array([e.wall_time for e in found], dtype=np.float64)
        return steps, times, np.array([e.value for e in found], dtype=np.float64)

    def series(tag: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(frames, running seconds, values, wall times) of one scalar tag, rewinds dropped."""
        steps, times, values = events(tag)
        keep = after_rewinds(steps)
        seconds = running_seconds(times, beats, start, sessions)
        return steps[keep] * skip, seconds[keep], values[keep], times[keep]

    frames, seconds, returns, walls = series(RETURN_TAG)
    if loss := _loss_note(run_dir, len(returns), cuts, summary):
        print(f"rltrain: plot: {loss}", file=sys.stderr)
    stops = frozenset(s * skip for s in stop_evaluations(run_dir))
    judged = settled_episodes(frames // skip, walls, sessions, *events(SETTLED_TAG))
    evals = series(EVAL_TAG)[:3]
    every, window = eval_every_steps(cfg) * skip, run_window(run_dir, cfg, summary)
    # the name the user gave it (a link named for its setting), the folder's for . and ..
    name = run_dir.name if run_dir.name not in ("", "..") else run_dir.resolve().name
    return Curve(name, frames, seconds, returns, evals, every, window, judged, run_dir, stops)


class _Cuts(logging.Handler):
    """TensorBoard's loader stops reading an event file at its first bad record and says so
    only at debug level ("Truncated record in FILE (REASON)"): what it said, kept."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.said: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if str(record.msg).startswith("Truncated record in") and len(record.args or ()) == 2:
            path, why = record.args  # type: ignore[misc]
            self.said.append(f"{Path(str(path)).name}: {str(why).split(' ', 1)[-1]}")


def _reload(acc: Any) -> list[str]:
    """Read every event file of ``acc``; the files where a bad record stopped it, and why.
    Its other lines stay unsaid (the "out of order event.step" of a resume: the rewinds are
    dropped, as the module says)."""
    quiet, cuts = logging.getLogger("tensorboard"), _Cuts()
    saved = quiet.level, quiet.propagate, quiet.handlers
    quiet.setLevel(logging.DEBUG)
    quiet.propagate, quiet.handlers = False, [cuts]
    try:
        acc.Reload()
    finally:  # (setLevel: a plain assignment left logging's cache enabled at debug, review 85)
        quiet.propagate, quiet.handlers = saved[1:]
        quiet.setLevel(saved[0])
    return cuts.said


def _loss_note(run_dir: Path, read: int, cuts: list[str], summary: dict[str, Any]) -> str:
    """A line where the episodes read fall short of those summary.json counts (a damaged or
    cut event file: explore101's flipped byte gave 31 of 178 episodes, a curve that never
    reached its marks, and no word), else ""; every episode of a run is logged, also those of
    the work in flight after its stop and across resumes, so the two agree."""
    with contextlib.suppress(ValueError, TypeError, KeyError):  # (none yet, or older)
        counted = int(summary["episodes"])
        if read < counted:
            where = f" ({', '.join(cuts)})" if cuts else ""
            return (
                f"{run_dir}: read {read:,} of the {counted:,} episodes summary.json counts: "
                f"its event files in {run_dir / TB_DIR} are damaged or cut short{where}"
            )
    return ""


def settled_episodes(
    steps: np.ndarray,
    walls: np.ndarray,
    sessions: np.ndarray,
    marks: np.ndarray,
    marked_at: np.ndarray,
    states: np.ndarray,
) -> np.ndarray | None:
    """[N] whether each episode (``steps``, ``walls``: its env steps and wall time) ended while
    its session's round was settled, as the score stop judges: the session is the last to
    start (``sessions``, wall times) before it; its ``session/settled`` events (env steps
    ``marks``, wall times ``marked_at``, ``states``) say 1 where every env had ended a game
    and 0 where a restarted actor's envs began theirs (a session is unsettled until its first
    1). Sessions written before rounds were settled (those before the first with such an
    event, and episodes before the first session mark) are judged at every episode, as the
    stop judged them then; None for a run with no such event at all."""
    if not len(marks) or not len(sessions):
        return None
    starts = np.sort(sessions)
    order = np.lexsort((marked_at, marks))  # by env steps, then as written
    # (a mark before the first session's: the first session's, as clocks may disagree a little)
    of_mark = np.maximum(np.searchsorted(starts, marked_at[order], side="right") - 1, 0)
    session = np.searchsorted(starts, walls, side="right") - 1  # -1: before the first mark
    first = int(of_mark.min())  # the first session that marks its round
    judged = session < first  # an older rltrain's sessions: the stop judged them all
    for k in range(first, len(starts)):
        mine, these = np.flatnonzero(session == k), order[of_mark == k]
        if not len(these):  # never settled
            continue
        last = np.searchsorted(marks[these], steps[mine], side="right") - 1  # -1: none yet
        judged[mine] = (last >= 0) & (states[these][np.maximum(last, 0)] > 0.5)
    return judged


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
