"""A user's own environments, registered on import (what `env.imports` names in the tests).

``rltrain_test/Corridor-v0``: walk right along a corridor of ``length`` cells; each step costs
-0.1 and reaching the end pays +1 and ends the episode. Optimal return 1 - 0.1 (length - 2).
"""

from __future__ import annotations

import gymnasium
import numpy as np
from gymnasium import spaces

CORRIDOR_ID = "rltrain_test/Corridor-v0"
DICT_ID = "rltrain_test/DictObs-v0"


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


class DictObs(Corridor):
    def __init__(self) -> None:
        super().__init__()
        self.observation_space = spaces.Dict({"pos": spaces.Box(0.0, 1.0, (5,), np.float32)})

    def _obs(self):  # noqa: ANN202
        return {"pos": super()._obs()}


class MultiDiscreteActions(Corridor):
    def __init__(self) -> None:
        super().__init__()
        self.action_space = spaces.MultiDiscrete([2, 2])


class DoubleReward(gymnasium.RewardWrapper):
    def reward(self, reward: float) -> float:
        return 2 * reward


class AddOneReward(gymnasium.RewardWrapper):
    def reward(self, reward: float) -> float:
        return reward + 1


gymnasium.register(CORRIDOR_ID, entry_point=Corridor, max_episode_steps=50)
gymnasium.register(DICT_ID, entry_point=DictObs, max_episode_steps=50)
gymnasium.register("rltrain_test/MultiDiscrete-v0", entry_point=MultiDiscreteActions)
