"""Users' own environments: imports, env.kwargs, env.wrappers and their one-line errors."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from rltrain.envs import EnvConfig, EnvError, make_env

CORRIDOR = "rltrain_test/Corridor-v0"
IMAGE = "rltrain_test/ImageCorridor-v0"


def corridor(**kw: object) -> EnvConfig:
    return EnvConfig(id=CORRIDOR, num_envs=2, imports=("custom_envs",), **kw)  # type: ignore[arg-type]


def train_short(run: Path, *sets: str, steps: int = 600) -> None:
    """A short cartpole_appo.yaml run of a custom_envs env (``sets``: its --set items)."""
    from rltrain.cli import main

    config = Path(__file__).resolve().parents[1] / "configs" / "cartpole_appo.yaml"
    argv = ["train", str(config), "--run-dir", str(run), "--set", "imports=[custom_envs]"]
    for kv in (*sets, "stop.mean_return=null", f"stop.max_env_steps={steps}"):
        argv += ["--set", kv]
    assert main(argv) == 0


def test_imports_register_the_env_and_kwargs_reach_make() -> None:
    env = make_env(corridor(kwargs={"length": 7}), seed=0)
    assert env.obs_shape == (7,) and env.num_actions == 2
    env.reset()
    env.close()


def test_wrappers_apply_in_order() -> None:
    def first_reward(wrappers: tuple[str, ...]) -> float:
        env = make_env(corridor(wrappers=wrappers), seed=0)
        env.reset()
        reward = float(env.step(np.array([1, 1])).reward[0])
        env.close()
        return reward

    assert first_reward(()) == pytest.approx(-0.1)
    double, add = "custom_envs:DoubleReward", "custom_envs:AddOneReward"
    assert first_reward((double, add)) == pytest.approx(0.8)  # (-0.1 * 2) + 1
    assert first_reward((add, double)) == pytest.approx(1.8)  # (-0.1 + 1) * 2


def test_wrappers_take_keyword_arguments() -> None:
    """module:Class(name=value, ...): Python literals, passed as Class(env, name=value)."""
    limit = "gymnasium.wrappers:TimeLimit(max_episode_steps=3)"
    env = make_env(EnvConfig(id="CartPole-v1", num_envs=1, wrappers=(limit,)), seed=0)
    env.reset()
    ends = [list(env.step(np.array([0])).episode_lengths) for _ in range(3)]
    assert ends == [[], [], [3]]  # cut at 3 steps (the pole cannot fall that soon)
    assert env.protocol["wrappers"] == ["TimeLimit(max_episode_steps=3)"]
    env.close()
    rescale = "gymnasium.wrappers:RescaleAction(min_action=-1, max_action=1)"
    env = make_env(EnvConfig(id="Pendulum-v1", num_envs=1, wrappers=(rescale,)), seed=0)
    assert env.action_space.high == (1.0,)  # Pendulum's own is 2.0
    env.close()
    dtype = 'gymnasium.wrappers:DtypeObservation(dtype="float64")'
    env = make_env(EnvConfig(id="CartPole-v1", num_envs=1, wrappers=(dtype,)), seed=0)
    assert env.obs_dtype == np.float64
    env.close()


def test_wrappers_with_arguments_from_yaml_and_set(tmp_path: Path) -> None:
    from rltrain.config import load_config
    from rltrain.rl.config import TrainConfig

    path = tmp_path / "c.yaml"
    path.write_text(
        "env:\n  id: CartPole-v1\n  wrappers:\n"
        '    - "gymnasium.wrappers:TimeLimit(max_episode_steps=50)"\n'
        "stop:\n  max_env_steps: 10\n"
    )
    cfg = load_config(TrainConfig, path)
    assert cfg.env.wrappers == ("gymnasium.wrappers:TimeLimit(max_episode_steps=50)",)
    limit = '["gymnasium.wrappers:TimeLimit(max_episode_steps=9)", custom_envs:DoubleReward]'
    cfg = load_config(TrainConfig, path, [f"env.wrappers={limit}"])
    assert cfg.env.wrappers[0].endswith("(max_episode_steps=9)") and len(cfg.env.wrappers) == 2


BARE = "missing 2 required positional arguments: 'min_action' and 'max_action'"


@pytest.mark.parametrize(
    ("wrapper", "message"),
    [
        (
            "gymnasium.wrappers:RescaleAction",
            f"env.wrappers: RescaleAction failed on Pendulum-v1: TypeError: .*{BARE}; give its "
            r"arguments as module:Class\(name=value, ...\)$",
        ),
        (
            "gymnasium.wrappers:RescaleAction(-1, 1)",
            "env.wrappers: 'gymnasium.wrappers:RescaleAction.-1, 1.': give the arguments by name",
        ),
        (
            "gymnasium.wrappers:RescaleAction(min_action=low, max_action=1)",
            "min_action=low is not a Python literal",
        ),
        (
            "gymnasium.wrappers:RescaleAction(min_action=-1",
            r"is not module:Class or module:Class\(name=value, ...\)",
        ),
        (
            "gymnasium.wrappers:RescaleAction(low=-1, high=1)",
            r"env.wrappers: RescaleAction\(low=-1, high=1\) failed on Pendulum-v1: TypeError: "
            ".*unexpected keyword argument 'low'$",
        ),
    ],
)
def test_wrapper_argument_errors_are_one_line(wrapper: str, message: str) -> None:
    """In training's vector env and in eval's recording env alike."""
    from rltrain.envs.screen import make_recording_env

    cfg = EnvConfig(id="Pendulum-v1", num_envs=1, wrappers=(wrapper,))
    for make in (lambda: make_env(cfg, seed=0), lambda: make_recording_env(cfg, 0, False)):
        with pytest.raises(EnvError, match=message) as info:
            make()
        assert "\n" not in str(info.value) and "could not be made" not in str(info.value)


@pytest.mark.parametrize(
    ("cfg", "message"),
    [
        (
            EnvConfig(id=CORRIDOR, imports=("no_such_module_xyz",)),
            "imports: cannot import module 'no_such_module_xyz': ModuleNotFoundError: .*; "
            "modules are looked up from the current folder .* run from the folder that holds",
        ),
        (
            EnvConfig(id=CORRIDOR, imports=("custom_broken_env",)),
            "cannot import module 'custom_broken_env': ImportError: no module named 'mujoco",
        ),
        (
            EnvConfig(id="rltrain_test/Nope-v0", imports=("custom_envs",)),
            r"unknown env id 'rltrain_test/Nope-v0' \(after importing imports",
        ),
        (corridor(wrappers=("custom_envs.DoubleReward",)), "is not module:Class"),
        (corridor(wrappers=("custom_envs:Nope",)), "module 'custom_envs' has no 'Nope'"),
        (corridor(wrappers=("custom_envs:CORRIDOR_ID",)), "is a str, not a wrapper class"),
        (
            corridor(kwargs={"width": 3}),
            "could not be made with env.kwargs {'width': 3}: TypeError: Corridor.__init__.. "
            "got an unexpected keyword argument 'width'$",  # (not gymnasium's repeat after it)
        ),
        (
            EnvConfig(id="rltrain_test/TextObs-v0", imports=("custom_envs",)),
            "Text observation space; supported: Box .arrays., or spaces gymnasium can flatten",
        ),
        (EnvConfig(id="ALE/Pong-v5", wrappers=("custom_envs:DoubleReward",)), "Gymnasium ids"),
        (
            EnvConfig(id="ALE/Pong-v5", kwargs={"frameskip": 2}),
            "allowed for Atari only thread_affinity_offset",
        ),
        (
            EnvConfig(id="ALE/Pong-v5", kwargs={"thread_affinity_offset": "abc"}),
            "env.kwargs.thread_affinity_offset='abc': expected an integer, the first core",
        ),
    ],
)
def test_errors_are_one_line_and_name_the_problem(cfg: EnvConfig, message: str) -> None:
    with pytest.raises(EnvError, match=message) as info:
        make_env(cfg, seed=0)
    assert "\n" not in str(info.value)


def test_observations_that_are_not_arrays_are_flattened_into_one_float_vector() -> None:
    """Discrete parts one-hot (FrozenLake's 16 cells), a Dict's Boxes side by side; the env
    protocol records it (SB3 preprocesses these the same way)."""
    lake = make_env(EnvConfig(id="FrozenLake-v1", num_envs=2), seed=0)
    obs = lake.reset()
    assert lake.obs_shape == (16,) and obs.dtype == np.float32
    np.testing.assert_array_equal(obs.sum(axis=1), [1.0, 1.0])  # one-hot: the start cell
    assert obs[0, 0] == 1.0
    assert lake.protocol["observations_flattened_from"] == "Discrete(16)"
    lake.close()
    boxes = make_env(EnvConfig(id="rltrain_test/DictObs-v0", imports=("custom_envs",)), seed=0)
    assert boxes.obs_shape == (5,) and boxes.reset().dtype == np.float32
    boxes.close()
    corridor_env = make_env(corridor(), seed=0)  # a Box stays as it is
    assert "observations_flattened_from" not in corridor_env.protocol
    corridor_env.close()


def test_a_scalar_box_is_a_vector_of_one_and_its_policy_takes_the_scalar(
    tmp_path: Path,
) -> None:
    """Box(-1, 1, ()): the torso's flatten(1) raised IndexError in the learner. The run sees
    [1] vectors; rltrain.load_policy takes the env's own scalar, or a batch of them."""
    import rltrain

    cfg = EnvConfig(id="rltrain_test/ScalarObs-v0", num_envs=2, imports=("custom_envs",))
    env = make_env(cfg, seed=0)
    assert env.obs_shape == (1,) and env.reset().shape == (2, 1)
    env.close()
    run = tmp_path / "scalar"
    train_short(run, "env.id=rltrain_test/ScalarObs-v0", "runtime.backend=local")
    policy = rltrain.load_policy(run)
    assert policy(np.float32(0.5)) in range(2) and policy(np.array([0.5])) in range(2)
    assert len(policy(np.array([0.5, -0.5, 0.5], np.float32))) == 3


@pytest.mark.slow
def test_wide_unsigned_observations_train_in_actor_processes(tmp_path: Path) -> None:
    """uint16/32/64 observations: torch shares no such tensor between processes (appo's
    actors failed with a traceback on the process runtime); they arrive as int32, int64 and
    float64. rltrain.make_env's observation space is of the run's dtype (a bool or an
    unsigned one raised: a Box of them cannot take -inf..inf)."""
    import rltrain
    from rltrain.envs.single import dtype_range

    for dtype, seen in (("uint16", "int32"), ("uint32", "int64"), ("uint64", "float64")):
        cfg = EnvConfig(id="rltrain_test/TypedObs-v0", imports=("custom_envs",))
        env = make_env(dataclasses.replace(cfg, kwargs={"dtype": dtype}), seed=0)
        assert env.obs_dtype == np.dtype(seen), dtype
        env.close()
    run = tmp_path / "u16"
    train_short(run, "env.id=rltrain_test/TypedObs-v0", "runtime.backend=process", "actors=1")
    assert rltrain.make_env(run).observation_space.dtype == np.int32
    assert dtype_range(np.dtype(bool)) == (False, True)
    assert dtype_range(np.dtype(np.uint8)) == (0, 255)


def test_a_float32_box_beside_a_discrete_flattens_without_warnings() -> None:
    """gymnasium flattens Dict(Box float32, Discrete) to float64 bounds; cast to float32 by
    Box, 0.1 warned of lost precision on every run and every eval."""
    import warnings

    import gymnasium
    from gymnasium import spaces

    from rltrain.envs.adapt import FlatObservation

    class Mixed(gymnasium.Env):
        observation_space = spaces.Dict(
            {"x": spaces.Box(-0.1, 0.3, (2,), np.float32), "n": spaces.Discrete(3)}
        )
        action_space = spaces.Discrete(2)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        flat = FlatObservation(Mixed()).observation_space
    assert flat.dtype == np.float32 and flat.shape == (5,)
    np.testing.assert_array_equal(flat.low, np.float32([0, 0, 0, -0.1, -0.1]))


def test_the_spec_of_a_flattened_env_rebuilds_it() -> None:
    """gymnasium.make(env.spec) makes the same env (the wrapper records no argument it does not
    take), as recorders and vector envs that rebuild from the spec need."""
    import gymnasium

    from rltrain.envs.user import make_one

    lake = make_one("FrozenLake-v1", {}, [])
    again = gymnasium.make(lake.spec)
    assert again.observation_space == lake.observation_space
    np.testing.assert_array_equal(again.reset(seed=3)[0], lake.reset(seed=3)[0])


def test_images_with_channels_last_are_moved_channels_first() -> None:
    """A gymnasium image [H, W, C] (CarRacing's 96x96x3) reaches the CNN as [C, H, W]; its
    colours are not a frame stack; the spec rebuilds the env."""
    import gymnasium

    from rltrain.envs.user import make_one
    from rltrain.rl.actor import frame_stack_of

    cfg = EnvConfig(id=IMAGE, num_envs=2, imports=("custom_envs",), frame_stack=1)
    env = make_env(cfg, seed=0)
    obs = env.reset()
    assert env.obs_shape == (3, 40, 48) and obs.shape == (2, 3, 40, 48) and obs.dtype == np.uint8
    np.testing.assert_array_equal(obs[0, :, 0, :12], [[255] * 12, [128] * 12, [0] * 12])
    assert obs[0, :, :, 12:].max() == 0  # the walker's column only
    assert "[C, H, W]" in env.protocol["observations"] and frame_stack_of(env.protocol) == 1
    env.close()
    one = make_one(IMAGE, {}, [])
    assert gymnasium.make(one.spec).observation_space == one.observation_space
    flat = make_env(corridor(), seed=0)  # vectors stay as they are
    assert "observations" not in flat.protocol
    flat.close()


def test_images_are_stacked_frame_stack_deep_and_vectors_are_not() -> None:
    """env.frame_stack images [C, H, W] become one [k C, H, W], oldest first; a reset repeats
    the first image; the spec rebuilds the stack."""
    import gymnasium

    from rltrain.envs.user import make_one

    cfg = EnvConfig(id=IMAGE, num_envs=1, imports=("custom_envs",), frame_stack=3)
    env = make_env(cfg, seed=0)
    assert env.obs_shape == (9, 40, 48) and env.stacked == 3 and env.transposed
    assert "the last 3 images stacked" in env.protocol["observations"]
    first = env.reset()[0]
    np.testing.assert_array_equal(first[:3], first[3:6])
    np.testing.assert_array_equal(first[:3], first[6:])
    obs = env.step(np.array([1])).obs[0]  # the walker moves right: a new newest image
    np.testing.assert_array_equal(obs[:6], first[3:])
    assert not np.array_equal(obs[6:], first[6:])
    env.close()
    one = make_one(IMAGE, {}, [], 3)
    assert gymnasium.make(one.spec).observation_space == one.observation_space
    vector = make_env(dataclasses.replace(corridor(), frame_stack=4), seed=0)
    assert vector.obs_shape == (5,) and vector.stacked == 1
    vector.close()


def test_an_env_that_stacks_its_own_frames_is_not_stacked_again() -> None:
    """Four gray frames [4, H, W] from the env's own wrappers are a stack already, not a
    4-channel image to stack 4 deep (16 channels)."""
    from gymnasium.wrappers import FrameStackObservation, GrayscaleObservation

    from rltrain.envs.adapt import stacked
    from rltrain.envs.user import make_one

    def own_stack(env):  # noqa: ANN001, ANN202 - a user's wrapper
        return FrameStackObservation(GrayscaleObservation(env), 4)

    env = make_one(IMAGE, {}, [own_stack], 4)
    assert env.observation_space.shape == (4, 40, 48) and stacked(env) == 1
    gray = make_one(IMAGE, {}, [GrayscaleObservation], 4)  # [40, 48]: one channel, stacked
    assert gray.observation_space.shape == (4, 40, 48) and stacked(gray) == 4


@pytest.mark.parametrize(
    ("config", "stack", "kind"),
    [
        ("cartpole_appo.yaml", 1, "auto"),
        ("cartpole_gorila.yaml", 2, "auto"),
        ("cartpole_appo.yaml", 1, "impala_cnn"),
    ],
)
def test_a_run_on_gymnasium_images_trains_the_cnn(
    config: str, stack: int, kind: str, tmp_path: Path
) -> None:
    """appo (the CNN actor-critic, auto's Nature CNN or IMPALA's) and dqn (its replay keeps
    whole observations: the colours of each frame are no Atari stack) train on an image env,
    one image or two stacked, and the checkpoint plays it: one image in the env's own layout
    or [C, H, W], a stack as the run stacked it."""
    import rltrain
    from rltrain.cli import main
    from rltrain.rl.algos.torsos import ImpalaCNNTorso, NatureCNNTorso

    run = tmp_path / "img"
    path = Path(__file__).resolve().parents[1] / "configs" / config
    argv = ["train", str(path), "--run-dir", str(run)]
    for kv in (
        f"env.id={IMAGE}",
        "imports=[custom_envs]",
        "env.num_envs=2",
        f"env.frame_stack={stack}",
        "runtime.backend=local",
        "stop.mean_return=null",
        "stop.max_env_steps=300",
        f"model.kind={kind}",
    ):
        argv += ["--set", kv]
    assert main(argv) == 0
    policy = rltrain.load_policy(run)
    torso = ImpalaCNNTorso if kind == "impala_cnn" else NatureCNNTorso
    assert any(isinstance(m, torso) for m in policy.policy.model.modules())
    image = np.zeros((40, 48, 3), np.uint8)  # as the env gives it: [H, W, C]
    # frames already scaled to [0, 1] (or cast to float) would be scaled again, or not
    with pytest.raises(ValueError, match="dtype float32; this policy takes the env's uint8"):
        policy(np.zeros(policy.obs_shape, np.float32))
    from rltrain.rl.algos.torsos import MLPTorso
    from rltrain.rl.loaded_policy import scales_frames

    assert scales_frames(policy.policy.model)  # an MLP on uint8 takes any number type
    assert not scales_frames(MLPTorso(4, 8))
    if stack == 1:
        assert policy(image) in range(2) and policy(np.moveaxis(image, -1, 0)) in range(2)
        assert len(policy(np.stack([image] * 3))) == 3
        return
    two = np.zeros((6, 40, 48), np.uint8)  # two [3, 40, 48] images
    assert policy(two) in range(2) and len(policy(np.stack([two] * 3))) == 3
    with pytest.raises(ValueError, match="the last 2 images stacked on channels"):
        policy(image)


def test_env_kwargs_from_yaml_and_set(tmp_path: Path) -> None:
    from rltrain.config import ConfigError, load_config
    from rltrain.rl.config import TrainConfig

    path = tmp_path / "c.yaml"
    path.write_text("env:\n  id: x\n  kwargs: {length: 4}\nstop:\n  max_env_steps: 10\n")
    cfg = load_config(TrainConfig, path, ["env.kwargs.length=6", "env.imports=[custom_envs]"])
    assert cfg.env.kwargs == {"length": 6}  # and an older config's env.imports is imports:
    assert cfg.imports == cfg.env.imports == ("custom_envs",)
    with pytest.raises(ConfigError, match="env.kwargs=3: expected a mapping"):
        load_config(TrainConfig, path, ["env.kwargs=3"])
    # YAML 1.2's floats (PyYAML's 1.1 read 1e3 and 5e0 as strings, and the env got "5e0")
    path.write_text("env:\n  id: x\n  kwargs: {g: 1e1, h: 2.5e-3}\nstop:\n  max_env_steps: 10\n")
    cfg = load_config(TrainConfig, path, ["env.kwargs.k=5e0"])
    assert cfg.env.kwargs == {"g": 10.0, "h": 0.0025, "k": 5.0}


def test_a_run_on_flattened_observations_acts_on_the_envs_own(tmp_path: Path) -> None:
    """rltrain.load_policy takes FrozenLake's cell number (or a list of them) as the env gives
    it, and the flattened one-hot vector too."""
    import rltrain
    from rltrain.cli import main

    run = tmp_path / "lake"
    config = Path(__file__).resolve().parents[1] / "configs" / "cartpole_appo.yaml"
    argv = ["train", str(config), "--run-dir", str(run)]
    for kv in ("env.id=FrozenLake-v1", "runtime.backend=local", "stop.mean_return=null"):
        argv += ["--set", kv]
    assert main([*argv, "--set", "stop.max_env_steps=600"]) == 0
    policy = rltrain.load_policy(run)
    assert policy(3) in range(4) and policy(np.int64(3)) in range(4)
    assert len(policy([0, 5, 15])) == 3
    assert policy(np.eye(16, dtype=np.float32)[3]) in range(4)
    with pytest.raises(ValueError, match="this policy takes"):
        policy(np.zeros(5))


def test_a_dict_observation_of_another_float_dtype_is_taken(tmp_path: Path) -> None:
    """load_policy took a Dict observation only of the space's exact dtypes: a float64 part
    fell through as "already flattened", a TypeError about a dict."""
    import rltrain

    run = tmp_path / "dict"
    train_short(run, "env.id=rltrain_test/DictObs-v0", "runtime.backend=local", steps=300)
    policy = rltrain.load_policy(run)
    assert policy({"pos": np.zeros(5, np.float64)}) in range(2)
    with pytest.raises(ValueError, match="^observation does not fit the env's Dict"):
        policy({"place": np.zeros(5)})


def test_mujocos_warnings_are_said_once_and_leave_no_log_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Gymnasium's v5 MuJoCo models warn as each env is built (17 lines for 16 envs), and
    MuJoCo appended each to MUJOCO_LOG.TXT in the working folder."""
    pytest.importorskip("mujoco")
    from rltrain.envs.user import make_one

    monkeypatch.chdir(tmp_path)
    for _ in range(3):
        make_one("HalfCheetah-v5", {}, []).close()
    assert capsys.readouterr().err.count("settotalmass") <= 1  # (0: said earlier here)
    assert not (tmp_path / "MUJOCO_LOG.TXT").exists()


def test_a_registration_made_in_the_driver_is_shipped_with_the_config() -> None:
    """A script's gymnasium.register runs in the driver only: the config carries it (pickled
    by value, a class defined where it was registered), not config.yaml."""
    import gymnasium

    from rltrain.config import to_dict
    from rltrain.envs.user import load_env_code, ship_registration

    class Local(gymnasium.Env):  # defined here: no module could import it by name
        observation_space = gymnasium.spaces.Box(-1, 1, (3,), np.float32)
        action_space = gymnasium.spaces.Discrete(2)

        def reset(self, *, seed=None, options=None):  # type: ignore[no-untyped-def]
            super().reset(seed=seed)
            return np.zeros(3, np.float32), {}

        def step(self, action):  # type: ignore[no-untyped-def]
            return np.ones(3, np.float32), 1.0, True, False, {}

    env_id = "rltrain_test/DriverOnly-v0"
    gymnasium.register(env_id, entry_point=Local, max_episode_steps=7)
    try:
        cfg = ship_registration(EnvConfig(id=env_id, num_envs=2))
        assert cfg.registration is not None and "registration" not in to_dict(cfg)
    finally:
        del gymnasium.registry[env_id]  # as in an actor process, which never registered it
    with make_env(cfg, seed=0) as env:  # registered again from the config
        assert env.obs_shape == (3,) and env.protocol["max_episode_steps"] == 7
    del gymnasium.registry[env_id]
    unknown = ship_registration(EnvConfig(id="rltrain_test/Nowhere-v0"))
    assert unknown.registration is None
    load_env_code(unknown)  # nothing to register: make_env then names the id as unknown


SCRIPT = """
import sys
import gymnasium as gym
import numpy as np
import rltrain


class Corridor(gym.Env):
    observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
    action_space = gym.spaces.Discrete(2, start=10)  # the policy's 0 and 1 arrive as 10, 11

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, a):
        if not self.action_space.contains(a):
            raise ValueError(f"action {a} is not in {self.action_space}")
        self.t += 1
        return np.zeros(2, np.float32), float(a - 10), self.t >= 20, False, {}


if __name__ == "__main__":
    gym.register("Corridor-v0", entry_point=Corridor)
    result = rltrain.train(
        sys.argv[1], env__id="Corridor-v0", stop__max_env_steps=500, run_dir=sys.argv[2]
    )
    print(rltrain.evaluate(result.run_dir, episodes=2).mean, result.stopped_by)
"""


@pytest.mark.slow  # a run of the process runtime in a new interpreter
def test_an_env_registered_in_the_users_script_trains_in_actor_processes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The actors (forkserver children) never run the script: they had 'unknown env id'.
    Its Discrete(2, start=10) gets 10 and 11 from the actors and from the evaluation."""
    import subprocess
    import sys

    script = tmp_path / "train_mine.py"
    script.write_text(SCRIPT)
    config = Path(__file__).resolve().parents[1] / "configs" / "cartpole_appo.yaml"
    run = subprocess.run(
        [sys.executable, str(script), str(config), str(tmp_path / "run")],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split()[-1] == "max_env_steps"
    # `rltrain eval` elsewhere: the id is not in config.yaml's reach; it says what to do
    from rltrain.cli import main

    assert main(["eval", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "unknown env id 'Corridor-v0': registered by the script that trained the run? " in err


def test_gymnasiums_module_colon_id_form_imports_the_module() -> None:
    """gymnasium.make("module:EnvId") imports the module first; env.id takes the same form,
    split so that config.yaml names the module in imports (resume and eval import it)."""
    from rltrain.config import load_config, to_dict
    from rltrain.rl.config import TrainConfig

    base = Path(__file__).resolve().parents[1] / "configs" / "cartpole_appo.yaml"
    cfg = load_config(TrainConfig, base, [f"env.id=custom_envs:{CORRIDOR}"])
    assert cfg.env.id == CORRIDOR and cfg.imports == cfg.env.imports == ("custom_envs",)
    listed = ["imports=[custom_envs]", f"env.id=custom_envs:{CORRIDOR}"]
    again = load_config(TrainConfig, base, listed)  # listed already: not twice
    assert again.imports == ("custom_envs",) and to_dict(again)["env"]["id"] == CORRIDOR
    with make_env(cfg.env, seed=0, num_envs=1) as env:
        assert env.obs_shape == (5,)


@pytest.mark.parametrize("backend", ["process", "local"])
def test_the_actors_envs_are_closed_as_the_run_ends(tmp_path: Path, backend: str) -> None:
    """explore92: the actor processes were killed at the end of a run without their envs'
    close(), which a user's env may need (a log it flushes, a simulator it frees): each of the
    actors' envs is closed now, as the env that the run probes."""
    closed = tmp_path / "closed"
    closed.mkdir()
    sets = ("env.id=rltrain_test/Closed-v0", "actors=2", "env.num_envs=3")
    kwargs = f"env.kwargs={{folder: {closed}}}"
    train_short(tmp_path / "run", *sets, f"runtime.backend={backend}", kwargs, steps=300)
    assert len(list(closed.iterdir())) >= 2 * 3  # (+ the probe's, and the evaluations')


def test_a_wrapper_of_the_script_is_refused_where_processes_cannot_import_it() -> None:
    """explore108: env.wrappers=["__main__:Scale"] trained on threads and failed on the default
    process runtime only after its start-up, as the run's fault."""
    from rltrain.envs.base import EnvError
    from rltrain.envs.user import check_wrappers_travel

    check_wrappers_travel(["__main__:Scale"], "local")
    check_wrappers_travel(["custom_envs:Scale"], "process")
    with pytest.raises(EnvError, match=r"'__main__:Scale' is defined in the script, which the "):
        check_wrappers_travel(["__main__:Scale"], "process")
