"""The learner's real learn in a loop, alone in one process: does its memory grow?

A soak (``benchmarks/soak.py``) samples a whole run's processes; this takes the learner's
arithmetic apart from the process runtime around it. It builds the config's learner beside a
local shard (``benchmarks/learner_step.py``'s ``learner_path``: the same ``Learner.learn``,
its minibatches, optimizer steps and restacked frames), learns on three synthetic rollouts
in turn, and every ``--every`` learns gives its free pages back (``malloc_trim``, as each
process of a run does once a minute) and prints glibc's bytes in use and held
(``mallinfo2``) and the process's RSS. A leak in the learn shows as bytes in use that climb;
the allocator keeping freed memory, as "held" that swings.

    python benchmarks/learner_memory.py [--config configs/pong_appo.yaml] [--learns 400]
        [--every 25] [--set KEY=VALUE ...]

The last line reads, for scripts: ``learner_memory: in use 208 -> 208 MB, RSS 429 -> 430 MB,
learns 25-400``. glibc only (elsewhere the allocator's figures read 0).
"""

from __future__ import annotations

import argparse
import ctypes
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from learner_step import learner_path, rollout, task_of  # noqa: E402

from rltrain.config import load_config  # noqa: E402
from rltrain.rl.config import TrainConfig  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MB = 1 << 20


FIELDS = "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost"


class MallInfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2`` (2.33 and later)."""

    _fields_ = [(name, ctypes.c_size_t) for name in FIELDS.split(" ")]


def allocator() -> tuple[int, int]:
    """(bytes in use, bytes held) of glibc's malloc after a trim; (0, 0) without glibc."""
    try:
        libc = ctypes.CDLL(None)
        libc.mallinfo2.restype = MallInfo2
        libc.malloc_trim(0)
        m = libc.mallinfo2()
    except (OSError, AttributeError):
        return 0, 0
    return m.uordblks + m.hblkhd, m.arena + m.hblkhd


def rss_mb() -> int:
    status = Path("/proc/self/status").read_text()
    return int(next(ln.split()[1] for ln in status.splitlines() if ln.startswith("VmRSS"))) // 1024


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default=str(ROOT / "configs" / "pong_appo.yaml"))
    p.add_argument("--learns", type=int, default=400)
    p.add_argument("--every", type=int, default=25, help="learns between two samples")
    p.add_argument("--set", action="append", default=[], help="a config override")
    args = p.parse_args()
    torch.set_num_threads(1)
    cfg = load_config(TrainConfig, args.config, args.set)
    task = task_of(cfg)
    learn = learner_path(cfg, task, "nature", torch.device("cpu"))
    rollouts = [rollout(cfg, task, seed) for seed in range(3)]
    samples: list[tuple[int, int]] = []
    for i in range(args.learns + 1):
        if i % args.every == 0:
            used, held = allocator()
            samples.append((used // MB, rss_mb()))
            print(f"learn {i}: in use {used // MB} MB, held {held // MB} MB, RSS {rss_mb()} MB")
        if i < args.learns:
            learn(rollouts[i % 3])
    start = 1 if len(samples) > 2 else 0  # (after the first learns: their allocations)
    (u0, r0), (u1, r1) = samples[start], samples[-1]
    span = f"learns {start * args.every}-{args.learns}"
    print(f"learner_memory: in use {u0} -> {u1} MB, RSS {r0} -> {r1} MB, {span}")


if __name__ == "__main__":
    main()
