"""What the Python API's ``train`` and ``bench`` return: a run folder's ``summary.json`` as
figures (:mod:`rltrain.api`)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

__all__ = ["BenchResult", "PlotResult", "RunResult"]


@dataclasses.dataclass(frozen=True)
class RunResult:
    """The figures of a finished ``train`` (its ``summary.json``; see the README)."""

    run_dir: Path
    stopped_by: str
    wall_seconds: float
    startup_seconds: float | None
    env_steps: int
    env_frames: int
    episodes: int
    mean_return: float | None  # what the stop judged: the last episodes when it stopped
    final_mean_return: float | None  # with those the work in flight ended (the last line's)
    best_mean_return: float | None
    updates: int
    updates_applied: int | None  # (None: a summary older than the key)
    dropped: int | None  # updates pushed and dropped (stale, or a soft_sync straggler's)
    server_rule: str | None  # the rule the server ran (ppo's barrier: sync)
    server_staleness: str | None
    mean_staleness: float
    faults: dict[str, int]
    summary: dict[str, Any] = dataclasses.field(repr=False)  # (a notebook's repr: 2,102 chars)
    """Everything summary.json holds (algo, env, protocol, failure, ...)."""

    @classmethod
    def from_run_dir(cls, run_dir: str | Path) -> RunResult:
        run_dir = Path(run_dir)  # (a str crashed: 'str' / 'str')
        return cls.from_summary(run_dir, json.loads((run_dir / "summary.json").read_text()))

    @classmethod
    def from_summary(cls, run_dir: Path, s: Any) -> RunResult:
        """The figures of a summary (what summary.json holds, or would: a full disk)."""
        names = {f.name for f in dataclasses.fields(cls)} - {"run_dir", "summary"}
        return cls(run_dir=run_dir, summary=s, **{k: s.get(k) for k in names})


@dataclasses.dataclass(frozen=True)
class BenchResult:
    """The figures of a finished ``bench`` (its ``summary.json``): one row per run."""

    run_dir: Path
    dataset: str
    results: list[dict[str, Any]] = dataclasses.field(repr=False)
    """Per run (a mode at a seed): final_accuracy, seconds_to, samples_per_s, ... (as
    results.csv)."""
    summary: dict[str, Any] = dataclasses.field(repr=False)  # (explore119: 7,585 chars)

    @property
    def stopped_by(self) -> str:
        """``done``, or ``interrupt`` (Ctrl-C: the runs that finished keep their rows)."""
        return str(self.summary.get("stopped_by", "done"))

    @classmethod
    def from_run_dir(cls, run_dir: str | Path) -> BenchResult:
        run_dir = Path(run_dir)
        s = json.loads((run_dir / "summary.json").read_text())
        return cls(run_dir, s["dataset"], s["results"], s)

    def by_mode(self) -> dict[str, dict[str, Any]]:
        """Each mode's row, for a bench of one run per mode (``seeds: 1``); with several,
        :meth:`spread` gives each mode's figures over them, and ``results`` every run's."""
        seeds = len(self.summary.get("seeds", [0]))
        if seeds > 1:
            raise ValueError(
                f"by_mode(): this bench ran {seeds} seeds of each mode; spread() gives each "
                "mode's mean and standard deviation, results every run's row (with its seed)"
            )
        return {r["mode"]: r for r in self.results}

    def spread(self) -> dict[str, dict[str, Any]]:
        """Each mode's figures over its seeds: {"final_accuracy": {"mean", "std", "n", "of"},
        "seconds_to": {target: {...}}, "samples_per_s": {...}, ...} (std None for one run;
        n of: the runs that reached a target, of all); the same shape whatever ``seeds``."""
        if "by_mode" not in self.summary:
            raise ValueError(
                f"spread(): {self.run_dir}/summary.json was written by an rltrain before seeds "
                "(one run per mode): use by_mode()"
            )
        return {r["mode"]: r for r in self.summary["by_mode"]}


@dataclasses.dataclass(frozen=True)
class PlotResult:
    """What :func:`rltrain.plot_runs` drew and printed, as ``rltrain plot`` prints it."""

    image: Path | None
    """The PNG (or .svg, .pdf) written; None without matplotlib."""
    table: str
    """The Markdown tables asked for (``marks``, ``evals``; a bench's runs: always), else ""."""
