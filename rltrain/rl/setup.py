"""What a run starts from: the environment's shapes and protocol, the initial parameters,
whether a checkpoint fits, and the counters a checkpoint carries."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rltrain.checkpoint import CheckpointError, latest_checkpoint, load_checkpoint
from rltrain.config import ConfigError, dotted, moved_keys, to_dict
from rltrain.envs import ActionSpace, EnvError, check_first_reset, make_env
from rltrain.envs.user import one_hot as one_hot_space
from rltrain.faults import FaultCounters
from rltrain.ps.server import ShardLayout
from rltrain.rl.actor import policy_builder
from rltrain.rl.algos import algo_names, algo_spec
from rltrain.rl.config import StopConfig, TrainConfig
from rltrain.rl.models import build_qnet, check_torso, flat_params
from rltrain.rl.rollout import WorkStats
from rltrain.rl.sizing import describe_batch, describe_sizes, gpu_learners, learner_cpus, sized
from rltrain.rundir import write_atomic


@dataclass(frozen=True)
class EnvSpec:
    obs_shape: tuple[int, ...]
    obs_dtype: str
    actions: ActionSpace
    frames_per_step: int
    protocol: dict[str, Any]
    flattened_from: Any = None
    """The env's own observation space, when its observations are flattened (VectorEnv)."""
    transposed: bool = False
    """Whether the env's own [H, W, C] images are moved to [C, H, W] (VectorEnv)."""
    stacked: int = 1
    """Images stacked into each observation of a Gymnasium image env (VectorEnv)."""

    @property
    def one_hot(self) -> bool:
        """Whether the observations are one-hot cells (a flattened Discrete, MultiDiscrete, ...)."""
        return one_hot_space(self.flattened_from)

    @property
    def num_actions(self) -> int:
        """Discrete: how many actions; a Box: its dimension."""
        return self.actions.n


def probe_env(cfg: TrainConfig) -> EnvSpec:
    """Open one environment here to learn shapes and the protocol (and fail early on a bad id,
    an action space the algorithm cannot handle, or a first reset that raises or returns a
    wrong shape or a NaN)."""
    env = make_env(cfg.env, seed=cfg.seed, num_envs=1)
    try:
        check_first_reset(env)
        if cfg.algo_spec.q_network and env.action_space.continuous:
            others = ", ".join(n for n in algo_names() if not algo_spec(n).q_network)
            raise EnvError(
                f"algo.name={cfg.algo.name} needs Discrete actions; {cfg.env.id} has "
                f"{env.action_space.describe()} actions: use one of {others}"
            )
        check_torso(cfg.model.kind, tuple(env.obs_shape))
        protocol = {**env.protocol, "num_envs": cfg.env.num_envs}  # per actor
        return EnvSpec(
            tuple(env.obs_shape),
            str(np.dtype(env.obs_dtype)),
            env.action_space,
            int(protocol.get("frame_skip", 1)),
            protocol,
            env.flattened_from,
            env.transposed,
            env.stacked,
        )
    finally:
        env.close()


def initial_params(cfg: TrainConfig, spec: EnvSpec) -> torch.Tensor:
    torch.manual_seed(cfg.seed)
    build = build_qnet if cfg.algo_spec.q_network else policy_builder(cfg)
    model = build(cfg.model.kind, spec.obs_shape, spec.actions, cfg.model.hidden)
    return flat_params(model)


def check_fits(path: Path, state: dict[str, Any], params: torch.Tensor, cfg: TrainConfig) -> None:
    """A checkpoint must match the server layout and model of the config it resumes under."""
    sizes = [int(s["param"].numel()) for s in state["shards"]]
    expected = ShardLayout(params.numel(), cfg.server.shards).sizes
    if sizes != expected:
        raise CheckpointError(
            f"{path} holds {len(sizes)} shard(s) of {sum(sizes)} parameters; this config needs "
            f"{len(expected)} of {sum(expected)} (keep server.shards and the model as they were)"
        )


DIVERGED_AFTER = 100
"""Updates refused in a row (non-finite gradients: NaN or inf) after which a run stops as
``diverged``: a NaN batch now and then is refused and the run goes on, but a run whose every
update is refused has frozen parameters and would only burn its budget."""


def diverged_note(refused: int, reason: str) -> str:
    """Why a run stopped as ``diverged`` (summary.json's failure, the CLI's last line)."""
    return (
        f"diverged: the server refused the last {refused} updates ({reason or 'non-finite'}); "
        "the parameters are those of the last update it applied: lower optimizer.lr or "
        "algo.max_grad_norm, or look for NaN in the env's rewards and observations"
    )


@dataclass
class Counters:
    """Everything the run has counted; saved in checkpoints so --resume continues them."""

    env_steps: int = 0
    episodes: int = 0
    updates: int = 0
    applied: int = 0
    dropped: int = 0
    rejected: int = 0
    staleness_sum: int = 0
    wall_seconds: float = 0.0
    best_mean_return: float | None = None
    recent_returns: list[float] = field(default_factory=list)
    rejected_in_a_row: int = 0  # updates refused since the server last applied one

    def mean_return(self, window: int) -> float | None:
        r = self.recent_returns[-window:]
        return sum(r) / len(r) if r else None

    def stop_met(self, stop: StopConfig, seconds: float) -> str:
        """The stop criterion these counts meet, '' for none: diverged, mean_return,
        max_env_steps or max_seconds (``seconds``: the run's wall time; eval_mean_return is
        the evaluator's)."""
        if self.rejected_in_a_row >= DIVERGED_AFTER:
            return "diverged"
        target, mean = stop.mean_return, self.mean_return(stop.window)
        if target is not None and len(self.recent_returns) >= stop.window and mean >= target:
            return "mean_return"
        if stop.max_env_steps and self.env_steps >= stop.max_env_steps:
            return "max_env_steps"
        if stop.max_seconds and seconds >= stop.max_seconds:
            return "max_seconds"
        return ""

    def add(self, stats: WorkStats, window: int) -> None:
        """Count one result of an actor, learner or worker; ``window``: stop.window."""
        self.env_steps += stats.env_steps
        self.episodes += len(stats.episode_returns)
        self.updates += stats.updates
        self.applied += stats.applied
        self.dropped += stats.dropped
        self.rejected += stats.rejected
        self.rejected_in_a_row = 0 if stats.applied else self.rejected_in_a_row + stats.rejected
        self.staleness_sum += sum(stats.staleness)
        self.recent_returns = (self.recent_returns + list(stats.episode_returns))[-1000:]
        mean = self.mean_return(window)
        if mean is not None and len(self.recent_returns) >= window:
            best = self.best_mean_return
            self.best_mean_return = mean if best is None else max(best, mean)


@dataclass(frozen=True)
class Resumed:
    """What ``--resume`` continues from: the newest checkpoint and the counters it carries."""

    path: Path
    state: dict[str, Any]
    counters: Counters
    faults: FaultCounters
    changes: list[str] = field(default_factory=list)
    """The config keys this session changes, ``key: old -> new``: what a user is told."""


KEPT_ON_RESUME = ("algo.name", "env.id", "optimizer.name", "normalize.obs")
"""Keys a resumed run keeps as they were: the checkpoint's parameters, optimizer state and
normalization statistics belong to them (an SGD run's state in Adam fails at its first step;
an a3c network trained on as appo, or on another game, is another run)."""

TOLD_ON_RESUME = (
    *("algo", "ppo", "impala", "env", "model", "optimizer", "normalize", "schedule", "server"),
    "stop",
)
"""Sections whose changes a resume names (actors, runtime and eval are sized or read anew)."""


SIZED_KEYS = ("env.groups",)
"""Keys whose auto (0) the trainer resolves for the machine (:func:`rltrain.rl.sizing.sized`):
a checkpoint holds what auto chose there."""


def resume_changes(path: Path, saved: dict[str, Any] | None, cfg: TrainConfig) -> list[str]:
    """What ``cfg`` changes against the config the checkpoint at ``path`` was saved under
    (``saved``; None for checkpoints that carry none): ``key: old -> new`` for the sections
    of :data:`TOLD_ON_RESUME`; CheckpointError for a key of :data:`KEPT_ON_RESUME`."""
    if not saved:
        return []
    old, new = dotted(moved_keys(TrainConfig, saved)), dotted(to_dict(cfg))
    changed = [
        k
        for k, v in new.items()
        if k.split(".")[0] in TOLD_ON_RESUME
        and old.get(k, v) != v
        and not (k in SIZED_KEYS and v == 0)  # auto, which the checkpoint holds resolved
    ]
    for key in KEPT_ON_RESUME:
        if key in changed and old[key] != "auto":  # auto: left to this rltrain to decide
            raise CheckpointError(
                f"{key}={new[key]}: the run at {path.parent.parent} has {key}={old[key]}, "
                "which a resumed run keeps; start a new run to change it"
            )
    return [f"{k}: {old[k]} -> {new[k]}" for k in changed]


def session_seed(seed: int, env_steps: int) -> int:
    """The seed of a session resumed at ``env_steps``: its actors' env seeds, samples and
    minibatch orders are new draws, not the first session's again (``seed`` stays the
    run's, in config.yaml)."""
    return int(np.random.SeedSequence([seed, env_steps]).generate_state(1)[0] % 2**31)


def load_resume(run_dir: Path, cfg: TrainConfig, spec: EnvSpec) -> Resumed | None:
    """The run's newest checkpoint, checked against ``cfg``; None when it has none yet."""
    path = latest_checkpoint(run_dir)
    if path is None:
        return None
    state = load_checkpoint(path)
    check_fits(path, state, initial_params(cfg, spec), cfg)
    try:
        counters = Counters(**state["counters"])
        faults = FaultCounters(**state.get("faults", {}))
    except TypeError:
        raise CheckpointError(f"{path}: its counters are not those this rltrain writes") from None
    changes = resume_changes(path, state.get("config"), cfg)
    met = counters.stop_met(cfg.stop, counters.wall_seconds)
    if met:  # a session would start every process only to stop at once
        raise CheckpointError(
            f"the run at {path.parent.parent} already met stop.{met}="
            f"{getattr(cfg.stop, met)}; raise it (or null mean_return) with --set to train on"
        )
    return Resumed(path, state, counters, faults, changes)


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
        why = "runtime.backend ray (the policy lives in the trainer's process: process or local)"
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

    def sharing_note(self, cpus: float, each: float) -> str:
        """When the processes reserve more CPUs than there are: each has ``each``."""
        return (
            f"{self.processes:g} processes on {cpus:.0f} CPUs: each reserves {each:.2f} CPU "
            "and they share the cores (actors: auto sizes the run to the CPUs)"
        )

    def describe(self) -> str:
        """``2 actors, 1 learner, 1 shard; learners on CPU`` and what is on a GPU."""
        where = f"{describe_sizes(self.cfg)}; learners on {'GPU' if self.gpu else 'CPU'}"
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
    cfg = sized(cfg, cpus, gpu, batched=inference is not None)
    split = cfg.algo_spec.split
    processes = cfg.actors + (cfg.learners * learner_cpus(gpu) if split else 0)
    where = shard_device(cfg, gpu, backend)
    return Placement(cfg, gpu, inference, where, processes, hosts_shards(cfg, backend))


def note_sizes(run_dir: Path, placed: Placement, cpus: float, gpus: float) -> None:
    """Say what a learn takes (the run's first lines), and add what ``auto`` chose for this
    session to config.yaml as comments: the keys keep saying auto, so that a --resume on
    another machine sizes the run to that one."""
    cfg, batch = placed.cfg, describe_batch(placed.cfg)
    print(batch)
    path = run_dir / "config.yaml"
    with contextlib.suppress(OSError):  # a note only: the run goes on without it
        text = path.read_text() + (
            f"# sized at this session's start ({cpus:g} CPUs, {gpus:g} GPUs; --resume sizes "
            f"again):\n# actors: {cfg.actors}\n# env.groups: {cfg.env.groups}\n# {batch}\n"
        )
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
