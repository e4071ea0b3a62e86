"""How an evaluation's score is recorded and compared: the settings and the env protocol it
was played under (a resumed run keeps its best score only if it is scored the same way), and
the last evaluation of a run folder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rltrain.checkpoint import CheckpointError, as_saved, best_checkpoint, load_checkpoint
from rltrain.config import to_dict
from rltrain.envs.atari import ATARI_KWARGS, ATARI_ONLY, is_atari
from rltrain.rl.config import TrainConfig
from rltrain.rundir import EVALS_FILE, RECORDED_BEFORE, same_protocol, write_atomic


def eval_settings(cfg: TrainConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    """(what an evaluation's record says it was played with, what a best score must match).

    A dqn run at dqn.eval_epsilon 0 plays greedily whatever eval.deterministic says (a dqn run
    resumed with it changed threw its best score away); its records keep the epsilon played,
    so that greedy and epsilon-greedy scores are not compared, either way.
    """
    settings = {k: getattr(cfg.eval, k) for k in ("episodes", "deterministic", "seed")}
    q_values = cfg.algo_spec.q_network
    eps = cfg.dqn.eval_epsilon if q_values and not cfg.eval.deterministic else 0.0
    greedy = q_values and eps == 0
    settings["deterministic"] = cfg.eval.deterministic or greedy
    if q_values:  # (only theirs: other runs' records have no epsilon to compare)
        settings["epsilon"] = eps
    settings["protocol"] = scored_protocol(cfg)
    same = {k: v for k, v in settings.items() if not (greedy and k == "deterministic")}
    return settings, same


def last_scored(run_dir: Path) -> tuple[int, int] | None:
    """(env steps, version) of the last evaluation in the run's evals.jsonl; None: none, or
    a file that cannot be read (the final parameters are then scored again)."""
    try:
        last = json.loads((run_dir / EVALS_FILE).read_text().splitlines()[-1])
        return int(last["env_steps"]), int(last["version"])
    except (OSError, IndexError, ValueError, KeyError, TypeError):
        return None


def drop_evals_after(run_dir: Path, env_steps: int) -> int:
    """Leave out of evals.jsonl the evaluations of checkpoints past ``env_steps``, where a run
    resumes from (a newer checkpoint deleted or damaged: explore104 found the lost one's
    "(stop)" label on the new evaluation's score); how many. Each evaluation scores a
    checkpoint written for it, so a plain resume leaves none out."""
    path = run_dir / EVALS_FILE
    try:
        lines = path.read_text().splitlines(keepends=True)
    except OSError:
        return 0
    kept = [x for x in lines if _steps(x) <= env_steps]
    if len(kept) < len(lines):
        write_atomic(path, "".join(kept))
    return len(lines) - len(kept)


def _steps(line: str) -> int:
    """A record's env steps; 0 for one that cannot be read (kept: nothing says it is later)."""
    try:
        return int(json.loads(line)["env_steps"])
    except (ValueError, KeyError, TypeError):
        return 0


PROTOCOL_KEYS = (
    *("frame_skip", "frame_stack", "image_size", "noop_max", "sticky_actions"),
    *("max_episode_frames", "full_action_space", "kwargs", "wrappers", "fire_reset"),
)
"""The env keys a score depends on: a resume may change them, and scores under others are
not compared (Machado et al. 2018: sticky actions, no-op starts and episode caps move scores)."""


def scored_protocol(cfg: TrainConfig) -> dict[str, Any]:
    """The env keys (:data:`PROTOCOL_KEYS`) an evaluation's score was played under; for a
    Gymnasium env, not the Atari protocol's (:data:`ATARI_ONLY`, which it never reads: an
    Acrobot run's evals.jsonl said frame skip 4 and 84-pixel images)."""
    env = to_dict(cfg.env)
    env["kwargs"] = {k: v for k, v in env["kwargs"].items() if k not in ATARI_KWARGS}  # (cores)
    atari = is_atari(cfg.env.id, cfg.env.wrappers)
    keys = [k for k in PROTOCOL_KEYS if atari or k not in ATARI_ONLY]
    return as_saved({k: env[k] for k in keys})  # as best.pt keeps it


def best_record(run_dir: Path) -> tuple[dict[str, Any] | None, str]:
    """(the evaluation record the run's ``best.pt`` keeps, why it does not load): (None, "")
    where there is none; (None, its cause, without the advice) where it does not load."""
    path = best_checkpoint(run_dir)
    try:
        record = load_checkpoint(path).get("eval") if path.is_file() else None
    except CheckpointError as e:
        return None, e.reason
    return (record if isinstance(record, dict) else None), ""


def best_score(
    record: dict[str, Any] | None, settings: dict[str, Any] | None = None
) -> float | None:
    """The mean raw score of a ``best.pt``'s ``record`` (:func:`best_record`; None: none yet,
    unreadable, or scored otherwise than ``settings`` (eval.episodes, deterministic, seed,
    the env's protocol): the next evaluation replaces it). A record of an rltrain that did
    not keep the protocol is taken as played under this one."""
    if record is None:
        return None
    settings = settings or {}
    protocol, now = record.get("protocol"), settings.get("protocol")
    same = not isinstance(protocol, dict) or now is None or same_protocol(protocol, now)
    other = any(
        record.get(k, RECORDED_BEFORE.get(k)) != v for k, v in settings.items() if k != "protocol"
    )
    return None if other or not same else float(record["mean_return"])
