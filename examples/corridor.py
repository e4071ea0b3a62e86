"""A user's own environment, registered on import: what `imports: [examples.corridor]`
names in the README's "Your own environment" example.

``examples/Corridor-v0``: walk right along a corridor of ``length`` cells (a one-hot position);
each step costs -0.1 and reaching the end pays +1 and ends the episode, so the best return
is 1 - 0.1 (length - 2).
"""

from __future__ import annotations

import gymnasium
import numpy as np
from gymnasium import spaces

CORRIDOR_ID = "examples/Corridor-v0"


class Corridor(gymnasium.Env):
    def __init__(self, length: int = 5) -> None:
        self.length = length
        self.observation_space = spaces.Box(0.0, 1.0, (length,), np.float32)
        self.action_space = spaces.Discrete(2)  # 0: left, 1: right
        self.pos = 0

    def _obs(self) -> np.ndarray:
        obs = np.zeros(self.length, np.float32)
        obs[self.pos] = 1.0
        return obs

    def reset(self, *, seed: int | None = None, options: dict | None = None):  # noqa: ANN201
        super().reset(seed=seed)
        self.pos = 0
        return self._obs(), {}

    def step(self, action: int):  # noqa: ANN201
        self.pos = max(0, min(self.length - 1, self.pos + (1 if action == 1 else -1)))
        done = self.pos == self.length - 1
        return self._obs(), 1.0 if done else -0.1, done, False, {}


class ScaleReward(gymnasium.RewardWrapper):
    """Rewards times 10 (a wrapper named in env.wrappers as examples.corridor:ScaleReward)."""

    def reward(self, reward: float) -> float:
        return 10 * reward


gymnasium.register(CORRIDOR_ID, entry_point=Corridor, max_episode_steps=50)
