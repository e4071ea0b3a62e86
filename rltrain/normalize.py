"""Observation normalisation and reward scaling that work when distributed.

Every actor counts the moments (count, mean, sum of squared deviations) of what it saw since its
last report; the deltas travel with rollouts and updates to the parameter server, which merges
them into the one global statistic with the parallel algorithm of Chan, Golub and LeVeque
(1979). Pulls hand the merged statistic back with the parameters, so the normaliser is
versioned with them, checkpointed with them and used by ``rltrain eval``. This is what RLlib's
MeanStdFilter sync and SB3's VecNormalize do, in one process or many.

* Observations: ``clip((x - mean) / sqrt(var + eps), -clip, clip)``, inside the network
  (:class:`rltrain.rl.algos.models.ActorCritic`), so a rollout stores raw observations.
* Rewards: divided by the standard deviation of the discounted return (no mean subtracted),
  as VecNormalize does; episode returns stay raw.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

EPS = 1e-8


@dataclass(frozen=True)
class Moments:
    """Count, mean and sum of squared deviations (M2) of a stream of arrays of one shape."""

    count: float
    mean: torch.Tensor  # [*shape] float64
    m2: torch.Tensor  # [*shape] float64

    @staticmethod
    def empty(shape: tuple[int, ...]) -> Moments:
        return Moments(
            0.0, torch.zeros(shape, dtype=torch.float64), torch.zeros(shape, dtype=torch.float64)
        )

    @staticmethod
    def of(x: torch.Tensor | np.ndarray) -> Moments:
        """The moments of a batch ``x`` [N, *shape]."""
        x = torch.as_tensor(np.asarray(x), dtype=torch.float64)
        n = x.shape[0]
        if n == 0:
            return Moments.empty(tuple(x.shape[1:]))
        mean = x.mean(0)
        return Moments(float(n), mean, ((x - mean) ** 2).sum(0))

    @property
    def var(self) -> torch.Tensor:  # [*shape], the population variance (1 where count is 0)
        return self.m2 / self.count if self.count > 0 else torch.ones_like(self.m2)

    def merge(self, other: Moments) -> Moments:
        """The moments of both streams together (Chan et al. 1979, the pairwise update)."""
        if other.count == 0:
            return self
        if self.count == 0:
            return other
        n = self.count + other.count
        delta = other.mean - self.mean
        mean = self.mean + delta * (other.count / n)
        m2 = self.m2 + other.m2 + delta**2 * (self.count * other.count / n)
        return Moments(n, mean, m2)

    def is_finite(self) -> bool:
        return bool(torch.isfinite(self.mean).all() and torch.isfinite(self.m2).all())

    def state(self) -> dict[str, torch.Tensor]:
        """Plain tensors, for checkpoints loaded with ``weights_only=True``."""
        return {
            "count": torch.tensor(self.count, dtype=torch.float64),
            "mean": self.mean,
            "m2": self.m2,
        }

    @staticmethod
    def from_state(state: dict[str, torch.Tensor]) -> Moments:
        return Moments(float(state["count"]), state["mean"].double(), state["m2"].double())


@dataclass(frozen=True)
class NormStats:
    """What the normaliser knows: moments of observations and of discounted returns (either may
    be absent when that part is off). Travels as a delta (rollouts, updates) or as the merged
    whole (pulls, checkpoints)."""

    obs: Moments | None = None
    ret: Moments | None = None  # shape (): the discounted return, for reward scaling

    def merge(self, other: NormStats | None) -> NormStats:
        if other is None:
            return self
        return NormStats(_merge(self.obs, other.obs), _merge(self.ret, other.ret))

    def is_finite(self) -> bool:
        return all(m is None or m.is_finite() for m in (self.obs, self.ret))

    def reward_scale(self) -> float | None:
        """1 / std of the discounted return; None before two returns are known (an actor
        then scales by the returns it has seen itself: :class:`RewardScaler`)."""
        return None if self.ret is None else return_scale(self.ret)

    def state(self) -> dict[str, dict[str, torch.Tensor]]:
        return {k: m.state() for k, m in (("obs", self.obs), ("ret", self.ret)) if m is not None}

    @staticmethod
    def from_state(state: dict[str, dict[str, torch.Tensor]]) -> NormStats:
        def get(k: str) -> Moments | None:
            return Moments.from_state(state[k]) if k in state else None

        return NormStats(get("obs"), get("ret"))


def _merge(a: Moments | None, b: Moments | None) -> Moments | None:
    if a is None:
        return b
    if b is None:
        return a
    return a.merge(b)


def merge_all(parts: list[NormStats | None]) -> NormStats | None:
    """The merge of several deltas (a learner's batch of rollouts); None if all are None."""
    out: NormStats | None = None
    for p in parts:
        if p is not None:
            out = p if out is None else out.merge(p)
    return out


def return_scale(ret: Moments) -> float | None:
    """1 / std of the discounted return from its moments; None before two are known."""
    if ret.count < 2:
        return None
    return float(1.0 / torch.sqrt(ret.var + EPS))


class RewardScaler:
    """Per-env discounted return R <- gamma R + r, whose variance scales the rewards.

    The actor divides each reward by the global return std (from its last pull) and clips the
    result to [-clip, clip] (VecNormalize's ``clip_reward``); it reports the moments of its own
    R values so the server can merge them. Until the server knows two (the run's first
    rollouts), it divides by the std of the returns this scaler (one env group's) has seen so
    far, this step's included, as VecNormalize and Gymnasium's NormalizeReward do from their
    first step: the first rollouts' rewards were otherwise unscaled, and the first update's
    value loss thousands of times the next ones' on Pendulum (explore92).
    """

    def __init__(self, num_envs: int, gamma: float, clip: float) -> None:
        self.gamma = gamma
        self.clip = clip
        self.returns = np.zeros(num_envs, dtype=np.float64)
        self.own = Moments.empty(())  # the returns seen while the server knew none

    def __call__(
        self, reward: np.ndarray, ended: np.ndarray, scale: float | None
    ) -> tuple[np.ndarray, Moments]:
        """Scaled rewards [B] and the moments of this step's discounted returns; ``scale``:
        the server's (None: none yet, and this scaler's own is used)."""
        self.returns = self.returns * self.gamma + reward
        seen = Moments.of(self.returns[:, None])
        seen = Moments(seen.count, seen.mean[0], seen.m2[0])
        self.returns[ended] = 0.0
        if scale is None:
            self.own = self.own.merge(seen)
            own = return_scale(self.own)
            scale = 1.0 if own is None else own  # (one return seen: no std yet)
        scaled = np.clip(reward * scale, -self.clip, self.clip).astype(np.float32)
        return scaled, seen
