"""Linear schedules over a run's env steps (``schedule``: PPO's annealing, SB3's lin_
schedules), and the learning rate's, as the trainer sends it to the server's shards."""

from __future__ import annotations

from typing import Any

from rltrain.faults import PeerLost, ProcessLost
from rltrain.ps.optim import warmup_factor
from rltrain.rl.algos.base import linear
from rltrain.rl.config import TrainConfig


def schedule_progress(cfg: TrainConfig, env_steps: int) -> float:
    """Fraction of the schedules' span (schedule.start to their end) done, in [0, 1]."""
    horizon = cfg.schedule.steps or cfg.stop.max_env_steps
    start = cfg.schedule.start
    if not horizon:
        return 0.0
    return min(1.0, max(0.0, (env_steps - start) / (horizon - start)))


class LRSender:
    """Tells the server the schedule's factor of ``optimizer.lr`` when it moved by 1% or more,
    and each time the shards loaded a state (at the start, from a checkpoint or a restore
    point): they then hold the factor saved with it, which the schedule now in force may not
    share (a run resumed with another schedule, or none)."""

    def __init__(self) -> None:
        self.factor: float | None = None  # last sent; None: send at the next look
        self.restores = 0  # the shard restores counted when it was sent

    def send(self, cfg: TrainConfig, server: Any, restores: int, progress: float) -> None:
        """``restores``: the shard restores so far; ``progress``: where the schedules stand."""
        end = cfg.schedule.lr_end
        factor = 1.0 if end is None else linear(1.0, end, progress)
        last = self.factor
        loaded = last is None or restores != self.restores
        if loaded or last is None or abs(factor - last) >= 0.01 or (factor == end and last != end):
            try:
                server.set_lr_factor(factor)
            except (ProcessLost, PeerLost):  # a shard is down: sent again at a later look,
                return  # and after its restore (the guard's, on the driver's next poll)
            self.factor, self.restores = factor, restores

    def lr(self, cfg: TrainConfig, version: int = 0) -> float:
        """The learning rate in force at the shards' ``version`` (their optimizer steps: the
        warm-up's count, ``optimizer.warmup_steps``)."""
        warm = warmup_factor(version, cfg.optimizer.warmup_steps)
        return cfg.optimizer.lr * (1.0 if self.factor is None else self.factor) * warm
