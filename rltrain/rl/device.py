"""Where a learner computes: its device, and CUDA set up early."""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import torch

F = TypeVar("F", bound=Callable[..., Any])


def pick_device(want_gpu: bool, who: str = "learner") -> torch.device:
    """CUDA when a GPU was reserved for this process and torch sees it; said in one line when
    it does not (a CPU build of torch on the GPU node?), rather than training on the CPU
    unseen (Ray forwards a process's stderr to the driver's)."""
    if want_gpu and torch.cuda.is_available():
        return tf32_on(torch.device("cuda"))
    if want_gpu:
        print(
            f"rltrain: {who} was given a GPU, but torch {torch.__version__} sees no CUDA device "
            "in its process; it trains on the CPU",
            file=sys.stderr,
        )
    return torch.device("cpu")


def tf32_on(device: torch.device) -> torch.device:
    """``device``, with this process's fp32 matmuls in TF32 where it is CUDA (Ampere and
    later), as cuDNN's convolutions are by default: a learner's and the policy worker's."""
    if device.type == "cuda":
        torch.set_float32_matmul_precision("high")
    return device


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


def compiled(fn: F, who: str) -> F:
    """``torch.compile(fn)`` (Inductor: on a CPU it builds C++, on a GPU Triton kernels),
    made at the first call, so that importing its compiler (seconds) delays no start-up; or
    ``fn`` itself from the first call whose compile fails (no C++ compiler, a platform
    torch.compile does not support), said in one line: a run goes on eagerly rather than
    ending over a speed-up. An error of ``fn``'s own is raised as it is."""
    from torch._dynamo.exc import TorchDynamoException  # (a submodule torch imports)

    use: list[Callable[..., Any]] = []  # what runs: the compiled fn, or fn

    def eager(e: Exception) -> None:
        reason = (str(e).strip().splitlines() or [""])[0][:160]
        print(
            f"rltrain: {who}: torch.compile failed ({type(e).__name__}: {reason}); "
            "it runs eagerly (model.compile=false skips compiling)",
            file=sys.stderr,
        )
        use[:] = [fn]

    def call(*args: Any, **kwargs: Any) -> Any:
        if not use:
            try:
                use.append(torch.compile(fn))
            except RuntimeError as e:  # a platform it does not support
                eager(e)
        if use[0] is not fn:
            try:
                return use[0](*args, **kwargs)
            except TorchDynamoException as e:  # the compiler's (its backend's wrapped)
                eager(e)
        return fn(*args, **kwargs)

    return call  # type: ignore[return-value]


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """torch's intra-op threads at ``n`` for the block, then as they were. An evaluation's
    small forward passes beside a running training took 77 ms on every core's threads and
    0.73 ms on one (explore84), as the training's own evaluator plays them."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)
