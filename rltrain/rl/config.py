"""Config of `rltrain train`: environment, algorithm, model, server, stop and checkpoints."""

from __future__ import annotations

from dataclasses import dataclass, field

from envs import EnvConfig
from rltrain.config import spec
from rltrain.ps.config import OptimizerConfig, ServerConfig
from rltrain.rl.models import MODELS
from rltrain.runtime_config import RuntimeConfig

ALGOS = ("a3c", "impala", "a2c")


@dataclass(frozen=True)
class AlgoConfig:
    """The learning algorithm."""

    name: str = field(default="a3c", metadata=spec(choices=ALGOS))
    """a3c: each worker acts and learns on its own rollouts and pushes asynchronously (Mnih et
    al. 2016). impala: actors only act; learners batch their rollouts and correct the policy
    lag with V-trace (Espeholt et al. 2018). a2c: A3C's workers through the server's `sync`
    rule, the synchronous twin."""
    rollout_length: int = field(default=20, metadata=spec(ge=1))
    """T: environment steps per rollout (A3C's t_max; n of the n-step return)."""
    gamma: float = field(default=0.99, metadata=spec(ge=0, le=1))
    """Discount factor."""
    value_coef: float = field(default=0.5, metadata=spec(ge=0))
    """Weight of the value loss."""
    entropy_coef: float = field(default=0.01, metadata=spec(ge=0))
    """Weight of the entropy bonus."""
    max_grad_norm: float = field(default=40.0, metadata=spec(ge=0))
    """Clip each gradient's global norm to this before pushing (0 = no clipping)."""
    rho_bar: float = field(default=1.0, metadata=spec(gt=0))
    """V-trace: truncation of the importance weights in the targets (rho-bar)."""
    c_bar: float = field(default=1.0, metadata=spec(gt=0))
    """V-trace: truncation of the trace-cutting weights (c-bar)."""
    learner_batch: int = field(default=2, metadata=spec(ge=1))
    """impala: rollouts each learner step batches together."""


@dataclass(frozen=True)
class ModelConfig:
    """The actor-critic network."""

    kind: str = field(default="auto", metadata=spec(choices=MODELS))
    """auto: the Nature CNN for image observations, an MLP for vectors."""
    hidden: int = field(default=64, metadata=spec(ge=1))
    """MLP hidden units per layer."""


@dataclass(frozen=True)
class StopConfig:
    """When training stops: whichever criterion is met first."""

    mean_return: float | None = None
    """Stop once the mean raw return of the last `window` episodes reaches this (null: never)."""
    window: int = field(default=20, metadata=spec(ge=1))
    """Episodes in the mean_return window (and in summary.json's mean_return)."""
    max_seconds: float = field(default=0.0, metadata=spec(ge=0))
    """Wall-clock limit, start-up included (0 = none)."""
    max_env_steps: int = field(default=0, metadata=spec(ge=0))
    """Limit on agent steps summed over all environments (0 = none)."""


@dataclass(frozen=True)
class CheckpointConfig:
    """Checkpoints under runs/<run>/checkpoints/."""

    every_seconds: float = field(default=600.0, metadata=spec(gt=0))
    """Seconds between checkpoints; one is always written at the end."""
    keep: int = field(default=3, metadata=spec(ge=1))
    """How many recent checkpoints to keep."""


@dataclass(frozen=True)
class TrainConfig:
    """`rltrain train`: actors, learners and the parameter server on one environment."""

    seed: int = 0
    """Seed of the network initialisation; actor i seeds its environments with seed + 1000 i."""
    env: EnvConfig = EnvConfig()
    algo: AlgoConfig = AlgoConfig()
    model: ModelConfig = ModelConfig()
    actors: int = field(default=2, metadata=spec(ge=1))
    """a3c/a2c: workers (each acts and learns); impala: acting-only actors."""
    learners: int = field(default=1, metadata=spec(ge=1))
    """impala: learner processes (each asks Ray for a GPU when one exists)."""
    learner_gpus: float = field(default=1.0, metadata=spec(ge=0))
    """impala: GPUs each learner asks for, when the Ray cluster has GPUs (0 = CPU learners)."""
    optimizer: OptimizerConfig = OptimizerConfig(name="rmsprop", lr=7e-4, eps=0.1, alpha=0.99)
    server: ServerConfig = ServerConfig()
    stop: StopConfig = StopConfig()
    checkpoint: CheckpointConfig = CheckpointConfig()
    runtime: RuntimeConfig = RuntimeConfig()
    log_every_seconds: float = field(default=2.0, metadata=spec(gt=0))
    """Seconds between TensorBoard points and progress-line updates."""

    def __post_init__(self) -> None:
        s = self.stop
        if s.mean_return is None and s.max_seconds == 0 and s.max_env_steps == 0:
            raise ValueError("stop: set mean_return, max_seconds or max_env_steps")
