"""Does bf16, channels-last or torch.compile pay for the CNNs? (`model.precision`)

Times the actor-critic's CNN (``--models``: nature_cnn, impala_cnn or both; 84x84x4 Atari
stacks, 6 actions) on ``--device`` (the
CPU on one torch thread by default): inference on a batch of ``--infer-batch`` (8, an actor's
env group; a batched policy serving many actors sees more) and forward + backward on 256 (a
learner minibatch), in fp32 (TF32 matmuls on a GPU, as learners run), bf16 autocast,
channels-last, and both; ``--variants`` picks among those and the same with a ``compile+``
prefix (through ``torch.compile``) or ``graphs+`` (``torch.compile(mode="reduce-overhead")``:
CUDA graphs, GPU only); ``--compile`` adds every ``compile+`` variant.
Each variant's rate is reported against the first model's fp32 measured in the same run
(rounds interleaved, the best of them kept). On a GPU the queue is drained before the clock
is read.

    python benchmarks/cnn_precision.py [--seconds 2] [--rounds 3] [--threads 1]
        [--models nature_cnn impala_cnn]
        [--device cpu|cuda] [--infer-batch 8] [--compile] [--variants fp32 bf16 graphs+bf16]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch

from rltrain.rl.algos.model_kinds import CNN_KINDS
from rltrain.rl.algos.models import build_policy
from rltrain.rl.algos.torsos import CNNTorso, bf16_native, to_device

VARIANTS = ("fp32", "bf16", "channels_last", "channels_last+bf16")


def rate(fn: Callable[[], None], batch: int, seconds: float, device: torch.device) -> float:
    """Observations per second of ``fn`` (one call = ``batch`` observations)."""
    for _ in range(3):
        fn()
    sync(device)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        fn()
        n += 1
    sync(device)
    return n * batch / (time.perf_counter() - t0)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def variant(
    model: str, name: str, seconds: float, device: torch.device, infer_batch: int
) -> tuple[float, float]:
    """(inference obs/s at ``infer_batch``, forward+backward obs/s at batch 256)."""
    torch.manual_seed(0)
    bf16 = "bf16" in name
    cl = "channels_last" in name
    net = build_policy(model, (4, 84, 84), 6, 512, precision="bf16" if bf16 else "fp32")
    to_device(net, device, "bf16" if bf16 else "fp32")
    fmt = torch.channels_last if cl else torch.contiguous_format
    net = net.to(memory_format=fmt)  # type: ignore[call-overload]  # the variant's, not the torso's own
    for m in net.modules():
        if isinstance(m, CNNTorso):
            m.channels_last = cl
    if name.startswith("compile+"):
        run = torch.compile(net)
    elif name.startswith("graphs+"):  # CUDA graphs: one launch replays the whole pass
        run = torch.compile(net, mode="reduce-overhead")
    else:
        run = net

    def frames(n: int) -> torch.Tensor:
        x = torch.randint(0, 255, (n, 4, 84, 84), dtype=torch.uint8, device=device)
        return x.contiguous(memory_format=fmt)

    small, big = frames(infer_batch), frames(256)

    def infer() -> None:
        with torch.no_grad():
            run(small)

    def learn() -> None:
        logits, values = run(big)
        (logits.sum() + values.sum()).backward()

    return rate(infer, infer_batch, seconds, device), rate(learn, 256, seconds, device)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--infer-batch", type=int, default=8)
    p.add_argument("--compile", action="store_true", help="also each variant via torch.compile")
    p.add_argument("--variants", nargs="+", help="these variants alone (fp32 first)")
    p.add_argument("--models", nargs="+", default=["nature_cnn"], choices=CNN_KINDS)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.set_float32_matmul_precision("high")  # TF32, as a learner on a GPU (pick_device)
        where = f"{torch.cuda.get_device_name(device)}, bf16 native: {bf16_native(device)}"
    else:
        where = f"the CPU, bf16 native: {bf16_native()}; torch threads: {args.threads}"
    print(where)
    names = [*VARIANTS, *(f"compile+{v}" for v in VARIANTS)] if args.compile else list(VARIANTS)
    if args.variants:
        names = ["fp32", *(v for v in args.variants if v != "fp32")]
    for name in names:
        base, _, plain = (
            name.partition("+") if name.startswith(("compile+", "graphs+")) else ("", "", name)
        )
        if plain not in VARIANTS or (base == "graphs" and device.type != "cuda"):
            p.error(
                f"variant {name!r}: allowed {', '.join(VARIANTS)}, each with compile+ "
                "or (on cuda) graphs+ before it"
            )
    rows = [(model, name) for model in args.models for name in names]
    best: dict[tuple[str, str], tuple[float, float]] = {}
    for _ in range(args.rounds):
        for row in rows:
            i, f = variant(*row, args.seconds, device, args.infer_batch)
            b = best.get(row, (0.0, 0.0))
            best[row] = (max(b[0], i), max(b[1], f))
    ref = best[(args.models[0], "fp32")]
    vs = f"vs {args.models[0]} fp32"
    head = f"inference, batch {args.infer_batch} | {vs} | fwd+bwd, batch 256 | {vs}"
    print(f"| model | variant | {head} |")
    print("|---|---|---|---|---|---|")
    for model, name in rows:
        i, f = best[(model, name)]
        ratios = f"{i / ref[0]:.2f}x | {f:,.0f} obs/s | {f / ref[1]:.2f}x"
        print(f"| {model} | {name} | {i:,.0f} obs/s | {ratios} |")


if __name__ == "__main__":
    main()
