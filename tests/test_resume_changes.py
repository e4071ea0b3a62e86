"""Start-up errors and resumes: a new run that a user error stops before it trained leaves no
folder behind; a resume names every key it changes, and refuses another env.id before it
makes the env."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from rltrain.cli import main
from rltrain.config import ConfigError

ROOT = Path(__file__).resolve().parents[1]
A3C = str(ROOT / "configs" / "cartpole_a3c.yaml")
APPO = str(ROOT / "configs" / "cartpole_appo.yaml")
PENDULUM = str(ROOT / "configs" / "pendulum_appo.yaml")
# sized at start-up (actors: auto gives at most the CPUs): refused after the run folder is made
FAR_WORKER = ["--set", "actors=auto", "--set", "faults.events=[{target: worker, index: 99, at: 9}]"]


def write_run(run: Path, config: str = A3C, overrides: tuple[str, ...] = ()) -> Any:
    """A run folder as `rltrain train` leaves it (config.yaml, one checkpoint), untrained."""
    from rltrain.checkpoint import save_checkpoint
    from rltrain.config import load_config, to_dict
    from rltrain.ps.server import make_shards
    from rltrain.rl.config import TrainConfig, server_settings
    from rltrain.rl.env_spec import initial_params, probe_env
    from rltrain.rl.inputs import resolve_obs_norm
    from rltrain.rl.run.counters import Counters
    from rltrain.rundir import write_config

    run.mkdir(parents=True)
    cfg = load_config(TrainConfig, config, ["stop.max_seconds=11", *overrides])
    spec = probe_env(cfg)
    cfg = resolve_obs_norm(cfg, spec.obs_shape, spec.one_hot)
    params = initial_params(cfg, spec)
    _, shards = make_shards(params, cfg.optimizer, server_settings(cfg), 2)
    state = {
        "shards": [s.state_dict() for s in shards],
        "counters": Counters().state(),
        "config": to_dict(cfg),
    }
    save_checkpoint(run, 0, state, keep=3)
    write_config(run, cfg)
    return cfg


def error_of(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("rltrain: error: ") and "\n" not in err, err
    return err


# ------------------------------------------------------------------------------------------
# a new run: checked before its folder is made, or its folder taken away again


@pytest.mark.parametrize(
    ("sets", "words"),
    [
        pytest.param(
            ["env.groups=5", "env.num_envs=2"],
            "env.groups=5 is more than env.num_envs=2; allowed: 0 (auto) or 1 to num_envs",
            id="groups",
        ),
        pytest.param(
            ["server.shards=100000"],
            "server.shards=100000: must be between 1 and the parameter count 9155",
            id="shards",
        ),
        pytest.param(
            ["algo.name=a3c", "runtime.inference=server", "actors=2"],
            "runtime.inference=server cannot be used with algo a3c",
            id="inference",
        ),
    ],
)
def test_what_the_env_tells_is_checked_before_the_run_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], sets: list[str], words: str
) -> None:
    run = tmp_path / "run"
    argv = ["train", APPO, "--run-dir", str(run), *(a for s in sets for a in ("--set", s))]
    assert words in error_of(capsys, argv)
    assert not run.exists()
    assert capsys.readouterr().out == ""  # no banner: nothing was started


def test_a_new_run_refused_at_start_up_leaves_no_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found once the runtime says how many CPUs there are: after the banner and the folder.
    The folder and the parents the command made go; the same --run-dir is free again."""
    run = tmp_path / "new" / "deeper" / "run"
    argv = ["train", A3C, "--run-dir", str(run), *FAR_WORKER]
    assert "faults.events[0]: worker index 99 out of range" in error_of(capsys, argv)
    assert not (tmp_path / "new").exists()
    assert "error" in error_of(capsys, argv)  # not "already exists and is not empty"
    assert not (tmp_path / "new").exists()


def test_an_empty_folder_given_is_kept_and_left_empty(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "given"
    run.mkdir()
    error_of(capsys, ["train", A3C, "--run-dir", str(run), *FAR_WORKER])
    assert run.is_dir() and not list(run.iterdir())


def test_the_default_folder_goes_and_runs_stays(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "older").mkdir(parents=True)
    error_of(capsys, ["train", A3C, *FAR_WORKER])
    assert [p.name for p in (tmp_path / "runs").iterdir()] == ["older"]


def test_a_resumed_run_refused_at_start_up_keeps_its_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    write_run(run)
    before = {p.relative_to(run) for p in run.rglob("*")}
    error_of(capsys, ["train", "--resume", str(run), *FAR_WORKER])
    assert before <= {p.relative_to(run) for p in run.rglob("*")}  # (and its session's tb/)


class FakeTrainer:
    """What run_train asks of a trainer; ``run`` fails as told, after ``episodes`` episodes."""

    def __init__(self, run_dir: Path, error: BaseException, episodes: int = 0, ckpt: bool = False):
        self.run_dir, self.error, self.ckpt = run_dir, error, ckpt
        self.counters = type("C", (), {"episodes": episodes})()

    def run(self) -> dict[str, Any]:
        if self.ckpt:
            (self.run_dir / "checkpoints").mkdir()
            (self.run_dir / "checkpoints" / "ckpt-0000000001.pt").write_bytes(b"")
        raise self.error


@pytest.mark.parametrize(
    ("error", "episodes", "ckpt", "kept"),
    [
        pytest.param(ConfigError("bad"), 0, False, False, id="user-error"),
        pytest.param(ConfigError("bad"), 1, False, True, id="after-an-episode"),
        pytest.param(ConfigError("bad"), 0, True, True, id="after-a-checkpoint"),
        pytest.param(RuntimeError("bug"), 0, False, True, id="a-bug"),
        pytest.param(KeyboardInterrupt(), 0, False, True, id="interrupt"),
    ],
)
def test_only_a_user_error_before_any_result_takes_the_folder(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    error: BaseException,
    episodes: int,
    ckpt: bool,
    kept: bool,
) -> None:
    from rltrain import launch
    from rltrain.faults import RunFailed
    from rltrain.rundir import new_run_dir

    def prepare(cfg: Any, run_dir: Path, *rest: Any) -> tuple[FakeTrainer, list[Path]]:
        made: list[Path] = []
        out = new_run_dir("x", run_dir, created=made)
        (out / "config.yaml").write_text("seed: 0\n")
        return FakeTrainer(out, error, episodes, ckpt), made

    monkeypatch.setattr(launch, "_prepare", prepare)
    with pytest.raises(type(error)):
        launch.run_train(None, tmp_path / "run")
    assert (tmp_path / "run").exists() == kept
    assert not launch._user_error(RunFailed("a fault, not bad input"))


def test_remove_new_run_dir_keeps_a_parent_another_run_uses(tmp_path: Path) -> None:
    from rltrain.rundir import new_run_dir, remove_new_run_dir

    made: list[Path] = []
    run = new_run_dir("x", tmp_path / "a" / "b" / "run", created=made)
    assert made == [run, tmp_path / "a" / "b", tmp_path / "a"]
    (tmp_path / "a" / "other").mkdir()  # another launch's, made meanwhile
    (run / "tb").mkdir()
    remove_new_run_dir(run, made)
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["other"]


def test_a_new_runs_folder_names_the_env_and_algorithm_the_command_changed() -> None:
    """One config run over several tasks (``--set env.id=...``) makes folders that tell the
    tasks apart; the config as it is keeps its plain name."""
    from rltrain.config import load_config
    from rltrain.launch import run_name
    from rltrain.rl.config import TrainConfig

    path = str(Path(__file__).resolve().parents[1] / "configs" / "pendulum_appo.yaml")
    as_is = load_config(TrainConfig, path)
    assert run_name(path, as_is) == "pendulum_appo"
    llc = load_config(TrainConfig, path, ["env.id=LunarLanderContinuous-v3", "algo.name=a3c"])
    assert run_name(path, llc) == "pendulum_appo-LunarLanderContinuous-v3-a3c"
    pong = dataclasses.replace(as_is, env=dataclasses.replace(as_is.env, id="ALE/Pong-v5"))
    assert run_name(path, pong) == "pendulum_appo-ALE_Pong-v5"
    assert run_name(None, pong) == "appo_ALE_Pong-v5"


def test_a_config_valid_only_with_the_commands_set_still_names_the_env(tmp_path: Path) -> None:
    """A file with no stop (the command gives it) is compared by its own keys."""
    from rltrain.config import load_config
    from rltrain.launch import run_name
    from rltrain.rl.config import TrainConfig

    (tmp_path / "mine.yaml").write_text("algo:\n  name: appo\n")
    sets = ["stop.max_seconds=5", "env.id=Acrobot-v1"]
    cfg = load_config(TrainConfig, tmp_path / "mine.yaml", sets)
    assert run_name(str(tmp_path / "mine.yaml"), cfg) == "mine-Acrobot-v1"


# ------------------------------------------------------------------------------------------
# resume: every changed key named; env.id (and the other kept keys) checked first


def test_a_resume_names_every_changed_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from rltrain.config import load_config
    from rltrain.launch import prepare_train
    from rltrain.rl.config import TrainConfig
    from rltrain.rundir import unlock

    run = tmp_path / "run"
    write_run(run, APPO, ("actors=2",))
    sets = ["actors=1", "learners=2", "seed=3", "learner_gpus=0.5", "stop.max_seconds=14"]
    sets += ["eval.episodes=3", "runtime.backend=local"]
    cfg = load_config(TrainConfig, run / "config.yaml", sets)
    capsys.readouterr()
    trainer = prepare_train(cfg, None, run)
    unlock(trainer.run_lock)
    trainer.log.close()
    out = capsys.readouterr().out
    assert out.count("resumed with config changes") == 1  # one line names them all
    assert (
        "resumed with config changes: stop.max_seconds: 11.0 -> 14.0; seed: 0 -> 3; actors: "
        "2 -> 1; learners: 1 -> 2; learner_gpus: 1.0 -> 0.5; eval.episodes: 10 -> 3; "
        "runtime.backend: auto -> local\n"
    ) in out


def test_a_resume_without_changes_says_none(tmp_path: Path) -> None:
    """actors: auto and the session's seed are what the checkpoint holds resolved: no change."""
    from rltrain.checkpoint import latest_checkpoint, load_checkpoint
    from rltrain.config import load_config
    from rltrain.launch import check_resume
    from rltrain.rl.config import TrainConfig

    run = tmp_path / "run"
    cfg = write_run(run, A3C, ("actors=auto",))
    path = latest_checkpoint(run)
    state = load_checkpoint(path)
    state["config"] = {**state["config"], "actors": 2, "seed": 123456}  # as a session saved it
    assert check_resume(path, state, load_config(TrainConfig, run / "config.yaml")) == []
    assert check_resume(path, state, dataclasses.replace(cfg, actors=3)) == ["actors: 0 -> 3"]


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["--set", "env.id=Acrobot-v1"], id="set-env-id"),
        pytest.param(["--set", "env.id=Pendulum-v1", "--set", "algo.name=appo"], id="and-algo"),
        pytest.param([PENDULUM], id="another-config"),
    ],
)
def test_a_resume_under_another_env_says_so_before_making_it(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
) -> None:
    import rltrain.rl.env_spec

    run = tmp_path / "run"
    write_run(run)

    def no_env(*args: Any) -> None:
        raise AssertionError("the env was made")

    monkeypatch.setattr(rltrain.rl.env_spec, "probe_env", no_env)
    monkeypatch.setattr(rltrain.rl.env_spec, "make_env", no_env)
    config, sets = (argv, []) if argv[0] == PENDULUM else ([], argv)
    err = error_of(capsys, ["train", *config, "--resume", str(run), *sets])
    assert err.startswith("rltrain: error: env.id=")
    assert err.endswith(
        f"the run at {run} has env.id=CartPole-v1, which a resumed run keeps; start a new "
        "run to change it"
    )
    assert "parameters" not in err


def test_a_box_runs_action_map_is_kept_on_resume_and_checked_by_eval(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """How a Box policy's samples reach the env (env.action_map) is part of what it learned:
    a resume under another map went on unsaid, and eval scored the same checkpoint -45.3
    under affine, -34.3 under tanh. A Discrete run has no map to keep."""
    import yaml

    box, discrete = tmp_path / "box", tmp_path / "discrete"
    write_run(box, PENDULUM)
    err = error_of(capsys, ["train", "--resume", str(box), "--set", "env.action_map=tanh"])
    assert err.endswith(
        f"env.action_map=tanh: the run at {box} has env.action_map=affine, which a resumed "
        "run keeps; start a new run to change it"
    )
    assert not (box / "tb").exists()  # refused before anything was written
    config = yaml.safe_load((box / "config.yaml").read_text())
    config["env"]["action_map"] = "tanh"  # an edit
    (box / "config.yaml").write_text(yaml.safe_dump(config))
    err = error_of(capsys, ["eval", str(box), "--episodes", "1"])
    assert "was trained with env.action_map='affine', not the 'tanh' of" in err

    from rltrain.checkpoint import latest_checkpoint, load_checkpoint
    from rltrain.config import load_config
    from rltrain.rl.config import TrainConfig
    from rltrain.rl.env_spec import probe_env
    from rltrain.rl.run.resume import resume_changes

    cfg = write_run(discrete, A3C)
    state = load_checkpoint(latest_checkpoint(discrete))
    tanh = load_config(TrainConfig, discrete / "config.yaml", ["env.action_map=tanh"])
    box_actions = probe_env(cfg).actions.continuous
    assert resume_changes(discrete, state["config"], tanh, box_actions) == [
        "env.action_map: affine -> tanh"
    ]


def test_a_resume_says_what_a_changed_step_budget_does_to_the_schedules(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """schedule.steps: 0 ends the schedules at stop.max_env_steps: raising it on resume brought
    an annealed learning rate from 0 back to 46% of its start, unsaid. A Box policy's
    log_std_init is the checkpoint's: a change was said as made and did nothing."""
    from rltrain.checkpoint import latest_checkpoint, load_checkpoint
    from rltrain.config import load_config
    from rltrain.rl.config import TrainConfig
    from rltrain.rl.run.resume import resume_changes

    run = tmp_path / "run"
    write_run(run, A3C, ("stop.max_env_steps=4000", "schedule.lr_end=0"))
    saved = load_checkpoint(latest_checkpoint(run))["config"]
    more = load_config(TrainConfig, run / "config.yaml", ["stop.max_env_steps=8000"])
    assert resume_changes(run, saved, more) == [
        "stop.max_env_steps: 4000 -> 8000 (the schedules end at it: set schedule.steps=4000 "
        "to keep them as they were)"
    ]
    kept = load_config(
        TrainConfig, run / "config.yaml", ["stop.max_env_steps=8000", "schedule.steps=4000"]
    )
    assert resume_changes(run, saved, kept) == [
        "schedule.steps: 0 -> 4000",
        "stop.max_env_steps: 4000 -> 8000",
    ]
    never = load_config(TrainConfig, run / "config.yaml", ["stop.mean_return=null"])
    assert resume_changes(run, saved, never) == [  # as config.yaml writes it (it said None)
        f"stop.mean_return: {saved['stop']['mean_return']} -> null"
    ]
    box = tmp_path / "box"
    write_run(box, PENDULUM)
    err = error_of(capsys, ["train", "--resume", str(box), "--set", "model.log_std_init=-2"])
    assert "model.log_std_init=-2.0: the run at" in err and "which a resumed run keeps" in err


def test_a_resume_that_changes_a_kept_key_is_told_so_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--set algo.name=dqn on a resume failed dqn's own check first (normalize.obs=always is
    not for dqn): the advice, to change normalize.obs, named another key a resume keeps."""
    run = tmp_path / "run"
    write_run(run, A3C, ("normalize.obs=always",))
    err = error_of(capsys, ["train", "--resume", str(run), "--set", "algo.name=dqn"])
    assert err == (
        f"rltrain: error: algo.name=dqn: the run at {run} has algo.name=a3c, which a resumed "
        "run keeps; start a new run to change it"
    )


def test_a_resume_that_changes_the_dueling_head_names_it() -> None:
    """explore95: dqn.dueling changed on --resume failed on a parameter count that named no
    key, where model.hidden was named."""
    import torch

    from rltrain.checkpoint import CheckpointError
    from rltrain.rl.config import StopConfig, TrainConfig
    from rltrain.rl.env_spec import check_fits

    cfg = TrainConfig(stop=StopConfig(max_env_steps=1))
    state = {"shards": [{"param": torch.zeros(17410)}]}
    with pytest.raises(CheckpointError, match=r"this resume changes dqn.dueling: false -> true"):
        check_fits(
            Path("ckpt.pt"),
            state,
            torch.zeros(17539),
            cfg,
            ["dqn.dueling: false -> true"],
        )
    # and from the checkpoint's config where the resume's changes hold no dqn key, as in a
    # real --resume (explore112: the refusal named nothing)
    from dataclasses import replace

    from rltrain.config import to_dict
    from rltrain.rl.config import DQNConfig

    dueling = replace(cfg, dqn=DQNConfig(dueling=True))
    with pytest.raises(CheckpointError, match=r"this resume changes dqn.dueling: false -> true"):
        check_fits(Path("ckpt.pt"), {**state, "config": to_dict(cfg)}, torch.zeros(17539), dueling)


def test_a_resume_names_the_env_kwargs_it_drops_changes_and_adds(tmp_path: Path) -> None:
    """--resume --set env.kwargs={} replaces the run's kwargs: the keys it dropped are told;
    so is a kwarg the run did not have."""
    from rltrain.config import load_config, to_dict
    from rltrain.rl.config import TrainConfig
    from rltrain.rl.run.resume import resume_changes

    path = tmp_path / "config.yaml"
    path.write_text(
        "algo: appo\nenv: {id: CartPole-v1, kwargs: {max_episode_steps: 50}}\n"
        "stop: {max_env_steps: 100}\n"
    )
    saved = to_dict(load_config(TrainConfig, path))
    cleared = load_config(TrainConfig, path, ["env.kwargs={}"])
    assert resume_changes(tmp_path / "ckpt.pt", saved, cleared) == [
        "env.kwargs.max_episode_steps: 50 -> (dropped)"
    ]
    other = load_config(TrainConfig, path, ["env.kwargs={max_episode_steps: 60}"])
    assert resume_changes(tmp_path / "ckpt.pt", saved, other) == [
        "env.kwargs.max_episode_steps: 50 -> 60"
    ]
    # explore97: a key the run lacked (Pendulum's g) changed the env unsaid
    added = load_config(TrainConfig, path, ["env.kwargs.g=2.0"])
    assert resume_changes(tmp_path / "ckpt.pt", saved, added) == ["env.kwargs.g: (unset) -> 2.0"]
