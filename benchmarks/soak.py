"""A long run's memory and file descriptors, process by process: do they grow?

Starts ``rltrain train CONFIG`` (Pong by default, ``--minutes`` 30) and, every
``--every`` seconds (60), samples each of its processes (the trainer and every descendant,
named as ``ps`` shows them: ``rltrain: actor 0``): resident memory (``VmRSS``) and open
file descriptors. At the end it prints, per process, both at ``--after`` minutes (5: start-up
and the first allocations are over) and at the end, and the growth between them. A leak
shows as growth that goes on; the goal is at most 5%. A process whose memory swings (the
allocator keeps and returns the buffers of a learner's passes: +-20% from one minute to the
next) would make two single samples say anything, so each end is the median of ``--span``
samples (3), and the range of the window is printed beside them; each process's samples
follow the table.

    python benchmarks/soak.py [configs/pong_appo.yaml] [--minutes 30] [--every 60]
        [--after 5] [--run-dir ~/soak] [--set key=value ...]

The last line reads, for scripts: ``soak: max RSS growth 1.2%, max fd growth 0 after 5 min``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def sample(pid: int) -> tuple[str, int, int] | None:
    """(name as ps shows it, RSS in kB, open descriptors), or None for a process gone."""
    proc = Path(f"/proc/{pid}")
    try:
        name = (proc / "cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
        if not name.startswith("rltrain:"):
            name = (proc / "comm").read_text().strip()
        status = (proc / "status").read_text()
        rss = int(next(ln.split()[1] for ln in status.splitlines() if ln.startswith("VmRSS")))
        fds = len(os.listdir(proc / "fd"))
    except (OSError, StopIteration, ValueError):
        return None
    return name, rss, fds


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("config", nargs="?", default=str(HERE.parent / "configs" / "pong_appo.yaml"))
    p.add_argument("--minutes", type=float, default=30.0)
    p.add_argument("--every", type=float, default=60.0, help="seconds between samples")
    p.add_argument("--after", type=float, default=5.0, help="minutes before growth is counted")
    p.add_argument("--span", type=int, default=3, help="samples in the median at each end")
    p.add_argument("--run-dir", default=str(Path.home() / "soak"))
    p.add_argument("--set", action="append", default=[], help="extra --set for the run")
    args = p.parse_args()
    seconds = args.minutes * 60
    argv = [sys.executable, "-m", "rltrain.cli", "train", args.config, "--run-dir", args.run_dir]
    argv += ["--set", f"stop.max_seconds={seconds:.0f}", "--set", "stop.mean_return=null"]
    argv += ["--set", "eval.every_steps=0", "--set", "stop.max_env_steps=0"]
    for s in args.set:
        argv += ["--set", s]
    log = open(Path(args.run_dir + ".log"), "w")  # noqa: SIM115 - open for the run's life
    run = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    start = time.time()
    series: dict[str, list[tuple[float, int, int]]] = {}  # name -> (minute, rss kB, fds)
    while run.poll() is None:
        minute = (time.time() - start) / 60
        for pid in descendants(run.pid):
            got = sample(pid)
            if got is not None:
                name, rss, fds = got
                name = "trainer" if pid == run.pid else name
                series.setdefault(f"{name} ({pid})", []).append((minute, rss, fds))
        print(f"[soak] {minute:5.1f} min: {len(series)} processes seen", flush=True)
        deadline = time.time() + args.every
        while run.poll() is None and time.time() < deadline:
            time.sleep(1)
    log.close()
    print(f"run ended with exit code {run.returncode} after {(time.time() - start) / 60:.1f} min")
    k = args.span
    print(
        f"| process | RSS from {args.after:g} min (MB, median of {k}) | at the end (median of "
        f"{k}) | growth | range in the window | fds then | at end |"
    )
    print("|---|---|---|---|---|---|---|")
    rss_growth, fd_growth = [], []
    for name, points in sorted(series.items()):
        later = [x for x in points if x[0] >= args.after]
        if len(later) < 2 * k:
            continue  # gone before the window (a start-up helper) or too short-lived to tell
        r0 = statistics.median(r for _, r, _ in later[:k])
        r1 = statistics.median(r for _, r, _ in later[-k:])
        f0, f1 = later[0][2], later[-1][2]
        g = 100 * (r1 - r0) / r0
        rss_growth.append(g)
        fd_growth.append(f1 - f0)
        low, high = min(r for _, r, _ in later) / 1024, max(r for _, r, _ in later) / 1024
        print(
            f"| {name} | {r0 / 1024:.0f} | {r1 / 1024:.0f} | {g:+.1f}% | {low:.0f}-{high:.0f} "
            f"| {f0} | {f1} |"
        )
    for name, points in sorted(series.items()):  # a trend or a swing: the samples themselves
        mbs = " ".join(f"{r / 1024:.0f}" for _, r, _ in points)
        print(f"{name} RSS (MB), one a sample: {mbs}")
    worst_rss = max(rss_growth, default=0.0)
    worst_fd = max(fd_growth, default=0)
    print(
        f"soak: max RSS growth {worst_rss:.1f}%, max fd growth {worst_fd} after {args.after:g} min"
    )


if __name__ == "__main__":
    main()
