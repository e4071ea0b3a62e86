"""Where a learner computes: its device, and CUDA set up early."""

from __future__ import annotations

import sys
import threading

import torch


def pick_device(want_gpu: bool, who: str = "learner") -> torch.device:
    """CUDA when a GPU was reserved for this process and torch sees it; said in one line when
    it does not (a CPU build of torch on the GPU node?), rather than training on the CPU
    unseen (Ray forwards a process's stderr to the driver's)."""
    if want_gpu and torch.cuda.is_available():
        # fp32 matmuls in TF32 on Ampere and later, as cuDNN's convolutions by default
        torch.set_float32_matmul_precision("high")
        return torch.device("cuda")
    if want_gpu:
        print(
            f"rltrain: {who} was given a GPU, but torch {torch.__version__} sees no CUDA device "
            "in its process; it trains on the CPU",
            file=sys.stderr,
        )
    return torch.device("cpu")


def warm_gpu() -> threading.Thread | None:
    """Set up the CUDA context in a thread, now, while the trainer probes the env and starts
    its actors: the first use of CUDA in a process takes seconds (the driver, the context,
    the libraries' handles), and a learner, the shards and the batched policy all wait for
    it otherwise, in line, before the first actor's step (the GPU issue: 64.6 s to the first
    env step on a 16-core box). None where there is no GPU."""
    if not torch.cuda.is_available():
        return None
    thread = threading.Thread(
        target=lambda: torch.zeros(1, device="cuda"), name="rltrain-cuda-init", daemon=True
    )
    thread.start()
    return thread
