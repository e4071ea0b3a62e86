"""Where a session's parts run (the learners', the batched policy's and the shards' devices)
and how big it is, decided once the runtime says what the machine has."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from rltrain.config import ConfigError
from rltrain.envs.atari_text import mark_unused, protocol_line
from rltrain.progress import say
from rltrain.rl.config import TrainConfig
from rltrain.rl.run.sizing import (
    describe_batch,
    describe_sizes,
    describe_stops,
    gpu_learners,
    learner_cpus,
    sized,
)
from rltrain.rundir import size_note, write_atomic

if TYPE_CHECKING:
    from rltrain.records import Role
    from rltrain.runtime.config import RuntimeConfig
    from rltrain.runtime.context import RunContext


def shard_device(cfg: TrainConfig, gpu: bool, backend: str) -> str:
    """Where the server's shards keep their values (``server.device``): the learners' GPU when
    they share a process with the shards (the learner's own, or the trainer's with learner
    threads; a push is then a GPU optimizer step), else the CPU. Ray's shards are processes
    of their own."""
    if cfg.server.device == "auto" and gpu and backend != "ray" and torch.cuda.is_available():
        return "cuda"
    return "cpu"


def inference_device(cfg: TrainConfig, gpu: bool, backend: str) -> str | None:
    """Where the batched policy acts for the actors (``runtime.inference``), or None: each
    actor acts with its own copy. A choice that cannot be is refused in one line."""
    want = cfg.runtime.inference
    if want == "actor":
        return None
    why = ""
    if cfg.algo_spec.layout != "actor_learner":
        why = f"algo {cfg.algo.name} (its workers or actors act themselves; impala, appo only)"
    elif backend == "ray":
        why = (
            "runtime.backend ray (the policy worker shares memory slots with the actors on one "
            "machine: process or local)"
        )
    if want == "server" and why:
        raise ConfigError(f"runtime.inference=server cannot be used with {why}")
    if why:
        return None
    on_gpu = gpu and torch.cuda.is_available()
    if want == "server":
        return "cuda" if on_gpu else "cpu"
    return "cuda" if on_gpu else None


@dataclass(frozen=True)
class Placement:
    """Where a session's parts run, decided once the runtime says what the machine has."""

    cfg: TrainConfig  # sized: actors and env.groups auto resolved
    gpu: bool  # the learners compute on a GPU
    inference: str | None  # the batched policy's device (runtime.inference), None: none
    shard_device: str  # where the shards keep their values
    processes: float  # CPUs the actors and learners reserve
    hosted: bool = False  # the one learner is a process that holds the shards
    replay_asked: int = 0  # dqn: replay.shards as the config gave it (sized: one per actor)

    def sharing_note(
        self, cpus: float, asked: RuntimeConfig, fitted: RuntimeConfig, actors_set: bool
    ) -> str:
        """When the processes ask more CPUs (``asked``: runtime.worker_cpus, server_cpus)
        than the cluster's ``cpus``: what each reserves instead (``fitted``), the shards
        counted (they were left out: "2 processes on 2 CPUs" where 4 were asked). The hint at
        ``actors: auto`` only where more than one actor was set (auto already sized them)."""
        shards = self.cfg.server.shards if asked.server_cpus > 0 else 0
        need = self.processes * asked.worker_cpus + shards * asked.server_cpus
        note = f"{self.processes:g} processes" + (f" and {shards} shard(s)" if shards else "")
        note += f" ask {need:g} CPUs of {cpus:g}: they share the cores, each reserving "
        note += f"{fitted.worker_cpus:.2f} CPU (runtime.worker_cpus={asked.worker_cpus:g})"
        if shards:
            note += (
                f", a shard {fitted.server_cpus:.2f} (runtime.server_cpus={asked.server_cpus:g})"
            )
        auto = actors_set and self.cfg.actors > 1
        return note + (" (actors: auto sizes the run to the CPUs)" if auto else "")

    def notes(
        self, cpus: float, asked: RuntimeConfig, fitted: RuntimeConfig, actors_set: bool
    ) -> list[str]:
        """What the run's start says about sharing the ``cpus``: Ray's CPUs shared
        (:meth:`sharing_note`) and torch's threads (:meth:`threads_note`)."""
        shared = fitted.worker_cpus < asked.worker_cpus
        notes = [self.sharing_note(cpus, asked, fitted, actors_set) if shared else ""]
        return [note for note in (*notes, self.threads_note(cpus)) if note]

    def threads_note(self, cpus: float) -> str:
        """Where the actors' torch threads alone outnumber the cores (threads_per_worker > 1
        on many actors), a note: torch's threads spin while they wait for each other, so a
        process whose threads share a core with another's runs several times slower. (One
        thread per actor and a learner with more, as atari_appo.yaml does, is not said: the
        learner's threads take the cores the waiting actors leave idle.)"""
        n, threads = self.cfg.actors, self.cfg.runtime.threads_per_worker
        if threads == 1 or n * threads <= cpus:
            return ""
        who = "actors" if self.cfg.algo_spec.split else "workers"
        note = f"{n} {who} x runtime.threads_per_worker={threads} = {n * threads} torch threads "
        note += f"on {cpus:g} CPUs: their threads share cores and wait on each other; keep "
        note += f"{who} x threads_per_worker within the CPUs"
        learners = " (the learners' runtime.learner_threads are not counted)"
        return note + (learners if who == "actors" else "")

    def describe(self) -> str:
        """``2 actors, 1 learner, 1 shard; learners on CPU`` and what is on a GPU."""
        who = "learners" if self.cfg.algo_spec.split else "workers"  # (a3c's learn themselves)
        sizes = describe_sizes(self.cfg, self.replay_asked)
        where = f"{sizes}; {who} on {'GPU' if self.gpu else 'CPU'}"
        where += ", shards on GPU" if self.shard_device != "cpu" else ""
        where += ", the shards in the learner's process" if self.hosted else ""
        if self.inference is not None:
            on = "GPU" if self.inference != "cpu" else "CPU"
            where += f", the actors' policy batched on the {on} (runtime.inference)"
        return where


def place(cfg: TrainConfig, backend: str, cpus: float, gpus: float) -> Placement:
    """The learners' device, the batched policy's, the shards', and ``cfg`` sized to the
    ``cpus`` and ``gpus`` the runtime ``backend`` reports."""
    gpu = gpu_learners(cfg, gpus, backend == "ray")
    inference = inference_device(cfg, gpu, backend)
    replay_shards = cfg.replay.shards
    cfg = sized(cfg, cpus, gpu, batched=inference is not None)
    split = cfg.algo_spec.split
    processes = cfg.actors + (cfg.learners * learner_cpus(gpu) if split else 0)
    where = shard_device(cfg, gpu, backend)
    hosted, asked = hosts_shards(cfg, backend), replay_shards
    return Placement(cfg, gpu, inference, where, processes, hosted, asked)


def note_sizes(run_dir: Path, placed: Placement, cpus: float, gpus: float) -> None:
    """Say what a learn takes (the run's first lines), and add what ``auto`` chose for this
    session to config.yaml as comments: the keys keep saying auto, so that a --resume on
    another machine sizes the run to that one."""
    cfg, batch = placed.cfg, describe_batch(placed.cfg)
    if line := protocol_line(cfg.env):
        say(line)
    say(batch)
    if cfg.episode_window > cfg.stop.window:  # (rltrain.rl.config.train.episode_window)
        say(
            f"return (the live line, stop.mean_return, summary.json): the mean of the last "
            f"{cfg.episode_window} episodes, as many as the envs; stop.window="
            f"{cfg.stop.window} would see only each round's shortest games (envs that start "
            "together end their short games first)",
            note=True,
        )
    say(describe_stops(cfg))
    path = run_dir / "config.yaml"
    with contextlib.suppress(OSError):  # a note only: the run goes on without it
        sizes = f"this session's start ({cpus:g} CPUs, {gpus:g} GPUs; --resume sizes again)"
        text = mark_unused(path.read_text(), cfg.env)  # (the Atari keys CartPole's shows)
        text += size_note(sizes, cfg.actors, cfg.env.groups, batch)
        write_atomic(path, text)


def computes_on_gpu_here(cfg: TrainConfig, backend: str) -> bool:
    """Whether the trainer's own process computes on a GPU (its learner threads and their
    shards), so that it sets CUDA up at once (Ray's learners, and a learner process with its
    shards, set it up in their own processes)."""
    on_gpu = cfg.algo_spec.split and cfg.learner_gpus > 0
    return on_gpu and backend != "ray" and not hosts_shards(cfg, backend)


def hosts_shards(cfg: TrainConfig, backend: str) -> bool:
    """Whether the learner is a process that holds the server's shards
    (:mod:`rltrain.rl.learner_host`): on the process runtime, with one learner (impala,
    appo). Ray's shards are processes of their own; the thread runtime's, the trainer's."""
    return backend == "process" and cfg.algo_spec.layout == "actor_learner" and cfg.learners == 1


def spawn_role(
    ctx: RunContext,
    cfg: TrainConfig,
    gpu: bool,
    role: Role,
    cls: type,
    args_of: Callable[[int], tuple[Any, ...]],
    **options: Any,
) -> list[Any]:
    """Restartable processes of one role (actor, a3c/a2c/ppo worker, learner or the one
    policy worker; ``cfg.actors`` workers), process i built with ``args_of(i)``; learners
    take a GPU when ``gpu``. ``options``: the runtime's ``Remote``'s own."""
    learner = role == "learner"
    cpus = cfg.runtime.worker_cpus * (learner_cpus(gpu) if learner else 1)
    gpus = cfg.learner_gpus if learner and gpu else 0.0
    remotes = [
        ctx.runtime.Remote(
            cls,
            *args_of(i),
            role=role,
            index=i,
            num_cpus=cpus,
            num_gpus=gpus,
            max_restarts=cfg.faults.max_restarts,
            **options,
        )
        for i in range({"learner": cfg.learners, "policy": 1}.get(role, cfg.actors))
    ]
    return ctx.add(role, remotes)
