"""What a run counts (env steps, episodes, updates, returns): saved in checkpoints, so that
``--resume`` continues them, and read for the stop criteria."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from rltrain.rl.config import StopConfig
from rltrain.rl.rollout import RoundCount, WorkStats, newest_count

KEEP_RETURNS = 1000
"""Recent episode returns a checkpoint keeps (more where the window is larger)."""

DIVERGED_AFTER = 100
"""Updates refused in a row (non-finite gradients: NaN or inf) after which a run stops as
``diverged``: a NaN batch now and then is refused and the run goes on, but a run whose every
update is refused has frozen parameters and would only burn its budget."""


def reaches(mean: float, target: float) -> bool:
    """Whether a mean return meets a score stop: within float32's rounding of it counts (the
    rewards are float32: a corridor whose best return is 0.8 summed to 0.79999999702 in every
    episode, and a stop at its optimum, 0.8, was never met)."""
    return mean >= target - 1e-6 * max(1.0, abs(target))


def diverged_note(c: Counters, reason: str) -> str:
    """Why a run stopped as ``diverged`` (summary.json's failure, the CLI's last line); one
    that never applied an update was non-finite from its first (explore108: a loss of one's
    own that returned NaN was told to lower the learning rate)."""
    refused, why = c.rejected_in_a_row, reason or "non-finite"
    if not c.applied:
        return (
            f"diverged: the server refused all {refused} updates ({why}), from the first: the "
            "initial parameters' gradients are not finite; look at the loss (one of your own?) "
            "and at the env's first rewards and observations (normalize.reward, normalize.obs)"
        )
    return (
        f"diverged: the server refused the last {refused} updates ({why}); "
        "the parameters are those of the last update it applied: lower optimizer.lr or "
        "algo.max_grad_norm, or look for huge values in the env's rewards and observations "
        "(normalize.reward, normalize.obs)"
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
    actor_lag_sum: int = 0  # impala/appo: over the batches learned (WorkStats.actor_lag)
    lagged_batches: int = 0
    wall_seconds: float = 0.0
    best_mean_return: float | None = None
    recent_returns: list[float] = field(default_factory=list)
    rejected_in_a_row: int = 0  # updates refused since the server last applied one
    per_env_steps: float = 0.0  # steps each env has taken, over every session's env count
    # (dqn's epsilon schedule goes on from it: env_steps over a resumed session's actors x
    # num_envs moved it back or forward when they changed; 0: older checkpoints)
    unsettled: dict[int, int] | None = None  # actor id -> its envs yet to end a game since
    # it (re)started, as its newest result said (rltrain.rl.rollout.FirstRound); {} at a
    # session's start (an actor's first result says how many with its first episodes; an
    # algorithm whose actors never say is judged as before); None: older checkpoints
    gone: set[int] = field(default_factory=set)  # actors gone for good this session (not
    # saved: a session starts with none, and torch < 2.6's weights_only load refuses a set)
    since: dict[int, float] = field(default_factory=dict)  # actor id -> when the round of its
    # `unsettled` count began (RoundCount.since; not saved: a session starts with none)
    actors: int = 0  # the session's (Counters.add); until each has counted its envs once one
    # has, the round is not settled (one actor's first result, its games ended, said settled
    # while the others had said nothing; not saved)

    def state(self) -> dict[str, Any]:
        """What a checkpoint keeps: plain types that ``torch.load(weights_only=True)`` reads
        on every torch the project allows, and nothing that a new session resets anyway."""
        return {k: v for k, v in asdict(self).items() if k not in ("gone", "since", "actors")}

    def new_session(self) -> None:
        """A session (the run, a ``--resume``) starts: every env starts a game at once."""
        self.unsettled, self.gone, self.since = {}, set(), {}

    def actor_gone(self, actor_id: int) -> None:
        """An actor gone for good: its envs' first games will never end, so none is waited for,
        not even as its rollouts still queued for a learner say (they come back after this)."""
        self.gone.add(actor_id)
        if self.unsettled is not None:
            self.unsettled.pop(actor_id, None)

    @property
    def in_first_game(self) -> int:
        """Envs still in their first game of the session, as the actors last said."""
        return sum((self.unsettled or {}).values())

    @property
    def settled(self) -> bool:
        """Every env has ended a game since the session (or its actor) started, so the last
        episodes are no longer a round's shortest games (:class:`rltrain.rl.rollout.FirstRound`)."""
        told = len(self.unsettled or {}) + len(self.gone)  # (a gone actor's count is dropped)
        return self.in_first_game == 0 and not (self.unsettled and told < self.actors)

    @property
    def round_settled(self) -> bool | None:
        """:attr:`settled` once an actor has counted its envs this session (None before, and
        once none counts any more: an older checkpoint, actors that never say, all gone)."""
        return self.settled if self.unsettled else None

    def mean_return(self, window: int) -> float | None:
        r = self.recent_returns[-window:]
        return sum(r) / len(r) if r else None

    def full_mean(self, window: int) -> float | None:
        """The mean of the last ``window`` returns once that many have ended and every env
        has ended a game since it started (None before): what the score stop judges, an early
        lucky episode, or a round's first and shortest games, being no mean."""
        full = len(self.recent_returns) >= window and self.settled
        return self.mean_return(window) if full else None

    def stop_met(self, stop: StopConfig, seconds: float, window: int) -> str:
        """The stop criterion these counts meet, '' for none: diverged, mean_return,
        max_env_steps or max_seconds (``seconds``: the run's wall time; ``window``: the
        episodes of the mean, ``TrainConfig.episode_window``; eval_mean_return is the
        evaluator's)."""
        if self.rejected_in_a_row >= DIVERGED_AFTER:
            return "diverged"
        target, mean = stop.mean_return, self.full_mean(window)
        if target is not None and mean is not None and reaches(mean, target):
            return "mean_return"
        if stop.max_env_steps and self.env_steps >= stop.max_env_steps:
            return "max_env_steps"
        if stop.max_seconds and seconds >= stop.max_seconds:
            return "max_seconds"
        return ""

    def _count_rounds(self, said: dict[int, RoundCount]) -> None:
        assert self.unsettled is not None
        for actor_id, count in said.items():
            if actor_id in self.gone:
                continue
            had = self.unsettled.get(actor_id)
            had_count = None if had is None else RoundCount(had, self.since.get(actor_id, 0.0))
            self.unsettled[actor_id], self.since[actor_id] = newest_count(had_count, count)

    def add(self, stats: WorkStats, window: int, sizes: tuple[int, int] = (0, 0)) -> float | None:
        """Count one result of an actor, learner or worker; ``window``: the episodes of the
        mean (``TrainConfig.episode_window``); ``sizes``: the session's actors and envs per
        actor (0: not known). Returns :meth:`full_mean` after it."""
        self.actors, envs = sizes[0], sizes[0] * sizes[1]
        self.env_steps += stats.env_steps
        self.per_env_steps += stats.env_steps / envs if envs else 0.0
        self.episodes += len(stats.episode_returns)
        self.updates += stats.updates
        self.applied += stats.applied
        self.dropped += stats.dropped
        self.rejected += stats.rejected
        self.rejected_in_a_row = 0 if stats.applied else self.rejected_in_a_row + stats.rejected
        self.staleness_sum += sum(stats.staleness)
        self.actor_lag_sum += sum(stats.actor_lag)
        self.lagged_batches += len(stats.actor_lag)
        if stats.unsettled and self.unsettled is not None:
            self._count_rounds(stats.unsettled)
        keep = max(KEEP_RETURNS, window)
        self.recent_returns = (self.recent_returns + list(stats.episode_returns))[-keep:]
        mean = self.full_mean(window)
        if mean is not None:
            best = self.best_mean_return
            self.best_mean_return = mean if best is None else max(best, mean)
        return mean
