"""``--resume``: the newest checkpoint of a run, checked against the config it continues
under, and what that config changes."""

from __future__ import annotations

import contextlib
import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rltrain import signals
from rltrain.checkpoint import (
    CheckpointError,
    as_saved,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
)
from rltrain.config import moved_keys, to_dict
from rltrain.config_keys import dotted, mapping_keys
from rltrain.envs.base import ActionSpace
from rltrain.errors import shown
from rltrain.faults import FaultCounters, RestorePoint, RunFailed
from rltrain.rl.config import TrainConfig
from rltrain.rl.env_spec import EnvSpec, actions_record, check_actions, check_fits, initial_params
from rltrain.rl.run.counters import Counters, reaches
from rltrain.rl.run.scores import drop_evals_after
from rltrain.rl.run.summary import SessionRecord
from rltrain.runtime.context import RunContext


@dataclass(frozen=True)
class Resumed:
    """What ``--resume`` continues from: the newest checkpoint and the counters it carries."""

    path: Path
    state: dict[str, Any]
    counters: Counters
    faults: FaultCounters
    changes: list[str] = field(default_factory=list)
    """The config keys this session changes, ``key: old -> new``: what a user is told."""
    unfinished: str = ""
    """The stop the checkpoint met already where the run ended before its summary.json (killed
    in its final evaluation): the session only finishes the run (:func:`check_unmet`)."""
    evals_dropped: int = 0
    """Records of evals.jsonl past the checkpoint left out: their checkpoints are gone (a
    newer one deleted or damaged; explore104 saw the lost one's "(stop)" on a new score)."""


KEPT_ON_RESUME = (
    *("algo.name", "env.id", "env.full_action_space", "env.frame_skip", "optimizer.name"),
    "normalize.obs",
)
KEPT_SINCE = {"env.full_action_space": False}
"""Kept keys newer than some checkpoints: the value those checkpoints' runs had."""
"""Keys a resumed run keeps as they were: the checkpoint's parameters, optimizer state and
normalization statistics belong to them (an SGD run's state in Adam fails at its first step;
an a3c network trained on as appo, or on another game, is another run; a run counts its
frames at its one frame_skip)."""


TOLD_ON_RESUME = (
    *("algo", "ppo", "impala", "dqn", "env", "model", "optimizer", "normalize", "schedule"),
    *("server", "stop"),
)
"""Sections whose changes a resume names (actors, runtime and eval are sized or read anew;
replay's shards are sized: review89; dqn's v_min and v_max relabel the atoms: review90)."""


FREE = tuple(f"{k}." for k in mapping_keys(TrainConfig))
"""Where the keys of a mapping the user fills begin (``env.kwargs.``: a key there the run
lacked is the user's, and told)."""

NEW = "(unset)"
"""What a key the run lacked was."""

SIZED_KEYS = ("env.groups",)
"""Keys whose auto (0) the trainer resolves for the machine (:func:`rltrain.rl.run.sizing.sized`):
a checkpoint holds what auto chose there."""


KEPT_FOR_A_BOX = ("env.action_map", "model.log_std_init")
"""Kept on resume where the actions are a Box: the policy's samples were learned through that
map (a run trained as affine went on under tanh unsaid); the log standard deviation's start
is the checkpoint's (a change was said as made, and did nothing)."""


def resume_changes(
    path: Path, saved: dict[str, Any] | None, cfg: TrainConfig, box: bool = False
) -> list[str]:
    """What ``cfg`` changes against the config the checkpoint at ``path`` was saved under
    (``saved``; None for checkpoints that carry none): ``key: old -> new`` for the sections
    of :data:`TOLD_ON_RESUME`; CheckpointError for a key of :data:`KEPT_ON_RESUME` (and, for
    ``box`` actions, :data:`KEPT_FOR_A_BOX`)."""
    if not saved:
        return []
    old, new = dotted(moved_keys(TrainConfig, saved)), dotted(as_saved(to_dict(cfg)))
    changed = [
        k
        for k, v in new.items()
        if k.split(".")[0] in TOLD_ON_RESUME
        and old.get(k, NEW if k.startswith(FREE) else v) != v  # (a key newer than the run: v)
        and not (k in SIZED_KEYS and v == 0)  # auto, which the checkpoint holds resolved
    ]
    for key in KEPT_ON_RESUME + (KEPT_FOR_A_BOX if box else ()):
        if key in changed and old[key] != "auto":  # auto: left to this rltrain to decide
            raise CheckpointError(kept_refusal(key, new[key], old[key], path.parent.parent))
    dropped = [k for k in old if k.startswith(FREE) and k not in new]  # --set env.kwargs={}
    return [
        f"{k}: {as_yaml(old.get(k, NEW))} -> {as_yaml(new[k])}{stretches(k, old.get(k), cfg)}"
        for k in changed
    ] + [f"{k}: {as_yaml(old[k])} -> (dropped)" for k in dropped]


def kept_refusal(key: str, new: Any, old: Any, run: Path) -> str:
    """The one line that refuses a resume's change of a key a resumed run keeps."""
    return (
        f"{key}={new}: the run at {run} has {key}={old}, which a resumed run keeps; start a "
        "new run to change it"
    )


def as_yaml(value: Any) -> str:
    """A value as config.yaml writes it (null, true; it said None, True)."""
    return shown(value) if value is None or isinstance(value, bool) else str(value)


def stretches(key: str, was: Any, cfg: TrainConfig) -> str:
    """What a changed ``key`` does beyond itself, said beside it: stop.max_env_steps moves
    the schedules whose end it is (schedule.steps: 0; an annealed learning rate rose from 0
    back to 46% of its start, unsaid); C51's support relabels the atoms it learned."""
    if key in ("dqn.v_min", "dqn.v_max") and cfg.dqn.atoms > 1:  # (explore116: Q 44.8 -> 91)
        return " (the atoms' learned probabilities are read at the new returns: Q jumps)"
    s = cfg.schedule
    if key != "stop.max_env_steps" or s.steps or (s.lr_end is None and s.entropy_end is None):
        return ""
    return f" (the schedules end at it: set schedule.steps={was} to keep them as they were)"


def session_seed(seed: int, env_steps: int) -> int:
    """The seed of a session resumed at ``env_steps``: its actors' env seeds, samples and
    minibatch orders are new draws, not the first session's again (``seed`` stays the
    run's, in config.yaml)."""
    return int(np.random.SeedSequence([seed, env_steps]).generate_state(1)[0] % 2**31)


def load_resume(run_dir: Path, cfg: TrainConfig, spec: EnvSpec) -> Resumed | None:
    """The run's newest checkpoint, checked against ``cfg``; None when it has none yet."""
    path = latest_checkpoint(run_dir)
    if path is None:
        return None
    state = load_checkpoint(path)
    saved = state.get("config")
    changes = resume_changes(path, saved, cfg, spec.actions.continuous)
    check_actions(path, state, spec.actions, cfg.env.id)
    check_fits(path, state, initial_params(cfg, spec), cfg, changes)
    counters, unfinished = check_unmet(path, state, cfg)
    try:
        faults = FaultCounters(**state.get("faults", {}))
    except TypeError:
        raise CheckpointError(f"{path}: its counters are not those this rltrain writes") from None
    signals.checkpointed()
    gone = drop_evals_after(run_dir, counters.env_steps)  # (a newer checkpoint deleted)
    return Resumed(path, state, counters, faults, changes, unfinished, gone)


def check_unmet(
    path: Path, state: dict[str, Any], cfg: TrainConfig, set_flag: str = "--set stop."
) -> tuple[Counters, str]:
    """The checkpoint's counters, and "" or the stop of ``cfg`` they met already where the run
    ended before its summary.json was written (killed in its final evaluation): the session
    then only finishes the run (that evaluation, summary.json). CheckpointError where the run
    diverged, or met a stop and finished (a session would start every process only to stop at
    once). ``set_flag``: how the error names an override (the API's ``stop__``)."""
    try:
        counters = Counters(**state["counters"])
    except TypeError:
        raise CheckpointError(f"{path}: its counters are not those this rltrain writes") from None
    window = cfg.episode_window_at(last_actors(cfg, state))
    met = counters.stop_met(cfg.stop, counters.wall_seconds, window)
    run = path.parent.parent
    mean, window_of = counters.mean_return(window), f"{window} episodes"
    summary = session_summary(run, counters)
    at_stop = mean_at_stop(summary, window)
    if at_stop is None:  # (a run killed in its final evaluation has no summary.json)
        at_stop = kept_mean(state, "mean_return", window)
    target = cfg.stop.mean_return
    scored = at_stop is not None and target is not None and reaches(at_stop, target)
    # the stop the session stopped by, where its final checkpoint kept it: the work in flight
    # after it may have met another in the counters (review 84)
    kept = state.get("stop") if summary is None else None
    kept_by = kept.get("stopped_by") if isinstance(kept, dict) else None
    # (and where the episodes after it meet it too: explore113 was told their mean)
    if scored and (met in ("", "mean_return") or kept_by == "mean_return"):
        met, mean, window_of = "mean_return", at_stop, f"{window} episodes at the stop"
    elif met and kept_by in ("max_env_steps", "max_seconds"):
        limit = getattr(cfg.stop, kept_by)
        now = counters.env_steps if kept_by == "max_env_steps" else counters.wall_seconds
        met = kept_by if limit and now >= limit else met
    if met == "diverged":  # its parameters are those of the last update the server took
        raise CheckpointError(
            f"the run at {run} diverged (the server refused its last "
            f"{counters.rejected_in_a_row} updates as non-finite); start a new run with a "
            "lower optimizer.lr or algo.max_grad_norm"
        )
    # no summary.json: a final checkpoint (its stop recorded; an older one's, the stop it ran
    # under met) is finished; a stop lowered below what a run killed mid-training had done is
    # refused as a finished run's (explore104: it was "finished")
    ran = (state.get("config") or {}).get("stop") or {}
    same = met in ran and ran[met] == getattr(cfg.stop, met, None)
    if met and summary is None and (kept is not None or same):
        return counters, met
    if met:
        seen = {
            "mean_return": f"the mean of its last {window_of}: {mean or 0.0:.2f}",
            "max_env_steps": f"it has {counters.env_steps:,} steps",
            "max_seconds": f"it has trained {counters.wall_seconds:,.0f}s",
        }[met]
        off = "null: never" if met.endswith("mean_return") else "0: no limit"
        raise CheckpointError(
            f"the run at {run} already met stop.{met}={getattr(cfg.stop, met)} ({seen}); "
            f"raise it ({off}) to train on: {set_flag}{met}=..."
        )
    return counters, ""


def mean_at_stop(summary: Any, window: int, stopped_by: str = "mean_return") -> float | None:
    """The mean the score stop met over ``window`` episodes, where the last session's
    ``summary`` (:func:`session_summary`, or the stop its final checkpoint keeps:
    :func:`stop_record`) says it stopped by it: the checkpoint, written after the stop, also
    counts the episodes the work in flight finished, whose mean may fall below the stop
    (explore97: a plain --resume trained again). None for a stop judged over another window,
    or another stop than ``stopped_by``."""
    if not isinstance(summary, dict):
        return None
    mean = summary.get("mean_return")
    stopped = summary.get("stopped_by") == stopped_by and summary.get("mean_window") == window
    if not stopped or isinstance(mean, bool):
        return None
    return float(mean) if isinstance(mean, int | float) else None


def session_summary(run: Path, counters: Counters) -> dict[str, Any] | None:
    """The run's summary.json where it is that of a session that ended at ``counters`` or
    later (None where it is missing, unreadable, not a mapping, or an earlier session's)."""
    try:
        summary = json.loads((run / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    steps = summary.get("env_steps") if isinstance(summary, dict) else None
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < counters.env_steps:
        return None
    return summary


def stop_record(stopped_by: str, mean: float | None, window: int) -> dict[str, Any] | None:
    """What a checkpoint written after the session's stop keeps of it, in summary.json's keys
    (:func:`mean_at_stop` reads either): a run killed in its final evaluation, before its
    summary.json, is judged at its resume on the mean its stop met (review 83: on the
    checkpoint's window, which the work in flight had moved). None before a stop."""
    if not stopped_by:
        return None
    return {"stopped_by": stopped_by, "mean_return": mean, "mean_window": window}


def kept_mean(state: dict[str, Any], stopped_by: str, window: int) -> float | None:
    """The mean return a checkpoint's :func:`stop_record` kept, where the session stopped by
    ``stopped_by`` and judged ``window`` episodes (None otherwise: a mean the work in flight
    moved past a score stop after another stop had come was not that stop's)."""
    return mean_at_stop(state.get("stop"), window, stopped_by)


def last_actors(cfg: TrainConfig, state: dict[str, Any]) -> int:
    """``cfg.actors``, or for ``actors: auto`` (0) what the checkpoint's session sized it to:
    the window of the training mean its stop judged (stop.window, at least as many episodes
    as envs) counts them."""
    saved = state.get("config")
    last = saved.get("actors") if isinstance(saved, dict) else None
    if cfg.actors or not isinstance(last, int) or isinstance(last, bool) or last < 1:
        return cfg.actors
    return last


def finishing(
    cfg: TrainConfig, state: dict[str, Any], met: str
) -> tuple[TrainConfig, float | None]:
    """For a session that only finishes a run whose checkpoint met stop ``met``: ``cfg`` sized
    as the checkpoint's session was (the window its stop judged) and the mean that stop met,
    where the checkpoint kept it (None: the counters' mean judges)."""
    actors = last_actors(cfg, state)
    if actors != cfg.actors:
        with contextlib.suppress(ValueError):  # (sized beyond a fault event: said at sizing)
            cfg = dataclasses.replace(cfg, actors=actors)
    return cfg, kept_mean(state, met, cfg.episode_window_at(actors))


def changes_history(resumed: Resumed | None, changes: list[str]) -> list[dict[str, Any]]:
    """Every session's config changes, in order: those the checkpoint kept of the sessions
    before, and this one's ``changes`` at the env steps it resumed from. A run resumed under
    another server.rule was summarised, and plotted by ``--group server.rule``, as a run of
    the last rule alone (explore98)."""
    if resumed is None:
        return []
    kept = resumed.state.get("changes")
    history = [h for h in kept if isinstance(h, dict)] if isinstance(kept, list) else []
    if changes:
        history.append({"env_steps": resumed.counters.env_steps, "changes": list(changes)})
    return history


def save_session(
    ctx: RunContext,
    run_dir: Path,
    cfg: TrainConfig,
    counters: Counters,
    faults: FaultCounters,
    record: SessionRecord | None = None,
    actions: ActionSpace | None = None,
) -> tuple[Path, dict[str, Any]]:
    """Write the session's checkpoint (what a ``--resume`` continues from): the shards' state,
    the counters, the config and, once the session (its ``record``) has stopped, its stop
    (:func:`stop_record`); the shards' guard restores that state if one is lost."""
    guard, server = ctx.guard, ctx.server
    if guard is not None:  # never checkpoint a shard restarted but not yet restored
        guard.check()
    state = {
        "shards": server.state_dicts(),
        "counters": counters.state(),
        "faults": dataclasses.asdict(faults),
        "config": to_dict(cfg),
    }
    stop = record and stop_record(record.stopped_by, record.mean_at_stop, cfg.episode_window)
    if stop:
        state["stop"] = stop
    if record is not None and record.changes:
        state["changes"] = record.changes
    if actions is not None:  # (checked at a resume: check_actions)
        state["actions"] = actions_record(actions)
    if not state["shards"]:  # its process not up yet (a Ctrl-C in a --resume's start)
        raise RunFailed("the learner process that holds the shards is not up yet")
    version = int(state["shards"][0]["version"])
    path = save_checkpoint(run_dir, version, state, cfg.checkpoint.keep)
    signals.checkpointed()
    if guard is not None:
        guard.remember(RestorePoint(version, state["shards"], f"checkpoint {path.name}"))
    return path, state


def first_restore_point(ctx: RunContext, resumed: Resumed | None) -> None:
    """Load a resumed run's checkpoint into the session's new shards, and keep what they hold
    as the guard's first restore point; from here a signal's graceful stop writes a final
    checkpoint (before, a Ctrl-C in start-up was promised one that was never written:
    explore99)."""
    label = "the initial parameters"
    if resumed is not None:
        ctx.server.load_state_dicts(resumed.state["shards"])
        label = f"checkpoint {resumed.path.name}"
    version = ctx.server.stats().version
    ctx.shard_guard().remember(RestorePoint(version, ctx.server.state_dicts(), label))
    ctx.restorable = True
    signals.stopping_now(signals.FINAL_CHECKPOINT)
