"""A user's own environments, registered on import (what `imports` names in the tests):
the README's corridor again (``rltrain_test/Corridor-v0``), envs rltrain must refuse, and
envs that fail during a run (tests/test_env_errors.py)."""

from __future__ import annotations

import time

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


class PickEach(gymnasium.Env):
    """A cue c of 3, one-hot; the action picks each sub-action, rewarded 1 for each equal to
    the cue's target: MultiDiscrete([3, 4], start=[-1, 0]) or MultiBinary(4). 20 steps, so the
    best return is 20 x the sub-actions. The env checks each action is in its space."""

    def __init__(self, binary: bool = False) -> None:
        self.observation_space = spaces.Box(0.0, 1.0, (3,), np.float32)
        if binary:
            self.action_space: spaces.Space = spaces.MultiBinary(4)
            self.targets = np.array([[1, 0, 1, 0], [0, 1, 1, 0], [1, 1, 0, 1]])
        else:
            self.action_space = spaces.MultiDiscrete([3, 4], start=[-1, 0])
            self.targets = np.array([[-1, 3], [0, 0], [1, 2]])
        self.t, self.cue = 0, 0

    def _obs(self) -> np.ndarray:
        return np.eye(3, dtype=np.float32)[self.cue]

    def reset(self, *, seed: int | None = None, options: dict | None = None):  # type: ignore[override]
        super().reset(seed=seed)
        self.t, self.cue = 0, int(self.np_random.integers(3))
        return self._obs(), {}

    def step(self, action: np.ndarray):  # type: ignore[override]
        a = np.asarray(action)
        if not self.action_space.contains(a.astype(self.action_space.dtype)):
            raise ValueError(f"action {a!r} is not in {self.action_space}")
        reward = float((a == self.targets[self.cue]).sum())
        self.t, self.cue = self.t + 1, int(self.np_random.integers(3))
        return self._obs(), reward, False, self.t >= 20, {}


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


class StepRaises(Corridor):
    """Its fourth step raises (a bug in the user's step)."""

    def step(self, action: int):  # noqa: ANN201
        self.steps = getattr(self, "steps", 0) + 1
        if self.steps > 3:
            raise RuntimeError("boom in step")
        return super().step(action)


class ArrayReward(Corridor):
    """Its reward is an array of one number, not a number."""

    def step(self, action: int):  # noqa: ANN201
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, np.array([reward]), terminated, truncated, info


class FourValues(Corridor):
    """Steps as the old gym API did: (obs, reward, done, info)."""

    def step(self, action: int):  # noqa: ANN201
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward, terminated or truncated, info


class WrongResetShape(Corridor):
    """reset() returns 7 numbers where its observation_space says 5."""

    def reset(self, *, seed: int | None = None, options: dict | None = None):  # noqa: ANN201
        super().reset(seed=seed)
        return np.zeros(7, np.float32), {}


class WrongStepShape(Corridor):
    def step(self, action: int):  # noqa: ANN201
        _, *rest = super().step(action)
        return (np.zeros(7, np.float32), *rest)


class WrongImageStep(ImageCorridor):
    """Its steps' images one column wider than its observation_space: rltrain's frame stack
    would fail on them in gymnasium's terms (explore108 #8)."""

    def step(self, action: int):  # noqa: ANN201
        obs, *rest = super().step(action)
        return (np.concatenate([obs, obs[:, :1]], axis=1), *rest)


class WrongImageReset(ImageCorridor):
    """Its first image one column wider than its observation_space (the second env's reset
    had not run when the first failed: review88b)."""

    def reset(self, *, seed: int | None = None, options: dict | None = None):  # noqa: ANN201
        obs, info = super().reset(seed=seed)
        return np.concatenate([obs, obs[:, :1]], axis=1), info


class WrongDictStep(DictObs):
    """Its steps' 'pos' has 7 numbers where its Dict says 5 (flattened: a vector of 7)."""

    def step(self, action: int):  # noqa: ANN201
        _, *rest = super().step(action)
        return ({"pos": np.zeros(7, np.float32)}, *rest)


class LooseDictRaises(Corridor):
    """A Dict whose Box(1,) part comes back as a plain number (flattened all the same: it
    trains), and whose fourth step raises: the raise is its error, not the loose shape."""

    def __init__(self) -> None:
        super().__init__()
        self.observation_space = spaces.Dict({"pos": spaces.Box(0.0, 9.0, (1,), np.float32)})

    def _obs(self):  # noqa: ANN202
        return {"pos": float(self.pos)}

    def step(self, action: int):  # noqa: ANN201
        self.steps = getattr(self, "steps", 0) + 1
        if self.steps > 3:
            raise RuntimeError("boom in a loose step")
        return super().step(action)


class NaNStep(Corridor):
    """Observations NaN from the third step on."""

    def step(self, action: int):  # noqa: ANN201
        obs, *rest = super().step(action)
        self.steps = getattr(self, "steps", 0) + 1
        if self.steps >= 3:
            obs[0] = np.nan
        return (obs, *rest)


class NaNReward(Corridor):
    """Rewards NaN from the third step on (observations fine)."""

    def step(self, action: int):  # noqa: ANN201
        obs, _, *rest = super().step(action)
        self.steps = getattr(self, "steps", 0) + 1
        return (obs, np.nan if self.steps >= 3 else 0.0, *rest)


class ResetRaisesInActors(Corridor):
    """reset() raises for the actors' seeds (1000 and up), not for the probe's: the run's
    probe passes, its actors fail as they start."""

    def reset(self, *, seed: int | None = None, options: dict | None = None):  # noqa: ANN201
        if seed is not None and seed >= 1000:
            raise OSError("no simulator for this seed")
        return super().reset(seed=seed, options=options)


class InitRaises(Corridor):
    """Its constructor raises (a simulator this process cannot start)."""

    def __init__(self) -> None:
        raise OSError("no display in this process")


class ResetRaisesLater(Corridor):
    """Its second reset raises: inside step(), as gymnasium's vector resets an ended episode."""

    def reset(self, *, seed: int | None = None, options: dict | None = None):  # noqa: ANN201
        self.resets = getattr(self, "resets", 0) + 1
        if self.resets > 1:
            raise RuntimeError("boom in reset")
        return super().reset(seed=seed, options=options)


class ResetObsOnly(Corridor):
    """reset() returns the observation alone (gym's old API), not (obs, info)."""

    def reset(self, *, seed: int | None = None, options: dict | None = None):  # noqa: ANN201
        return super().reset(seed=seed, options=options)[0]


class Drawn(Corridor):
    """A corridor that draws itself (a 4 x 6 RGB frame): rltrain.make_env's render_mode."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 4}

    def __init__(self, render_mode: str | None = None) -> None:
        super().__init__()
        self.render_mode = render_mode

    def render(self):  # noqa: ANN201
        return np.zeros((4, 6, 3), np.uint8)


class StepHangs(Corridor):
    """step() never returns on an actor's 40th step (a simulator stuck in a syscall, a
    deadlock), and again in the actor that replaces it: tests/test_hangs.py."""

    def reset(self, *, seed: int | None = None, options: dict | None = None):  # noqa: ANN201
        if seed is not None:
            self.actor = seed >= 1000  # (the run's probe steps too: it must pass)
        return super().reset(seed=seed, options=options)

    def step(self, action: int):  # noqa: ANN201
        self.steps = getattr(self, "steps", 0) + 1
        if self.steps == 40 and getattr(self, "actor", False):
            time.sleep(3600)
        return super().step(action)


class DoubleReward(gymnasium.RewardWrapper):
    def reward(self, reward: float) -> float:
        return 2 * reward


class AddOneReward(gymnasium.RewardWrapper):
    def reward(self, reward: float) -> float:
        return reward + 1


class HugeReward(gymnasium.RewardWrapper):
    """Every reward 3e38, finite (a NaN one is refused by the env's check): without
    normalize.reward the advantages overflow float32, every gradient is non-finite, and the
    server refuses every update."""

    def reward(self, reward: float) -> float:
        return 3e38


class AsymmetricBox(gymnasium.Env):
    """One-step episodes: actions in Box([0, -5], [1, 10]), the reward highest (0) at the
    interior point OPTIMUM, falling quadratically with the distance measured in each
    dimension's width. A policy must reach [0.3, 7] from its start near the Box's middle
    (affine, tanh) or near 0 (clip, which never leaves [0, 1] in the second dimension)."""

    OPTIMUM = np.array([0.3, 7.0], np.float32)
    WIDTH = np.array([1.0, 15.0], np.float32)

    def __init__(self, high: float = 10.0) -> None:  # (high: another Box, for a resume)
        self.observation_space = spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.action_space = spaces.Box(
            np.array([0.0, -5.0], np.float32), np.array([1.0, high], np.float32)
        )

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple:
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action: np.ndarray) -> tuple:
        gap = (np.asarray(action, np.float32) - self.OPTIMUM) / self.WIDTH
        return np.zeros(1, np.float32), -10.0 * float(np.sum(gap**2)), True, False, {}


class HugeBox(gymnasium.Env):
    """A float64 Box of +-1e300 whose last action is kept (``HugeBox.last``): an action near
    float64's range must reach it as sent (float32 made 1.2e298 inf: explore97)."""

    last: np.ndarray | None = None

    def __init__(self) -> None:
        self.observation_space = spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.action_space = spaces.Box(-1e300, 1e300, (1,), np.float64)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple:
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action: np.ndarray) -> tuple:
        HugeBox.last = np.array(action, np.float64)
        return np.zeros(1, np.float32), 0.0, False, False, {}


class ScalarObs(gymnasium.Env):
    """Observations in a Box of shape () (one float, not a vector of one): the sign of the
    last action's choice; reward 1 for action 1."""

    observation_space = spaces.Box(-1.0, 1.0, (), np.float32)
    action_space = spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple:
        super().reset(seed=seed)
        return np.array(0.0, np.float32), {}

    def step(self, action: int) -> tuple:
        return np.array(action - 0.5, np.float32), float(action), False, False, {}


class TypedObs(gymnasium.Env):
    """Observations of any dtype (kwarg ``dtype``), 0..100; reward 1 for action 1."""

    action_space = spaces.Discrete(2)

    def __init__(self, dtype: str = "uint16") -> None:
        self.observation_space = spaces.Box(0, 100, (2,), np.dtype(dtype))

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple:
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action: int) -> tuple:
        return self.observation_space.sample(), float(action), False, False, {}


class Closed(Corridor):
    """A corridor whose close() leaves a file in ``folder`` (a user's env that flushes a log
    or frees a simulator there)."""

    def __init__(self, folder: str = "") -> None:
        super().__init__()
        self.folder = folder

    def close(self) -> None:
        import os
        from pathlib import Path

        (Path(self.folder) / f"closed-{os.getpid()}-{id(self)}").touch()


gymnasium.register("rltrain_test/ScalarObs-v0", entry_point=ScalarObs, max_episode_steps=10)
gymnasium.register("rltrain_test/Closed-v0", entry_point=Closed, max_episode_steps=20)
gymnasium.register("rltrain_test/TypedObs-v0", entry_point=TypedObs, max_episode_steps=10)
ASYMMETRIC_ID = "rltrain_test/AsymmetricBox-v0"
gymnasium.register(ASYMMETRIC_ID, entry_point=AsymmetricBox)
HUGE_ID = "rltrain_test/HugeBox-v0"
gymnasium.register(HUGE_ID, entry_point=HugeBox, max_episode_steps=10)
gymnasium.register(CORRIDOR_ID, entry_point=Corridor, max_episode_steps=50)


class RenderRaises(Corridor):
    """Declares rgb_array but fails to draw, as MuJoCo's envs on a machine without OpenGL
    (``mujoco.FatalError``, not a gymnasium error)."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 4}

    def __init__(self, render_mode: str | None = None) -> None:
        super().__init__()
        self.render_mode = render_mode

    def render(self):  # noqa: ANN201
        raise RuntimeError("an OpenGL platform library has not been loaded")


gymnasium.register("rltrain_test/RenderRaises-v0", entry_point=RenderRaises, max_episode_steps=20)
gymnasium.register("rltrain_test/Drawn-v0", entry_point=Drawn, max_episode_steps=20)
gymnasium.register(DICT_ID, entry_point=DictObs, max_episode_steps=50)
gymnasium.register(TEXT_ID, entry_point=TextObs, max_episode_steps=50)
gymnasium.register(IMAGE_ID, entry_point=ImageCorridor, max_episode_steps=20)
gymnasium.register("rltrain_test/MultiDiscrete-v0", entry_point=PickEach)
gymnasium.register("rltrain_test/InitRaises-v0", entry_point=InitRaises)
gymnasium.register(
    "rltrain_test/ResetRaisesLater-v0", entry_point=ResetRaisesLater, max_episode_steps=3
)
gymnasium.register("rltrain_test/MultiBinary-v0", entry_point=PickEach, kwargs={"binary": True})
for failing in (
    ArrayReward,
    FourValues,
    StepRaises,
    WrongResetShape,
    WrongStepShape,
    WrongImageStep,
    WrongImageReset,
    WrongDictStep,
    LooseDictRaises,
    NaNStep,
    NaNReward,
    ResetRaisesInActors,
    ResetObsOnly,
    StepHangs,
):
    gymnasium.register(
        f"rltrain_test/{failing.__name__}-v0", entry_point=failing, max_episode_steps=50
    )
