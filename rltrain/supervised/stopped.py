"""What a bench stopped part-way (Ctrl-C, a fault) has no results for, and the commands that
run the rest."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from shlex import quote

from rltrain.supervised.config import BenchConfig
from rltrain.supervised.tables import ModeResult


def _missing(cfg: BenchConfig, results: Sequence[ModeResult]) -> dict[str, list[int]]:
    """Each mode's seeds that have no results."""
    ran = {(r.mode, r.seed) for r in results}
    seeds = range(cfg.seed, cfg.seed + cfg.seeds)
    return {m: [s for s in seeds if (m, s) not in ran] for m in cfg.modes}


def rest_command(cfg: BenchConfig, results: Sequence[ModeResult], run_dir: Path) -> str | None:
    """The commands that run what a stopped bench has no results for, each into a new run
    folder (explore100: the stop said how many finished, not how to run the rest): the modes
    that miss the same seeds, one command per stretch of seeds, so that no finished run runs
    again (explore106: with seeds 2, the one command reran the first round's 7 of 8)."""
    stretches: dict[tuple[int, int], list[str]] = {}
    for mode, left in _missing(cfg, results).items():
        for first, n in _stretches(left):
            stretches.setdefault((first, n), []).append(mode)
    config = quote(str(run_dir / "config.yaml"))
    commands = []
    for (first, n), modes in sorted(stretches.items()):
        sets = [] if len(modes) == len(cfg.modes) else [f"modes=[{', '.join(modes)}]"]
        if (first, n) != (cfg.seed, cfg.seeds):
            sets += [f"seed={first}", f"seeds={n}"]
        commands.append(" ".join([f"rltrain bench {config}", *(f"--set {quote(x)}" for x in sets)]))
    return "; ".join(commands) or None


def _stretches(seeds: Sequence[int]) -> list[tuple[int, int]]:
    """Consecutive seeds as (first, how many): [1, 2, 4] -> [(1, 2), (4, 1)]."""
    out: list[tuple[int, int]] = []
    for s in seeds:
        if out and out[-1][0] + out[-1][1] == s:
            out[-1] = (out[-1][0], out[-1][1] + 1)
        else:
            out.append((s, 1))
    return out


def not_run(cfg: BenchConfig, results: Sequence[ModeResult]) -> str:
    """The modes (with seeds > 1, the runs) a stopped bench has no results for."""
    missing = _missing(cfg, results)
    if cfg.seeds == 1:
        return ", ".join(m for m, left in missing.items() if left)
    return ", ".join(
        f"{m} (seed{'s' * (len(left) > 1)} {', '.join(map(str, left))})"
        for m, left in missing.items()
        if left
    )
