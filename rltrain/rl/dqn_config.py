"""The config sections of dqn (Gorila, Nair et al. 2015): its learners and its replay memory."""

from __future__ import annotations

from dataclasses import dataclass, field

from rltrain.config import spec


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
    """The replay memory: one or more Ray processes (shards), each with its own capacity."""

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
