"""One actor's act round trip through the policy worker: latency, pickles, bytes copied.

With ``runtime.inference: server`` an actor process steps its envs only; each group of
observations goes to the policy worker, a process of its own, through shared slots
(:class:`rltrain.rl.inference.ActSlots`). This runs that path as a run does on the process
runtime: an actor-side loop in one child process (:class:`rltrain.runtime.process.Remote`)
calls its slot's ``act(obs)``, ``--steps`` times; a :class:`~rltrain.rl.inference.PolicyWorker`
in another child serves it (a tiny MLP policy, so that the transport is what is measured),
taking parameters from a server in this process. It reports:

* the round trip's p50 and p99 (in the actor's process, around each ``act``);
* the same policy's forward pass and sampling alone, in this process, back to back (hot
  caches) and after a 0.2 ms sleep each (as a process woken by a request finds them);
* messages pickled per step (counted in the actor's process: pickles written and read);
* bytes copied across processes per step: observations in (into the act slot, or into the
  rollout's slot, where the learner reads them too), actions and logits out.

It runs two paths: the run's, where the actor has written its frames into the rollout's
observation slot (:class:`~rltrain.rl.obs_slots.ObsSlots`) and the policy worker reads them
there, so the act copies no frame (the slot's own write is the frame's one crossing); and
the one where the rollouts travel as messages (the thread runtime, several learners, or no
room in /dev/shm for the slots), where the act copies the frames into its slot. The policy
worker's logits are checked against the same policy's in this process, which would show
observations read from the wrong place.

``--obs pong`` sends one Pong env group's frames ([8, 4, 84, 84] uint8) instead of
CartPole's [8, 4] floats.

    python benchmarks/act_latency.py [--steps 2000] [--obs cartpole|pong] [--batch 8]

The last line reads, for scripts: ``act_latency: p50 0.21 ms, p99 0.90 ms, pickles/step 0``.
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

    HIGHEST_PROTOCOL = pickle.HIGHEST_PROTOCOL

    def __init__(self) -> None:
        self.count = self.bytes = 0

    def dumps(self, obj: Any, *a: Any, **k: Any) -> bytes:
        out = pickle.dumps(obj, *a, **k)
        self.count, self.bytes = self.count + 1, self.bytes + len(out)
        return out

    def loads(self, data: bytes, *a: Any, **k: Any) -> Any:
        self.count, self.bytes = self.count + 1, self.bytes + len(data)
        return pickle.loads(data, *a, **k)


def observations(obs: str, batch: int) -> torch.Tensor:
    shape, dtype = OBS[obs]
    g = torch.Generator().manual_seed(0)
    if dtype == torch.uint8:  # a stack of one frame k times: each step's shifted stack is
        # the same, so that a worker reading restacked frames acts on these very rows
        frame = torch.randint(0, 256, (batch, 1, *shape[1:]), dtype=dtype, generator=g)
        return frame.expand(batch, *shape).contiguous()
    return torch.randn(batch, *shape, generator=g)


class ActLoop:
    """The actor's side, in a child process: acts ``steps`` times through its slot. With
    ``frames`` (the run's observation slots) each step's observations are written there
    first, as an actor writes a step's frames for the learner (Pong's: the newest frame
    alone, or the stacks whole as before issue 36's item 2), and each act names their place."""

    def __init__(self, obs: str, batch: int, policy: Any, frames: Any = None) -> None:
        torch.set_num_threads(1)
        self.obs, self.policy, self.at = observations(obs, batch), policy, None
        self.columns = None if frames is None else frames.columns(0, 0, batch)
        if self.columns is not None:
            self.columns.first(self.obs)
            self.at = self.columns.at(1)

    def act(self) -> tuple[torch.Tensor, torch.Tensor, int]:
        if self.columns is not None:  # the step's frames into the rollout's slot, then act
            self.columns.write(1, self.obs, [])
        return self.policy.act(self.obs, self.at)

    def run(self, steps: int) -> dict[str, Any]:
        from rltrain.runtime.process import child

        counted = Counted()
        child.pickle = counted  # type: ignore[assignment]
        for _ in range(50):  # warm
            self.act()
        counted.count = counted.bytes = 0
        latencies = []
        for _ in range(steps):
            t = time.perf_counter()
            actions, logits, _ = self.act()
            latencies.append(time.perf_counter() - t)
        written = self.obs  # (into the act slot, or the rollout's slot)
        if self.columns is not None and self.columns.k > 1:
            written = self.obs[:, -1]  # each step's newest frame
        copied = sum(x.numel() * x.element_size() for x in (written, actions, logits))
        return {
            "logits": logits,
            "latencies": latencies,
            "pickles": counted.count / steps,
            "pickled_bytes": counted.bytes / steps,
            "copied_bytes": copied,
        }


def percentiles(seconds: list[float]) -> tuple[float, float]:
    ms = sorted(1000 * x for x in seconds)
    return statistics.median(ms), ms[int(0.99 * (len(ms) - 1))]


def alone(policy: Any, obs: torch.Tensor, steps: int, gap: float) -> list[float]:
    """The forward pass and sampling in this process, ``gap`` seconds of sleep before each."""
    out = []
    for _ in range(steps):
        if gap:
            time.sleep(gap)
        t = time.perf_counter()
        policy.act([obs])
        out.append(time.perf_counter() - t)
    return out


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
    from rltrain.rl.algos.models import flat_params
    from rltrain.rl.config import ModelConfig, StopConfig, TrainConfig
    from rltrain.rl.inference import ActSlots, BatchedPolicy, PolicyWorker
    from rltrain.rl.obs_slots import ObsSlots
    from rltrain.runtime import process
    from rltrain.runtime.config import RuntimeConfig

    shape, dtype = OBS[args.obs]
    cfg = TrainConfig(
        model=ModelConfig(kind="mlp", hidden=16),
        stop=StopConfig(max_seconds=1),
        runtime=RuntimeConfig(threads_per_worker=1),
    )
    floor = BatchedPolicy(cfg, shape, 6)
    server = LocalServer(flat_params(floor.model), OptimizerConfig(), ServerConfig(), 1)
    floor.refresh(server)
    obs = observations(args.obs, args.batch)
    alone(floor, obs, 50, 0.0)
    hot, woken = alone(floor, obs, args.steps, 0.0), alone(floor, obs, args.steps, 0.0002)

    print(
        f"{args.steps} acts of {args.batch} x {args.obs} observations, one in flight, through "
        "the policy worker's slots (process runtime, tiny MLP, CPU)"
    )
    print("| path | p50 ms | p99 ms | pickles/step | bytes pickled/step | bytes copied/step |")
    print("|---|---|---|---|---|---|")
    for name, seconds in (
        ("forward + sample alone, back to back", hot),
        ("forward + sample alone, after 0.2 ms asleep", woken),
    ):
        a50, a99 = percentiles(seconds)
        print(f"| {name} | {a50:.3f} | {a99:.3f} | - | - | - |")
    _, expected, _ = floor.act([obs])[0]
    run = None
    paths = [
        ("actor -> policy worker -> actor, frames copied into the act slot", None),
        ("actor -> policy worker -> actor, observations whole in the rollout's slot", 1),
    ]
    if args.obs == "pong":  # (a run's: Atari's stacks as their newest frame, issue 36 item 2)
        paths.append(("actor -> policy worker -> actor, newest frame in the rollout's slot", 4))
    for name, stack in paths:
        frames = None if stack is None else ObsSlots(1, 1, args.batch, shape, dtype, stack)
        slots = ActSlots(1, args.batch, shape, dtype, 6, process.Semaphore, frames)
        worker = process.Remote(PolicyWorker, cfg, shape, 6, slots, "cpu", role="policy")
        actor = process.Remote(Loop, args.obs, args.batch, slots.client(0), frames, role="actor")
        try:
            serving = worker.call("serve", server)
            outs = [actor.call("run", args.steps).result(timeout=600) for _ in range(2)]
            slots.stop()
            served = serving.result(timeout=60)
        finally:
            process.shutdown()
        out = outs[-1]
        torch.testing.assert_close(out["logits"], expected)  # the rows it was meant to read
        run = percentiles([x for o in outs for x in o["latencies"]]), out
        (p50, p99) = run[0]
        print(
            f"| {name} | {p50:.3f} | {p99:.3f} | {out['pickles']:g} | "
            f"{out['pickled_bytes']:.0f} | {out['copied_bytes']} |"
        )
    print(f"policy worker, last path: {served['batches']} forward passes, {served['rows']} rows")
    assert run is not None
    (p50, p99), out = run
    print(f"act_latency: p50 {p50:.2f} ms, p99 {p99:.2f} ms, pickles/step {out['pickles']:g}")


if __name__ == "__main__":
    main()
