"""Seconds from the command to the first env step, per runtime and actor count.

Each run is a fresh `rltrain train CONFIG` process with a tiny budget; summary.json's
``startup`` marks say when each phase ended, counted from the process's own start time
(``trainer``: imports, config, env probe, run folder; ``runtime``: Ray or the forkserver
started; ``server``: the shards up, which on the in-process runtime includes building the
actors, spawned first and built in the trainer's thread; ``first_step``: an actor's first
env step). Runs alternate between the settings, so machine noise hits them alike; the median
over ``--repeats`` is reported. ``--trees`` compares checkouts (git worktrees of two
commits, say) in the same invocation: each run starts in its tree, so that ``python -m``
imports that tree's rltrain (the working directory comes first on ``sys.path``, before
``PYTHONPATH``, also set).

    python benchmarks/startup.py [--config configs/cartpole_appo.yaml] [--actors 1 8]
        [--backends auto] [--repeats 3] [--trees /tmp/before /tmp/after] [--set KEY=VALUE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def one(
    config: str, backend: str, actors: int, out: Path, tree: str | None, sets: list[str]
) -> tuple[dict, float]:
    run_dir = out / f"{backend}-{actors}-{time.time_ns()}"
    cmd = [sys.executable, "-m", "rltrain.cli", "train", config, "--run-dir", str(run_dir)]
    for item in sets:  # (first: the settings below win)
        cmd += ["--set", item]
    cmd += ["--set", f"runtime.backend={backend}", "--set", f"actors={actors}"]
    cmd += ["--set", "stop.max_env_steps=2000", "--set", "stop.mean_return=null"]
    cmd += ["--set", "eval.every_steps=0"]
    env = os.environ if tree is None else dict(os.environ, PYTHONPATH=tree)
    t0 = time.time()
    # in the tree too: `python -m` puts the working directory first on sys.path, before
    # PYTHONPATH, so a run from another checkout would import that one's rltrain
    subprocess.run(cmd, check=True, capture_output=True, env=env, cwd=tree)
    whole = time.time() - t0
    return json.loads((run_dir / "summary.json").read_text())["startup"], whole


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--config", default=str(ROOT / "configs" / "cartpole_appo.yaml"))
    p.add_argument("--actors", type=int, nargs="+", default=[1, 8])
    p.add_argument("--backends", nargs="+", default=["auto"])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument(
        "--set", action="append", default=[], help="a config override for every run (KEY=VALUE)"
    )
    p.add_argument(
        "--trees", nargs="+", default=[None], help="checkouts to compare (each run in its own)"
    )
    args = p.parse_args()
    args.trees = [None if t is None else str(Path(t).resolve()) for t in args.trees]  # (cwd=)
    args.config = str(Path(args.config).resolve())  # the same file, whichever tree runs it
    settings = [(t, b, a) for b in args.backends for a in args.actors for t in args.trees]
    marks: dict[tuple, list[dict]] = {s: [] for s in settings}
    wholes: dict[tuple, list[float]] = {s: [] for s in settings}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeats):
            for s in settings:
                m, w = one(args.config, s[1], s[2], Path(tmp), s[0], args.set)
                marks[s].append(m)
                wholes[s].append(w)
    sets = "".join(f" --set {item}" for item in args.set)
    print(f"{Path(args.config).name}{sets}, median of {args.repeats} (seconds from the command)")
    tree = "tree | " if args.trees != [None] else ""
    head = "runtime.backend | actors | trainer | runtime | server | first env step | whole"
    print(f"| {tree}{head} |")
    print("|" + "---|" * (8 if tree else 7))
    for s in settings:
        med = {k: statistics.median(m[k] for m in marks[s]) for k in marks[s][0]}
        where = f"{s[0]} | " if tree else ""
        print(
            f"| {where}{s[1]} | {s[2]} | {med['trainer']:.2f} | {med['runtime']:.2f} | "
            f"{med['server']:.2f} | **{med['first_step']:.2f}** | "
            f"{statistics.median(wholes[s]):.2f} |"
        )


if __name__ == "__main__":
    main()
