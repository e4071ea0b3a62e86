"""A checkpoint's network acting on a batch of observations, as an evaluation plays it
(``rltrain eval``, the training's evaluator, ``rltrain.load_policy``)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from rltrain.rl.algos.distributions import CATEGORICAL, Distribution


class Policy:
    """A checkpoint's network acting on a batch of observations: actor-critic runs sample
    from their policy, as they were trained; DQN runs (``greedy``: the network gives action
    values) act epsilon-greedily with ``epsilon`` (dqn.eval_epsilon)."""

    def __init__(
        self,
        model: torch.nn.Module,
        greedy: bool,
        dist: Distribution = CATEGORICAL,
        epsilon: float = 0.0,
    ) -> None:
        self.model = model.eval()
        self.greedy = greedy
        self.dist = dist
        self.epsilon = epsilon if greedy else 0.0

    def plays_greedy(self, deterministic: bool) -> bool:
        """Whether ``act(..., deterministic)`` plays the most likely actions."""
        return deterministic or (self.greedy and self.epsilon == 0)

    def act(self, obs: np.ndarray, gen: Draws, deterministic: bool = False) -> np.ndarray:
        """Actions for observations [B, *obs_shape]: int64 [B], or float32 [B, n] for a Box
        (unclipped: the env clips). ``deterministic``: the most likely action (the mean).
        ``gen``: one generator for the batch, or one per row: each env's draws its own, so that
        a game plays alike in any batch (an evaluation's filmed game is its env's game)."""
        with torch.no_grad():
            x = torch.from_numpy(np.asarray(obs))
            if self.greedy:
                q = self.model(x)  # [B, A]
                acts = q.argmax(1)
                if not deterministic and self.epsilon > 0:  # (Mnih et al. 2015's evaluation)
                    acts = torch.cat(
                        [self._explore(q[r], acts[r], g) for r, g in rows(gen, len(q))]
                    )
                return acts.numpy()
            params, _ = self.model(x)
            if deterministic:
                return self.dist.mode(params).numpy()
            draws = [self.dist.sample(params[r], g) for r, g in rows(gen, len(params))]
            return torch.cat(draws).numpy()

    def _explore(
        self, q: torch.Tensor, acts: torch.Tensor, gen: torch.Generator | None
    ) -> torch.Tensor:
        """``acts`` [B], each replaced by a uniform action with probability ``epsilon``."""
        explore = torch.rand(len(acts), generator=gen) < self.epsilon
        other = torch.randint(q.shape[1], (len(acts),), generator=gen)
        return torch.where(explore, other, acts)


Draws = torch.Generator | Sequence[torch.Generator] | None
"""A batch's random draws: one generator for every row, one per row, or torch's default."""


def rows(gen: Draws, n: int) -> list[tuple[slice, torch.Generator | None]]:
    """The batch's rows, each with its generator; or the whole batch, with ``gen``."""
    if isinstance(gen, Sequence):  # (one each: a row left out would act for no env)
        return [(slice(i, i + 1), g) for i, g in zip(range(n), gen, strict=True)]
    return [(slice(0, n), gen)]


def how_played(q_values: bool, greedy: bool, epsilon: float) -> str:
    """How an evaluation chose its actions, in `rltrain eval`'s words (``q_values``: a dqn
    run; ``greedy``: the most likely actions; ``epsilon``: dqn.eval_epsilon)."""
    if q_values:
        return "greedy actions" if greedy else f"epsilon-greedy actions, epsilon {epsilon}"
    return "most likely actions" if greedy else "sampled actions, as in training"
