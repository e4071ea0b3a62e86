"""The tables of a bench's results.md and its printout: every run's row, the time to the first
target split into statistical and hardware efficiency, and, with ``seeds`` > 1, each mode's
mean and standard deviation over its seeds (:func:`by_mode`, also in summary.json)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rltrain.supervised.config import BenchConfig
from rltrain.supervised.evaluation import targets_of
from rltrain.supervised.toys import TOY_PROBLEMS


@dataclass(frozen=True)
class ModeResult:
    """One row of results.csv / results.md."""

    mode: str
    workers: int
    final_accuracy: float
    best_accuracy: float  # the best snapshot's test accuracy: chosen on the validation set
    # (data.validation), else on the test set itself (optimistic)
    train_seconds: float
    startup_seconds: float
    samples: int
    samples_per_s: float
    updates_applied: int  # pushes the server applied: gradients (sync: N per step), or
    # parameters (average)
    dropped: int
    rejected: int
    mean_staleness: float
    seconds_to: dict[str, float | None] = field(default_factory=dict)
    samples_to: dict[str, int | None] = field(default_factory=dict)
    us_per_sample_to: dict[str, float | None] = field(default_factory=dict)
    """Hardware efficiency: training microseconds per sample until each target was reached
    (seconds_to = samples_to x us_per_sample_to / 1e6, exactly)."""
    steps_to: dict[str, int | None] = field(default_factory=dict)
    """Server versions (optimizer steps) until each target was reached: one per applied
    gradient where each is a step (async), one per round of N (sync) or K (soft_sync)."""
    steps: int = 0  # the server's version at the mode's end: its optimizer steps
    bytes_pushed: int = 0  # update values the shards received, as they travelled
    bytes_pulled: int = 0  # parameter values the shards sent
    final_distance: float | None = None  # toy problems: |w - w*| / |w0 - w*| at the end
    diverged: bool = False  # toy problems: see is_diverged()
    faults: dict[str, int] = field(default_factory=dict)  # FaultCounters of the mode
    synthetic: dict[str, float | None] = field(default_factory=dict)
    """Synthetic-gradient stages (model.synthetic): the means over every true gradient of
    every replica's synthetic stages (staleness in the stage's updates; cosine and relative
    L2 of the prediction against it) and their count; empty for other modes."""
    seed: int = 0  # the run's (BenchConfig.seed; with seeds > 1, seed + the round)
    dropped_by: dict[str, int] = field(default_factory=dict)
    """``dropped`` per worker index (JSON's keys: strings): whose updates the rule dropped."""
    best_validation: float | None = None
    """With data.validation: the held-out accuracy of the snapshot best_accuracy is of (the
    one best on it); None: best_accuracy is the best test accuracy, picked on the test set."""


def _fmt(v: float | int | None, spec: str) -> str:
    return "not reached" if v is None else format(v, spec)


def in_order(cfg: BenchConfig, results: Sequence[ModeResult]) -> list[ModeResult]:
    """The runs by mode (in ``modes``' order), then seed: the bench runs them round by round."""
    order = {m: i for i, m in enumerate(cfg.modes)}
    return sorted(results, key=lambda r: (order.get(r.mode, len(order)), r.seed))


def markdown_table(cfg: BenchConfig, results: Sequence[ModeResult]) -> str:
    """One row per run (a ``seed`` column when there are several)."""
    keys = [t.key for t in targets_of(cfg)]
    toy, seeds = cfg.data.dataset in TOY_PROBLEMS, cfg.seeds > 1
    first = ["final dist"] if toy else []
    first += [] if cfg.data.dataset == "toy_quadratic" else ["final acc"]
    head = ["mode", *(["seed"] if seeds else []), *first]
    head += [*[f"s to {k}" for k in keys], *[f"samples to {k}" for k in keys]]
    head += [f"steps to {k}" for k in keys] if toy else []
    head += ["samples/s", "pushes applied", "steps", "dropped", "rejected"]
    head += ["mean staleness", "MB pushed"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in in_order(cfg, results):
        cells = [r.mode, *([str(r.seed)] if seeds else [])]
        cells += (["diverged"] if r.diverged else [_fmt(r.final_distance, ".2e")]) if toy else []
        cells += [] if cfg.data.dataset == "toy_quadratic" else [f"{r.final_accuracy:.4f}"]
        cells += [_fmt(r.seconds_to[k], ".1f") for k in keys]
        cells += [_fmt(r.samples_to[k], ",") for k in keys]
        cells += [_fmt(r.steps_to[k], ",") for k in keys] if toy else []
        cells += [f"{r.samples_per_s:,.0f}", f"{r.updates_applied:,}", f"{r.steps:,}"]
        cells += [str(r.dropped)]
        cells += [str(r.rejected), f"{r.mean_staleness:.2f}", f"{r.bytes_pushed / 1e6:,.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def efficiency_table(cfg: BenchConfig, results: Sequence[ModeResult]) -> str:
    """Time to the first target split into statistical and hardware efficiency, each against
    the reference mode (``baseline`` if it ran, else the first) at the same seed: time ratio =
    samples ratio x speed ratio, exactly, since seconds_to = samples_to x seconds per sample."""
    if not results or not targets_of(cfg):
        return ""
    key, seeds = targets_of(cfg)[0].key, cfg.seeds > 1
    rows = in_order(cfg, results)
    refs = {}
    for r in rows:  # per seed: the baseline's run, else the first mode's
        if r.seed not in refs or r.mode == "baseline":
            refs[r.seed] = r
    ref_mode = next(iter(refs.values())).mode
    head = [
        "mode",
        *(["seed"] if seeds else []),
        f"s to {key}",
        f"samples to {key} (statistical)",
        "us/sample (hardware)",
        f"speed-up vs {ref_mode}",
        "= fewer samples",
        "x faster samples",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        ref = refs[r.seed]
        rs, rn, ru = ref.seconds_to[key], ref.samples_to[key], ref.us_per_sample_to[key]
        s, n, u = r.seconds_to[key], r.samples_to[key], r.us_per_sample_to[key]
        cells = [r.mode, *([str(r.seed)] if seeds else [])]
        if None in (s, n, u, rs, rn, ru):
            cells += ["not reached" if s is None else f"{s:.1f}", "", "", "", "", ""]
        else:
            cells += [f"{s:.1f}", f"{n:,}", f"{u:.1f}"]
            cells += [f"{rs / s:.2f}x", f"{rn / n:.2f}", f"{ru / u:.2f}"]  # type: ignore[operator]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# over seeds


def spread(values: Sequence[float | int | None]) -> dict[str, Any]:
    """Mean and sample standard deviation of the values that exist (None: a target a run did
    not reach; NaN: no accuracy on a toy problem), with how many there were of how many runs."""
    have = [float(v) for v in values if v is not None and not math.isnan(v)]
    mean = statistics.fmean(have) if have else None
    std = statistics.stdev(have) if len(have) > 1 else None
    return {"mean": mean, "std": std, "n": len(have), "of": len(values)}


def _cell(s: dict[str, Any], spec: str) -> str:
    """``mean ± std``, and ``(k/n)`` when only k of the n runs have a value (a target reached
    by some seeds: the mean is over those, an optimistic one)."""
    if s["mean"] is None:
        return "not reached"
    text = format(s["mean"], spec)
    text += f" ± {format(s['std'], spec)}" if s["std"] is not None else ""
    return text + (f" ({s['n']}/{s['of']})" if s["n"] < s["of"] else "")


def by_mode(cfg: BenchConfig, results: Sequence[ModeResult]) -> list[dict[str, Any]]:
    """Each mode's spread over its runs (summary.json's ``by_mode``)."""
    keys = [t.key for t in targets_of(cfg)]
    out = []
    for mode in dict.fromkeys(r.mode for r in in_order(cfg, results)):
        runs = [r for r in results if r.mode == mode]
        row: dict[str, Any] = {"mode": mode, "seeds": sorted(r.seed for r in runs)}
        row["final_accuracy"] = spread([r.final_accuracy for r in runs])
        if cfg.data.dataset in TOY_PROBLEMS:
            row["final_distance"] = spread([r.final_distance for r in runs])
            row["diverged"] = sum(r.diverged for r in runs)
            row["steps_to"] = {k: spread([r.steps_to[k] for r in runs]) for k in keys}
        row["seconds_to"] = {k: spread([r.seconds_to[k] for r in runs]) for k in keys}
        row["samples_to"] = {k: spread([r.samples_to[k] for r in runs]) for k in keys}
        row["samples_per_s"] = spread([r.samples_per_s for r in runs])
        row["mean_staleness"] = spread([r.mean_staleness for r in runs])
        out.append(row)
    return out


def seeds_table(cfg: BenchConfig, results: Sequence[ModeResult]) -> str:
    """One row per mode: mean ± standard deviation over its seeds (the sample's, n - 1)."""
    keys = [t.key for t in targets_of(cfg)]
    toy = cfg.data.dataset in TOY_PROBLEMS
    head = ["mode", "runs", *(["final dist", "diverged"] if toy else [])]
    head += [] if cfg.data.dataset == "toy_quadratic" else ["final acc"]
    head += [*[f"s to {k}" for k in keys], *[f"samples to {k}" for k in keys]]
    head += [f"steps to {k}" for k in keys] if toy else []
    head += ["samples/s", "mean staleness"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in by_mode(cfg, results):
        cells = [row["mode"], str(len(row["seeds"]))]
        if toy:
            cells += [_cell(row["final_distance"], ".2e"), str(row["diverged"])]
        if cfg.data.dataset != "toy_quadratic":
            cells += [_cell(row["final_accuracy"], ".4f")]
        cells += [_cell(row["seconds_to"][k], ".1f") for k in keys]
        cells += [_cell(row["samples_to"][k], ",.0f") for k in keys]
        cells += [_cell(row["steps_to"][k], ",.0f") for k in keys] if toy else []
        cells += [_cell(row["samples_per_s"], ",.0f"), _cell(row["mean_staleness"], ".2f")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
