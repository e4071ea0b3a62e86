"""``rltrain/Chain-v0``: a tiny, fast, deterministic corridor for tests and learning checks.

The agent stands on one of ``length`` cells and moves left (action 0) or right (action 1);
reaching the last cell gives reward 1 and ends the episode, every other step gives 0, and the
episode is truncated after ``max_steps`` steps. The start cell is drawn from the first half of
the corridor by the env's seeded generator, so a seed fixes the whole trajectory for given
actions. The observation is the one-hot position (float32 [length]), which a tiny MLP maps to
"go right" within a few hundred updates, while a uniformly random policy reaches the goal only
part of the time (it does a random walk), so learning is visible in the returns.
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

CHAIN_ID = "rltrain/Chain-v0"
CHAIN_LENGTH = 8
CHAIN_MAX_STEPS = 32


class ChainEnv(gymnasium.Env[np.ndarray, np.int64]):
    """A corridor of ``length`` cells; reward 1 for reaching the right end."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, length: int = CHAIN_LENGTH) -> None:
        if length < 2:
            raise ValueError(f"length={length}: a chain needs at least 2 cells")
        self.length = length
        self.observation_space = spaces.Box(0.0, 1.0, shape=(length,), dtype=np.float32)
        self.action_space = spaces.Discrete(2)
        self._pos = 0

    def _obs(self) -> np.ndarray:
        obs = np.zeros(self.length, dtype=np.float32)
        obs[self._pos] = 1.0
        return obs

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Start on a random cell of the first half (seeded by ``seed``)."""
        super().reset(seed=seed)
        self._pos = int(self.np_random.integers(0, max(1, self.length // 2)))
        return self._obs(), {}

    def step(self, action: np.int64) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Move one cell (0: left, 1: right); reward 1 and terminated at the right end."""
        move = 1 if int(action) == 1 else -1
        self._pos = min(max(self._pos + move, 0), self.length - 1)
        at_goal = self._pos == self.length - 1
        return self._obs(), float(at_goal), at_goal, False, {}


def register_chain() -> None:
    """Register ``rltrain/Chain-v0`` with gymnasium (idempotent)."""
    if CHAIN_ID not in gymnasium.registry:
        gymnasium.register(
            id=CHAIN_ID,
            entry_point="rltrain.envs.toy:ChainEnv",
            max_episode_steps=CHAIN_MAX_STEPS,
            kwargs={"length": CHAIN_LENGTH},
        )
