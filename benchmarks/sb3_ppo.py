"""Stable-Baselines3 PPO on a task until the mean return of the last 20 episodes hits its target.

The reference run of `time_to_solve.py`, which starts this script as a subprocess and times
it from launch to exit. Hyper-parameters: rl-baselines3-zoo's tuned entry for the task
(hyperparams/ppo.yml at 208b6fd: CartPole-v1; Pendulum-v1 with gSDE; MountainCarContinuous-v0
with VecNormalize and gSDE; LunarLander-v3 and LunarLanderContinuous-v3: 16 envs, 1M steps;
Taxi-v4, which the zoo lacks: SB3's defaults, 8 envs; HalfCheetah-v5: its tuned HalfCheetah-v3
entry, 1 env, VecNormalize, to its 1M-step budget), with SB3's defaults for everything
else (torch threads and device included, as a user would run it).
The stop criterion is rltrain's: the mean raw return of the last `--window` finished training
episodes, across all envs, reaches `--target`; also `--max-seconds` and `--max-steps`. Where a
zoo schedule decays over its n_timesteps (CartPole's linear learning rate and clip range), that
budget ends a run first unless `--max-steps` is lower; where every setting is constant
(Pendulum, MountainCarContinuous, LunarLanderContinuous) a run may go on past it, so SB3 is not
cut short of the target. Prints one JSON line.

    pip install -e '.[bench]'
    python benchmarks/sb3_ppo.py [--task TASK] (TASK: cartpole, pendulum, mountaincar_continuous,
        lunarlander, lunarlander_continuous, taxi, halfcheetah) [--seed 0]
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import time
from collections.abc import Callable
from typing import Any

import stable_baselines3
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import VecNormalize


def linear(initial: float) -> Callable[[float], float]:
    """The zoo's `lin_<initial>`: initial * progress_remaining (clamped at 0 here)."""
    return lambda progress_remaining: max(progress_remaining, 0.0) * initial


@dataclasses.dataclass(frozen=True)
class Task:
    env_id: str
    target: float  # the mean return that solves it
    n_envs: int
    n_timesteps: int  # the zoo's training budget, and the horizon of its lin_ schedules
    hyper: dict[str, Any]
    normalize: bool = False  # the zoo's `normalize: true`: VecNormalize (obs and reward)
    max_seconds: float = 300.0  # the default cap on the learning clock
    # the steps a run may take: the zoo's n_timesteps where a lin_ schedule decays over it;
    # where every setting is constant, more than the zoo trains (so SB3 is not cut short)
    budget: int | None = None

    @property
    def max_steps(self) -> int:
        return self.n_timesteps if self.budget is None else self.budget


# the zoo's settings for both LunarLander envs, discrete and continuous
LUNAR = {
    "n_steps": 1024,
    "batch_size": 64,
    "gae_lambda": 0.98,
    "gamma": 0.999,
    "n_epochs": 4,
    "ent_coef": 0.01,
}

# rl-baselines3-zoo hyperparams/ppo.yml
TASKS: dict[str, Task] = {
    "cartpole": Task(
        "CartPole-v1",
        475.0,
        8,
        100_000,
        {
            "n_steps": 32,
            "batch_size": 256,
            "gae_lambda": 0.8,
            "gamma": 0.98,
            "n_epochs": 20,
            "ent_coef": 0.0,
            "learning_rate": linear(1e-3),
            "clip_range": linear(0.2),
        },
    ),
    "pendulum": Task(
        "Pendulum-v1",
        -200.0,
        4,
        100_000,
        {
            "n_steps": 1024,
            "gae_lambda": 0.95,
            "gamma": 0.9,
            "n_epochs": 10,
            "ent_coef": 0.0,
            "learning_rate": 1e-3,
            "clip_range": 0.2,
            "use_sde": True,
            "sde_sample_freq": 4,
        },
        budget=1_000_000,  # (earlier rounds cut it at the zoo's 1e5 and added VecNormalize)
    ),
    "lunarlander": Task(
        "LunarLander-v3",
        200.0,
        16,
        1_000_000,
        LUNAR,
        max_seconds=1200.0,
    ),
    "mountaincar_continuous": Task(
        "MountainCarContinuous-v0",
        90.0,  # gymnasium's reward_threshold
        1,
        20_000,
        {
            "batch_size": 256,  # more than the 8-step rollout: SB3 takes the whole rollout
            "n_steps": 8,
            "gamma": 0.9999,
            "learning_rate": 7.77e-05,
            "ent_coef": 0.00429,
            "clip_range": 0.1,
            "n_epochs": 10,
            "gae_lambda": 0.9,
            "max_grad_norm": 5.0,
            "vf_coef": 0.19,
            "use_sde": True,
            "policy_kwargs": {"log_std_init": -3.29, "ortho_init": False},
        },
        normalize=True,
        budget=200_000,
    ),
    # the zoo's LunarLanderContinuous-v2 entry (gymnasium 1.x names the env v3)
    "lunarlander_continuous": Task(
        "LunarLanderContinuous-v3",
        200.0,
        16,
        1_000_000,
        LUNAR,
        max_seconds=1200.0,
        budget=3_000_000,
    ),
    # the zoo has no Taxi entry: SB3's own defaults (n_steps 2048, batch 64, 10 epochs, lr 3e-4,
    # entropy 0), as a user would start; 7 of gymnasium's reward_threshold 8 (the optimum's mean)
    "taxi": Task("Taxi-v4", 7.0, 8, 2_000_000, {}, max_seconds=900.0),
    # the zoo's tuned HalfCheetah-v3 entry on gymnasium's v5; no solved score: the mean of the
    # last 20 episodes at the zoo's budget of 1M steps (the target is never reached)
    "halfcheetah": Task(
        "HalfCheetah-v5",
        float("inf"),
        1,
        1_000_000,
        {
            "batch_size": 64,
            "n_steps": 512,
            "gamma": 0.98,
            "learning_rate": 2.0633e-05,
            "ent_coef": 0.000401762,
            "clip_range": 0.1,
            "n_epochs": 20,
            "gae_lambda": 0.92,
            "max_grad_norm": 0.8,
            "vf_coef": 0.58096,
            "policy_kwargs": {
                "log_std_init": -2,
                "ortho_init": False,
                "activation_fn": torch.nn.ReLU,
                "net_arch": {"pi": [256, 256], "vf": [256, 256]},
            },
        },
        normalize=True,
        max_seconds=3600.0,
    ),
}


class StopRule(BaseCallback):
    """rltrain's stop: the mean of the last `window` finished episodes reaches `target`."""

    def __init__(self, target: float, window: int, max_seconds: float, start: float) -> None:
        super().__init__()
        self.target, self.max_seconds, self.start = target, max_seconds, start
        self.returns: collections.deque[float] = collections.deque(maxlen=window)
        self.stopped_by = ""

    def mean(self) -> float | None:
        return sum(self.returns) / len(self.returns) if self.returns else None

    def _on_step(self) -> bool:
        for info in self.locals["infos"]:
            if "episode" in info:  # written by the Monitor wrapper at the end of an episode
                self.returns.append(float(info["episode"]["r"]))
        mean = self.mean()
        if len(self.returns) == self.returns.maxlen and mean is not None and mean >= self.target:
            self.stopped_by = "mean_return"
        elif time.perf_counter() - self.start >= self.max_seconds:
            self.stopped_by = "max_seconds"
        return not self.stopped_by


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--task", choices=list(TASKS), default="cartpole")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--target", type=float, help="mean return to stop at (default: the task's)")
    p.add_argument("--window", type=int, default=20, help="episodes in that mean")
    p.add_argument("--max-seconds", type=float, help="cap on the learning clock (default: task's)")
    p.add_argument("--max-steps", type=int, help="cap on env steps (default: the zoo's budget)")
    args = p.parse_args()

    task = TASKS[args.task]
    target = task.target if args.target is None else args.target
    start = time.perf_counter()
    # Monitor-wrapped envs in a DummyVecEnv: Monitor's episode returns stay raw under VecNormalize
    env = make_vec_env(task.env_id, n_envs=task.n_envs, seed=args.seed)
    if task.normalize:
        env = VecNormalize(env)
    model = PPO("MlpPolicy", env, seed=args.seed, verbose=0, **task.hyper)
    max_seconds = task.max_seconds if args.max_seconds is None else args.max_seconds
    stop = StopRule(target, args.window, max_seconds, start)
    max_steps = task.max_steps if args.max_steps is None else args.max_steps
    budget = min(task.max_steps, max_steps)
    model.learn(total_timesteps=budget, callback=stop)
    seconds = time.perf_counter() - start
    budget_end = "max_env_steps" if max_steps < task.max_steps else "n_timesteps"
    stopped_by = stop.stopped_by or budget_end
    result = {
        "stopped_by": stopped_by,
        "solved": stopped_by == "mean_return",
        "learn_seconds": round(seconds, 2),  # env + model construction + learn()
        "env_steps": model.num_timesteps,
        "mean_return": stop.mean(),
        "episodes_in_mean": len(stop.returns),
        "torch_threads": torch.get_num_threads(),
        "device": str(model.device),
        "sb3_version": stable_baselines3.__version__,
    }
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
