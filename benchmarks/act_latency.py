"""One actor's act round trip through the batched policy: latency, pickles, bytes.

With ``runtime.inference: server`` an actor process steps its envs only; each group of
observations goes to the policy, which acts for every actor (:mod:`rltrain.rl.inference`).
This runs that path as a run does on the process runtime: an actor-side loop in a child
process (:class:`rltrain.runtime.process.Remote`) calls ``policy.act(obs)`` on the trainer's
:class:`~rltrain.rl.inference.PolicyServer` (a tiny MLP policy here, so that the transport
is what is measured), ``--steps`` times, one call in flight, and reports:

* the round trip's p50 and p99 (in the child, around each ``act``);
* messages pickled per step (the child's request and the trainer's reply, counted in the
  child as pickles written and read);
* bytes per step: pickled, and copied through shared-memory slots (into a slot, and out).

``--obs pong`` sends one Pong env group's frames ([8, 4, 84, 84] uint8) instead of
CartPole's [8, 4] floats: the frames then travel through a slot and are copied on each side.

    python benchmarks/act_latency.py [--steps 2000] [--obs cartpole|pong] [--batch 8]

The last line reads, for scripts: ``act_latency: p50 0.21 ms, p99 0.90 ms, pickles/step 2``.
"""

from __future__ import annotations

import argparse
import pickle
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))  # the child imports ActLoop from here

OBS = {"cartpole": ((4,), torch.float32), "pong": ((4, 84, 84), torch.uint8)}


class Counted:
    """``pickle`` as the process runtime's channels use it, counting what passes."""

    def __init__(self) -> None:
        self.dumps = self.loads = self.bytes = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(pickle, name)

    def dumps_(self, obj: Any, *a: Any, **k: Any) -> bytes:
        out = pickle.dumps(obj, *a, **k)
        self.dumps, self.bytes = self.dumps + 1, self.bytes + len(out)
        return out

    def loads_(self, data: bytes, *a: Any, **k: Any) -> Any:
        self.loads, self.bytes = self.loads + 1, self.bytes + len(data)
        return pickle.loads(data, *a, **k)


class ActLoop:
    """The actor's side, in a child process: acts ``steps`` times and times each."""

    def __init__(self, obs: str, batch: int) -> None:
        shape, dtype = OBS[obs]
        g = torch.Generator().manual_seed(0)
        if dtype == torch.uint8:
            self.obs = torch.randint(0, 256, (batch, *shape), dtype=dtype, generator=g)
        else:
            self.obs = torch.randn(batch, *shape, generator=g)

    def run(self, policy: Any, steps: int, torch_pickles: bool = False) -> dict[str, Any]:
        """``torch_pickles``: small tensors pickled as torch tensors (as before issue 36)."""
        from rltrain.runtime import child, shm

        small_as_numpy(not torch_pickles)
        counted = Counted()
        counted_dumps, counted_loads = counted.dumps_, counted.loads_
        shim = type("PickleShim", (), {})()
        shim.dumps, shim.loads, shim.HIGHEST_PROTOCOL = (
            counted_dumps,
            counted_loads,
            pickle.HIGHEST_PROTOCOL,
        )
        copied = [0]
        put, unpack = shm.Outbox._put, shm.Inbox.unpack

        def counting_put(self: Any, t: torch.Tensor, numpy: bool) -> Any:
            copied[0] += t.numel() * t.element_size()
            return put(self, t, numpy)

        def counting_unpack(self: Any, obj: Any) -> Any:
            out = unpack(self, obj)
            if isinstance(obj, shm.SlotRef):
                copied[0] += out.numel() * out.element_size() if hasattr(out, "numel") else 0
            return out

        child.pickle = shim  # type: ignore[attr-defined]
        shm.Outbox._put, shm.Inbox.unpack = counting_put, counting_unpack  # type: ignore[method-assign]
        for _ in range(50):  # warm: slots made, the policy's first pull
            policy.act(self.obs)
        counted.dumps = counted.loads = counted.bytes = copied[0] = 0
        latencies = []
        for _ in range(steps):
            t = time.perf_counter()
            policy.act(self.obs)
            latencies.append(time.perf_counter() - t)
        return {
            "latencies": latencies,
            "pickles": (counted.dumps + counted.loads) / steps,
            "pickled_bytes": counted.bytes / steps,
            "shm_bytes": copied[0] / steps,
        }


def small_as_numpy(on: bool) -> None:
    """Small tensors through the pipes as numpy arrays (on), or as torch tensors (off)."""
    from rltrain.runtime import shm

    if not hasattr(shm, "ALL_NUMPY_DTYPES"):
        shm.ALL_NUMPY_DTYPES = set(shm.NUMPY_DTYPES)  # type: ignore[attr-defined]
    shm.NUMPY_DTYPES.clear()
    if on:
        shm.NUMPY_DTYPES.update(shm.ALL_NUMPY_DTYPES)  # type: ignore[attr-defined]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--obs", choices=sorted(OBS), default="cartpole")
    p.add_argument("--batch", type=int, default=8, help="observations per act (an env group)")
    args = p.parse_args()
    torch.set_num_threads(1)

    from act_latency import ActLoop as Loop  # by its module's name: the child imports it

    from rltrain.ps.config import OptimizerConfig, ServerConfig
    from rltrain.ps.server import LocalServer
    from rltrain.rl.config import ModelConfig, StopConfig, TrainConfig
    from rltrain.rl.inference import PolicyServer
    from rltrain.rl.models import flat_params
    from rltrain.runtime import process

    shape, _ = OBS[args.obs]
    cfg = TrainConfig(model=ModelConfig(kind="mlp", hidden=16), stop=StopConfig(max_seconds=1))
    policy = PolicyServer(cfg, shape, 6, None, "cpu")
    server = LocalServer(flat_params(policy.model), OptimizerConfig(), ServerConfig(), 1)
    policy.server = server
    actor = process.Remote(Loop, args.obs, args.batch, role="actor")
    print(
        f"{args.steps} acts of {args.batch} x {args.obs} observations, one in flight, through "
        "the trainer's batched policy (process runtime, tiny MLP, CPU)"
    )
    print("| small tensors | p50 ms | p99 ms | pickles/step | bytes pickled | bytes via shm |")
    print("|---|---|---|---|---|---|")
    rows: dict[bool, list[dict[str, Any]]] = {}
    try:
        for torch_pickles in (True, False, True, False):  # interleaved: noise falls on both
            small_as_numpy(not torch_pickles)
            out = actor.call("run", policy, args.steps, torch_pickles).result(timeout=600)
            rows.setdefault(torch_pickles, []).append(out)
    finally:
        process.shutdown()
    for torch_pickles, outs in rows.items():
        ms = sorted(1000 * x for o in outs for x in o["latencies"])
        p50, p99 = statistics.median(ms), ms[int(0.99 * (len(ms) - 1))]
        out = outs[-1]
        how = "as torch tensors (before)" if torch_pickles else "as numpy arrays"
        print(
            f"| {how} | {p50:.3f} | {p99:.3f} | {out['pickles']:g} | "
            f"{out['pickled_bytes']:.0f} | {out['shm_bytes']:.0f} |"
        )
    print(f"act_latency: p50 {p50:.2f} ms, p99 {p99:.2f} ms, pickles/step {out['pickles']:g}")


if __name__ == "__main__":
    main()
