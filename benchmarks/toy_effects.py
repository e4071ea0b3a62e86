"""The effects of asynchrony that the literature describes, measured on toy_quadratic.

Two experiments, each a set of `rltrain bench` runs on a quadratic with a known optimum and
no label noise (so every update rule that converges reaches w* exactly):

``curvature``: plain SGD at one learning rate, sync / async / async_scale with N workers, at
several curvatures L (the largest Hessian eigenvalue). Gradient descent with delay tau is
stable only for lr L < 2 sin(pi / (2 (2 tau + 1))) (about 0.45 at tau = 3), against
lr L < 2 for sync: staleness hurts more at high curvature, and scaling the step by
1 / staleness (async_scale) restores convergence where plain async diverges.

``momentum``: SGD with explicit momentum mu on an ill-conditioned quadratic, for the
single-process baseline (N = 1) and async with N workers, with and without
``server.momentum_correction``. Mitliagkas et al. (2016) predict an implicit momentum of
1 - 1/N from asynchrony, so the best explicit momentum falls as N grows; the effective
(implicit) momentum of async with N workers is measured as best_mu(1) - best_mu(N), the
momentum asynchrony supplied in place of the explicit one.

Every run has an epoch budget (not seconds), so the figures count updates and samples and do
not depend on the machine's load. Usage:

    python benchmarks/toy_effects.py curvature --out runs/toy_curvature.md
    python benchmarks/toy_effects.py momentum --out runs/toy_momentum.md
"""

from __future__ import annotations

import argparse
import math
import tempfile
from pathlib import Path
from typing import Any

import rltrain

CURVATURES = (0.1, 0.25, 0.5, 1.0, 1.5)
MOMENTA = (0.0, 0.5, 0.7, 0.8, 0.9, 0.95)


def run(modes: list[str], workers: int, **overrides: Any) -> dict[str, dict[str, Any]]:
    """One bench; its rows by mode."""
    with tempfile.TemporaryDirectory() as tmp:
        base = rltrain.Config(
            {
                "modes": modes,
                "workers": workers,
                "batch_size": 32,
                "data": {"dataset": "toy_quadratic"},
                "budget": {"max_seconds": 0, "epochs": 1},  # epochs: overridden
                "eval": {"every_seconds": 0.25, "distance_targets": [0.1, 0.01]},
                "runtime": {"threads_per_worker": 1},
            },
            "bench",
        )
        result = rltrain.bench(base, run_dir=Path(tmp) / "run", **overrides)
        return result.by_mode()


def cell(row: dict[str, Any]) -> str:
    """updates to dist 0.01 (final distance)."""
    if row.get("diverged"):
        return "diverged"
    hit = row["updates_to"].get("dist 0.01")
    final = row["final_distance"]
    return f"{hit:,} ({final:.0e})" if hit is not None else f"not reached ({final:.0e})"


def curvature(workers: int, lr: float, epochs: int) -> str:
    modes = ["sync", "async", "async_scale"]
    lines = [
        f"SGD lr {lr:g}, {workers} workers, batch 32, {epochs} epochs of 20k samples; "
        "cells: server updates to 1% of the start distance (final relative distance)",
        "",
        "| curvature L | lr L | " + " | ".join(modes) + " | async mean staleness |",
        "|---" * (len(modes) + 3) + "|",
    ]
    for L in CURVATURES:
        rows = run(
            modes,
            workers,
            data__toy__curvature=L,
            data__toy__condition=10.0,
            data__toy__noise=0.0,
            optimizer__name="sgd",
            optimizer__lr=lr,
            budget__epochs=epochs,
        )
        stale = rows["async"]["mean_staleness"]
        cells = [cell(rows[m]) for m in modes]
        lines.append(f"| {L:g} | {lr * L:g} | " + " | ".join(cells) + f" | {stale:.2f} |")
        print(lines[-1], flush=True)
    return "\n".join(lines) + "\n"


def momentum(workers: tuple[int, ...], lr: float, epochs: int) -> str:
    setups: list[tuple[str, int, bool]] = [("baseline", 1, False)]
    setups += [("async", n, False) for n in workers]
    setups += [("async", n, True) for n in workers]
    names = [
        "N=1 (baseline)" if mode == "baseline" else f"async N={n}" + (" corrected" if c else "")
        for mode, n, c in setups
    ]
    table: dict[str, dict[float, dict[str, Any]]] = {name: {} for name in names}
    for mu in MOMENTA:
        for (mode, n, corrected), name in zip(setups, names, strict=True):
            if corrected and mu < 1 - 1 / n:
                continue  # the correction leaves no explicit momentum: the plain async row
            rows = run(
                [mode],
                n,
                data__toy__curvature=1.0,
                data__toy__condition=100.0,
                data__toy__noise=0.0,
                optimizer__name="momentum",
                optimizer__momentum=mu,
                optimizer__lr=lr,
                server__momentum_correction=corrected,
                budget__epochs=epochs,
            )
            table[name][mu] = rows[mode]
            print(f"mu {mu:g} {name}: {cell(rows[mode])}", flush=True)
    head = "| total momentum mu | " + " | ".join(names) + " |"
    lines = [
        f"SGD+momentum lr {lr:g}, curvature 1, condition 100, batch 32, {epochs} epochs of 20k "
        "samples; cells: server updates to 1% of the start distance (final distance). "
        "`corrected`: server.momentum_correction=true (explicit momentum mu - (1 - 1/N))",
        "",
        head,
        "|---" * (len(names) + 1) + "|",
    ]
    for mu in MOMENTA:
        cells = [cell(table[n][mu]) if mu in table[n] else "" for n in names]
        lines.append(f"| {mu:g} | " + " | ".join(cells) + " |")
    best = {n: _best(table[n]) for n in names}
    lines += ["", "| setup | best mu (fewest updates) | mean staleness | implied 1 - 1/N |"]
    lines += ["|---|---|---|---|"]
    for (_, n, _), name in zip(setups, names, strict=True):
        mu_best = best[name]
        stale = table[name][mu_best]["mean_staleness"] if mu_best is not None else math.nan
        lines.append(f"| {name} | {mu_best} | {stale:.2f} | {1 - 1 / n:.2f} |")
    ref = best[names[0]]
    for n, name in zip(workers, names[1 : 1 + len(workers)], strict=True):
        mu_n = best[name]
        if ref is not None and mu_n is not None:
            lines.append(
                f"\nEffective momentum of async with N={n}: best mu(1) - best mu({n}) = "
                f"{ref - mu_n:.2f} (Mitliagkas et al.: 1 - 1/N = {1 - 1 / n:.2f})"
            )
    return "\n".join(lines) + "\n"


def _best(rows: dict[float, dict[str, Any]]) -> float | None:
    reached = {
        mu: r["updates_to"]["dist 0.01"]
        for mu, r in rows.items()
        if not r.get("diverged") and r["updates_to"].get("dist 0.01") is not None
    }
    return min(reached, key=reached.__getitem__) if reached else None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("experiment", choices=["curvature", "momentum"])
    p.add_argument("--workers", type=int, nargs="+", default=None)
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--epochs", type=int, default=None)
    p.add_argument("--out", type=Path, default=None)
    a = p.parse_args()
    if a.experiment == "curvature":
        text = curvature((a.workers or [4])[0], a.lr or 1.0, a.epochs or 3)
    else:
        text = momentum(tuple(a.workers or (2, 4)), a.lr or 0.05, a.epochs or 3)
    print(text)
    if a.out is not None:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(text)


if __name__ == "__main__":
    main()
