"""Seconds to solve a task per rltrain algorithm and seed, next to Stable-Baselines3 PPO.

"Solved": the mean raw return of the last 20 finished training episodes (across all envs;
rltrain's window is at least as many as the envs, 16 in these configs, so 20)
reaches the task's target (CartPole-v1: 475; Pendulum-v1: -200; MountainCarContinuous-v0: 90
and LunarLanderContinuous-v3: 200, with pendulum_appo.yaml and only env.id and the stop
changed; LunarLander-v3: 200, with the CartPole configs and only env.id and the stop changed;
Taxi-v4: 7, with the CartPole ppo/appo configs and SB3's batch size: tasks no config was
tuned on). Several tasks in one invocation run one after the other, each task's seeds
interleaved with its SB3 runs.
Each run is a fresh process timed from launch to exit, so imports and start-up (Ray, actor
processes) count.
rltrain runs are `rltrain train` with the algorithm's config for the task (its stop: section
caps the time). When stable-baselines3 is installed (`pip install -e '.[bench]'`), every seed
also runs SB3 PPO with rl-baselines3-zoo's hyper-parameters for the task and the same stop
rule (benchmarks/sb3_ppo.py), interleaved with the rltrain runs so machine noise hits both
alike; the order alternates per seed.

Prints a markdown table of every run, the median whole-process seconds and env steps to the
target per algorithm (an unsolved run counts as infinite) and each rltrain median divided by
SB3 PPO's.

    python benchmarks/time_to_solve.py [--task TASK [TASK ...]] [--seeds 0 1 2]
        [--algos appo ppo a3c impala a2c] [--backends auto ray local] [--no-sb3]
        [--out results.csv|results.json]

``--backends auto ray local`` runs each algorithm three times per seed: the default runtime
(auto: the process runtime on one machine), Ray processes, and ``runtime.backend=local``
(every process a thread of the one command, no Ray).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import importlib.util
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# task -> algorithm -> (config under configs/, --set overrides)
TASKS: dict[str, dict[str, tuple[str, list[str]]]] = {
    "cartpole": {
        "a3c": ("cartpole_a3c.yaml", []),
        "a2c": ("cartpole_a3c.yaml", ["algo.name=a2c"]),
        "impala": ("cartpole_impala.yaml", []),
        "dqn": ("cartpole_gorila.yaml", []),
        "appo": ("cartpole_appo.yaml", []),
        "ppo": ("cartpole_ppo.yaml", []),
    },
    "pendulum": {"appo": ("pendulum_appo.yaml", [])},
    # continuous tasks no config was tuned on: pendulum_appo.yaml with only env.id and stop changed
    "mountaincar_continuous": {
        "appo": (
            "pendulum_appo.yaml",
            ["env.id=MountainCarContinuous-v0", "stop.mean_return=90", "stop.max_seconds=300"],
        )
    },
    "lunarlander_continuous": {
        "appo": (
            "pendulum_appo.yaml",
            ["env.id=LunarLanderContinuous-v3", "stop.mean_return=200", "stop.max_seconds=1200"],
        )
    },
    # a task no config was tuned on: the CartPole configs with only env.id and stop changed
    "lunarlander": {
        algo: (config, ["env.id=LunarLander-v3", "stop.mean_return=200", "stop.max_seconds=1200"])
        for algo, config in (
            ("a3c", "cartpole_a3c.yaml"),
            ("appo", "cartpole_appo.yaml"),
            ("ppo", "cartpole_ppo.yaml"),
        )
    },
}
# a sparse-reward task no config was tuned on (-1 a step, -10 for a wrong pickup or drop-off,
# +20 for a delivery, 200-step episodes): the CartPole configs stay at -200 (they learn to
# avoid the -10 before any delivery), so ppo runs with SB3's batch size (16 envs x 1024 steps
# per update) in 32 minibatches, Adam 3e-4 (the one-hot cells are left raw by normalize.obs:
# auto); appo the same, without V-trace (impala.correction=none): a batch of 320 minibatch steps
# moves the policy so far that V-trace's truncated weights cut the actors' lagging traces and
# the policy collapses before any delivery counts (docs/benchmarks.md)
TAXI = [
    "env.id=Taxi-v4",
    "stop.mean_return=7",
    "stop.max_seconds=900",
    "algo.rollout_length=1024",
    "ppo.minibatches=32",
    "optimizer.lr=0.0003",
]
TASKS["taxi"] = {
    "ppo": ("cartpole_ppo.yaml", TAXI),
    "appo": ("cartpole_appo.yaml", [*TAXI, "impala.correction=none"]),
}
TARGETS = {
    "cartpole": 475,
    "pendulum": -200,
    "mountaincar_continuous": 90,
    "lunarlander": 200,
    "lunarlander_continuous": 200,
    "taxi": 7,
}
SB3 = "sb3"  # the job name of an SB3 PPO run


@dataclasses.dataclass
class Row:
    tool: str  # rltrain | sb3
    algo: str
    seed: int
    solved: bool
    stopped_by: str
    process_seconds: float  # launch to exit
    learn_seconds: float | None  # the run's own clock (see the table's footnote)
    env_steps: int | None
    mean_return: float | None
    torch_threads: int | None = None
    error: str = ""
    backend: str = "auto"  # rltrain's runtime.backend
    task: str = ""

    @property
    def label(self) -> str:
        return f"{self.tool} {self.algo}" + (f" ({self.backend})" if self.backend != "auto" else "")


def timed(cmd: list[str]) -> tuple[subprocess.CompletedProcess[str], float]:
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    return proc, time.perf_counter() - t


def failure(proc: subprocess.CompletedProcess[str], what: str) -> str:
    lines = [line for line in (proc.stderr or proc.stdout).splitlines() if line.strip()]
    msg = f"exit {proc.returncode}: {lines[-1][:200] if lines else 'no output'}"
    print(f"{what} failed, {msg}", file=sys.stderr, flush=True)
    return msg


def run_rltrain(task: str, algo: str, seed: int, out: Path, backend: str = "auto") -> Row:
    config, overrides = TASKS[task][algo]
    run_dir = out / f"{algo}-{backend}-{seed}"
    cmd = [sys.executable, "-m", "rltrain.cli", "train", str(ROOT / "configs" / config)]
    cmd += ["--run-dir", str(run_dir), "--set", f"seed={seed}"]
    cmd += ["--set", f"runtime.backend={backend}"]
    for o in overrides:
        cmd += ["--set", o]
    proc, seconds = timed(cmd)
    error = failure(proc, f"rltrain {algo} seed {seed}") if proc.returncode else ""
    path = run_dir / "summary.json"
    if not path.exists():
        return Row(
            "rltrain", algo, seed, False, "error", seconds, None, None, None, None, error, backend
        )
    s = json.loads(path.read_text())
    return Row(
        tool="rltrain",
        algo=algo,
        seed=seed,
        solved=s["stopped_by"] == "mean_return",
        stopped_by=s["stopped_by"],
        process_seconds=seconds,
        learn_seconds=s["wall_seconds"],
        env_steps=s["env_steps"],
        mean_return=s["mean_return"],
        error=error,
        backend=backend,
    )


def run_sb3(task: str, seed: int) -> Row:
    cmd = [sys.executable, str(ROOT / "benchmarks" / "sb3_ppo.py"), "--task", task]
    cmd += ["--seed", str(seed)]
    proc, seconds = timed(cmd)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode or not lines:
        error = failure(proc, f"SB3 PPO seed {seed}")
        return Row(SB3, "ppo", seed, False, "error", seconds, None, None, None, error=error)
    r = json.loads(lines[-1])
    return Row(
        tool=SB3,
        algo="ppo",
        seed=seed,
        solved=r["solved"],
        stopped_by=r["stopped_by"],
        process_seconds=seconds,
        learn_seconds=r["learn_seconds"],
        env_steps=r["env_steps"],
        mean_return=r["mean_return"],
        torch_threads=r["torch_threads"],
    )


def fmt(x: float | None, spec: str = ".1f") -> str:
    return "-" if x is None else format(x, spec)


def print_row(r: Row) -> None:
    solved = "yes" if r.solved else f"no ({r.stopped_by})"
    print(
        f"| {r.label} | {r.seed} | {solved} | {r.process_seconds:.1f} | {fmt(r.learn_seconds)} | "
        f"{fmt(r.env_steps, ',')} | {fmt(r.mean_return)} |",
        flush=True,
    )


def summarize(rows: list[Row], target: float) -> None:
    medians: dict[str, tuple[float, float]] = {}  # label -> (seconds, env steps) to the target
    for label in dict.fromkeys(r.label for r in rows):
        runs = [r for r in rows if r.label == label]
        times = [r.process_seconds if r.solved else math.inf for r in runs]
        steps = [float(r.env_steps or 0) if r.solved else math.inf for r in runs]
        medians[label] = statistics.median(times), statistics.median(steps)
        solved = sum(r.solved for r in runs)
        t, n = medians[label]
        m = "unsolved" if math.isinf(t) else f"{t:.1f} s, {n:,.0f} steps"
        print(f"{label}: median to {target:g} = {m} ({solved}/{len(runs)} solved)")
    base = medians.get(f"{SB3} ppo")
    if base is None:
        return
    for label, (t, n) in medians.items():
        if label.startswith("rltrain"):
            if math.isinf(base[0]):
                ratio = "n/a (SB3 PPO unsolved)"
            elif math.isinf(t):
                ratio = "inf (unsolved)"
            else:
                ratio = f"{t / base[0]:.2f}x in seconds, {n / base[1]:.2f}x in env steps"
            print(f"{label} / SB3 PPO median: {ratio}")


def write(rows: list[Row], path: Path) -> None:
    dicts: list[dict[str, Any]] = [dataclasses.asdict(r) for r in rows]
    if path.suffix == ".csv":
        with path.open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=[f.name for f in dataclasses.fields(Row)])
            w.writeheader()
            w.writerows(dicts)
    else:
        path.write_text(json.dumps(dicts, indent=2) + "\n")
    print(f"rows written to {path}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "--task", "--tasks", dest="tasks", nargs="+", choices=list(TASKS), default=["cartpole"]
    )
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument(
        "--algos",
        nargs="+",
        choices=sorted({a for t in TASKS.values() for a in t}),
        help="default: every algorithm with a config for the task but dqn",
    )
    p.add_argument(
        "--backends",
        nargs="+",
        choices=["auto", "process", "ray", "local"],
        default=["auto"],
        help="rltrain's runtime.backend for each algorithm (default: auto, the default's)",
    )
    p.add_argument("--no-sb3", action="store_true", help="skip the SB3 PPO reference runs")
    p.add_argument("--out", type=Path, help="also write the rows to FILE (.csv, else JSON)")
    args = p.parse_args()

    sb3 = not args.no_sb3 and importlib.util.find_spec("stable_baselines3") is not None
    if not args.no_sb3 and not sb3:
        print("skip SB3 PPO: stable-baselines3 is not installed (pip install -e '.[bench]')")
    plan = {task: jobs_for(task, args.algos, args.backends, sb3) for task in args.tasks}
    if not any(plan.values()):
        sys.exit("nothing to run")
    out = Path(tempfile.mkdtemp(prefix="time-to-solve-"))
    print(f"{os.cpu_count()} CPUs; rltrain run dirs under {out}")
    rows: list[Row] = []
    for task, jobs in plan.items():
        print(f"\n## {task}\n")
        print("| run | seed | solved | whole-process s | learn s | env steps | mean return |")
        print("|---|---|---|---|---|---|---|", flush=True)
        for i, seed in enumerate(args.seeds):
            for job in jobs if i % 2 == 0 else jobs[::-1]:
                if job == SB3:
                    row = run_sb3(task, seed)
                else:
                    row = run_rltrain(task, job[0], seed, out / task, job[1])
                row.task = task
                rows.append(row)
                print_row(row)
    print(
        "\nlearn s: rltrain's summary.json wall_seconds (Trainer.run to stop: Ray start-up in, "
        "imports out); SB3: env + model construction + learn()."
    )
    threads = sorted({r.torch_threads for r in rows if r.torch_threads is not None})
    if threads:
        print(
            f"SB3 PPO used torch's default thread count: {', '.join(map(str, threads))}; rltrain "
            "processes use runtime.threads_per_worker from their config."
        )
    for task in plan:
        print(f"\n{task}:")
        summarize([r for r in rows if r.task == task], TARGETS[task])
    if args.out:
        write(rows, args.out)


def jobs_for(task: str, algos: list[str] | None, backends: list[str], sb3: bool) -> list[Any]:
    """SB3 (when installed) and each (algorithm, backend) of ``task`` with a config."""
    configs = TASKS[task]
    runs = []
    for algo in dict.fromkeys(algos or [a for a in configs if a != "dqn"]):
        if algo not in configs:
            print(f"skip {task} {algo}: no config for {task}")
            continue
        config = ROOT / "configs" / configs[algo][0]
        if not config.exists():
            print(f"skip {task} {algo}: {config.relative_to(ROOT)} does not exist (yet)")
            continue
        runs += [(algo, b) for b in dict.fromkeys(backends)]
    return [SB3, *runs] if sb3 and runs else runs


if __name__ == "__main__":
    main()
