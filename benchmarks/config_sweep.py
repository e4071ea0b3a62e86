"""Seconds and env steps to a config's stop for variants of it, several seeds each.

Each run is a whole `rltrain train` process (start-up included), one after another, so that
the variants share the machine's state; the table gives each variant's median and slowest
seconds and its env steps. A run that stops on anything but its mean return counts as
unsolved (inf steps).

    python benchmarks/config_sweep.py configs/cartpole_appo.yaml --seeds 0 1 2 3 4 5 6 7 \\
        --variant base= \\
        --variant lb1_e4m4=impala.learner_batch=1,ppo.epochs=4,ppo.minibatches=4
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path


def run(config: str, seed: int, sets: list[str], run_dir: Path) -> tuple[float, float]:
    """(whole-process seconds, env steps to the stop, inf when unsolved)."""
    argv = ["rltrain", "train", config, "--run-dir", str(run_dir), "--set", f"seed={seed}"]
    for s in sets:
        argv += ["--set", s]
    start = time.time()
    subprocess.run(argv, capture_output=True, check=True)
    seconds = time.time() - start
    summary = json.loads((run_dir / "summary.json").read_text())
    solved = summary["stopped_by"] in ("mean_return", "eval_mean_return")
    return seconds, summary["env_steps"] if solved else float("inf")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("config")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument(
        "--variant",
        action="append",
        default=[],
        help="NAME=key=value,key=value (NAME= alone: the config as it is)",
    )
    args = p.parse_args()
    variants = dict(v.split("=", 1) for v in args.variant) or {"base": ""}
    print("| variant | median s | slowest s | median env steps | env steps |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, spec in variants.items():
            sets = [s for s in spec.split(",") if s]
            runs = [run(args.config, s, sets, Path(tmp) / f"{name}-{s}") for s in args.seeds]
            secs, steps = [r[0] for r in runs], [r[1] for r in runs]
            listed = ", ".join(f"{x:,.0f}" for x in steps)
            print(
                f"| {name} | {statistics.median(secs):.1f} | {max(secs):.1f} | "
                f"{statistics.median(steps):,.0f} | {listed} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
