"""The config of `rltrain train` (:class:`TrainConfig`) and its checks across sections: the
sections come from the envs, the algorithms (:mod:`rltrain.rl.algos`, their registry adding
the user's), the server, the runtime and :mod:`.sections`."""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from rltrain.config import ConfigError, spec
from rltrain.envs import EnvConfig
from rltrain.envs.user import import_listed
from rltrain.faults import FaultsConfig
from rltrain.ps.config import OptimizerConfig, ServerConfig, check_momentum_correction
from rltrain.ps.rules import SYNC
from rltrain.rl.algos import AlgoConfig, AlgoSpec, algo_spec, section_types
from rltrain.rl.algos.dqn import DQNConfig, ReplayConfig
from rltrain.rl.algos.impala import ImpalaConfig
from rltrain.rl.algos.ppo import PPOConfig
from rltrain.rl.config.sections import (
    CheckpointConfig,
    EvalConfig,
    ModelConfig,
    NormalizeConfig,
    ScheduleConfig,
    StopConfig,
    episode_window,
)
from rltrain.runtime.config import RuntimeConfig


def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


@dataclass(frozen=True)
class TrainConfig:
    """`rltrain train`: actors, learners and the parameter server on one environment."""

    COMMAND: ClassVar[str] = "train"  # (its config.yaml leaves out bench's keys: to_dict)
    MOVED: ClassVar[dict[str, str]] = {
        **{f"algo.{k}": f"impala.{k}" for k in _field_names(ImpalaConfig)},
        **{f"algo.{k}": f"ppo.{k}" for k in _field_names(PPOConfig)},
        "env.imports": "imports",
    }
    """Keys an older rltrain kept elsewhere (PPO's and IMPALA's in the flat ``algo`` section,
    ``imports`` in ``env``): old configs, command lines and checkpoints still load
    (:func:`rltrain.config.moved_keys`)."""
    seed: int = field(default=0, metadata=spec(ge=0, le=2**31 - 1))
    """Seed of the network initialisation; actor i seeds its environments with seed + 1000 i."""
    imports: tuple[str, ...] = ()
    """Your modules, imported in every process of the run (the driver, each actor and learner,
    on every node) before the config is checked and before an env is made, e.g.
    [mypkg.envs]: one that registers envs (gymnasium.register), algorithms
    (rltrain.rl.algos.register_algo), update rules or runtimes. The current directory is
    searched too, as `python -m` does; Ray ships a module that is not installed to every node
    (runtime_env.py_modules), an installed one must be installed on each node (as rltrain
    itself). An older config's env.imports is read as this key."""
    env: EnvConfig = EnvConfig()
    algo: AlgoConfig = AlgoConfig()
    ppo: PPOConfig = PPOConfig()
    impala: ImpalaConfig = ImpalaConfig()
    model: ModelConfig = ModelConfig()
    dqn: DQNConfig = DQNConfig()
    replay: ReplayConfig = ReplayConfig()
    sections: dict[str, Any] = field(
        default_factory=lambda: {n: c() for n, c in section_types(built_in=False).items()},
        hash=False,
    )
    """The sections of the algorithms registered beyond the built-ins, by name: read and
    written as top-level sections (``reinforce.baseline_coef``), never under this key
    (:meth:`section`; :func:`rltrain.config.from_dict`)."""
    normalize: NormalizeConfig = NormalizeConfig()
    schedule: ScheduleConfig = ScheduleConfig()
    actors: int = field(default=0, metadata=spec(ge=0, auto=True))
    """a3c/a2c/ppo: workers (each acts and learns); impala/appo/dqn: acting-only actors.
    auto (or 0): one per CPU Ray reports, after the learners' (impala/appo/dqn: a CPU each, half
    of one for a GPU learner) and the policy worker's (runtime.inference=server: the same);
    at least one."""
    learners: int = field(default=1, metadata=spec(ge=1))
    """impala, appo and dqn: learner processes (each asks Ray for a GPU when one exists)."""
    learner_gpus: float = field(default=1.0, metadata=spec(ge=0))
    """impala/appo/dqn: the share of one GPU each learner asks for when the Ray cluster has
    GPUs (0 = CPU; at most 1: a learner computes on one GPU, more GPUs take more learners)."""
    optimizer: OptimizerConfig = OptimizerConfig(name="rmsprop", lr=7e-4, eps=0.1, alpha=0.99)
    server: ServerConfig = ServerConfig()
    stop: StopConfig = StopConfig()
    checkpoint: CheckpointConfig = CheckpointConfig()
    eval: EvalConfig = EvalConfig()
    faults: FaultsConfig = FaultsConfig()
    runtime: RuntimeConfig = RuntimeConfig()
    log_every_seconds: float = field(default=2.0, metadata=spec(gt=0))
    """Seconds between TensorBoard points and progress-line updates (on a terminal; written
    to a file or a pipe, a line every 10 s)."""

    @property
    def algo_spec(self) -> AlgoSpec:
        """The registry's entry for ``algo.name`` (rltrain.rl.algos)."""
        return algo_spec(self.algo.name)

    @property
    def episode_window(self) -> int:
        """Episodes in the training mean (the score stop, the live line, summary.json):
        ``stop.window``, but at least as many as the envs (:func:`episode_window`). Read it
        from the sized config: with ``actors: auto`` unsized (0) it is ``stop.window``."""
        return self.episode_window_at(self.actors)

    def episode_window_at(self, actors: int) -> int:
        """:attr:`episode_window` with ``actors`` actors: the resume check sizes an
        ``actors: auto`` config by the last session's count, before this session sizes it."""
        return episode_window(self.stop.window, actors * self.env.num_envs)

    SECTIONS: ClassVar[str] = "sections"
    """The field holding the registry's other sections (:func:`rltrain.config.from_dict`)."""

    @staticmethod
    def extra_sections() -> dict[str, type]:
        """The config sections of registered algorithms other than the built-ins'."""
        return section_types(built_in=False)

    def section(self, name: str) -> Any:
        """A section by name: one of this class's, or a registered algorithm's."""
        if name in self.sections:
            return self.sections[name]
        if name != self.SECTIONS and name in {f.name for f in dataclasses.fields(self)}:
            return getattr(self, name)
        fields = (f.name for f in dataclasses.fields(self))
        have = [*(n for n in fields if dataclasses.is_dataclass(getattr(self, n))), *self.sections]
        caller = sys._getframe(1)  # (explore91: a typo in a loss of one's own)
        where = f"{os.path.basename(caller.f_code.co_filename)}:{caller.f_lineno}"
        raise ConfigError(
            f"cfg.section({name!r}) at {where}: no such section; the config's are {', '.join(have)}"
        )

    @staticmethod
    def before_check(data: Mapping[str, Any]) -> None:
        import_listed(data)

    def __post_init__(self) -> None:
        """An ``env.id`` of gymnasium's form ``module:EnvId`` is split: ``module`` joins
        ``imports`` (config.yaml keeps both). The env makers read ``imports`` from the env's
        section (``env.imports``, set from it); then the checks across sections, one concern
        each (a section checks its own keys)."""
        module, colon, bare = self.env.id.rpartition(":")
        if colon and module:  # gymnasium.make's "module:EnvId": the module registers the id
            imports = self.imports if module in self.imports else (*self.imports, module)
            object.__setattr__(self, "imports", imports)
            object.__setattr__(self, "env", dataclasses.replace(self.env, id=bare))
        if self.env.imports != self.imports:
            object.__setattr__(self, "env", dataclasses.replace(self.env, imports=self.imports))
        if self.env.kwargs.get("render_mode") == "human":  # (headless: XDG errors from each)
            raise ConfigError(  # (rltrain.make_env(RUN, render_mode="human") draws one)
                "env.kwargs.render_mode='human': every env of every actor would open a window; "
                "leave it out (rltrain eval RUN --video films the game)"
            )
        checks = (check_stop, check_server, check_algo, *self.algo_spec.checks)
        for check in (*checks, check_schedule, check_local):
            check(self)


# --- checks across sections, one concern each (a section checks its own keys) ------------

BENCH_ONLY_SERVER = tuple(
    f.name
    for f in dataclasses.fields(ServerConfig)
    if f.metadata.get("only") == "bench" and f.name != "record"  # (record: its own check)
)
"""ServerConfig keys the supervised workers use and rltrain train's do not."""


def check_stop(cfg: TrainConfig) -> None:
    s = cfg.stop
    if s.eval_mean_return is not None and not cfg.eval.every_steps:
        raise ValueError(
            "stop.eval_mean_return: needs evaluations during training; set eval.every_steps"
        )
    if (s.mean_return, s.eval_mean_return) == (None, None) and not (
        s.max_seconds or s.max_env_steps
    ):
        raise ValueError("stop: set mean_return, eval_mean_return, max_seconds or max_env_steps")


def check_server(cfg: TrainConfig) -> None:
    """What the server's rule and keys can do for rltrain train's pushers."""
    server = cfg.server
    who, pushers = ("learners", cfg.learners) if cfg.algo_spec.split else ("actors", cfg.actors)
    if pushers and server.k > pushers:  # (0: actors auto, checked once sized)
        raise ValueError(
            f"server.k={server.k}: exceeds the {pushers} that push gradients "
            f"({cfg.algo.name}: {who}={pushers}); allowed "
            + (f"0 (all but one) to {pushers}" if pushers > 1 else "0 or 1 (the one pusher)")
        )
    if server.update_rule.supervised_only or server.update_rule.pushes_parameters:
        raise ValueError(
            f"server.rule={server.rule}: rltrain bench only (rltrain train's workers "
            "and learners push gradients); use sync, soft_sync or async"
        )
    for key in BENCH_ONLY_SERVER:  # accepted silently, they would do nothing here
        value = getattr(server, key)
        if value != getattr(ServerConfig(), key):
            raise ValueError(
                f"server.{key}={value}: rltrain bench only (rltrain train's workers and "
                "learners push every gradient as it is made)"
            )
    if server.n_fetch > 1 and not cfg.algo_spec.split:
        raise ValueError(
            f"server.n_fetch={server.n_fetch}: impala/appo/dqn actors only; "
            f"{cfg.algo.name} workers get the parameters back with each push"
        )
    check_momentum_correction(cfg.optimizer, server)
    check_staleness_read(cfg)
    if server.record:
        raise ValueError(
            "server.record=true: only rltrain bench records and reapplies its updates (a "
            "training run's data comes from environments, which cannot be read again)"
        )


def check_algo(cfg: TrainConfig) -> None:
    """What the algorithm's spec allows: learners on one GPU each, normalisation, and the
    fault events' targets among its processes."""
    name, spec = cfg.algo.name, cfg.algo_spec
    for key in ("learners", "learner_gpus") if not spec.split else ():
        value = getattr(cfg, key)  # (the default, 1, is any algorithm's config)
        if value != 1:
            raise ValueError(
                f"{key}={value:g}: algo.name={name} has no learners (each of its workers "
                "learns from its own rollouts); leave it out, or use impala, appo or dqn for "
                "separate learners (for more workers set actors)"
            )
    if cfg.learner_gpus > 1:  # the learner computes on cuda:0; more would sit idle
        raise ValueError(
            f"learner_gpus={cfg.learner_gpus:g}: a learner computes on one GPU, so give "
            "it a share of one (0 to 1); to use more GPUs, set learners to their number"
        )
    if not spec.normalizes and cfg.normalize.obs == "always":
        raise ValueError(
            f"normalize.obs=always: not supported with algo.name={name}; use auto or never"
        )
    if not spec.normalizes and cfg.normalize.reward:
        raise ValueError(f"normalize.reward=true: not supported with algo.name={name}")
    if cfg.model.compile and not spec.minibatched(cfg):
        raise ValueError(
            f"model.compile=true: compiles ppo's and appo's minibatch step; algo.name={name} "
            "has none, use model.compile=false"
        )
    for i, e in enumerate(cfg.faults.events):  # (a3c's workers are the target worker too)
        if e.action not in ("kill", "pause"):
            raise ValueError(
                f"faults.events[{i}]: action {e.action} applies to rltrain bench's workers; "
                "rltrain train injects kill and pause"
            )
    cfg.faults.check_targets(
        {
            # a3c/a2c/ppo: workers that act and learn; impala/appo/dqn: actors (auto: checked
            # once sized)
            "actor": (cfg.actors or None) if spec.split else 0,
            "worker": 0 if spec.split else (cfg.actors or None),
            "learner": cfg.learners if spec.split else 0,  # separate learner processes
            "shard": cfg.server.shards,
            # the policy worker: with runtime.inference=server (auto: known once placed)
            "policy": {"server": 1, "actor": 0}.get(cfg.runtime.inference),
        }
    )


def check_schedule(cfg: TrainConfig) -> None:
    sched, stop = cfg.schedule, cfg.stop
    if (sched.lr_end is not None or sched.entropy_end is not None) and not (
        sched.steps or stop.max_env_steps
    ):
        raise ValueError(
            "schedule: lr_end/entropy_end need a horizon: set schedule.steps or stop.max_env_steps"
        )
    horizon = sched.steps or stop.max_env_steps
    if sched.start and horizon and sched.start >= horizon:
        raise ValueError(
            f"schedule.start={sched.start}: must be below the schedules' end "
            f"({horizon}: schedule.steps, else stop.max_env_steps)"
        )


def check_local(cfg: TrainConfig) -> None:
    """What ``runtime.backend: local`` (every process a thread of this one) and ``process``
    (processes of this machine) cannot do. (A learner targeted by faults.events on the
    process runtime that is a thread of the trainer's, several learners or dqn's, is skipped
    with a note, so that one fault plan runs on every runtime.)"""
    b = cfg.runtime.backend
    if b in ("local", "process") and cfg.runtime.address:
        raise ValueError(
            f"runtime.backend={b} runs on this machine: it joins no Ray cluster "
            f"(address {cfg.runtime.address!r}); use backend ray or auto with --address"
        )
    if cfg.faults.events and b == "local":
        raise ValueError(
            "runtime.backend=local: faults.events need processes to kill and pause; use backend "
            "process or ray"
        )


def check_staleness_read(cfg: TrainConfig) -> None:
    """Refuse a staleness policy the rule run never applies (a sweep's "sync + drop" cell ran
    as plain sync, without a word): sync and soft_sync step on a version's own updates, none
    stale, and only ``drop`` reads ``max_staleness``; and soft_sync's K under another rule."""
    server, run = cfg.server, server_settings(cfg)
    barrier = run.rule in ("sync", "soft_sync")  # (a registered rule may read any key)
    if server.k and run.rule in ("sync", "async"):  # (as bench refuses it: mode_keys.py)
        ran = f"{cfg.algo.name} runs {run.rule}" if run.rule != server.rule else run.rule
        raise ValueError(
            f"server.k={server.k}: soft_sync's K, read by server.rule=soft_sync only (this "
            f"run: {ran}); set server.rule=soft_sync, or leave server.k at 0"
        )
    if server.staleness != "none" and barrier:
        forced = run.rule != server.rule  # a2c, ppo: behind a barrier whatever the rule
        where = f"{cfg.algo.name} runs behind a barrier ({run.rule}), where" if forced else ""
        where = where or f"under {run.rule}"
        fix = "another algorithm (a3c, impala, appo)" if forced else "server.rule=async"
        raise ValueError(
            f"server.staleness={server.staleness}: a policy for updates applied on arrival "
            f"(server.rule=async); {where} each step takes its version's own updates, none "
            f"stale; use {fix}, or server.staleness=none"
        )
    default = ServerConfig.max_staleness
    if server.max_staleness != default and (barrier or server.staleness != "drop"):
        raise ValueError(
            f"server.max_staleness={server.max_staleness}: read by server.staleness=drop "
            f"(with server.rule=async) only; set them, or leave max_staleness at {default}"
        )


def server_settings(cfg: TrainConfig) -> ServerConfig:
    """The rule the server runs: a2c and ppo run behind a barrier (`sync`, or `soft_sync` when
    configured: K of N); the other algorithms use the configured rule."""
    if cfg.algo_spec.barrier and not cfg.server.update_rule.barrier:
        return dataclasses.replace(cfg.server, rule=SYNC.name)
    return cfg.server


def waits_at_barrier(cfg: TrainConfig) -> bool:
    """Whether every push waits for the version it makes (sync, soft_sync): what `sync` means
    for every algorithm. A worker or learner that pushed for version v waits until the server
    steps to v + 1 before it computes its next gradient, so it never pushes twice for one
    version (a3c under sync is a2c; impala/appo learners step together)."""
    return server_settings(cfg).update_rule.barrier
