"""The Python API: Config, train, evaluate, load_policy and bench, against summary.json."""

from __future__ import annotations

import contextlib
import copy
import os
import pickle
import signal
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

import rltrain
from rltrain.config import ConfigError
from rltrain.curves import PlotError, read_curve
from rltrain.errors import RLTrainError

ROOT = Path(__file__).resolve().parents[1]
CARTPOLE = ROOT / "configs" / "cartpole_a3c.yaml"


def test_config_from_yaml_with_overrides_validates_as_the_cli() -> None:
    base = rltrain.Config.from_yaml(CARTPOLE)
    cfg = base.with_overrides({"env.id": "Acrobot-v1", "optimizer.lr": 3e-4})
    assert cfg.value.env.id == "Acrobot-v1" and cfg.value.optimizer.lr == 3e-4
    assert base.value.env.id == "CartPole-v1"  # immutable: a new Config came back
    with pytest.raises(ConfigError, match="optimizer.lr='fast': expected a number"):
        base.with_overrides({"optimizer.lr": "fast"})
    with pytest.raises(ConfigError, match="unknown config key 'algo.epoch'"):
        base.with_overrides({"algo.epoch": 3})
    assert cfg.to_dict()["env"]["id"] == "Acrobot-v1"
    assert cfg.env.id == "Acrobot-v1" and cfg.stop is cfg.value.stop  # as users try it
    with pytest.raises(AttributeError, match="envs"):
        cfg.envs  # noqa: B018 - the typo is named
    assert copy.deepcopy(cfg) == cfg and pickle.loads(pickle.dumps(cfg)).env.id == "Acrobot-v1"
    with pytest.raises(ConfigError, match="1: config keys are strings"):
        base.with_overrides({1: 2})
    # as train takes them (explore119: a TypeError, and env__id an unknown key)
    assert base.with_overrides(env__id="Acrobot-v1").env.id == "Acrobot-v1"
    assert base.with_overrides({"env__id": "Acrobot-v1"}, optimizer__lr=3e-4).optimizer.lr == 3e-4


def test_a_config_holds_its_own_copy_of_the_keys_given() -> None:
    """Config(d) copies d, and with_overrides leaves the mapping it was given as it was;
    a dotted key and its section as a mapping both hold (the later wins a key set twice)."""
    data = {"env": {"id": "CartPole-v1"}, "stop": {"max_env_steps": 1000}}
    cfg = rltrain.Config(data)
    data["stop"]["max_env_steps"] = 5
    assert cfg.data["stop"]["max_env_steps"] == 1000 == cfg.value.stop.max_env_steps
    over = {"stop": {"max_seconds": 5}}
    again = cfg.with_overrides({"stop.max_env_steps": 3000, **over, "stop.window": 4})
    assert over == {"stop": {"max_seconds": 5}}
    stop = again.value.stop
    assert (stop.max_env_steps, stop.max_seconds, stop.window) == (3000, 5.0, 4)
    # hashable as it is frozen (explore102: a TypeError on its dict), equal ones alike
    same = rltrain.Config({"stop": {"max_env_steps": 1000}, "env": {"id": "CartPole-v1"}})
    assert hash(same) == hash(cfg) and same == cfg and len({cfg, same, again}) == 2
    # a file's config keeps its file through overrides: the run's name, its score stop's game
    assert rltrain.Config.from_yaml(CARTPOLE).with_overrides({"seed": 1}).source == str(CARTPOLE)


@pytest.mark.slow
def test_ctrl_c_stops_a_python_run_gracefully(tmp_path: Path) -> None:
    """As in a notebook: SIGINT (KeyboardInterrupt) mid-run ends it with a checkpoint."""
    run_dir = tmp_path / "run"
    done = threading.Event()

    def interrupt_once_training() -> None:
        # Wait for the first scalars in TensorBoard (training has begun) rather than a fixed
        # delay: start-up time varies with the machine's load.
        while not done.wait(0.5):
            with contextlib.suppress(PlotError):
                read_curve(run_dir)  # raises until an episode's return is in TensorBoard
                os.kill(os.getpid(), signal.SIGINT)
                return

    watcher = threading.Thread(target=interrupt_once_training, daemon=True)
    watcher.start()
    try:
        # An unreachable target: only the interrupt (or the 120 s cap) can end this run.
        run = rltrain.train(CARTPOLE, run_dir=run_dir, stop__max_seconds=120, stop__mean_return=1e9)
    finally:
        done.set()
    assert run.stopped_by == "interrupt"
    assert list((tmp_path / "run" / "checkpoints").glob("ckpt-*.pt"))


def quiet_run(run_dir: Path, steps: int) -> rltrain.RunResult:
    """A short quiet CartPole run in threads of this process (no processes to start)."""
    return rltrain.train(
        CARTPOLE,
        run_dir=run_dir,
        quiet=True,
        stop__max_env_steps=steps,
        stop__mean_return=None,
        runtime__backend="local",
    )


def test_a_quiet_run_prints_nothing_of_its_own(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """explore102: a script writing its results to stdout got the run's start lines among
    them and could only silence them with redirect_stdout; quiet=True says nothing."""
    run = quiet_run(tmp_path / "run", 3000)
    out, err = capfd.readouterr()
    assert run.stopped_by == "max_env_steps" and (out, err) == ("", "")
    assert "summary=" not in repr(run) and "stopped_by='max_env_steps'" in repr(run)  # (explore119)
    box = run.summary["machine"]  # (explore106: on what machine, torch and load it ran)
    assert box["cores"] >= 1 and box["load_1min_at_start"] is not None and box["torch"]
    with pytest.raises(ConfigError, match="^quiet='yes': allowed are True or False$"):
        rltrain.train(CARTPOLE, quiet="yes")
    with pytest.raises(ConfigError, match="^quite=: not an argument .*; did you mean quiet=\\?$"):
        rltrain.train(CARTPOLE, quite=True)
    print("after")  # and the caller's stdout is its own again
    assert capfd.readouterr().out == "after\n"


def test_a_quiet_bench_prints_nothing_of_its_own(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """explore119: quiet=True still printed the toy's generation line and the time-left line
    between runs."""
    bench = rltrain.bench(
        ROOT / "configs" / "bench_fashion_mnist.yaml",
        run_dir=tmp_path / "run",
        quiet=True,
        data__dataset="toy_quadratic",
        data__toy__samples=600,
        modes=["baseline", "async"],
        runtime__backend="process",
        budget__max_seconds=0,
        budget__epochs=1,
    )
    assert len(bench.results) == 2
    assert capfd.readouterr() == ("", "")
    assert "results=" not in repr(bench) and "summary=" not in repr(bench)  # a notebook's


def test_a_summary_that_cannot_be_written_is_said_and_returned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """explore104: a run folder gone read-only ended the run with a traceback at summary.json;
    now one note, and the figures come back (the command's last line prints them)."""
    import errno

    from rltrain import rundir

    real = rundir.write_atomic

    def read_only(path: Path, text: str) -> None:
        if path.name == "summary.json":
            raise OSError(errno.EROFS, "Read-only file system")
        real(path, text)

    monkeypatch.setattr(rundir, "write_atomic", read_only)
    run = quiet_run(tmp_path / "run", 2000)
    assert run.stopped_by == "max_env_steps" and run.env_steps >= 2000
    # what a study of rules reads (explore111: only in .summary)
    assert (run.server_rule, run.server_staleness, run.dropped) == ("async", "none", 0)
    assert run.updates_applied == run.updates > 0
    assert not (tmp_path / "run" / "summary.json").exists()
    err = capfd.readouterr().err
    assert "summary.json not written (Read-only file system)" in err


def test_quiet_is_the_calling_threads_and_keeps_notes(capfd: pytest.CaptureFixture[str]) -> None:
    """review 86: quiet swapped sys.stdout for every thread (another thread's prints and the
    user's env's were lost, and two quiet threads left it swapped); notes to stderr."""
    from rltrain.progress import say, silenced

    def other() -> None:
        print("other thread")

    with silenced():
        say("own line")
        say("a note", note=True)
        with silenced(False):  # nested: still quiet
            say("inner")
        t = threading.Thread(target=other)
        t.start()
        t.join()
        print("the caller's print")
    say("after")
    out, err = capfd.readouterr()
    assert out == "other thread\nthe caller's print\nafter\n" and err == "a note\n"


@pytest.mark.slow
@pytest.mark.shared_ray  # started as a notebook's ray.init (conftest), and checked after
def test_a_ray_the_caller_started_is_left_running(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A notebook that called ray.init itself keeps its Ray after a run (rltrain stops only
    the Ray it started); the run's processes were Ray's."""
    import ray

    assert ray.is_initialized()
    run = rltrain.train(
        CARTPOLE,
        run_dir=tmp_path / "run",
        stop__max_env_steps=2000,
        stop__mean_return=None,
        runtime__backend="ray",
        actors=1,  # one actor process of Ray's to start, not two (seconds on 2 cores)
    )
    assert run.stopped_by == "max_env_steps"
    assert "runtime: ray (already running: the caller's, left running" in capsys.readouterr().out
    assert ray.is_initialized()


def untrained_run(run: Path, imports: tuple[str, ...] = (), **env: object) -> Path:
    """A run folder as `rltrain train` leaves it (config.yaml, one checkpoint), untrained."""
    import dataclasses

    from rltrain.checkpoint import save_checkpoint
    from rltrain.config import load_config, to_dict
    from rltrain.rl.config import TrainConfig
    from rltrain.rl.env_spec import initial_params, probe_env
    from rltrain.rl.run.counters import Counters
    from rltrain.rundir import write_config

    cfg = load_config(TrainConfig, ROOT / "configs" / "cartpole_appo.yaml")
    cfg = dataclasses.replace(cfg, imports=imports, env=dataclasses.replace(cfg.env, **env))
    run.mkdir(parents=True)
    shard = {"param": initial_params(cfg, probe_env(cfg)), "version": 0}
    state = {"shards": [shard], "counters": Counters().state(), "config": to_dict(cfg)}
    save_checkpoint(run, 0, state, keep=1)
    write_config(run, cfg)
    return run


@pytest.fixture(scope="module")
def cartpole_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return untrained_run(tmp_path_factory.mktemp("api") / "run")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"episodes": 0}, "episodes=0: expected a whole number >= 1"),
        ({"episodes": -1}, "episodes=-1: expected a whole number >= 1"),
        ({"episodes": 2.5}, "episodes=2.5: expected a whole number >= 1"),
        ({"episodes": "3"}, "episodes='3': expected a whole number >= 1"),
        ({"episodes": True}, "episodes=True: expected a whole number >= 1"),
        ({"seed": -5}, "seed=-5: expected a whole number 0 .. 2147483647"),
        ({"seed": 2**31}, "seed=2147483648: expected a whole number 0 .. 2147483647"),
        ({"video": "yes"}, "video='yes': allowed are True or False"),
        ({"deterministic": 1}, "deterministic=1: allowed are True, False or None"),
        ({"video_view": "screen"}, 'video_view=\'screen\': allowed are "game", "agent" or None'),
        ({"video_format": "avi"}, 'video_format=\'avi\': allowed are "mp4", "gif" or None'),
        ({"checkpoint": 3}, 'checkpoint=3: expected "latest", "best" or a checkpoint\'s path'),
    ],
)
def test_evaluate_checks_its_arguments_as_the_cli(
    cartpole_run: Path, kwargs: dict, message: str
) -> None:
    """As `rltrain eval`'s --episodes and --seed (the same rules, rltrain.rl.evaluate's
    EPISODES and SEED), in one line naming the keyword; before anything is played."""
    with pytest.raises(ConfigError) as info:
        rltrain.evaluate(cartpole_run, **kwargs)
    assert str(info.value) == message


def test_evaluate_takes_numpy_integers(cartpole_run: Path) -> None:
    import numpy as np

    res = rltrain.evaluate(cartpole_run, episodes=np.int64(2), seed=np.int32(7))
    assert len(res.returns) == 2 and res.seed == 7


def test_numpy_scalars_and_other_numbers_are_override_values() -> None:
    from fractions import Fraction

    import numpy as np

    base = rltrain.Config.from_yaml(CARTPOLE)
    cfg = base.with_overrides(
        {"optimizer.lr": np.float32(0.5), "actors": np.int64(2), "eval.deterministic": np.bool_(1)}
    )
    assert cfg.value.optimizer.lr == 0.5 and type(cfg.value.optimizer.lr) is float
    assert cfg.value.actors == 2 and type(cfg.value.actors) is int
    assert cfg.value.eval.deterministic is True
    assert base.with_overrides({"optimizer.lr": Fraction(1, 4)}).value.optimizer.lr == 0.25
    for value, shown in ((np.float64(2.5), "2.5"), (2.0, "2.0"), (True, "true")):
        with pytest.raises(ConfigError, match=rf"^actors={shown}: expected an integer$"):
            base.with_overrides({"actors": value})
    with pytest.raises(ConfigError, match="optimizer.lr=nan: must be a finite number > 0"):
        base.with_overrides({"optimizer.lr": np.float32("nan")})


def test_a_dict_is_a_config(tmp_path: Path) -> None:
    """train/bench take a dict of config keys as Config(dict) does; anything else that is no
    config is one line naming the types allowed."""
    data = {"env": {"id": "Acrobot-v1"}, "stop": {"max_env_steps": 100}}
    assert rltrain.api._config(data, "train") == rltrain.Config(data).value
    full = tmp_path / "full"
    full.mkdir()
    (full / "x").write_text("")
    with pytest.raises(ConfigError, match="^run_dir=.*full: already exists and is not empty"):
        rltrain.train(data, run_dir=full)  # the dict was read: the run folder is next
    with pytest.raises(ConfigError) as info:
        rltrain.train(["env.id=Acrobot-v1"])  # type: ignore[arg-type]
    assert str(info.value) == (
        "config: expected a Config, a dict of config keys, a YAML file's path (str or Path) "
        "or a TrainConfig; got list"
    )
    with pytest.raises(ConfigError, match=r"^Config: expected a mapping of config keys, got str"):
        rltrain.Config("configs/cartpole_appo.yaml")  # type: ignore[arg-type]


def test_a_missing_run_folder_is_named_as_resume_names_it(tmp_path: Path) -> None:
    missing = tmp_path / "nonexistent"
    why = f"{missing}: not a run directory (it does not exist); give a folder written by"
    for call, arg in (
        (lambda: rltrain.evaluate(missing), "run_dir="),
        (lambda: rltrain.load_policy(missing), "run_dir="),
        (lambda: rltrain.train(resume=missing), "resume="),
    ):
        with pytest.raises(RLTrainError) as info:
            call()
        assert str(info.value).startswith(arg + why)


def test_api_errors_name_the_apis_arguments(cartpole_run: Path, tmp_path: Path) -> None:
    """run_dir=, checkpoint="latest" and video_view="agent", not the command line's flags."""
    from rltrain.checkpoint import CheckpointError
    from rltrain.envs import EnvError

    full = tmp_path / "full"
    full.mkdir()
    (full / "x").write_text("")
    refused = f"run_dir={full}: already exists and is not empty; choose a new folder"
    for call in (
        lambda: rltrain.train(CARTPOLE, run_dir=full),
        lambda: rltrain.bench(ROOT / "configs" / "bench_fashion_mnist.yaml", run_dir=full),
    ):
        with pytest.raises(ConfigError) as info:
            call()
        assert str(info.value) == refused
    for call, meant in (
        (lambda: rltrain.train(CARTPOLE, resum=cartpole_run), "resume"),
        (lambda: rltrain.train(CARTPOLE, rundir=full), "run_dir"),
        (lambda: rltrain.bench(ROOT / "configs" / "bench_toy.yaml", run_dr=full), "run_dir"),
    ):
        with pytest.raises(ConfigError, match=rf"=: not an argument .*; did you mean {meant}=\?$"):
            call()
    with pytest.raises(RLTrainError, match="^run_dir= does not go with resume="):
        rltrain.train(resume=cartpole_run, run_dir=tmp_path / "elsewhere")
    early = tmp_path / "early"  # stopped before its first checkpoint
    early.mkdir()
    (early / "config.yaml").write_text((cartpole_run / "config.yaml").read_text())
    with pytest.raises(RLTrainError) as info:
        rltrain.train(resume=early)
    assert str(info.value).endswith(  # (explore102: the command line's words)
        f"start again: rltrain.train('{early}/config.yaml', run_dir=NEW_DIR) (or remove "
        f"{early} first to reuse its name)"
    )
    with pytest.raises(CheckpointError, match='use checkpoint="latest" or a checkpoint'):
        rltrain.load_policy(cartpole_run, checkpoint="best")
    with pytest.raises(CheckpointError) as info:
        rltrain.evaluate(cartpole_run, checkpoint=tmp_path / "nope.pt")
    assert str(info.value) == (
        f'checkpoint="{tmp_path / "nope.pt"}": no such file; use "latest", "best" or a '
        "checkpoint's path (checkpoints/ckpt-*.pt)"
    )
    chain = untrained_run(tmp_path / "chain", id="rltrain/Chain-v0")  # it cannot draw
    with pytest.raises(EnvError, match='cannot draw its screen.*; use video_view="agent"$'):
        rltrain.evaluate(chain, episodes=1, video=True, video_view="game")
    res = rltrain.evaluate(chain, episodes=1, video=True, video_format="gif")
    assert res.view == "agent" and "filmed the agent's view instead" in res.note
    assert "video_view" not in res.note and "--" not in res.note  # (the advice it followed)


def test_the_readme_loop_plays_pong_as_rltrain_eval_does(tmp_path: Path) -> None:
    """rltrain.make_env(run) is the run's env (the Atari protocol's frame stack, raw scores):
    the README's loop plays one Pong game with load_policy(run) and scores what
    rltrain.evaluate(run, episodes=1) scores with the same seed and checkpoint."""
    # games cut at 1,600 frames (400 steps; a truncation is an episode's end as any other)
    pong = untrained_run(tmp_path / "pong", id="ALE/Pong-v5", max_episode_frames=1600)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one observation a step: a second thread only waits (x5 under load)
    try:
        play_readme_loop(pong)
    finally:
        torch.set_num_threads(threads)


def play_readme_loop(pong: Path) -> None:
    policy = rltrain.load_policy(pong)
    env = rltrain.make_env(pong)
    assert env.observation_space.shape == (4, 84, 84) and env.action_space.n == 6
    obs, _ = env.reset(seed=0)
    done, score, steps = False, 0.0, 0
    while not done:
        before = obs
        obs, reward, terminated, truncated, _ = env.step(policy(obs))
        score, done, steps = score + reward, terminated or truncated, steps + 1
    env.close()
    assert (obs[:-1] == before[1:]).all()  # the game's last stack, not the next game's first
    played = rltrain.evaluate(pong, episodes=1, seed=0)
    assert (score, steps) == (played.returns[0], played.lengths[0])
    assert -21 <= score <= 21


def test_the_readme_loop_plays_a_box_env_as_rltrain_eval_does(tmp_path: Path) -> None:
    """load_policy's actions are in the env's units and make_env's env takes them as such:
    Pendulum's loop scored -1616 where `rltrain eval --deterministic` scored -1612 (the
    actions were mapped onto [-2, 2] twice)."""
    run = untrained_run(tmp_path / "pendulum", id="Pendulum-v1")
    policy, env = rltrain.load_policy(run), rltrain.make_env(run)
    obs, _ = env.reset(seed=1)
    done, score, acted = False, 0.0, []
    while not done:
        action = policy(obs, deterministic=True)
        acted.append(float(action[0]))
        obs, reward, terminated, truncated, _ = env.step(action)
        score, done = score + reward, terminated or truncated
    played = rltrain.evaluate(run, episodes=1, seed=1, deterministic=True)
    assert score == pytest.approx(played.returns[0], rel=1e-5)
    assert any(abs(a) > 1e-3 for a in acted)  # (the test means something)


def test_make_env_renders_a_gymnasium_env_and_says_why_not_an_atari_one(tmp_path: Path) -> None:
    """make_env(run, render_mode=...) was a TypeError; a user watching a policy needs it."""
    run = untrained_run(tmp_path / "drawn", ("custom_envs",), id="rltrain_test/Drawn-v0")
    env = rltrain.make_env(run, render_mode="rgb_array")
    env.reset(seed=0)
    assert env.render().shape == (4, 6, 3)
    env.close()
    with pytest.raises(RLTrainError, match="render_mode='rgb'"):  # (explore102: ValueError)
        rltrain.make_env(run, render_mode="rgb")
    with pytest.raises(ValueError, match="make the env with render_mode"):
        rltrain.make_env(run).render()
    pong = untrained_run(tmp_path / "pong", id="ALE/Pong-v5")
    with pytest.raises(RLTrainError, match="draws no screen; rltrain eval RUN --video"):
        rltrain.make_env(pong, render_mode="human")


def test_make_env_plays_another_game_at_each_reset_as_gymnasium_envs_do(
    cartpole_run: Path,
) -> None:
    """explore102: every unseeded reset replayed the constructor's game, so a loop of four
    episodes scored [315, 315, 315, 315]; a seeded reset restarts the sequence."""
    env = rltrain.make_env(cartpole_run, seed=3)
    firsts = [env.reset()[0] for _ in range(4)]
    assert len({f.tobytes() for f in firsts}) == 4
    again = [env.reset(seed=3)[0], *(env.reset()[0] for _ in range(3))]
    assert [a.tobytes() for a in again] == [f.tobytes() for f in firsts]
    assert env.reset(seed=5)[0].tobytes() not in {f.tobytes() for f in firsts}


def test_a_run_leaves_the_callers_torch_rng_as_it_was() -> None:
    """explore102: rltrain.train() reseeded a notebook's global torch RNG to the run's seed;
    the network's first parameters are still the seed's."""
    from rltrain.rl.config import StopConfig, TrainConfig
    from rltrain.rl.env_spec import initial_params, probe_env

    cfg = TrainConfig(stop=StopConfig(max_env_steps=10))
    spec = probe_env(cfg)
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    first = initial_params(cfg, spec)
    assert torch.equal(torch.rand(3), expected)
    assert torch.equal(initial_params(cfg, spec), first)


def test_make_env_returns_an_episodes_last_observation_as_gymnasium_envs_do(
    cartpole_run: Path,
) -> None:
    """explore102: at terminated=True the next episode's first observation came back (a cart
    at rest, |x| < 0.05), so a recorded trajectory's last transition was wrong."""
    env = rltrain.make_env(cartpole_run)
    assert env.observation_space.high[0] == 4.8  # CartPole's own bounds (were -inf..inf)
    obs, _ = env.reset(seed=0)
    env.action_space.seed(0)
    for _ in range(500):
        obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            break
    assert terminated and (abs(obs[0]) > 2.4 or abs(obs[2]) > 0.2094)  # CartPole's end
    first, _ = env.reset()
    assert np.abs(first).max() < 0.05  # and a reset starts the next
    env.close()


def test_make_env_checks_its_arguments(cartpole_run: Path, tmp_path: Path) -> None:
    env = rltrain.make_env(cartpole_run, seed=3)
    obs, _ = env.reset()
    assert env.observation_space.contains(obs) and env.action_space.n == 2
    with pytest.raises(ConfigError, match="seed=-1: expected a whole number"):
        rltrain.make_env(cartpole_run, seed=-1)
    with pytest.raises(RLTrainError, match="run_dir"):
        rltrain.make_env(tmp_path / "missing")


def test_a_config_or_run_of_the_other_command_is_named_as_on_the_command_line(
    tmp_path: Path,
) -> None:
    """A bench config given to train(), a train config to bench(), a bench run to evaluate()
    or resume=: which command it is for, not its keys as unknown ones."""
    bench_yaml = ROOT / "configs" / "bench_toy.yaml"
    with pytest.raises(RLTrainError, match=r"is a `rltrain bench` config \(it has "):
        rltrain.train(bench_yaml)
    with pytest.raises(RLTrainError, match=r"is a `rltrain train` config \(it has "):
        rltrain.bench(ROOT / "configs" / "cartpole_appo.yaml")
    run = tmp_path / "bench_run"
    run.mkdir()
    (run / "config.yaml").write_text(bench_yaml.read_text())
    for call in (
        lambda: rltrain.evaluate(run),
        lambda: rltrain.load_policy(run),
        lambda: rltrain.make_env(run),
        lambda: rltrain.train(resume=run),
    ):
        with pytest.raises(RLTrainError, match=r"is a `rltrain bench` run .*results\.md"):
            call()


def test_a_run_that_fails_raises_with_its_result(tmp_path: Path) -> None:
    """Where `rltrain train` exits with code 1, train() raises TrainFailed (not a return a
    script must remember to check), its RunResult attached."""
    with pytest.raises(rltrain.TrainFailed, match="step\\(\\) raised RuntimeError") as info:
        rltrain.train(
            ROOT / "configs" / "cartpole_a3c.yaml",
            run_dir=tmp_path / "run",
            env__id="rltrain_test/StepRaises-v0",
            imports=["custom_envs"],
            actors=1,
            runtime__backend="local",
            stop__mean_return=None,
            stop__max_seconds=30,
        )
    assert info.value.result.stopped_by == "fault"
    assert info.value.result.final_mean_return == info.value.result.summary["final_mean_return"]
    assert (tmp_path / "run" / "summary.json").is_file()


def test_a_run_leaves_no_socket_unclosed_under_python_dev_mode(tmp_path: Path) -> None:
    """explore102: under `python -X dev` (or -W default, as many test setups run) each child
    and each of the trainer's pipe threads warned of an unclosed socket at its end."""
    import subprocess
    import sys

    config = ROOT / "configs" / "cartpole_appo.yaml"
    code = "from rltrain.cli import entry; entry()"
    argv = [sys.executable, "-X", "dev", "-c", code, "train", str(config)]
    argv += ["--run-dir", str(tmp_path / "run"), "--set", "stop.max_env_steps=2000"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "ResourceWarning" not in done.stderr, done.stderr


def test_the_api_is_in_dir() -> None:
    """explore106: dir(rltrain) gave API, Any, TYPE_CHECKING: tab completion hid train."""
    assert {"train", "bench", "evaluate", "load_policy", "make_env", "plot_runs"} <= set(
        dir(rltrain)
    )
