"""The sections of a run's config that are neither an algorithm's nor a runtime's: the
network, normalisation, schedules, the stop, checkpoints and evaluations."""

from __future__ import annotations

from dataclasses import dataclass, field

from rltrain.config import spec
from rltrain.rl.algos.model_kinds import MODELS, PRECISIONS, VALUE_NETS


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
    episode returns stay raw): the run's, merged by the server; before it knows any, that of
    the returns each actor's env group has seen."""
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
    an MLP for vectors and smaller images. impala_cnn: IMPALA's 15-layer residual CNN
    (Espeholt et al. 2018) for images of any size, 6x the Nature CNN's arithmetic: cheap on a
    GPU learner, ~9x slower per sample to learn on a CPU."""
    hidden: int = field(default=64, metadata=spec(ge=1))
    """MLP hidden units per layer."""
    log_std_init: float = field(default=0.0, metadata=spec(ge=-5, le=5))
    """Box actions: the Gaussian policy's initial log standard deviation, one learned
    parameter per action dimension (0: std 1, CleanRL's and SB3's default; rl-baselines3-zoo's
    tuned MuJoCo entries start at -2, std 0.14). Below -5 (std 0.0067) the mean's gradients,
    which grow as 1 / std^2, fill the clipped norm and the std never grows back: at -10 and
    -20 Pendulum learned nothing, its gradient norm 5e7 to 1e15 (explore105). Discrete
    actions: unused."""
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
    compile: bool = False
    """ppo and appo: compile each minibatch's forward pass and loss, and their backward, with
    torch.compile (Inductor; on a CPU it needs a C++ compiler, else the learner says so and
    runs eagerly). It fuses the loss's ~100 small ops: an MLP learner's update took 0.69x
    the time on a CPU (MuJoCo's minibatches of 64) and whole MuJoCo runs 0.76-0.79x, for a
    few seconds of compiling at each learner process's first learn (docs/benchmarks.md);
    Pong's CNN on a CPU gained nothing. Off by default: short runs lose more to the compile
    than they gain."""


@dataclass(frozen=True)
class StopConfig:
    """When training stops: whichever criterion is met first."""

    mean_return: float | None = None
    """Stop once the mean raw return of the last `window` episodes (at least as many as the
    envs) reaches this, judged once every env has ended a game since the session (the run, a
    --resume) started (null: never)."""
    window: int = field(default=20, metadata=spec(ge=1))
    """Episodes in the mean_return window (and in summary.json's mean_return), at least as
    many as the envs (actors x env.num_envs): envs that start their games together end the
    short ones first, so a window smaller than the envs would judge the run by its shortest
    games."""
    max_seconds: float = field(default=0.0, metadata=spec(ge=0))
    """Wall-clock limit over the whole run, resumed sessions and their processes' start
    included; the command's imports and env check before it are not (summary.json's
    startup_seconds and wall_seconds say each) (0 = none)."""
    max_env_steps: int = field(default=0, metadata=spec(ge=0))
    """Limit on agent steps summed over all environments (0 = none; Atari: 1/frame_skip of
    the frames). Counted per rollout: the run stops at the rollout that reaches it, and the
    rollouts in flight then count too, so it ends a few rollouts past it (each env.num_envs x
    algo.rollout_length steps)."""
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
    greedy, instead of epsilon-greedy with dqn.eval_epsilon)."""
    seed: int = field(default=12345, metadata=spec(ge=0, le=2**31 - 1))
    """Seed of the evaluation environments (env i: seed + i), the same at every evaluation."""


def episode_window(window: int, envs: int) -> int:
    """The last ``window`` episodes, but at least as many as the envs (``envs`` in all).

    Every env starts its first game at once, at a run's start and at each ``--resume``, and
    240 envs play about 6 games each in 12M frames of Pong: too few for them to drift apart.
    So the episodes that end first are the shortest ones, and the last 20 of 240 are the
    shortest or the longest of a round: in Pong the most lopsided wins, or the closest games.
    A window of 20 at 240 envs stopped a resumed run "at 18.6" on its first 17 games, 18-21
    wins, where its evaluations said 16.1-16.9 and the mean of its last 240 games 14.8
    (docs/pong.md). A window of at least as many episodes as envs takes a whole round.
    """
    return max(window, envs)
