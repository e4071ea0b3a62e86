"""Errors of the user's own env (tests/custom_envs.py): one line that names the env and what it
did, and a run that stops as faults stop it (summary.json, exit code 1, no traceback, no
restarts), its traceback kept in RUN/failure.log; a wrong first reset is refused before the
run folder is made."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rltrain.envs import EnvConfig, EnvError, make_env
from rltrain.envs.checks import check_finite
from rltrain.faults import EnvFailed

ROOT = Path(__file__).resolve().parents[1]


def at(raised: str, method: str) -> str:
    """Where custom_envs.py raises ``raised``, as the one line names it."""
    lines = (Path(__file__).parent / "custom_envs.py").read_text().splitlines()
    line = next(i for i, text in enumerate(lines, 1) if raised in text)
    return f" (at custom_envs.py:{line}, in {method})"


def env_of(name: str) -> EnvConfig:
    return EnvConfig(id=f"rltrain_test/{name}-v0", num_envs=2, imports=("custom_envs",))


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("StepRaises", "step() raised RuntimeError: boom in step" + at("boom in step", "step")),
        (
            "WrongStepShape",
            "step() returned an observation of shape (7,); its observation_space is Box(5,)",
        ),
        (  # in the env's terms, not the frame stack's (explore108 #8)
            "WrongImageStep",
            "step() returned an observation of shape (40, 49, 3); its observation_space is "
            "Box(40, 48, 3)",
        ),
        (  # the first of two envs' first image: the other not reset yet (review88b)
            "WrongImageReset",
            "reset() returned an observation of shape (40, 49, 3); its observation_space is "
            "Box(40, 48, 3)",
        ),
        (  # the Dict's key, not the flattened vector's length
            "WrongDictStep",
            "step() returned an observation['pos'] of shape (7,); its observation_space['pos'] "
            "is Box(5,)",
        ),
        (  # its loose Dict part is no shape error: it raised (review88)
            "LooseDictRaises",
            "step() raised RuntimeError: boom in a loose step" + at("boom in a loose step", "step"),
        ),
        (
            "NaNStep",
            "step() returned a non-finite observation "
            "(NaN or inf, or a value beyond float32's range)",
        ),
        (
            "NaNReward",
            "step() returned a non-finite reward "
            "(NaN or inf; or None, which gymnasium's vector stores as NaN)",
        ),
        (
            "WrongResetShape",
            "reset() returned an observation of shape (7,); its observation_space is Box(5,)",
        ),
        (  # (explore96: it read "step() raised ..., in reset")
            "ResetRaisesLater",
            "reset() (the autoreset inside step()) raised RuntimeError: boom in reset"
            + at("boom in reset", "reset"),
        ),
    ],
)
def test_what_the_env_did_is_one_line_naming_it(name: str, message: str) -> None:
    with make_env(env_of(name), seed=0) as env, pytest.raises(EnvFailed) as info:
        env.reset()
        for _ in range(5):
            env.step(np.ones(2, np.int64))
    assert str(info.value) == f"env 'rltrain_test/{name}-v0': {message}"
    if name == "StepRaises":  # the env's own traceback travels with it (for RUN/failure.log)
        assert "custom_envs.py" in info.value.detail and "boom in step" in info.value.detail


def test_a_constructor_that_raises_is_named_by_its_line() -> None:
    """explore96: the one line said what was raised but not where, and failure.log lost the
    env's frames (the error is raised again from None)."""
    with pytest.raises(EnvError) as info:
        make_env(env_of("InitRaises"), seed=0)
    assert str(info.value) == (
        "env 'rltrain_test/InitRaises-v0' could not be made: OSError: no display in this "
        "process" + at("no display", "__init__")
    )


def test_a_line_of_pythons_own_is_never_named() -> None:
    """review 82b: an import failing in importlib named "<frozen importlib._bootstrap>:241";
    a user's reset() failing in random.py named random.py's line, not the user's."""
    import importlib
    import random

    from rltrain.envs.checks import where
    from rltrain.envs.user import make_failed

    try:
        importlib.import_module("rltrain_test_no_such_module")
    except ImportError as e:
        said = str(make_failed("rltrain_test/Nope-v0", {}, e))
    assert "frozen" not in said and "importlib" not in said
    try:
        random.choice([])  # the user's line: the one named
    except IndexError as e:
        assert where(e).startswith(" (at test_env_errors.py:")


def test_a_reset_that_returns_the_observation_alone_says_what_it_must_return() -> None:
    """Gymnasium's vector unpacks reset()'s value: "too many values to unpack", at a line of
    gymnasium's, named the env's fault without saying what it should have returned."""
    with make_env(env_of("ResetObsOnly"), seed=0) as env, pytest.raises(EnvFailed) as info:
        env.reset()
    message = str(info.value)
    assert message.startswith(
        "env 'rltrain_test/ResetObsOnly-v0': reset() returned what gymnasium's vector could "
        "not take (ValueError: "
    )
    assert message.endswith("; reset() must return (obs, info: dict)")


@pytest.mark.parametrize(
    ("name", "error"),
    [
        ("ArrayReward", "ValueError: setting an array element with a sequence."),
        ("FourValues", "ValueError: not enough values to unpack (expected 5, got 4)"),
    ],
)
def test_a_step_that_returns_the_wrong_things_says_what_it_must_return(
    name: str, error: str
) -> None:
    """Gymnasium's vector fails to store them, in its own code: its error and line alone
    did not say that the env's return was to blame."""
    with make_env(env_of(name), seed=0) as env, pytest.raises(EnvFailed) as info:
        env.reset()
        env.step(np.ones(2, np.int64))
    message = str(info.value)
    assert message.startswith(  # (not the line of gymnasium's that failed: no line of the env's)
        f"env 'rltrain_test/{name}-v0': step() returned what gymnasium's vector could not "
        f"take ({error}); "
    )
    assert message.endswith(
        "; step() must return (obs, reward: a number, terminated: bool, truncated: bool, "
        "info: dict)"
    )


def test_the_finiteness_check_takes_large_values_and_finds_inf() -> None:
    check_finite("e", "step()", np.full((8, 4), 3e38, np.float32))  # overflows a dot product
    check_finite("e", "step()", np.zeros((0, 4), np.float32))
    with pytest.raises(EnvFailed, match="non-finite"):
        check_finite("e", "step()", np.array([[0.0, -np.inf]], np.float32))
    check_finite("e", "step()", np.full((2, 3), -3e38, np.float64))  # float32 holds it


def test_a_float64_observation_beyond_float32s_range_is_named() -> None:
    """1e40 is finite in float64, inf in the policy's float32: the run went on with half
    its updates refused as non-finite, and no word on why."""
    obs = np.array([[1.0, 2.0], [-1e40, 0.0]])
    with pytest.raises(
        EnvFailed,
        match=r"^env 'e': reset\(\) returned an observation of "
        r"magnitude 1e\+40, beyond float32's 3.4e\+38: the policy",
    ):
        check_finite("e", "reset()", obs)


def train(tmp_path: Path, config: str, name: str, *sets: str) -> tuple[int, Path]:
    from rltrain.cli import main

    run = tmp_path / "run"
    argv = ["train", str(ROOT / "configs" / config), "--run-dir", str(run)]
    for kv in (
        f"env.id=rltrain_test/{name}-v0",
        "imports=[custom_envs]",
        "actors=1",
        "env.num_envs=2",
        "stop.mean_return=null",
        "stop.max_seconds=30",
        "eval.every_steps=0",
        *sets,
    ):
        argv += ["--set", kv]
    return main(argv), run


def test_a_wrong_first_reset_is_refused_before_the_run_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, run = train(tmp_path, "cartpole_appo.yaml", "WrongResetShape")
    assert code == 2 and not run.exists()
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "rltrain: error: env 'rltrain_test/WrongResetShape-v0': reset() returned an observation "
        "of shape (7,); its observation_space is Box(5,)"
    )


@pytest.mark.parametrize(
    ("config", "name", "backend", "what"),
    [
        (
            "cartpole_appo.yaml",
            "StepRaises",
            "process",
            "step() raised RuntimeError: boom in step" + at("boom in step", "step"),
        ),
        (
            "cartpole_a3c.yaml",
            "NaNStep",
            "local",
            "step() returned a non-finite observation "
            "(NaN or inf, or a value beyond float32's range)",
        ),
        (  # not "diverged" after 100 refused updates, which blames the learning rate
            "cartpole_appo.yaml",
            "NaNReward",
            "process",
            "step() returned a non-finite reward "
            "(NaN or inf; or None, which gymnasium's vector stores as NaN)",
        ),
        (
            "cartpole_appo.yaml",
            "ResetRaisesInActors",
            "process",
            "reset() raised OSError: no simulator for this seed" + at("no simulator", "reset"),
        ),
    ],
)
def test_an_env_error_stops_the_run_as_a_fault_in_one_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    config: str,
    name: str,
    backend: str,
    what: str,
) -> None:
    code, run = train(tmp_path, config, name, f"runtime.backend={backend}")
    line = f"env 'rltrain_test/{name}-v0': {what}"
    assert code == 1
    out, err = capsys.readouterr()
    assert err.strip().splitlines()[-1] == f"rltrain: run failed: {line}"
    assert "Traceback" not in err
    assert "summary.json, failure.log (its traceback), checkpoints/" in out.splitlines()[-1]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["stopped_by"] == "fault" and summary["failure"] == line
    faults = summary["faults"]  # not a lost process: nothing restarted
    assert faults["actor_restarts"] == faults["worker_restarts"] == 0
    assert list((run / "checkpoints").glob("ckpt-*.pt"))  # a final checkpoint: the server is whole
    assert (run / "failure.log").read_text().startswith(line)


def test_a_session_that_does_not_fail_removes_an_earlier_failure_log(tmp_path: Path) -> None:
    """A run resumed after a failure and then finished: its folder no longer holds the old
    traceback that its summary.json no longer mentions; a failed session keeps its own."""
    from rltrain.rundir import write_summary

    (tmp_path / "failure.log").write_text("env 'x': step() raised\n\nTraceback ...")
    write_summary(tmp_path, {"stopped_by": "fault", "failure": "env 'x': step() raised"})
    assert (tmp_path / "failure.log").exists()
    write_summary(tmp_path, {"stopped_by": "max_env_steps"})
    assert not (tmp_path / "failure.log").exists()
    write_summary(tmp_path, {"stopped_by": "max_env_steps"})  # none to remove: no error


def test_a_reward_beyond_float32s_range_is_one_line() -> None:
    """A reward of 1e76 is finite in float64 and inf in the learners' float32: every update
    was refused as non-finite and the run's mean return printed with 77 digits."""
    from rltrain.envs.checks import float32_rewards
    from rltrain.faults import EnvFailed

    assert float32_rewards("e", np.array([1.5, -2.0])).dtype == np.float32
    assert float32_rewards("e", np.array([True, False])).tolist() == [1.0, 0.0]
    with pytest.raises(
        EnvFailed, match=r"^env 'e': step\(\) returned a reward of magnitude 1e\+76"
    ):
        float32_rewards("e", np.array([0.0, -1e76]))
    with pytest.raises(EnvFailed, match="non-finite reward"):
        float32_rewards("e", np.array([0.0, np.nan]))


def test_a_gymnasium_env_failing_in_its_own_step_is_not_told_what_to_return() -> None:
    """Pendulum's step() dividing by a string g (env.kwargs) was told "step() must return
    (obs, reward, ...)": that hint is for gymnasium taking what an env returned."""
    env = make_env(EnvConfig(id="Pendulum-v1", num_envs=1, kwargs={"g": "abc"}), seed=0)
    env.reset()
    with pytest.raises(EnvFailed) as caught:
        env.step(np.zeros((1, 1), np.float32))
    assert "(at pendulum.py:" in str(caught.value) and "must return" not in str(caught.value)
    env.close()


def test_an_env_whose_module_is_missing_names_the_extra_that_installs_it() -> None:
    """MuJoCo's envs said only "No module named 'mujoco'" (gymnasium's Box2D ones say how)."""
    from rltrain.envs.user import make_failed

    missing = ModuleNotFoundError("No module named 'mujoco'", name="mujoco")
    said = str(make_failed("HalfCheetah-v5", {}, missing))
    assert said.endswith("""'mujoco'; install it with: pip install "gymnasium[mujoco]\"""")
    told = ModuleNotFoundError('Box2D is not installed, run `pip install "gymnasium[box2d]"`')
    told.name = "Box2D"
    assert str(make_failed("LunarLander-v3", {}, told)).count("pip install") == 1


def test_a_wrong_observation_is_named_in_the_env_s_own_space() -> None:
    """What :class:`RawObservation` kept, against the space before rltrain flattened it."""
    from gymnasium import spaces

    from rltrain.envs.adapt import raw_mismatch

    space = spaces.Dict(
        {
            "pos": spaces.Box(0, 1, (2,)),
            "pair": spaces.Tuple([spaces.Discrete(3), spaces.Box(0, 1, (4,))]),
        }
    )
    good = {"pos": np.zeros(2), "pair": (1, np.zeros(4))}
    assert raw_mismatch(space, good) is None
    assert raw_mismatch(space, {**good, "pair": (1, np.zeros(5))}) == (
        "observation['pair'][1] of shape (5,); its observation_space['pair'][1] is Box(4,)"
    )
    assert raw_mismatch(space, {"pos": np.zeros(2)}) == (
        "observation without ['pair']; its observation_space is a Dict of ['pair', 'pos']"
    )
    assert raw_mismatch(space["pair"], (1,)) == (
        "observation without [1]; its observation_space is a Tuple of 2"
    )
