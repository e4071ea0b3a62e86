"""Config of `rltrain train`: environment, algorithm, model, server, stop and checkpoints."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from rltrain.config import from_dict, merge, moved_keys, parse_overrides, read_yaml, spec
from rltrain.envs import EnvConfig
from rltrain.envs.user import import_env_modules
from rltrain.faults import FaultsConfig
from rltrain.ps.config import OptimizerConfig, ServerConfig
from rltrain.ps.rules import SYNC
from rltrain.rl.algos import AlgoSpec, algo_names, algo_spec
from rltrain.rl.config_checks import (
    check_algo,
    check_batches,
    check_local,
    check_replay,
    check_schedule,
    check_server,
    check_stop,
)
from rltrain.rl.dqn_config import DQNConfig, ReplayConfig
from rltrain.runtime.config import RuntimeConfig

REDUCTIONS = ("mean", "sum")
MODELS = ("auto", "mlp", "nature_cnn")  # rltrain.rl.models
VALUE_NETS = ("auto", "shared", "separate")
PRECISIONS = ("auto", "fp32", "bf16")
CORRECTIONS = ("vtrace", "none")


@dataclass(frozen=True)
class AlgoConfig:
    """The learning algorithm and its loss."""

    name: str = field(default="a3c", metadata=spec(choices=algo_names))
    """a3c: each worker acts and learns on its own rollouts and pushes asynchronously (Mnih et
    al. 2016). impala: actors only act; learners batch their rollouts and correct the policy
    lag with V-trace (Espeholt et al. 2018). appo: IMPALA's actors and learners with PPO's
    clipped surrogate on V-trace advantages, several epochs of minibatches per learner batch
    (asynchronous PPO, as RLlib's APPO and Sample Factory). a2c and ppo: workers that act and
    learn behind the server's barrier (`sync`, or `soft_sync`), the synchronous twins of a3c
    and appo (ppo: every worker's minibatch gradient is averaged before each step, as in
    DD-PPO). dqn: Gorila (Nair et al. 2015): epsilon-greedy actors fill a replay memory,
    learners push double-DQN gradients."""
    rollout_length: int = field(default=20, metadata=spec(ge=1))
    """T: environment steps per rollout (A3C's t_max; n of the n-step return)."""
    gamma: float = field(default=0.99, metadata=spec(ge=0, le=1))
    """Discount factor."""
    gae_lambda: float = field(default=1.0, metadata=spec(ge=0, le=1))
    """lambda of the value targets and advantages: GAE(lambda) (Schulman et al. 2016) for
    a3c/a2c/ppo and for impala/appo with correction: none, V-trace's lambda (c_s = lambda
    min(c_bar, pi/mu), Espeholt et al. 2018, Remark 2) for impala/appo with correction:
    vtrace. 1 = A3C's n-step returns."""
    value_coef: float = field(default=0.5, metadata=spec(ge=0))
    """Weight of the value loss."""
    entropy_coef: float = field(default=0.01, metadata=spec(ge=0))
    """Weight of the entropy bonus (its start value when schedule.entropy_end is set)."""
    max_grad_norm: float = field(default=40.0, metadata=spec(ge=0))
    """Clip each gradient's global norm to this before pushing (0 = no clipping)."""
    loss_reduction: str = field(default="mean", metadata=spec(choices=REDUCTIONS))
    """How the per-step losses of a batch combine: mean (over every step of every env: PPO's
    and CleanRL's convention; learning rates then do not depend on rollout_length or batch
    size) or sum (over time and batch: scalable_agent's IMPALA and the A3C papers)."""


@dataclass(frozen=True)
class ImpalaConfig:
    """impala and appo (section ``impala``): acting-only actors whose rollouts learners batch,
    and how the learner corrects the actors' policy lag (Espeholt et al. 2018)."""

    rho_bar: float = field(default=1.0, metadata=spec(gt=0))
    """V-trace: truncation of the importance weights in the value targets (rho-bar)."""
    pg_rho_bar: float = field(default=1.0, metadata=spec(gt=0))
    """V-trace: truncation of the importance weights of the policy-gradient advantages
    (scalable_agent's clip_pg_rho_threshold)."""
    c_bar: float = field(default=1.0, metadata=spec(gt=0))
    """V-trace: truncation of the trace-cutting weights (c-bar)."""
    correction: str = field(default="vtrace", metadata=spec(choices=CORRECTIONS))
    """How the learner treats the actors' policy lag. vtrace: V-trace targets and advantages
    (Espeholt et al. 2018). none: lambda-returns and GAE(lambda) as if the
    actors had acted with the learner's policy (the paper's "no correction" baseline).
    When each batch moves the policy far (many epochs of minibatches), the actors' data lag by
    a whole batch and V-trace's truncated weights cut most traces (docs/benchmarks.md: appo
    on Taxi). loss/lag_kl shows the lag."""
    learner_batch: int = field(default=2, metadata=spec(ge=1))
    """Rollouts each learner step batches together."""


@dataclass(frozen=True)
class PPOConfig:
    """ppo and appo (section ``ppo``): PPO's clipped surrogate over several epochs of
    minibatches per batch (Schulman et al. 2017)."""

    epochs: int = field(default=4, metadata=spec(ge=1))
    """Passes over each batch (a worker's rollout, a learner's batch)."""
    minibatches: int = field(default=4, metadata=spec(ge=1))
    """Minibatches per pass; each is one gradient push (one server step)."""
    clip: float = field(default=0.2, metadata=spec(gt=0))
    """Epsilon of the clipped surrogate, ratio clipped to [1 - eps, 1 + eps]."""
    dual_clip: float = field(default=3.0, metadata=spec(ge=0))
    """c of dual-clip PPO (Ye et al. 2020): with a negative advantage the surrogate
    is bounded below by c A, so a sample far in the new policy's tail (a ratio of 1e3 when a
    Gaussian's std has shrunk) cannot blow the step up; 0 = off, else > 1."""
    value_clip: float = field(default=0.0, metadata=spec(ge=0))
    """Clip the value's change from its batch-start value to +-this (0 = off)."""
    kl_coef: float = field(default=0.0, metadata=spec(ge=0))
    """Weight of a KL(pi_old || pi) penalty, pi_old the policy at the batch's start
    (0 = off)."""
    normalize_advantages: bool = True
    """Standardise the advantages of each minibatch (zero mean, unit std)."""
    overlap_push: bool = False
    """Without a barrier: compute each minibatch's gradient while the previous push is
    in flight, at the parameters before it (one step of staleness). It hides the round trip,
    but the delay acts as momentum on top of Adam's (Mitliagkas et al. 2016, "Asynchrony
    begets momentum") and destabilised PPO's epochs on Pong (docs/pong.md). Off by default."""

    def __post_init__(self) -> None:
        if 0 < self.dual_clip <= 1:
            raise ValueError(
                f"dual_clip={self.dual_clip:g}: must be 0 (off) or above 1 (the bound c A "
                "lies below the clipped surrogate's (1 - eps) A only for c > 1)"
            )


@dataclass(frozen=True)
class NormalizeConfig:
    """Observation normalisation and reward scaling, merged from every actor (VecNormalize /
    RLlib's MeanStdFilter, distributed); not for dqn."""

    obs: str = field(default="auto", metadata=spec(choices=("auto", "always", "never")))
    """Normalise observations by the running mean/std of every actor's observations. auto: on
    for vector observations of a3c/a2c/impala/appo/ppo; off for images, for one-hot ones
    (flattened Discrete spaces: Taxi, FrozenLake) and for dqn. A new run writes what auto
    chose (always or never) into its config.yaml."""
    reward: bool = False
    """Divide rewards by the running std of the discounted return (training reward only;
    episode returns stay raw)."""
    clip: float = field(default=10.0, metadata=spec(gt=0))
    """Clip normalised observations and scaled rewards to +-this."""


@dataclass(frozen=True)
class ScheduleConfig:
    """Linear schedules over the run's env steps (PPO's annealing; SB3's lin_ schedules)."""

    steps: int = field(default=0, metadata=spec(ge=0))
    """Env steps at which the schedules reach their end values; 0 = stop.max_env_steps. After
    it they hold."""
    start: int = field(default=0, metadata=spec(ge=0))
    """Env steps before the schedules begin: they hold their start values until then and go
    linearly to their end values from there to `steps` (a constant rate until the score
    levels off, then the anneal: the better Pong schedule of docs/pong.md)."""
    lr_end: float | None = field(default=None, metadata=spec(ge=0))
    """null: a constant learning rate; else the factor of optimizer.lr reached at `steps`
    (0 = anneal to zero)."""
    entropy_end: float | None = field(default=None, metadata=spec(ge=0))
    """null: a constant algo.entropy_coef; else the coefficient reached at `steps`."""


@dataclass(frozen=True)
class ModelConfig:
    """The actor-critic network."""

    kind: str = field(default="auto", metadata=spec(choices=MODELS))
    """auto: the Nature CNN for image observations [C, H, W] of at least 36 pixels a side
    (Atari's frame stacks; a gymnasium env's [H, W, C] uint8 images are moved channels first),
    an MLP for vectors and smaller images."""
    hidden: int = field(default=64, metadata=spec(ge=1))
    """MLP hidden units per layer."""
    value_net: str = field(default="auto", metadata=spec(choices=VALUE_NETS))
    """The value function's torso. auto: its own MLP for vector observations (as CleanRL and
    SB3), the policy's CNN for images. shared or separate force either."""
    precision: str = field(default="auto", metadata=spec(choices=PRECISIONS))
    """Arithmetic of the actor-critic's CNN torso (dqn's Q-network stays fp32, which a GPU
    learner runs in TF32 on Ampere and later: torch.set_float32_matmul_precision("high")):
    bf16 (autocast; parameters, gradients, heads and losses stay float32),
    fp32, or auto: bf16 for the Nature CNN where the device it runs on (each actor's, each
    learner's) runs it faster (CPUs with AVX-512 BF16 / AMX), fp32 elsewhere: on CUDA (TF32
    matmuls) the CNN is too small for bf16 to win back autocast's casts, and MLPs are too
    small to gain."""


@dataclass(frozen=True)
class StopConfig:
    """When training stops: whichever criterion is met first."""

    mean_return: float | None = None
    """Stop once the mean raw return of the last `window` episodes reaches this (null: never)."""
    window: int = field(default=20, metadata=spec(ge=1))
    """Episodes in the mean_return window (and in summary.json's mean_return)."""
    max_seconds: float = field(default=0.0, metadata=spec(ge=0))
    """Wall-clock limit over the whole run, start-up and resumed sessions included (0 = none)."""
    max_env_steps: int = field(default=0, metadata=spec(ge=0))
    """Limit on agent steps summed over all environments (0 = none)."""
    eval_mean_return: float | None = None
    """Stop once an evaluation during training (eval.every_steps) scores this mean raw return
    or more (null: never); its checkpoint is checkpoints/best.pt."""


@dataclass(frozen=True)
class CheckpointConfig:
    """Checkpoints under runs/<run>/checkpoints/."""

    every_seconds: float = field(default=600.0, metadata=spec(gt=0))
    """Seconds between checkpoints; one is always written at the end."""
    keep: int = field(default=3, metadata=spec(ge=1))
    """How many recent checkpoints to keep."""


@dataclass(frozen=True)
class EvalConfig:
    """Evaluation during training, as SB3's EvalCallback: every ``every_steps`` agent steps the
    trainer writes a checkpoint and a process beside training plays ``episodes`` episodes
    with it, under the evaluation protocol (raw scores: no reward clipping, no episodic life;
    the same seeds each time, so that the scores compare). The scores go to TensorBoard
    (``eval/mean_return``) and to ``evals.jsonl``; the best-scoring checkpoint is kept as
    ``checkpoints/best.pt`` (``rltrain eval RUN --checkpoint best``). It shares the CPUs."""

    every_steps: int = field(default=0, metadata=spec(ge=0))
    """Agent steps (summed over every environment) between evaluations (0 = none)."""
    episodes: int = field(default=10, metadata=spec(ge=1))
    """Episodes per evaluation, played in up to 8 environments at once."""
    deterministic: bool = False
    """Play the policy's most likely action (a Box: its mean) instead of sampling (dqn:
    always greedy)."""
    seed: int = field(default=12345, metadata=spec(ge=0, le=2**31 - 1))
    """Seed of the evaluation environments (env i: seed + i), the same at every evaluation."""


def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


@dataclass(frozen=True)
class TrainConfig:
    """`rltrain train`: actors, learners and the parameter server on one environment."""

    MOVED: ClassVar[dict[str, str]] = {
        **{f"algo.{k}": f"impala.{k}" for k in _field_names(ImpalaConfig)},
        **{f"algo.{k}": f"ppo.{k}" for k in _field_names(PPOConfig)},
    }
    """Keys an older rltrain kept in the flat ``algo`` section: old configs, command lines and
    checkpoints still load (:func:`rltrain.config.moved_keys`)."""
    OLDER_RUNS: ClassVar[dict[str, object]] = {"env.action_map": "clip"}
    """What a run folder's config.yaml means by a key an older rltrain did not write
    (:func:`run_yaml`): Box samples were clipped to the bounds."""

    seed: int = field(default=0, metadata=spec(ge=0, le=2**31 - 1))
    """Seed of the network initialisation; actor i seeds its environments with seed + 1000 i."""
    env: EnvConfig = EnvConfig()
    algo: AlgoConfig = AlgoConfig()
    ppo: PPOConfig = PPOConfig()
    impala: ImpalaConfig = ImpalaConfig()
    model: ModelConfig = ModelConfig()
    dqn: DQNConfig = DQNConfig()
    replay: ReplayConfig = ReplayConfig()
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
    """Seconds between TensorBoard points and progress-line updates."""

    @property
    def algo_spec(self) -> AlgoSpec:
        """The registry's entry for ``algo.name`` (rltrain.rl.algos)."""
        return algo_spec(self.algo.name)

    @staticmethod
    def before_check(data: Mapping[str, Any]) -> None:
        """Import ``env.imports`` before the keys are checked: a module there may register an
        algorithm or an update rule (rltrain.rl.algos, rltrain.ps.rules) that the config
        names."""
        env = data.get("env")
        imports = env.get("imports") if isinstance(env, Mapping) else None
        if isinstance(imports, list | tuple) and all(isinstance(m, str) for m in imports):
            import_env_modules(imports)

    def __post_init__(self) -> None:
        """The checks across sections, one concern each (a section checks its own keys)."""
        checks = (check_stop, check_server, check_algo, check_batches, check_replay)
        for check in (*checks, check_schedule, check_local):
            check(self)


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


def run_yaml(path: str | Path) -> dict[str, Any]:
    """A run folder's config.yaml as a dict, its keys as this rltrain names them, each key of
    :attr:`TrainConfig.OLDER_RUNS` it lacks set to what the older rltrain that wrote it acted
    by. Every config.yaml rltrain writes into a run folder holds every key, so a missing one
    means an older rltrain: the run then resumes and plays as it was trained."""
    data = moved_keys(TrainConfig, read_yaml(path))
    for dotted_key, value in TrainConfig.OLDER_RUNS.items():
        section, key = dotted_key.split(".")
        part = data.get(section)
        if isinstance(part, Mapping) and key not in part:
            data[section] = {**part, key: value}
    return data


def load_run_config(
    cls: type[TrainConfig], path: str | Path, overrides: Sequence[str] = ()
) -> TrainConfig:
    """A run folder's config.yaml (:func:`run_yaml`) plus ``--set`` overrides, validated (as
    :func:`rltrain.config.load_config`'s signature, ``cls`` TrainConfig)."""
    over = parse_overrides(overrides, TrainConfig)
    return from_dict(TrainConfig, merge(run_yaml(path), over, TrainConfig))
