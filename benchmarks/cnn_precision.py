"""Does bf16 or channels-last pay for the Nature CNN on this CPU? (`model.precision`)

Times the actor-critic's Nature CNN (84x84x4 Atari stacks, 6 actions) on one torch thread:
inference on a batch of 8 (an actor's env group) and forward + backward on 256 (a learner
minibatch), in fp32, bf16 autocast, channels-last, and both; each variant's rate is reported
against fp32 measured in the same run (rounds interleaved, the best of them kept).

    python benchmarks/cnn_precision.py [--seconds 2] [--rounds 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch

from rltrain.rl.models import bf16_native, build_policy

VARIANTS = ("fp32", "bf16", "channels_last", "channels_last+bf16")


def rate(fn: Callable[[], None], batch: int, seconds: float) -> float:
    """Observations per second of ``fn`` (one call = ``batch`` observations)."""
    for _ in range(3):
        fn()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        fn()
        n += 1
    return n * batch / (time.perf_counter() - t0)


def variant(name: str, seconds: float) -> tuple[float, float]:
    """(inference obs/s at batch 8, forward+backward obs/s at batch 256)."""
    torch.manual_seed(0)
    bf16 = "bf16" in name
    cl = name.startswith("channels_last")
    net = build_policy("nature_cnn", (4, 84, 84), 6, 512, precision="bf16" if bf16 else "fp32")
    fmt = torch.channels_last if cl else torch.contiguous_format
    if cl:
        net = net.to(memory_format=torch.channels_last)
    small = torch.randint(0, 255, (8, 4, 84, 84), dtype=torch.uint8).contiguous(memory_format=fmt)
    big = torch.randint(0, 255, (256, 4, 84, 84), dtype=torch.uint8).contiguous(memory_format=fmt)

    def infer() -> None:
        with torch.no_grad():
            net(small)

    def learn() -> None:
        logits, values = net(big)
        (logits.sum() + values.sum()).backward()

    return rate(infer, 8, seconds), rate(learn, 256, seconds)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    print(f"bf16 native on this CPU: {bf16_native()}; torch threads: {args.threads}")
    best: dict[str, tuple[float, float]] = {}
    for _ in range(args.rounds):
        for name in VARIANTS:
            i, f = variant(name, args.seconds)
            b = best.get(name, (0.0, 0.0))
            best[name] = (max(b[0], i), max(b[1], f))
    base = best["fp32"]
    print("| variant | inference, batch 8 | vs fp32 | fwd+bwd, batch 256 | vs fp32 |")
    print("|---|---|---|---|---|")
    for name in VARIANTS:
        i, f = best[name]
        ratios = f"{i / base[0]:.2f}x | {f:,.0f} obs/s | {f / base[1]:.2f}x"
        print(f"| {name} | {i:,.0f} obs/s | {ratios} |")


if __name__ == "__main__":
    main()
