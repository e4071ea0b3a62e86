"""Pong sampling throughput: rltrain's actors (learning off) against raw AtariVectorEnv.

Raw: one `ale_py.vector_env.AtariVectorEnv` with all the environments and as many C++
threads as cores, random actions, the same protocol (frame-skip 4, sticky 0.25). Actors: the
same number of environments split over `--actors` Ray processes, each acting with the
Nature CNN policy on the CPU (1 torch thread), rollouts produced and discarded.

    python benchmarks/pong_sampling.py [--actors 2] [--envs-per-actor 8] [--seconds 20]
        [--groups 1 0]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time

import numpy as np
import torch


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
    rng = np.random.default_rng(0)
    steps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        env.step(rng.integers(0, env.single_action_space.n, num_envs))
        steps += num_envs
    fps = steps * 4 / (time.perf_counter() - t0)
    env.close()
    return fps


def actor_fps(actors: int, envs_per_actor: int, seconds: float, groups: int = 0) -> float:
    from rltrain import runtime
    from rltrain.config import load_config
    from rltrain.records import Params
    from rltrain.rl.actor import Actor
    from rltrain.rl.config import TrainConfig
    from rltrain.rl.setup import initial_params, probe_env

    class SamplingActor(Actor):
        def sample(self, params: Params, seconds: float) -> int:
            self.load(params)
            steps, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < seconds:
                steps += self.rollout().env_steps
            return steps

    cfg = load_config(
        TrainConfig,
        os.path.join(os.path.dirname(__file__), "..", "configs", "pong_a3c.yaml"),
        [
            f"actors={actors}",
            f"env.num_envs={envs_per_actor}",
            "env.num_threads=1",
            f"env.groups={groups}",
        ],
    )
    params = Params(0, initial_params(cfg, probe_env(cfg)))
    runtime.init_ray(dataclasses.replace(cfg.runtime, num_cpus=os.cpu_count() or 2))
    handles = [runtime.Remote(SamplingActor, cfg, i) for i in range(actors)]
    runtime.get([h.call("sample", params, 3.0) for h in handles])  # warm-up: start, JIT, caches
    t0 = time.perf_counter()
    steps = sum(runtime.get([h.call("sample", params, seconds) for h in handles]))
    fps = steps * cfg.env.frame_skip / (time.perf_counter() - t0)
    runtime.shutdown()
    return fps


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--actors", type=int, default=2)
    p.add_argument("--envs-per-actor", type=int, default=8)
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument(
        "--groups",
        type=int,
        nargs="+",
        default=[1, 0],
        help="env.groups to measure (1: no overlap, 0: auto = 2 for Atari)",
    )
    args = p.parse_args()
    torch.set_num_threads(1)
    n = args.actors * args.envs_per_actor
    raw = raw_fps(n, os.cpu_count() or 2, args.seconds)
    print(
        f"raw AtariVectorEnv: {n} envs, {os.cpu_count()} threads: {raw:,.0f} frames/s", flush=True
    )
    for groups in args.groups:
        act = actor_fps(args.actors, args.envs_per_actor, args.seconds, groups)
        print(
            f"rltrain actors (policy on, learning off), env.groups={groups}: "
            f"{args.actors} x {args.envs_per_actor} envs: {act:,.0f} frames/s "
            f"= {act / raw:.0%} of raw",
            flush=True,
        )


if __name__ == "__main__":
    main()
