"""What ``rltrain plot`` reads of a run's evals.jsonl: the evaluations made at its stop, and
where its evaluations changed how they were scored."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rltrain.rundir import EVALS_FILE, RECORDED_BEFORE, same_protocol


def eval_records(run_dir: Path) -> tuple[list[dict[str, Any]], list[int]]:
    """The records of ``run_dir/evals.jsonl`` one can read, and the numbers of the lines one
    cannot (a damaged line; explore107: one of them silenced every check of the file)."""
    try:
        lines = (run_dir / EVALS_FILE).read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return [], []
    records, bad = [], []
    for i, line in enumerate(lines, 1):
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if isinstance(record, dict) and isinstance(record.get("env_steps"), int):
            records.append(record)
        elif line.strip():
            bad.append(i)
    return records, bad


def stop_evaluations(run_dir: Path) -> list[int]:
    """The env steps of the evaluations ``run_dir/evals.jsonl`` says were made as the run
    stopped (none where it is missing, or of an rltrain that did not say)."""
    return [r["env_steps"] for r in eval_records(run_dir)[0] if r.get("at_stop")]


SCORED_BY = ("episodes", "deterministic", "seed", "epsilon")
"""What an evaluation's score depends on beside the env's protocol (evals.jsonl's keys;
epsilon: dqn's, dqn.eval_epsilon, absent in other runs' records)."""


def scoring_notes(run_dir: Path, label: str) -> list[str]:
    """``plot --evals``' lines on a run's evaluations: where they changed how they were scored
    (a resume's --set of eval.* or of the env's protocol: their scores do not compare across
    it), and lines of evals.jsonl it could not read."""
    records, bad = eval_records(run_dir)
    notes = []
    if bad:
        lines = ", ".join(map(str, bad[:5])) + (", ..." if len(bad) > 5 else "")
        notes.append(f"{label}: {EVALS_FILE}'s line {lines} unreadable, left out of these checks")
    changes: list[str] = []
    last: tuple[dict[str, Any], dict[str, Any]] | None = None
    for r in records:
        now = {k: r.get(k, RECORDED_BEFORE.get(k)) for k in SCORED_BY}
        kept = r.get("protocol")
        protocol: dict[str, Any] = kept if isinstance(kept, dict) else {}
        if last is not None:
            said = [f"{k} {last[0][k]} -> {now[k]}" for k in SCORED_BY if now[k] != last[0][k]]
            said += [] if same_protocol(last[1], protocol) else ["the env's protocol"]
            if said:  # (a key one record lacks is no change: review87)
                changes.append(f"at {r['env_steps']:,} steps: {', '.join(said)}")
        last = (now, protocol)
    if changes:
        notes.append(
            f"{label}'s evaluations were scored otherwise {'; '.join(changes)}: scores before "
            "and after do not compare"
        )
    return notes
