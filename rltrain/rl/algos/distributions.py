"""Action distributions of the actor-critic, as pure tensor functions of the policy head's
output (its *parameters*) for the losses, the learners and the actors.

* :class:`Categorical` for Discrete(n): parameters are the n logits.
* :class:`MultiCategorical` for MultiDiscrete(nvec) and MultiBinary: a Categorical per
  sub-action, their logits side by side.
* :class:`DiagGaussian` for a Box of n reals: parameters are the n means and n log standard
  deviations, [..., 2n] (the log-std is state-independent, as CleanRL's and SB3's PPO for
  continuous control; :class:`~rltrain.rl.algos.models.ActorCritic` broadcasts it). A sample
  reaches the env mapped into the Box (``env.action_map``: affine, tanh or clip); the
  log-probabilities, V-trace ratios and the PPO ratio are those of the sample, which is what
  the policy drew (with tanh, :class:`TanhDiagGaussian` adds the change of variables).

Shapes: parameters [..., P], actions [...] (int64), [..., D] (int64, MultiDiscrete) or
[..., n] (float32); log_prob, entropy and kl return [...].
"""

from __future__ import annotations

import math
from typing import Protocol

import numpy as np
import torch
import torch.nn.functional as F

from rltrain.envs import ActionSpace

LOG_2PI_E = math.log(2 * math.pi * math.e)


class Distribution(Protocol):
    def log_prob(self, params: torch.Tensor, actions: torch.Tensor) -> torch.Tensor: ...
    def entropy(self, params: torch.Tensor) -> torch.Tensor: ...
    def kl(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor: ...
    def sample(self, params: torch.Tensor, gen: torch.Generator | None) -> torch.Tensor: ...
    def mode(self, params: torch.Tensor) -> torch.Tensor: ...


class Categorical:
    def log_prob(self, params: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        return F.log_softmax(params, -1).gather(-1, actions.unsqueeze(-1)).squeeze(-1)

    def entropy(self, params: torch.Tensor) -> torch.Tensor:
        logp = F.log_softmax(params, -1)
        return -(logp.exp() * logp).sum(-1)

    def kl(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        """KL(p || q) of two logit tensors."""
        lp, lq = F.log_softmax(p, -1), F.log_softmax(q, -1)
        return (lp.exp() * (lp - lq)).sum(-1)

    def sample(self, params: torch.Tensor, gen: torch.Generator | None) -> torch.Tensor:
        """The Gumbel-max trick: argmax(logits + G), G = -log(E) with E ~ Exp(1), is a draw
        from softmax(logits) (Gumbel 1954; Maddison et al. 2014). Three element-wise ops and an
        argmax, cheaper than softmax + multinomial on an actor's few rows."""
        e = torch.empty_like(params, dtype=torch.float32).exponential_(generator=gen)
        return (params - e.log()).argmax(-1)

    def mode(self, params: torch.Tensor) -> torch.Tensor:
        return params.argmax(-1)


class MultiCategorical:
    """A categorical per sub-action of a MultiDiscrete (MultiBinary: each of 2), independent
    given the state, as SB3's and RLlib's: parameters [..., sum(nvec)] are the sub-actions'
    logits side by side, actions [..., D] int64; log-probabilities, entropies and KLs add up
    over the sub-actions (the joint of independent parts)."""

    def __init__(self, nvec: tuple[int, ...]) -> None:
        self.nvec = list(nvec)

    def _split(self, params: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return torch.split(params, self.nvec, dim=-1)

    def log_prob(self, params: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        parts = self._split(params)
        return sum(  # type: ignore[return-value]
            CATEGORICAL.log_prob(p, actions[..., d]) for d, p in enumerate(parts)
        )

    def entropy(self, params: torch.Tensor) -> torch.Tensor:
        return sum(CATEGORICAL.entropy(p) for p in self._split(params))  # type: ignore[return-value]

    def kl(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        pairs = zip(self._split(p), self._split(q), strict=True)
        return sum(CATEGORICAL.kl(a, b) for a, b in pairs)  # type: ignore[return-value]

    def sample(self, params: torch.Tensor, gen: torch.Generator | None) -> torch.Tensor:
        return torch.stack([CATEGORICAL.sample(p, gen) for p in self._split(params)], -1)

    def mode(self, params: torch.Tensor) -> torch.Tensor:
        return torch.stack([p.argmax(-1) for p in self._split(params)], -1)


class DiagGaussian:
    @staticmethod
    def split(params: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # mean, log_std
        n = params.shape[-1] // 2
        return params[..., :n], params[..., n:]

    def log_prob(self, params: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        mean, log_std = self.split(params)
        z = (actions - mean) * torch.exp(-log_std)
        return (-0.5 * z.pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)

    def entropy(self, params: torch.Tensor) -> torch.Tensor:
        _, log_std = self.split(params)
        return (log_std + 0.5 * LOG_2PI_E).sum(-1)

    def kl(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        """KL(p || q) = sum log(sq/sp) + (sp^2 + (mp - mq)^2) / (2 sq^2) - 1/2."""
        mp, lp = self.split(p)
        mq, lq = self.split(q)
        ratio = torch.exp(2 * (lp - lq))
        return (lq - lp + 0.5 * (ratio + (mp - mq).pow(2) * torch.exp(-2 * lq)) - 0.5).sum(-1)

    def sample(self, params: torch.Tensor, gen: torch.Generator | None) -> torch.Tensor:
        mean, log_std = self.split(params)
        noise = torch.randn(mean.shape, generator=gen, dtype=mean.dtype, device=mean.device)
        return mean + torch.exp(log_std) * noise

    def mode(self, params: torch.Tensor) -> torch.Tensor:
        return self.split(params)[0]


class TanhDiagGaussian(DiagGaussian):
    """A :class:`DiagGaussian` whose sample u reaches the env as low + (tanh(u) + 1) (high -
    low) / 2 on the Box's bounded dimensions (``env.action_map: tanh``). ``log_prob`` is the
    density of that env action: the Gaussian's minus log |da/du| = log(1 - tanh(u)^2) +
    log((high - low) / 2) on those dimensions (the change of variables of SAC, Haarnoja et
    al. 2018, eq. 21). The term depends on u alone, so it cancels in every ratio of two
    policies at one sample (PPO's, V-trace's); an invertible map keeps the KL of two
    policies, so ``kl`` is their Gaussians'; the entropy bonus stays the Gaussian's."""

    def __init__(self, space: ActionSpace) -> None:
        low, high = np.asarray(space.low, np.float64), np.asarray(space.high, np.float64)
        half = np.where(space.bounded(), 0.5 * high - 0.5 * low, 1.0)  # (no overflow at 1e308)
        # a dimension of width 0 ([1, 1]) reaches the env as its one value whatever u is: its
        # terms, log 0 and constant in u, would make every ratio NaN (explore97); left out,
        # they cancel in each ratio as the others do
        bounded = space.bounded() & (half > 0)
        half = np.where(bounded, half, 1.0)
        self.bounded = torch.tensor(bounded, dtype=torch.float32)  # [n] 1: bounded
        self.log_half = torch.tensor(np.log(half), dtype=torch.float32) * self.bounded

    def log_prob(self, params: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        # log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)), finite for any u
        squash = 2 * (math.log(2.0) - actions - F.softplus(-2 * actions))  # [..., n]
        bounded, log_half = self.bounded.to(actions), self.log_half.to(actions)
        return super().log_prob(params, actions) - (squash * bounded + log_half).sum(-1)


CATEGORICAL = Categorical()
DIAG_GAUSSIAN = DiagGaussian()


def distribution(actions: ActionSpace | int) -> Distribution:
    """The distribution of an action space (an int n: Discrete(n))."""
    if isinstance(actions, ActionSpace) and actions.multi:
        return MultiCategorical(actions.nvec)
    if not (isinstance(actions, ActionSpace) and actions.continuous):
        return CATEGORICAL
    return TanhDiagGaussian(actions) if actions.mapping == "tanh" else DIAG_GAUSSIAN
