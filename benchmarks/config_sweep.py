"""Seconds and env steps to a config's stop for variants of it, several seeds each.

Each run is a whole `rltrain train` process (start-up included), one after another, so that
the variants share the machine's state; the table gives each variant's median and slowest
seconds and its env steps. A run that stops on anything but its mean return counts as
unsolved (inf steps).

    python benchmarks/config_sweep.py configs/cartpole_appo.yaml --seeds 0 1 2 3 4 5 6 7 \\
        --variant base= \\
        --variant lb1_e4m4=impala.learner_batch=1,ppo.epochs=4,ppo.minibatches=4

With ``--past STEPS`` each run trains on past its stop to STEPS env steps, in one session
(stop.mean_return=null, stop.max_env_steps=STEPS: as a `--resume ... --set
stop.mean_return=null` would go on, but a schedule whose horizon is stop.max_env_steps moves
to STEPS), and the table says whether it holds what it learned: the env steps at which the
mean return first reached the config's stop, the lowest mean return after that, and the mean
over the last fifth of the run.

    python benchmarks/config_sweep.py configs/cartpole_impala.yaml --seeds 0 1 2 3 4 5 \
        --past 300000 --variant base= --variant norm=normalize.reward=true
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


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


def held(run_dir: Path, target: float) -> tuple[float, float, float]:
    """(env steps at which the mean return first reached ``target``, inf if never; the
    lowest mean return after that; the mean over the last fifth of the run's steps)."""
    acc = EventAccumulator(str(run_dir / "tb"), size_guidance={"scalars": 0})
    acc.Reload()
    points = [(e.step, e.value) for e in acc.Scalars("episode/mean_return")]
    first = next((step for step, v in points if v >= target), float("inf"))
    lowest = min((v for step, v in points if step >= first), default=float("nan"))
    end = points[-1][0] * 0.8
    last = [v for step, v in points if step >= end]
    return first, lowest, statistics.fmean(last)


def past(config: str, seeds: list[int], variants: dict[str, str], steps: int, tmp: str) -> None:
    """The --past table: each variant's runs trained on to ``steps``."""
    target = float(yaml.safe_load(Path(config).read_text())["stop"]["mean_return"])
    print(f"| variant | first mean return >= {target:g} (env steps) | lowest after | last 20% |")
    print("|---|---|---|---|")
    on = [f"stop.mean_return=null,stop.max_env_steps={steps},stop.max_seconds=0"]
    for name, spec in variants.items():
        rows = []
        for seed in seeds:
            sets = [x for x in f"{spec},{on[0]}".split(",") if x]
            run(config, seed, sets, Path(tmp) / f"{name}-{seed}")
            rows.append(held(Path(tmp) / f"{name}-{seed}", target))
        cols = [", ".join(shown(r[i], i > 0) for r in rows) for i in range(3)]
        print(f"| {name} | {' | '.join(cols)} |", flush=True)


def shown(value: float, is_return: bool) -> str:
    """never (the target not reached) and - (nothing after it) in place of inf and nan; env
    steps whole, returns to 3 significant digits (FrozenLake's 0.612 as CartPole's 475)."""
    if value == float("inf"):
        return "never"
    if value != value:
        return "-"
    if not is_return:
        return f"{value:,.0f}"
    digits = 2 - math.floor(math.log10(abs(value))) if value else 0
    return f"{value:,.{max(digits, 0)}f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("config")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--past", type=int, default=0, metavar="STEPS", help="train on to STEPS")
    p.add_argument(
        "--variant",
        action="append",
        default=[],
        help="NAME=key=value,key=value (NAME= alone: the config as it is)",
    )
    args = p.parse_args()
    variants = dict(v.split("=", 1) for v in args.variant) or {"base": ""}
    if args.past:
        with tempfile.TemporaryDirectory() as tmp:
            return past(args.config, args.seeds, variants, args.past, tmp)
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
