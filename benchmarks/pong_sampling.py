"""Pong sampling throughput: rltrain's actors (learning off) against raw AtariVectorEnv.

Raw: one `ale_py.vector_env.AtariVectorEnv` with all the environments and as many C++
threads as cores, random actions, the same protocol (frame-skip 4, sticky 0.25). Actors:
`--envs-per-actor` environments in each of `--actors` processes of the runtime `--backend`
(process: the process runtime, the default; ray; local: threads of this process), each
acting with the Nature CNN policy on the CPU (1 torch thread), rollouts produced and
discarded. Several `--actors` counts are measured one after the other, and each is given as
a multiple of the first (scaling).

`--inference server` measures the sampling side of `runtime.inference: server` instead
(issue 36's "sampling alone": actors and the policy worker, no learner): the actors step
their envs only, and one policy worker process (`rltrain.rl.inference.PolicyWorker`, on
`--device`) acts for all of them through the shared slots. Both given: one after the other.

    python benchmarks/pong_sampling.py [--actors 1 2] [--envs-per-actor 8] [--seconds 20]
        [--groups 0] [--backend process|ray|local] [--inference actor server]
        [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time

import numpy as np
import torch

from rltrain.records import Params
from rltrain.rl.actor import Actor


def raw_fps(num_envs: int, threads: int, seconds: float) -> float:
    from ale_py.vector_env import AtariVectorEnv

    env = AtariVectorEnv(
        "pong",
        num_envs,
        num_threads=threads,
        repeat_action_probability=0.25,
        reward_clipping=False,
        autoreset_mode="SameStep",
    )
    env.reset(seed=0)
    n_actions = int(env.single_action_space.n)  # type: ignore[attr-defined]  # Discrete
    rng = np.random.default_rng(0)
    steps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        env.step(rng.integers(0, n_actions, num_envs))
        steps += num_envs
    fps = steps * 4 / (time.perf_counter() - t0)
    env.close()
    return fps


class SamplingActor(Actor):
    """An Actor that samples for a while and counts its steps (a class of an importable
    module, so that a forkserver's child can build it)."""

    def sample(self, params: Params, seconds: float) -> int:
        self.load(params)
        steps, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            steps += self.rollout(self.policy).env_steps  # (the policy worker's, if given)
        return steps


def actor_fps(
    actors: int,
    envs_per_actor: int,
    seconds: float,
    groups: int = 0,
    backend: str = "process",
    inference: str = "actor",
    device: str = "cpu",
) -> float:
    from pong_sampling import SamplingActor  # this file, as a module a child can import

    from rltrain import runtime as runtimes
    from rltrain.config import load_config
    from rltrain.rl.config import TrainConfig
    from rltrain.rl.env_spec import initial_params, probe_env

    cfg = load_config(
        TrainConfig,
        os.path.join(os.path.dirname(__file__), "..", "configs", "pong_a3c.yaml"),
        [
            f"actors={actors}",
            f"env.num_envs={envs_per_actor}",
            "env.num_threads=1",
            f"env.groups={groups}",
            f"runtime.backend={backend}",
        ],
    )
    spec = probe_env(cfg)
    params = Params(0, initial_params(cfg, spec))
    runtime = runtimes.backend(cfg.runtime)
    runtime.start(dataclasses.replace(cfg.runtime, num_cpus=os.cpu_count() or 2))
    clients: list = [None] * actors
    worker = slots = None
    if inference == "server":  # the policy worker, serving a server that never moves
        from rltrain.ps.config import OptimizerConfig, ServerConfig
        from rltrain.ps.server import LocalServer
        from rltrain.rl.inference import ActSlots, PolicyWorker

        semaphore = runtime.Semaphore
        slots = ActSlots.for_run(cfg, spec.obs_shape, spec.obs_dtype, spec.actions, semaphore)
        clients = [slots.client(i) for i in range(actors)]
        server = LocalServer(params.values, OptimizerConfig(), ServerConfig(), 1)
        args = (cfg, spec.obs_shape, spec.actions, slots, device)
        worker = runtime.Remote(PolicyWorker, *args, role="policy")
        serving = worker.call("serve", server)
    handles = [runtime.Remote(SamplingActor, cfg, i, clients[i]) for i in range(actors)]
    runtime.get([h.call("sample", params, 3.0) for h in handles])  # warm-up: start, JIT, caches
    t0 = time.perf_counter()
    steps = sum(runtime.get([h.call("sample", params, seconds) for h in handles]))
    fps = steps * cfg.env.frame_skip / (time.perf_counter() - t0)
    if slots is not None:
        slots.stop()
        serving.result(timeout=30)
    for h in [*handles, *([worker] if worker is not None else [])]:
        h.kill()
    runtime.shutdown()
    return fps


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--actors", type=int, nargs="+", default=[1, 2])
    p.add_argument("--backend", choices=["process", "ray", "local"], default="process")
    p.add_argument("--envs-per-actor", type=int, default=8)
    p.add_argument("--inference", choices=["actor", "server"], nargs="+", default=["actor"])
    p.add_argument("--device", default="cpu", help="the policy worker's (--inference server)")
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument(
        "--groups",
        type=int,
        nargs="+",
        default=[0],
        help="env.groups to measure (1: no overlap, 0: auto = 2 for Atari)",
    )
    args = p.parse_args()
    torch.set_num_threads(1)
    n = max(args.actors) * args.envs_per_actor
    raw = raw_fps(n, os.cpu_count() or 2, args.seconds)
    print(
        f"raw AtariVectorEnv: {n} envs, {os.cpu_count()} threads: {raw:,.0f} frames/s", flush=True
    )
    first = None
    for inference in args.inference:
        for groups in args.groups:
            for actors in args.actors:
                act = actor_fps(
                    actors,
                    args.envs_per_actor,
                    args.seconds,
                    groups,
                    args.backend,
                    inference,
                    args.device,
                )
                first = first or act
                where = "each actor's own" if inference == "actor" else "the policy worker's"
                print(
                    f"rltrain actors ({args.backend}; {where} policy, learning off), "
                    f"env.groups={groups}: {actors} x {args.envs_per_actor} envs: "
                    f"{act:,.0f} frames/s = {act / raw:.0%} of raw, {act / first:.2f}x the first",
                    flush=True,
                )


if __name__ == "__main__":
    main()
