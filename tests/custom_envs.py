"""A user's own environments, registered on import (what `env.imports` names in the tests):
the README's corridor again (``rltrain_test/Corridor-v0``), and envs rltrain must refuse."""

from __future__ import annotations

import gymnasium
import numpy as np
from gymnasium import spaces

from examples.corridor import Corridor

CORRIDOR_ID = "rltrain_test/Corridor-v0"
DICT_ID = "rltrain_test/DictObs-v0"
TEXT_ID = "rltrain_test/TextObs-v0"
IMAGE_ID = "rltrain_test/ImageCorridor-v0"


class DictObs(Corridor):
    def __init__(self) -> None:
        super().__init__()
        self.observation_space = spaces.Dict({"pos": spaces.Box(0.0, 1.0, (5,), np.float32)})

    def _obs(self):  # noqa: ANN202
        return {"pos": super()._obs()}


class TextObs(Corridor):
    """Observations gymnasium cannot flatten into one array."""

    def __init__(self) -> None:
        super().__init__()
        self.observation_space = spaces.Text(8)

    def _obs(self):  # noqa: ANN202
        return "corridor"


class MultiDiscreteActions(Corridor):
    def __init__(self) -> None:
        super().__init__()
        self.action_space = spaces.MultiDiscrete([2, 2])


class ImageCorridor(Corridor):
    """The corridor seen as an RGB image [H, W, 3] (gymnasium's layout, as CarRacing's): the
    walker is a bright column, one ``width // length`` pixels wide per cell."""

    def __init__(self, length: int = 4, height: int = 40, width: int = 48) -> None:
        super().__init__(length)
        self.height, self.width = height, width
        self.observation_space = spaces.Box(0, 255, (height, width, 3), np.uint8)

    def _obs(self):  # noqa: ANN202
        img = np.zeros((self.height, self.width, 3), np.uint8)
        cell = self.width // self.length
        img[:, self.pos * cell : (self.pos + 1) * cell] = (255, 128, 0)
        return img


class DoubleReward(gymnasium.RewardWrapper):
    def reward(self, reward: float) -> float:
        return 2 * reward


class AddOneReward(gymnasium.RewardWrapper):
    def reward(self, reward: float) -> float:
        return reward + 1


class NaNReward(gymnasium.RewardWrapper):
    """Every reward NaN: every gradient is non-finite, and the server refuses every update."""

    def reward(self, reward: float) -> float:
        return float("nan")


gymnasium.register(CORRIDOR_ID, entry_point=Corridor, max_episode_steps=50)
gymnasium.register(DICT_ID, entry_point=DictObs, max_episode_steps=50)
gymnasium.register(TEXT_ID, entry_point=TextObs, max_episode_steps=50)
gymnasium.register(IMAGE_ID, entry_point=ImageCorridor, max_episode_steps=20)
gymnasium.register("rltrain_test/MultiDiscrete-v0", entry_point=MultiDiscreteActions)
