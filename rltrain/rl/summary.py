"""A training run's ``summary.json``: its figures, as :class:`~rltrain.rl.train.Trainer` ends."""

from __future__ import annotations

import dataclasses
from typing import Any

from rltrain.rl.config import SPLIT_ALGOS


def train_summary(t: Any) -> dict[str, Any]:
    """The figures of trainer ``t`` (a :class:`~rltrain.rl.train.Trainer`)."""
    c = t.counters
    final = c.mean_return(t.cfg.stop.window)
    mean = t.mean_at_stop if t.mean_at_stop is not None else final
    return {
        "command": "train",
        "env": t.cfg.env.id,
        "algo": t.cfg.algo.name,
        "actors": t.cfg.actors,  # as sized (actors: auto) for this session
        "learners": t.cfg.learners if t.cfg.algo.name in SPLIT_ALGOS else 0,
        "stopped_by": t.stopped_by or "finished",
        "wall_seconds": round(c.wall_seconds, 2),
        "startup_seconds": t.startup_seconds,  # the command to the first result
        # cumulative seconds at: trainer (imports, config, env probe), ray (started or
        # joined), server (shards up), first_step (an actor's first env step),
        # first_result (a first result back at the driver)
        "startup": t.startup,
        "env_steps": c.env_steps,
        "env_frames": c.env_steps * t.spec.frames_per_step,
        "episodes": c.episodes,
        "mean_return": mean,  # over the last stop.window episodes when the run stopped
        "final_mean_return": final,  # the same, with the episodes of work then in flight
        "best_mean_return": c.best_mean_return,
        "updates": c.updates,
        "updates_applied": c.applied,
        "dropped": c.dropped,
        "rejected": c.rejected,
        "mean_staleness": round(c.staleness_sum / c.applied, 4) if c.applied else 0.0,
        "faults": dataclasses.asdict(t.faults),
        "bytes_pushed": t.net_bytes[0],  # update values the shards received (compression)
        "bytes_pulled": t.net_bytes[1],
        **({"failure": t.failure} if t.failure else {}),
        "protocol": t.spec.protocol,
        # the Ray job (as Ray's own tables name it) and the node each process last ran on
        "ray": {**t.ray, "placement": placement(t.procs)},
        **({"replay_bytes": t.replay_bytes} if t.replay_bytes is not None else {}),
        **t.evals.summary(),  # eval.every_steps: this session's evaluations
    }


def placement(procs: dict[str, list[Any]]) -> dict[str, list[str | None]]:
    """Role -> the Ray node id of each process (None: not known, e.g. restarting)."""
    return {role: [r.node() for r in remotes] for role, remotes in procs.items()}
