"""Seconds to solve CartPole-v1 (mean return 475 over 20 episodes) per algorithm and seed.

Each run is a fresh `rltrain train` process, timed from launch to exit, so start-up (Ray,
actor processes) is included. Prints a table and the median over seeds.

    python benchmarks/cartpole_time_to_solve.py [--seeds 0 1 2] [--algos a3c impala a2c]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = {
    "a3c": "cartpole_a3c.yaml",
    "impala": "cartpole_impala.yaml",
    "a2c": "cartpole_a3c.yaml",
    "dqn": "cartpole_gorila.yaml",
}


def run(algo: str, seed: int, out: Path) -> dict:
    run_dir = out / f"{algo}-{seed}"
    cmd = [sys.executable, "-m", "rltrain.cli", "train", str(ROOT / "configs" / CONFIGS[algo])]
    cmd += ["--run-dir", str(run_dir), "--set", f"seed={seed}", "--set", f"algo.name={algo}"]
    t = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    seconds = time.perf_counter() - t
    summary = json.loads((run_dir / "summary.json").read_text())
    return {"algo": algo, "seed": seed, "seconds": seconds, **summary}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--algos", nargs="+", default=["a3c", "impala", "a2c", "dqn"])
    args = p.parse_args()
    out = Path(tempfile.mkdtemp(prefix="cartpole-bench-"))
    print("| algo | seed | solved | seconds (start-up incl.) | train s | env steps | mean return |")
    print("|---|---|---|---|---|---|---|")
    medians = {}
    for algo in args.algos:
        times = []
        for seed in args.seeds:
            r = run(algo, seed, out)
            solved = r["stopped_by"] == "mean_return"
            times.append(r["seconds"] if solved else float("inf"))
            print(
                f"| {algo} | {seed} | {solved} | {r['seconds']:.1f} | {r['wall_seconds']:.1f} | "
                f"{r['env_steps']:,} | {r['mean_return']:.1f} |",
                flush=True,
            )
        medians[algo] = statistics.median(times)
    print()
    for algo, m in medians.items():
        print(f"{algo}: median seconds to 475 = {m:.1f}")


if __name__ == "__main__":
    main()
