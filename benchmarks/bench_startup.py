"""Seconds each `rltrain bench` mode takes to start, and the whole command's wall time.

Start-up is not training time (the bench's clocks begin at a mode's first worker step), but a
bench of seven modes pays it seven times. Each run is a fresh `rltrain bench CONFIG` process
with a short budget per mode; ``results.csv``'s ``startup_seconds`` says how long each mode
took from its start to its first worker step. ``--trees`` compares checkouts (git worktrees of
two commits, say) in the same invocation, their runs alternating so that machine noise hits
them alike; the median over ``--repeats`` is reported.

    python benchmarks/bench_startup.py [--config configs/bench_fashion_mnist.yaml]
        [--modes baseline sync async hogwild] [--seconds 2] [--repeats 3]
        [--set runtime.backend=ray ...] [--trees /tmp/before /tmp/after]
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def one(args: argparse.Namespace, tree: str | None, out: Path) -> tuple[float, dict[str, float]]:
    """(the command's wall seconds, start-up seconds per mode) of one bench run."""
    run_dir = out / f"run-{time.time_ns()}"
    cmd = [sys.executable, "-m", "rltrain.cli", "bench", args.config, "--run-dir", str(run_dir)]
    cmd += ["--set", f"modes=[{', '.join(args.modes)}]"]
    cmd += ["--set", f"budget.max_seconds={args.seconds}", "--set", "budget.epochs=0"]
    for kv in args.set:
        cmd += ["--set", kv]
    env = os.environ if tree is None else dict(os.environ, PYTHONPATH=tree)
    t0 = time.time()
    done = subprocess.run(cmd, cwd=tree or ROOT, env=env, capture_output=True, text=True)
    wall = time.time() - t0
    if done.returncode != 0:
        raise SystemExit(f"bench failed ({tree or ROOT}):\n{done.stderr[-2000:]}")
    with (run_dir / "results.csv").open() as f:
        startup = {r["mode"]: float(r["startup_seconds"]) for r in csv.DictReader(f)}
    return wall, startup


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default=str(ROOT / "configs" / "bench_fashion_mnist.yaml"))
    p.add_argument("--modes", nargs="+", default=["baseline", "sync", "async", "hogwild"])
    p.add_argument("--seconds", type=float, default=2.0, help="training seconds per mode")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--set", nargs="*", default=[], help="more KEY=VALUE overrides")
    p.add_argument("--trees", nargs="*", default=[], help="checkouts to compare")
    args = p.parse_args()
    trees: list[str | None] = list(args.trees) or [None]
    runs: dict[str | None, list[tuple[float, dict[str, float]]]] = {t: [] for t in trees}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.repeats):
            for tree in trees:
                runs[tree].append(one(args, tree, Path(tmp)))
                wall, startup = runs[tree][-1]
                print(f"[{rep + 1}/{args.repeats}] {tree or ROOT}: {wall:.2f} s, {startup}")
    print(f"\n{Path(args.config).name} {' '.join(args.set)}, median of {args.repeats}")
    print("| tree | " + " | ".join(f"{m} start-up (s)" for m in args.modes) + " | whole (s) |")
    print("|---|" + "---|" * (len(args.modes) + 1))
    for tree, rows in runs.items():
        cells = [f"{statistics.median(s[m] for _, s in rows):.2f}" for m in args.modes]
        whole = statistics.median(w for w, _ in rows)
        print(f"| {tree or ROOT} | " + " | ".join(cells) + f" | **{whole:.2f}** |")


if __name__ == "__main__":
    main()
