"""Seconds from the command to the first env step, per runtime and actor count.

Each run is a fresh `rltrain train CONFIG` process with a tiny budget; summary.json's
``startup`` marks say when each phase ended, counted from the process's own start time
(``trainer``: imports, config, env probe, run folder; ``runtime``: Ray or the forkserver
started; ``server``: the shards up; ``first_step``: an actor's first env step). Runs alternate
between the settings, so machine noise hits them alike; the median over ``--repeats`` is
reported.

    python benchmarks/startup.py [--config configs/cartpole_appo.yaml] [--actors 1 8]
        [--backends auto] [--repeats 3]
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


def one(config: str, backend: str, actors: int, out: Path) -> tuple[dict, float]:
    run_dir = out / f"{backend}-{actors}-{time.time_ns()}"
    cmd = [sys.executable, "-m", "rltrain.cli", "train", config, "--run-dir", str(run_dir)]
    cmd += ["--set", f"runtime.backend={backend}", "--set", f"actors={actors}"]
    cmd += ["--set", "stop.max_env_steps=2000", "--set", "stop.mean_return=null"]
    t0 = time.time()
    subprocess.run(cmd, check=True, capture_output=True)
    whole = time.time() - t0
    return json.loads((run_dir / "summary.json").read_text())["startup"], whole


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--config", default=str(ROOT / "configs" / "cartpole_appo.yaml"))
    p.add_argument("--actors", type=int, nargs="+", default=[1, 8])
    p.add_argument("--backends", nargs="+", default=["auto"])
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    settings = [(b, a) for b in args.backends for a in args.actors]
    marks: dict[tuple[str, int], list[dict]] = {s: [] for s in settings}
    wholes: dict[tuple[str, int], list[float]] = {s: [] for s in settings}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeats):
            for b, a in settings:
                m, w = one(args.config, b, a, Path(tmp))
                marks[(b, a)].append(m)
                wholes[(b, a)].append(w)
    print(f"{Path(args.config).name}, median of {args.repeats} (seconds from the command)")
    print("| runtime.backend | actors | trainer | runtime | server | first env step | whole |")
    print("|---|---|---|---|---|---|---|")
    for b, a in settings:
        med = {k: statistics.median(m[k] for m in marks[(b, a)]) for k in marks[(b, a)][0]}
        print(
            f"| {b} | {a} | {med['trainer']:.2f} | {med['runtime']:.2f} | {med['server']:.2f} | "
            f"**{med['first_step']:.2f}** | {statistics.median(wholes[(b, a)]):.2f} |"
        )


if __name__ == "__main__":
    main()
