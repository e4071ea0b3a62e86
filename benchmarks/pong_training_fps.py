"""Full-training frames/s of a Pong config, as a ratio of raw AtariVectorEnv on the same cores.

Raw: one `AtariVectorEnv` with the config's total number of games (actors x env.num_envs,
actors resolved as the run resolves them) on as many C++ threads as cores, random actions,
the same protocol. Training: `rltrain train CONFIG` for `--seconds` (90 by default) in a
subprocess; its rate is taken from the TensorBoard points after start-up and a warm-up
(`--skip` seconds after the first point), so Ray's start and the first rollouts do not count.

    python benchmarks/pong_training_fps.py [configs/pong_appo.yaml] [--seconds 90]
        [--repo PATH]   # another checkout (e.g. a git worktree of an older commit: "before")
        [--backends process local ray]  # one run each, as multiples of the first
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from pong_sampling import raw_fps

HERE = Path(__file__).resolve().parent


def steady_fps(tb_dir: Path, frame_skip: int, skip: float) -> tuple[float, int]:
    """Frames/s between the first perf point ``skip`` s after the first one and the last."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ea = EventAccumulator(str(tb_dir))
    ea.Reload()
    points = ea.Scalars("perf/env_fps")
    start = next(p for p in points if p.wall_time >= points[0].wall_time + skip)
    end = points[-1]
    return (end.step - start.step) * frame_skip / (end.wall_time - start.wall_time), end.step


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("config", nargs="?", default=str(HERE.parent / "configs" / "pong_appo.yaml"))
    p.add_argument("--seconds", type=float, default=90.0)
    p.add_argument("--skip", type=float, default=20.0, help="warm-up seconds not counted")
    p.add_argument("--raw-seconds", type=float, default=15.0)
    p.add_argument("--repo", default=str(HERE.parent), help="checkout whose rltrain to run")
    p.add_argument("--set", action="append", default=[], help="extra --set for the run")
    p.add_argument(
        "--backends",
        nargs="+",
        default=[""],
        help="runtime.backend of each run, one after the other (default: the config's)",
    )
    args = p.parse_args()

    rows = []
    for backend in args.backends:
        extra = [f"runtime.backend={backend}"] if backend else []
        fps, steps, seconds, games = train_fps(args, [*args.set, *extra])
        rows.append((backend or "the config's", fps, steps, seconds))
    raw = raw_fps(games, os.cpu_count() or 2, args.raw_seconds)
    print(f"raw AtariVectorEnv: {games} games, {os.cpu_count()} threads: {raw:,.0f} frames/s")
    for backend, fps, steps, seconds in rows:
        print(
            f"rltrain train {Path(args.config).name} ({args.repo}), runtime.backend={backend}: "
            f"{fps:,.0f} frames/s after {args.skip:.0f} s of warm-up ({steps:,} env steps in "
            f"{seconds:.0f} s) = {fps / raw:.0%} of raw, {fps / rows[0][1]:.2f}x {rows[0][0]}"
        )


def train_fps(args: argparse.Namespace, sets: list[str]) -> tuple[float, int, float, int]:
    """One training run: its steady frames/s, env steps, seconds and games (actors x envs)."""
    import yaml

    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        sets = [f"stop.max_seconds={args.seconds}", "stop.mean_return=null", *sets]
        config = str(Path(args.config).resolve())
        cmd = [sys.executable, "-m", "rltrain.cli", "train", config, "--run-dir", str(run_dir)]
        for s in sets:
            cmd += ["--set", s]
        env = dict(os.environ, PYTHONPATH=args.repo)
        subprocess.run(cmd, check=True, cwd=args.repo, env=env, stdout=subprocess.DEVNULL)
        summary = json.loads((run_dir / "summary.json").read_text())
        cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
        frame_skip = int(cfg["env"]["frame_skip"])
        fps, steps = steady_fps(run_dir / "tb", frame_skip, args.skip)
    workers = int(summary.get("actors") or cfg["actors"] or 8)  # an older rltrain: its config
    games = workers * int(cfg["env"]["num_envs"])
    return fps, steps, summary["wall_seconds"], games


if __name__ == "__main__":
    main()
