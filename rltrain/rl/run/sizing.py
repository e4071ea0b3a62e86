"""How big a session is: actors and env groups sized to the machine, learners' GPUs."""

from __future__ import annotations

import dataclasses
import math
import os
from typing import TYPE_CHECKING

from rltrain.config import ConfigError
from rltrain.envs import env_groups
from rltrain.rl.config import DQNConfig, TrainConfig, server_settings

if TYPE_CHECKING:
    from rltrain.rl.env_spec import EnvSpec


def sized(cfg: TrainConfig, cpus: float, gpu: bool = False, batched: bool = False) -> TrainConfig:
    """``cfg`` with ``actors: auto`` and ``env.groups: auto`` resolved against the ``cpus``
    the runtime reports (Ray's, or this machine's cores). Actors: one process per CPU, the
    learners' and the policy worker's first (a CPU each, half of one when it drives a GPU),
    at least one. Groups
    (:func:`rltrain.envs.env_groups`): Atari overlaps emulation and inference in two groups only
    where each actor has two cores or more, or where the policy acts elsewhere (``batched``:
    runtime.inference), so that an actor's games run while it waits for the actions of the
    other group."""
    actors = cfg.actors
    if not actors:
        learners = cfg.learners * learner_cpus(gpu) if cfg.algo_spec.split else 0
        policy = learner_cpus(gpu) if batched else 0.0  # the policy worker, a process too
        actors = max(1, int(cpus - learners - policy))
    replay = cfg.replay
    if cfg.algo_spec.layout == "replay" and replay.shards > actors:
        # actor i fills shard i mod shards: the others would hold their memory, never filled
        # (explore103: a second 1.8 GB shard zero-filled for 20 s beside one actor)
        replay = dataclasses.replace(replay, shards=actors)
    try:
        cores = float("inf") if batched else cpus / actors
        groups = cfg.env.groups or env_groups(cfg.env, cores)
        env = dataclasses.replace(cfg.env, groups=groups)
        return dataclasses.replace(cfg, actors=actors, env=env, replay=replay)
    except ValueError as e:  # e.g. a fault event for an actor index the machine does not have
        why = f"actors=auto gave {actors} on {cpus:.0f} CPUs" if not cfg.actors else ""
        why = why or f"actors={actors}"
        if replay is not cfg.replay:  # (review 86b: it quoted the shards as if the user's)
            why += f", so replay.shards={cfg.replay.shards} builds {n(actors, 'shard')} (one"
            why += " per actor: no actor would fill another)"
        raise ConfigError(f"{why}: {e}") from None


GPU_LEARNER_CPUS = 0.5
"""CPUs a learner that drives a GPU reserves (the GPU does its passes), against 1."""


def learner_cpus(gpu: bool) -> float:
    return GPU_LEARNER_CPUS if gpu else 1.0


def gpu_learners(cfg: TrainConfig, cluster_gpus: float, reserved: bool = True) -> bool:
    """Whether the learners take GPUs: impala/appo/dqn with ``learner_gpus`` > 0 where there
    are GPUs (the driver itself may have none). ``reserved`` (Ray): requests that Ray could not
    place are refused in one line, before any process starts, since a learner would wait for
    a GPU that never frees up; Ray fits each share below 1 inside one GPU."""
    if not cfg.algo_spec.split or cfg.learner_gpus <= 0 or cluster_gpus <= 0:
        return False
    n, share, gpus = cfg.learners, cfg.learner_gpus, int(cluster_gpus + 1e-6)
    if share < 1:
        fits = n <= math.floor(1 / share + 1e-6) * max(gpus, 1)
    else:
        fits = n * share <= cluster_gpus + 1e-6
    if reserved and not fits:
        per_gpu = math.ceil(n / max(gpus, 1))  # learners on the busiest GPU
        fair = math.floor(10_000 / per_gpu) / 10_000  # Ray keeps 4 decimals
        raise ConfigError(
            f"learners={n} x learner_gpus={share:g}: Ray cannot place them on {cluster_gpus:g} "
            f"GPU(s); lower learners, or share the GPUs (learner_gpus={fair:g}), or "
            "learner_gpus=0 (CPU)"
        )
    return True


def n(count: int, what: str) -> str:
    """``1 actor``, ``2 actors``."""
    return f"{count} {what}{'s' if count != 1 else ''}"


def describe_sizes(cfg: TrainConfig, asked_replay: int = 0) -> str:
    """``2 actors, 1 learner, 1 server shard`` (a3c/a2c/ppo: workers; dqn: and its replay
    shards, which actor i fills shard i mod shards of: explore95 read "1 shard" as the
    replay's, and 1 actor left a second replay shard empty, its memory taken, unsaid)."""
    if cfg.algo_spec.split:
        parts = [n(cfg.actors, "actor"), n(cfg.learners, "learner")]
    else:
        parts = [n(cfg.actors, "worker")]
    parts.append(n(cfg.server.shards, "server shard"))
    if cfg.algo_spec.layout == "replay":
        parts.append(n(cfg.replay.shards, "replay shard"))
        if asked_replay > cfg.replay.shards:
            parts[-1] += f" (replay.shards={asked_replay}: one per actor at most, as actor i "
            parts[-1] += "fills shard i mod shards)"
    return ", ".join(parts)


def describe_head(d: DQNConfig) -> str:
    """dqn's head where it is more than one Q-value per action: ``a dueling C51 head (51
    atoms on [-10, 10]); ``."""
    kind = "a dueling" if d.dueling else "a"
    if d.atoms > 1:
        return f"{kind} C51 head ({d.atoms} atoms on [{d.v_min:g}, {d.v_max:g}]); "
    return f"{kind} head; " if d.dueling else ""


def describe_batch(cfg: TrainConfig) -> str:
    """What a learn takes, for the run's first lines: ``batch: 15 actors x 16 envs x 64
    steps; each learn 1024 samples, 4 epochs x 4 minibatches of 256; adam lr 0.00025`` and
    the envs in all (the training mean's delay: an episode of L steps spans L x envs steps of
    the run); dqn's minibatches from the replay."""
    spec, steps, envs = cfg.algo_spec, cfg.algo.rollout_length, cfg.env.num_envs
    if spec.layout == "replay":  # (when learning starts: explore112 saw "updates 0" 170 s)
        d = cfg.dqn
        return (
            f"batch: {n(cfg.actors, 'actor')} x {n(envs, 'env')} "
            f"({n(cfg.actors * envs, 'env')}); {describe_head(d)}learners sample minibatches "
            f"of {d.batch_size} from the replay once it holds {d.learning_starts:,} transitions "
            f"(dqn.learning_starts; the memory is not checkpointed: a resume fills it again); "
            f"{describe_lr(cfg)}"
        )
    who = "actor" if spec.split else "worker"
    samples = steps * envs * (cfg.impala.learner_batch if spec.split else 1)
    text = f"batch: {n(cfg.actors, who)} x {n(envs, 'env')} x {n(steps, 'step')} "
    text += f"({n(cfg.actors * envs, 'env')}); each learn {samples} samples"
    loss = spec.make_loss(cfg)
    if loss.minibatched:
        mb = samples // loss.minibatches
        text += f", {loss.epochs} epochs x {loss.minibatches} minibatches of {mb}"
    text += f"; {describe_lr(cfg)}"
    run = server_settings(cfg).rule
    if run != cfg.server.rule:  # a2c/ppo: config.yaml keeps the rule as given
        text += f"; server.rule={cfg.server.rule} runs as {run} for {cfg.algo.name}"
    return text


def describe_stops(cfg: TrainConfig) -> str:
    """``stop: a mean return of 18 (the last 240 episodes), 5,000,000 env steps or 14,400 s,
    whichever comes first``, for the run's first lines: a score stop kept from another game's
    config was found only when it stopped the run (explore103: pong_a3c.yaml's 18 ended a
    SpaceInvaders run in 29 s)."""
    stop, parts = cfg.stop, []
    if stop.mean_return is not None:
        window = n(cfg.episode_window, "episode")
        parts.append(f"a mean return of {stop.mean_return:g} (the last {window})")
    if stop.eval_mean_return is not None:
        every = f"{cfg.eval.episodes} episodes every {cfg.eval.every_steps:,} steps"
        parts.append(f"an evaluation's mean return of {stop.eval_mean_return:g} ({every})")
    if stop.max_env_steps:
        parts.append(f"{stop.max_env_steps:,} env steps")
    if stop.max_seconds:
        parts.append(
            f"{stop.max_seconds:,.0f} s" if stop.max_seconds >= 1 else f"{stop.max_seconds:g} s"
        )
    if len(parts) > 1:
        return f"stop: {', '.join(parts[:-1])} or {parts[-1]}, whichever comes first"
    return f"stop: {parts[0] if parts else 'none'}"


def describe_lr(cfg: TrainConfig) -> str:
    """``adam lr 0.003``, and where schedule.lr_end anneals it, to what and by when."""
    lr, sched = cfg.optimizer.lr, cfg.schedule
    text = f"{cfg.optimizer.name} lr {lr:g}"
    if sched.lr_end is None:
        return text
    since = f" from {sched.start:,} steps" if sched.start else ""
    horizon = sched.steps or cfg.stop.max_env_steps
    return text + f" (linearly{since} to {lr * sched.lr_end:g} at {horizon:,} steps)"


def check_rollout_memory(cfg: TrainConfig, spec: EnvSpec) -> None:
    """Rollouts that could never be learned from are refused: an actor builds one and the
    learner holds a batch of them (``impala.learner_batch``; a worker its own), and where
    those observations alone exceed this machine's memory the run sat at 0 steps, swapping.
    dqn's transitions go to the replay (:func:`check_replay_memory`)."""
    import numpy as np

    if cfg.runtime.address:  # (a cluster's nodes differ)
        return
    if cfg.algo_spec.layout == "replay":
        check_replay_memory(cfg, spec)
        return
    T, B = cfg.algo.rollout_length, cfg.env.num_envs
    one = (T + 1) * B * math.prod(spec.obs_shape) * np.dtype(spec.obs_dtype).itemsize
    total = machine_memory()
    copies = 1 + (cfg.impala.learner_batch if cfg.algo_spec.split else 1)
    if copies * one > total:
        raise ConfigError(
            f"algo.rollout_length={T} x env.num_envs={B}: one rollout's observations take "
            f"{one / 2**30:.1f} GiB, and an actor and its learner hold {copies}: more than this "
            f"machine's {total / 2**30:.1f} GiB of memory; lower one of them"
        )


def check_replay_memory(cfg: TrainConfig, spec: EnvSpec) -> None:
    """A replay memory larger than this machine's memory is refused before it is built, which
    allocates it whole: a Gymnasium env's 64x64 RGB images, stacked 4 and stored whole (48 KB a
    transition), at replay.capacity 1M failed to allocate 47 GiB as an internal error, and a
    size the system grants but cannot hold is killed later (explore118)."""
    import numpy as np

    from rltrain.replay.memory import frame_capacity
    from rltrain.rl.actor import frame_stack_of

    r, stack = cfg.replay, frame_stack_of(spec.protocol)  # (Atari's: stored frame by frame)
    frame = spec.obs_shape[1:] if stack > 1 else spec.obs_shape
    frames = (
        frame_capacity(r.capacity, stack) * math.prod(frame) * np.dtype(spec.obs_dtype).itemsize
    )
    shards = min(r.shards, cfg.actors) if cfg.actors else r.shards  # (one per actor at most)
    need, total = shards * frames, machine_memory()
    if need > total:
        how = "frame by frame" if stack > 1 else "whole"
        raise ConfigError(
            f"replay.capacity={r.capacity:,} x {n(shards, 'replay shard')}: the replay memory's "
            f"observations ({spec.obs_shape} {spec.obs_dtype}, stored {how}) take "
            f"{need / 2**30:.1f} GiB, more than this machine's {total / 2**30:.1f} GiB of memory; "
            "lower replay.capacity"
        )


MODEL_COPIES = 4
"""Float32 copies of the parameters a run holds at the least: the server's, their gradient
and the optimizer's state (Adam's two moments), before any learner's or actor's own."""


def check_model_memory(cfg: TrainConfig, spec: EnvSpec) -> None:
    """A network that could not be held is refused before anything is built: it is counted
    on the meta device (no memory). ``env.image_size=2000`` gave a Nature CNN of 2 billion
    parameters, and the kernel's out-of-memory killer ended the run without a word."""
    import torch

    from rltrain.rl.env_spec import build_model

    if cfg.runtime.address:  # (a cluster's nodes differ)
        return
    try:
        with torch.device("meta"):
            n = sum(p.numel() for p in build_model(cfg, spec).parameters())
    except (RuntimeError, NotImplementedError, TypeError, ValueError):  # (an op meta lacks)
        return  # built for real later, where a bad shape says its own error
    one, total = n * 4, machine_memory()
    if MODEL_COPIES * one > total:
        image = "env.image_size, " if len(spec.obs_shape) == 3 else ""
        raise ConfigError(
            f"the network has {n:,} parameters ({one / 2**30:.1f} GiB), of which a run holds "
            f"{MODEL_COPIES} copies at the least: more than this machine's "
            f"{total / 2**30:.1f} GiB of memory; lower {image}model.hidden or choose another "
            "model.kind"
        )


def machine_memory() -> int:
    """This machine's memory, in bytes."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
