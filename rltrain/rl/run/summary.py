"""A training session's record and the ``summary.json`` written from it when it ends."""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from shlex import quote
from typing import Any

from rltrain.checkpoint import latest_checkpoint
from rltrain.failure import FAILURE_LOG
from rltrain.faults import FaultCounters
from rltrain.machine import machine
from rltrain.rl.config import TrainConfig, server_settings
from rltrain.rl.env_spec import EnvSpec
from rltrain.rl.run.counters import Counters
from rltrain.rundir import summary_text


@dataclass
class SessionRecord:
    """What one session saw, beside the counters a checkpoint keeps: how it started, why it
    stopped, and what its processes moved."""

    started: float = field(default_factory=time.time)
    """When start-up began (the command's start); startup marks count from it."""
    startup: dict[str, float] = field(default_factory=dict)
    """Cumulative seconds at: trainer (imports, config, env probe), runtime (the runtime started
    or joined), server (shards up), first_step (an actor's first env step), first_result (a
    first result back at the driver)."""
    startup_seconds: float | None = None  # the command to the first result
    stopped_by: str = ""  # "" while the session runs
    failure: str = ""  # why a session stopped_by "fault"
    mean_at_stop: float | None = None  # the stop's mean return (work in flight lands after)
    episodes_at_stop: int | None = None  # the episodes counted when the stop came
    mean_count: int = 0  # the episodes mean_at_stop is over (the window, or fewer so far)
    net_bytes: tuple[int, int] = (0, 0)  # bytes pushed to and pulled from the shards
    runtime: dict[str, Any] = field(default_factory=dict)  # the runtime's record: job, nodes
    replay_bytes: int | None = None  # dqn: the replay memory's size at the end
    changes: list[dict[str, Any]] = field(default_factory=list)
    """Each session's config changes at its --resume (:func:`~rltrain.rl.run.resume.
    changes_history`), kept in the checkpoints and summary.json's ``resumed_changes``."""

    def stop(self, why: str, counters: Counters, window: int, mean: float | None = None) -> None:
        """The session stops for ``why``: keep what the stop saw (work in flight lands after;
        ``mean``: the mean it met, where a checkpoint kept it: the counters then hold more)."""
        self.stopped_by = why
        self.mean_at_stop = counters.mean_return(window) if mean is None else mean
        self.episodes_at_stop = counters.episodes
        self.mean_count = len(counters.recent_returns[-window:])

    def judged_mean(self, final: float | None) -> float | None:
        """The mean return the stop saw: None where no episode had ended by then (not the
        mean of the episodes the work in flight ended after it); ``final`` before a stop."""
        return self.mean_at_stop if self.episodes_at_stop is not None else final

    def mark(self, name: str) -> float:
        """Seconds since start-up began, kept the first time ``name`` is reached."""
        return self.startup.setdefault(name, round(time.time() - self.started, 2))


def train_summary(
    cfg: TrainConfig,
    spec: EnvSpec,
    counters: Counters,
    faults: FaultCounters,
    record: SessionRecord,
    procs: dict[str, list[Any]],
    evals: dict[str, Any],
) -> dict[str, Any]:
    """summary.json's figures (``evals``: this session's evaluations, ``PeriodicEval.summary``)."""
    c = counters
    final = c.mean_return(cfg.episode_window)
    window_of = c.recent_returns[-cfg.episode_window :]
    mean = record.judged_mean(final)
    rec_eps = record.episodes_at_stop
    return {
        "command": "train",
        "env": cfg.env.id,
        "algo": cfg.algo.name,
        "actors": cfg.actors,  # as sized (actors: auto) for this session
        "learners": cfg.learners if cfg.algo_spec.split else 0,
        # the rule the server ran (a2c/ppo: behind a barrier whatever config.yaml's server.rule)
        "server_rule": server_settings(cfg).rule,
        "server_staleness": server_settings(cfg).staleness,  # (none, scale, drop)
        "stopped_by": record.stopped_by or "finished",
        "wall_seconds": round(c.wall_seconds, 2),
        "startup_seconds": record.startup_seconds,
        "startup": record.startup,
        "env_steps": c.env_steps,
        "env_frames": c.env_steps * spec.frames_per_step,
        # over the run's training seconds (its sessions' start-ups in, the stops between out)
        "frames_per_second": round(c.env_steps * spec.frames_per_step / c.wall_seconds, 1)
        if c.wall_seconds > 0
        else 0.0,
        "episodes": c.episodes,  # with those the work in flight at the stop finished
        "episodes_at_stop": c.episodes if rec_eps is None else rec_eps,
        "mean_return": mean,  # over the last episode_window episodes when the run stopped
        "mean_window": cfg.episode_window,  # stop.window, at least as many episodes as envs
        # the episodes mean_return is over: fewer than the window where fewer had ended
        "mean_episodes": record.mean_count if rec_eps is not None else len(window_of),
        "final_mean_return": final,  # the same, with the episodes of work then in flight
        "best_mean_return": c.best_mean_return,
        "envs_in_first_game": c.in_first_game,  # at the end:
        # the stop judges none of the mean while an env is in its first game of the session
        "updates": c.updates,
        "updates_applied": c.applied,
        "dropped": c.dropped,
        "rejected": c.rejected,
        "mean_staleness": round(c.staleness_sum / c.applied, 4) if c.applied else 0.0,
        # impala/appo: versions from the oldest parameters that acted in a batch to the
        # learner's, the mean over its batches (a run resumed from an older rltrain's
        # checkpoint: over those since)
        **(
            {"mean_actor_lag": round(c.actor_lag_sum / c.lagged_batches, 2)}
            if c.lagged_batches
            else {}
        ),
        "faults": dataclasses.asdict(faults),
        "bytes_pushed": record.net_bytes[0],  # update values the shards received
        "bytes_pulled": record.net_bytes[1],
        **({"failure": record.failure} if record.failure else {}),
        "protocol": spec.protocol,
        # the Ray job (as Ray's own tables name it) and the node each process last ran on
        "runtime": {**record.runtime, "placement": placement(procs)},
        **({"replay_bytes": record.replay_bytes} if record.replay_bytes is not None else {}),
        # [{env_steps, changes: ["server.rule: async -> sync", ...]}]: a run of several settings
        "resumed_changes": record.changes,
        **evals,
        "machine": machine(),  # (this session's: speeds compare on one machine and load)
    }


def placement(procs: dict[str, list[Any]]) -> dict[str, list[str | None]]:
    """Role -> the Ray node id of each process (None: not known, e.g. restarting)."""
    return {role: [r.node() for r in remotes] for role, remotes in procs.items()}


def final_line(summary: dict[str, Any], run: Path) -> str:
    """``rltrain train``'s last line: the stop, the counts and the mean return the stop saw
    (the episodes that the work in flight at the stop finished are counted, and said)."""
    faults = FaultCounters(**summary["faults"]).brief()
    if summary["stopped_by"] == "fault":  # the counters are the faults it survived
        faults = "the one that stopped it" + ("" if faults == "none" else f", after {faults}")
    mean = summary["mean_return"]
    shown = "none (no episode ended)" if mean is None else f"{mean:.2f}"
    rejected = summary.get("rejected", 0)  # non-finite or malformed updates the server refused
    refused = f" ({rejected:,} of {summary['updates']:,} updates refused)" if rejected else ""
    episodes = summary["episodes"]
    late = episodes - summary.get("episodes_at_stop", episodes)  # (an older summary: 0)
    late_note = f" ({late:,} of them ended in the work in flight after the stop)" if late else ""
    n = summary.get("mean_episodes")  # (an older summary: unsaid)
    over = f" (last {n:,} episode{'s' if n != 1 else ''})" if mean is not None and n else ""
    final = summary.get("final_mean_return")
    if late and final is not None and f"{final:.2f}" != shown:
        shown = "none" if mean is None else shown
        shown += f" at the stop, {final:.2f} with the {late:,} after it (the last status line's)"
    return (
        f"stopped by {summary['stopped_by']} after {summary['wall_seconds']:.0f}s: "
        f"{summary['env_steps']:,} steps, {episodes:,} episode{'s' if episodes != 1 else ''}"
        f"{late_note}, "
        f"mean return{over} {shown}; faults: {faults}{refused}; "
        f"{'summary.json, ' if summary_written(run, summary) else ''}"
        f"{'failure.log (its traceback), ' if (run / FAILURE_LOG).is_file() else ''}"
        f"{'checkpoints/, ' if latest_checkpoint(run) else ''}"
        f"tensorboard --logdir {quote(str(run / 'tb'))}"
    )


def summary_written(run: Path, summary: dict[str, Any]) -> bool:
    """Whether the run's summary.json is ``summary`` (review 86b: one that could not be
    written, in a folder gone read-only, was listed; an older session's stayed there)."""
    try:
        return json.loads((run / "summary.json").read_text()) == json.loads(summary_text(summary))
    except (OSError, ValueError):
        return False


SCORE_EPISODES = 100
"""Episodes a training mean needs before it is taken for a score (Gymnasium's
``reward_threshold`` is over 100 episodes, as RLlib's reported mean is)."""


def score_advice(summary: dict[str, Any], run: Path) -> str:
    """A second line where a run met ``stop.mean_return`` over fewer than
    :data:`SCORE_EPISODES` episodes and nothing scored it: the first window to reach a target
    is often a lucky one (Taxi-v4 stopped at 7.05 over 20 episodes; ``rltrain eval`` gave
    -2.9, docs/training.md)."""
    window = summary.get("mean_window", SCORE_EPISODES)
    if summary["stopped_by"] != "mean_return" or window >= SCORE_EPISODES:
        return ""
    if summary.get("eval", {}).get("evaluations"):
        return ""  # the evaluations scored it
    return (
        f"a mean of {window} training episodes is a quick stop, not a score: "
        f"rltrain eval {quote(str(run))} --episodes {SCORE_EPISODES} scores the policy "
        f"(or train with stop.window={SCORE_EPISODES})"
    )


def lost_ray_advice(summary: dict[str, Any], run: Path) -> str:
    """What ``rltrain train`` says after "run failed: lost the Ray cluster": where the run can
    go on from, or that it cannot (explore99: nothing was said, though a periodic checkpoint
    had been written and resumed on a fresh head)."""
    failure = str(summary.get("failure", ""))
    if not failure.startswith(("lost the Ray cluster", "lost the run's Ray instance")):
        return ""
    ckpt = latest_checkpoint(run)
    if ckpt is None:
        return "no checkpoint was written before the loss: nothing to resume"
    return (
        f"its last checkpoint is {ckpt.name}: continue with rltrain train --resume "
        f"{quote(str(run))} once the cluster is back (or --address another; "
        "--set runtime.address=null trains on this machine)"
    )


def interrupted_note(restorable: bool, resumed: bool) -> str:
    """What a run says as a signal stops it: what the graceful stop will write. Before its
    shards hold the run's state there is nothing to checkpoint (explore99: a Ctrl-C 2 s into
    a cluster run promised a final checkpoint, then said none was written); a resumed run's
    checkpoints stay as they were."""
    if restorable:
        return "interrupted: the work in flight, a final checkpoint, summary.json"
    kept = "its checkpoints stay as they were" if resumed else "no checkpoint: nothing trained"
    return f"interrupted in its start-up: summary.json ({kept})"


def interrupted_advice(summary: dict[str, Any], run: Path, run_dir_given: bool) -> str:
    """What ``rltrain train`` says as it exits 130: how to continue a run a signal stopped,
    or to score one that met its stop and was interrupted in its final evaluation."""
    if summary["stopped_by"] != "interrupt":
        says = "rltrain: interrupted in the final evaluation; score the run: rltrain eval"
        return f"{says} {quote(str(run))}"
    if latest_checkpoint(run) is None:  # stopped in its start-up, before the server was up
        again = f"with a new --run-dir (or remove {run})" if run_dir_given else "the same way"
        return f"no checkpoint was written: nothing to resume; start again {again}"
    return f"continue with: rltrain train --resume {quote(str(run))}"
