"""Config of `rltrain train`: environment, algorithm, model, server, stop and checkpoints."""

from __future__ import annotations

from dataclasses import dataclass, field

from envs import EnvConfig
from rltrain.config import spec
from rltrain.faults import FaultsConfig
from rltrain.ps.config import OptimizerConfig, ServerConfig
from rltrain.rl.models import MODELS
from rltrain.runtime_config import RuntimeConfig

ALGOS = ("a3c", "impala", "a2c", "dqn")


@dataclass(frozen=True)
class AlgoConfig:
    """The learning algorithm."""

    name: str = field(default="a3c", metadata=spec(choices=ALGOS))
    """a3c: each worker acts and learns on its own rollouts and pushes asynchronously (Mnih et
    al. 2016). impala: actors only act; learners batch their rollouts and correct the policy
    lag with V-trace (Espeholt et al. 2018). a2c: A3C's workers through the server's `sync`
    rule, the synchronous twin. dqn: Gorila (Nair et al. 2015): epsilon-greedy actors fill a
    replay memory, learners push double-DQN gradients."""
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
class DQNConfig:
    """Gorila DQN: exploration, target network and learner settings (algo.name=dqn)."""

    epsilon: str = field(default="apex", metadata=spec(choices=("apex", "decay")))
    """apex: a fixed epsilon per actor, eps_i = base^(1 + alpha i / (N - 1)) (Horgan et al.
    2018); decay: every actor decays linearly from epsilon_start to epsilon_final."""
    epsilon_base: float = field(default=0.4, metadata=spec(ge=0, le=1))
    """apex: the base epsilon."""
    epsilon_alpha: float = field(default=7.0, metadata=spec(ge=0))
    """apex: the exponent spread across actors."""
    epsilon_start: float = field(default=1.0, metadata=spec(ge=0, le=1))
    """decay: epsilon at the first step."""
    epsilon_final: float = field(default=0.05, metadata=spec(ge=0, le=1))
    """decay: epsilon after epsilon_decay_steps."""
    epsilon_decay_steps: int = field(default=50_000, metadata=spec(ge=1))
    """decay: steps (per actor) over which epsilon falls."""
    target_update: int = field(default=500, metadata=spec(ge=1))
    """Learners refresh their target network every this many server versions."""
    learning_starts: int = field(default=5_000, metadata=spec(ge=0))
    """Transitions in replay before learners start."""
    batch_size: int = field(default=64, metadata=spec(ge=1))
    """Transitions per learner step."""
    env_steps_per_update: float = field(default=0.0, metadata=spec(ge=0))
    """Once learning has started, actors pause while they are more than this many env steps
    per learner update ahead (a replay ratio: on few cores it keeps CPU for the learners).
    0 = never pause (Gorila's fully asynchronous actors)."""
    updates_per_call: int = field(default=20, metadata=spec(ge=1))
    """Learner steps per driver call (how often the driver hears from a learner)."""


@dataclass(frozen=True)
class ReplayConfig:
    """The replay memory: one or more Ray actors (shards), each with its own capacity."""

    shards: int = field(default=1, metadata=spec(ge=1))
    """Replay shards; actor i sends its transitions to shard i mod shards."""
    capacity: int = field(default=100_000, metadata=spec(ge=1))
    """Transitions per shard (FIFO). Atari stores each 84x84 frame once (~7 KB/transition)."""
    prioritized: bool = False
    """Proportional prioritised replay (Schaul et al. 2016) instead of uniform sampling."""
    alpha: float = field(default=0.6, metadata=spec(ge=0))
    """Prioritised replay: priority exponent."""
    beta: float = field(default=0.4, metadata=spec(ge=0, le=1))
    """Prioritised replay: importance-weight exponent."""


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
    """Wall-clock limit over the whole run, start-up and resumed sessions included (0 = none)."""
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

    seed: int = field(default=0, metadata=spec(ge=0, le=2**31 - 1))
    """Seed of the network initialisation; actor i seeds its environments with seed + 1000 i."""
    env: EnvConfig = EnvConfig()
    algo: AlgoConfig = AlgoConfig()
    model: ModelConfig = ModelConfig()
    dqn: DQNConfig = DQNConfig()
    replay: ReplayConfig = ReplayConfig()
    actors: int = field(default=2, metadata=spec(ge=1))
    """a3c/a2c: workers (each acts and learns); impala: acting-only actors."""
    learners: int = field(default=1, metadata=spec(ge=1))
    """impala and dqn: learner processes (each asks Ray for a GPU when one exists)."""
    learner_gpus: float = field(default=1.0, metadata=spec(ge=0))
    """impala: GPUs each learner asks for, when the Ray cluster has GPUs (0 = CPU learners)."""
    optimizer: OptimizerConfig = OptimizerConfig(name="rmsprop", lr=7e-4, eps=0.1, alpha=0.99)
    server: ServerConfig = ServerConfig()
    stop: StopConfig = StopConfig()
    checkpoint: CheckpointConfig = CheckpointConfig()
    faults: FaultsConfig = FaultsConfig()
    runtime: RuntimeConfig = RuntimeConfig()
    log_every_seconds: float = field(default=2.0, metadata=spec(gt=0))
    """Seconds between TensorBoard points and progress-line updates."""

    def __post_init__(self) -> None:
        s = self.stop
        if s.mean_return is None and s.max_seconds == 0 and s.max_env_steps == 0:
            raise ValueError("stop: set mean_return, max_seconds or max_env_steps")
        pushers = self.learners if self.algo.name in ("impala", "dqn") else self.actors
        if self.server.k > pushers:
            raise ValueError(f"server.k={self.server.k} exceeds the {pushers} pushing workers")
        split = self.algo.name in ("impala", "dqn")  # separate learner processes
        self.faults.check_targets(
            {
                "actor": self.actors,
                "learner": self.learners if split else 0,
                "shard": self.server.shards,
            }
        )
