"""Config loading: YAML + --set overrides onto typed dataclasses, with one-line errors."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
import yaml

import rltrain
from rltrain.config import (
    ConfigError,
    dump_yaml,
    from_dict,
    load_config,
    parse_overrides,
    read_yaml,
    spec,
)
from rltrain.options import describe
from rltrain.rl.config import TrainConfig
from rltrain.supervised.config import BenchConfig

ROOT = Path(__file__).resolve().parents[1]


def test_shipped_bench_configs_load() -> None:
    for name in ("bench_fashion_mnist", "bench_mnist", "bench_cifar10"):
        cfg = load_config(BenchConfig, ROOT / "configs" / f"{name}.yaml")
        assert cfg.workers >= 1 and cfg.modes


def test_set_overrides_nested_and_typed() -> None:
    cfg = load_config(
        BenchConfig,
        ROOT / "configs" / "bench_fashion_mnist.yaml",
        ["optimizer.lr=0.01", "modes=[sync, async]", "server.shards=2", "data.download=false"],
    )
    assert cfg.optimizer.lr == 0.01
    assert cfg.modes == ("sync", "async")
    assert cfg.server.shards == 2
    assert cfg.data.download is False


def test_int_is_accepted_for_float() -> None:
    assert from_dict(BenchConfig, {"optimizer": {"lr": 1}}).optimizer.lr == 1.0


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ({"optimizer": {"lrr": 0.1}}, ["optimizer.lrr", "did you mean lr"]),
        ({"wokers": 2}, ["wokers", "workers"]),
        ({"workers": "two"}, ["workers='two'", "integer"]),
        ({"workers": 0}, ["workers=0", ">= 1"]),
        ({"workers": True}, ["workers=true", "integer"]),
        ({"optimizer": {"name": "adamw"}}, ["optimizer.name='adamw'", "adam", "sgd"]),
        ({"modes": ["sync", "fast"]}, ["modes[1]='fast'", "allowed"]),
        ({"modes": ["asink"]}, ["modes[0]='asink'", "(did you mean async?)"]),
        ({"modes": ["Hogwild"]}, ["modes[0]='Hogwild'", "(did you mean hogwild?)"]),
        ({"modes": ["sandblast"]}, ["(did you mean sandblaster?)"]),
        ({"modes": "sync"}, ["modes='sync'", "list"]),
        ({"eval": {"targets": [1.5]}}, ["eval.targets[0]=1.5", "<= 1"]),
        ({"eval": {"targets": [0.9, 0.9]}}, ["eval.targets: 0.9 listed twice; list each once"]),
        ({"optimizer": 3}, ["optimizer", "mapping"]),
        ({"budget": {"max_seconds": 0, "epochs": 0}}, ["budget", "max_seconds"]),
        (
            {
                "workers": 2,
                "faults": {"events": [{"action": "slow", "target": "worker", "index": 2}]},
            },
            ["faults.events[0]", "index 2 out of range 0..1"],
        ),
        (
            {"faults": {"events": [{"action": "slow", "target": "shard"}]}},
            ["slow applies to target worker"],
        ),
        ({"faults": {"events": [{"action": "pause", "target": "worker"}]}}, ["seconds > 0"]),
        (
            {"faults": {"events": [{"action": "explode"}]}},
            ["action='explode'", "kill, pause, slow"],
        ),
        ({"faults": {"on_worker_loss": "panic"}}, ["on_worker_loss='panic'", "wait, continue"]),
    ],
)
def test_bad_values_name_key_value_and_allowed(data: dict, words: list[str]) -> None:
    with pytest.raises(ConfigError) as e:
        from_dict(BenchConfig, data)
    msg = str(e.value)
    assert "\n" not in msg
    for w in words:
        assert w in msg


def test_missing_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_config(BenchConfig, tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("workers: [1,\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(BenchConfig, bad)
    top = tmp_path / "list.yaml"
    top.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(BenchConfig, top)


def test_parse_overrides() -> None:
    assert parse_overrides(["a.b=3", "a.c=x", "d=[1, 2]", "e=null"]) == {
        "a": {"b": 3, "c": "x"},
        "d": [1, 2],
        "e": None,
    }
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        parse_overrides(["novalue"])


def test_a_dotted_key_and_its_section_as_a_mapping_both_hold() -> None:
    """--set stop.max_env_steps=2000 --set "stop={max_seconds: 8}" keeps the 2000 (as one
    file with both keys would), in either order; a key set twice: the later wins."""
    for order in (
        ["stop.max_env_steps=2000", "stop={max_seconds: 8}"],
        ["stop={max_seconds: 8}", "stop.max_env_steps=2000"],
    ):
        assert parse_overrides(order, TrainConfig) == {
            "stop": {"max_env_steps": 2000, "max_seconds": 8}
        }
    over = parse_overrides(["stop.max_seconds=1", "stop={max_seconds: 8}"], TrainConfig)
    assert over == {"stop": {"max_seconds": 8}}
    over = parse_overrides(["model.stages=2", "model={name: cnn}"], BenchConfig)
    assert over == {"model": {"stages": 2, "name": "cnn"}}


def test_a_mapping_set_whole_replaces_the_files_and_a_dotted_key_merges(tmp_path: Path) -> None:
    """env.kwargs holds a mapping of its own: --set env.kwargs={} drops the file's keys (the
    one way to remove one), env.kwargs.KEY=V adds one beside them; a section still merges."""
    path = tmp_path / "c.yaml"
    path.write_text(
        "algo: appo\nenv: {id: CartPole-v1, kwargs: {max_episode_steps: 50, n: 4}}\n"
        "stop: {max_env_steps: 100}\n"
    )

    def kwargs(*sets: str) -> dict:
        return dict(load_config(TrainConfig, path, list(sets)).env.kwargs)

    assert kwargs() == {"max_episode_steps": 50, "n": 4}
    assert kwargs("env.kwargs={}") == {}
    assert kwargs("env.kwargs={m: 1}") == {"m": 1}
    assert kwargs("env.kwargs.m=1") == {"max_episode_steps": 50, "n": 4, "m": 1}
    assert kwargs("env.kwargs={}", "env.kwargs.m=2") == {"m": 2}  # in order, as typed
    assert kwargs("env.kwargs.m=2", "env.kwargs={}") == {}
    assert kwargs("stop={max_seconds: 8}") == {"max_episode_steps": 50, "n": 4}
    assert load_config(TrainConfig, path, ["stop={max_seconds: 8}"]).stop.max_env_steps == 100
    cfg = rltrain.Config.from_yaml(path)
    assert dict(cfg.with_overrides({"env.kwargs": {}}).env.kwargs) == {}
    assert dict(cfg.with_overrides({"env.kwargs.m": 1}).env.kwargs)["n"] == 4
    assert "kwargs: {}" in dump_yaml(cfg.with_overrides({"env.kwargs": {}}).value)


def test_resolved_config_round_trips_through_yaml() -> None:
    cfg = from_dict(BenchConfig, {"modes": ["soft_sync"], "server": {"k": 1}})
    again = from_dict(BenchConfig, yaml.safe_load(dump_yaml(cfg)))
    assert again == cfg


def test_every_option_is_documented() -> None:
    rows = describe(BenchConfig)
    keys = {r[0] for r in rows}
    assert {"optimizer.lr", "server.rule", "runtime.address", "data.root"} <= keys
    undocumented = [r[0] for r in rows if not r[3]]
    assert not undocumented, undocumented


def test_a_section_with_a_name_can_be_written_as_its_name() -> None:
    """`model: cnn` is `model: {name: cnn}`; --set model.stages=2 keeps the name, and
    --set optimizer=adam changes the name and keeps the section's other keys."""
    from rltrain.config import merge

    base = {"model": "cnn", "modes": ["sync"], "optimizer": {"name": "sgd", "lr": 0.05}}
    over = parse_overrides(["model.stages=2", "optimizer=adam"], BenchConfig)
    cfg = from_dict(BenchConfig, merge(base, over, BenchConfig))
    assert (cfg.model.name, cfg.model.stages) == ("cnn", 2)
    assert (cfg.optimizer.name, cfg.optimizer.lr) == ("adam", 0.05)
    assert from_dict(BenchConfig, {"model": "linear"}).model.name == "linear"


def test_a_partial_section_keeps_the_fields_own_default() -> None:
    """train's optimizer defaults to RMSProp (lr 7e-4, eps 0.1), not OptimizerConfig's Adam:
    setting one key of it, with no optimizer section in the file, keeps the rest."""
    from rltrain.ps.config import OptimizerConfig

    base = ["env.id=CartPole-v1", "stop.max_env_steps=1"]
    default = load_config(TrainConfig, None, base).optimizer
    cfg = load_config(TrainConfig, None, [*base, "optimizer.lr=0.001"])
    assert (cfg.optimizer.name, cfg.optimizer.eps, cfg.optimizer.lr) == ("rmsprop", 0.1, 0.001)
    assert cfg.optimizer.alpha == default.alpha
    for named in (["optimizer=adam"], ["optimizer.name=adam", "optimizer.lr=0.001"]):
        cfg = load_config(TrainConfig, None, [*base, *named])  # another optimizer: its defaults
        assert (cfg.optimizer.name, cfg.optimizer.eps) == ("adam", OptimizerConfig().eps)
    cfg = load_config(TrainConfig, ROOT / "configs" / "cartpole_gorila.yaml")
    assert cfg.optimizer == OptimizerConfig(name="adam", lr=0.001)


def test_a_name_and_the_sections_keys_set_in_any_order() -> None:
    from rltrain.config import merge

    for order in (["model=cnn", "model.stages=2"], ["model.stages=2", "model=cnn"]):
        over = parse_overrides(order, BenchConfig)
        cfg = from_dict(BenchConfig, merge({"modes": ["sync"]}, over, BenchConfig))
        assert (cfg.model.name, cfg.model.stages) == ("cnn", 2)
    # a section without a name is not one: its keys are named as written
    with pytest.raises(ConfigError, match="unknown config key 'data.x'"):
        load_config(BenchConfig, None, ["data.x=1"])
    with pytest.raises(ConfigError, match="data: expected a mapping of keys, got 'mnist'"):
        load_config(BenchConfig, None, ["data=mnist"])


# ---------------------------------------------------------------------------------------------
# Defects QA found: each a one-line `rltrain: error: ...`, exit code 2, before any run folder


def cli_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """Run `rltrain` in-process; assert exit code 2 and one error line; return it."""
    from rltrain.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("rltrain: error: ") and "\n" not in err, err
    return err


def train_argv(config: str, tmp_path: Path, *sets: str) -> list[str]:
    argv = ["train", str(ROOT / "configs" / config), "--run-dir", str(tmp_path / "run")]
    for s in sets:
        argv += ["--set", s]
    return argv


def test_non_finite_numbers_are_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    for key, value, shown, allowed in (
        ("optimizer.lr", ".inf", "inf", "must be a finite number > 0"),
        ("algo.entropy_coef", ".inf", "inf", "must be a finite number >= 0"),
        ("algo.entropy_coef", "-.inf", "-inf", "must be a finite number >= 0"),
        ("optimizer.lr", "1e999", "inf", "must be a finite number > 0"),  # overflows to inf
        ("stop.mean_return", ".inf", "inf", "must be a finite number, or null"),
        ("stop.mean_return", ".nan", "nan", "must be a finite number, or null"),
    ):
        err = cli_error(capsys, train_argv("cartpole_a3c.yaml", tmp_path, f"{key}={value}"))
        assert err == f"rltrain: error: {key}={shown}: {allowed}"
        assert not (tmp_path / "run").exists()
    # a field whose spec says infinite=True takes +-inf (within its bounds), never NaN
    assert from_dict(Limit, {"seconds": float("inf")}).seconds == float("inf")
    with pytest.raises(ConfigError, match="seconds=nan: must be a finite number >= 0"):
        from_dict(Limit, {"seconds": float("nan")})


@dataclass(frozen=True)
class Limit:
    seconds: float = field(default=0.0, metadata=spec(ge=0, infinite=True))
    """A limit that takes .inf (no shipped field does)."""


def test_a_key_written_twice_in_a_yaml_file_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    twice = tmp_path / "twice.yaml"
    twice.write_text("env:\n  id: CartPole-v1\nstop:\n  max_seconds: 5\nenv:\n  id: Acrobot-v1\n")
    err = cli_error(capsys, ["train", str(twice), "--run-dir", str(tmp_path / "run")])
    assert err == (
        f"rltrain: error: {twice}: not valid YAML at line 5 (duplicate key 'env', first at "
        "line 1; keep one)"
    )
    assert not (tmp_path / "run").exists()
    nested = tmp_path / "nested.yaml"
    nested.write_text("workers: 2\nworkers: 3\n")
    with pytest.raises(ConfigError, match="line 2 .duplicate key 'workers', first at line 1"):
        load_config(BenchConfig, nested)
    # otherwise yaml.safe_load's reading: a merge key's keys may still be overridden
    merged = tmp_path / "merged.yaml"
    merged.write_text("base: &b {lr: 0.5, name: sgd}\noptimizer: {<<: *b, lr: 0.1}\n")
    assert read_yaml(merged) == yaml.safe_load(merged.read_text())
    assert read_yaml(merged)["optimizer"] == {"lr": 0.1, "name": "sgd"}


def test_more_minibatches_than_samples_in_a_batch_are_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    err = cli_error(capsys, train_argv("cartpole_appo.yaml", tmp_path, "ppo.minibatches=100000"))
    assert err.endswith(
        "ppo.minibatches=100000: exceeds the 256 samples of each batch (algo.rollout_length 32 "
        "x env.num_envs 8 x impala.learner_batch 1); use at most 256"
    )
    assert not (tmp_path / "run").exists()

    ppo = ROOT / "configs" / "cartpole_ppo.yaml"  # a worker's own rollout is its batch
    with pytest.raises(ConfigError, match=r"exceeds the 256 samples .*env.num_envs 8\); use"):
        load_config(TrainConfig, ppo, ["ppo.minibatches=257"])
    assert load_config(TrainConfig, ppo, ["ppo.minibatches=256"]).ppo.minibatches == 256


def test_a_bench_modes_name_as_a_rule_names_the_settings() -> None:
    """explore111: server.rule=async_scale was told its allowed values (and, since, that a
    rule of one's own needs its module in imports), not the two keys that make it."""
    a3c = ROOT / "configs" / "cartpole_a3c.yaml"
    with pytest.raises(ConfigError) as e:
        load_config(TrainConfig, a3c, ["server.rule=async_scale"])
    assert str(e.value).endswith(
        "; async_scale is rltrain bench's name for server.rule=async with server.staleness=scale"
    )


def test_target_kl_behind_a_barrier_is_refused(tmp_path: Path) -> None:
    """An early stop pushes a varying number of gradients: a barrier would wait for the rest."""

    for name, sets, fix in (
        ("cartpole_ppo.yaml", ["ppo.target_kl=0.02"], "use algo.name=appo with server.rule=async"),
        # (an appo run is told to change its rule only: explore98)
        ("cartpole_appo.yaml", ["ppo.target_kl=0.02", "server.rule=sync"], "; use server.rule"),
    ):
        with pytest.raises(ConfigError, match=r"ppo.target_kl=0.02: an early stop needs an ") as e:
            load_config(TrainConfig, ROOT / "configs" / name, sets)
        assert fix in str(e.value) and "on the asynchronous runs too" in str(e.value)
    appo = ROOT / "configs" / "cartpole_appo.yaml"
    assert load_config(TrainConfig, appo, ["ppo.target_kl=0.02"]).ppo.target_kl == 0.02
    with pytest.raises(ConfigError, match=r"ppo.target_kl.*-1"):
        load_config(TrainConfig, appo, ["ppo.target_kl=-1"])


def test_a_model_the_observations_do_not_fit_is_a_one_line_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = train_argv(
        "cartpole_a3c.yaml", tmp_path, "model.kind=nature_cnn", "runtime.backend=local"
    )
    err = cli_error(capsys, argv)
    assert err == (
        "rltrain: error: model.kind=nature_cnn needs image observations [C, H, W] of at least "
        "36 pixels a side, got (4,); use model.kind=mlp or auto"
    )
    from rltrain.rl.algos.torsos import check_torso

    with pytest.raises(ConfigError, match="got \\(3, 7, 7\\)"):
        check_torso("nature_cnn", (3, 7, 7))
    check_torso("nature_cnn", (4, 84, 84))


def test_a_replay_memory_smaller_than_a_block_names_its_minimum(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    err = cli_error(capsys, train_argv("cartpole_gorila.yaml", tmp_path, "replay.capacity=10"))
    assert err == (
        "rltrain: error: replay.capacity=10: must be at least 32 (env.num_envs 4 x "
        "algo.rollout_length 8: the transitions of one block an actor sends to a shard)"
    )
    assert not (tmp_path / "run").exists()
    # a memory the learners would wait on for good (cartpole_gorila: learning_starts 2000)
    err = cli_error(capsys, train_argv("cartpole_gorila.yaml", tmp_path, "replay.capacity=500"))
    assert err == (
        "rltrain: error: dqn.learning_starts=2000: more than the replay memory holds (500: "
        "replay.capacity 500 x replay.shards 1), so learning would never start"
    )
    # a minibatch larger than the shard it is drawn from: every one repeats transitions
    argv = train_argv("cartpole_gorila.yaml", tmp_path, "replay.capacity=40")
    err = cli_error(capsys, [*argv, "--set", "dqn.learning_starts=40"])
    assert err.startswith("rltrain: error: dqn.batch_size=64: more than a replay shard holds")
    # a run that ends before its learners start (explore112: it stopped untrained, rc 0)
    from rltrain.rl.config.notes import learning_start_notes

    short = load_config(
        TrainConfig, ROOT / "configs" / "cartpole_gorila.yaml", ["stop.max_env_steps=1500"]
    )
    assert learning_start_notes(short) == [
        "stop.max_env_steps=1500: the session ends before its learners start, at "
        "dqn.learning_starts=2000 transitions in the replay memory, so it learns nothing; "
        "raise it, or lower dqn.learning_starts"
    ]
    longer = replace(short, stop=replace(short.stop, max_env_steps=2001))
    assert learning_start_notes(longer) == []
    # a resume fills the memory again: 2,001 steps after 1,000 done leave 1,001 (review89)
    (note,) = learning_start_notes(longer, done=1000)
    assert "the session ends (1,001 steps after the 1,000 done) before its learners" in note
    err = cli_error(capsys, train_argv("cartpole_gorila.yaml", tmp_path, "replay.alpha=400"))
    assert err == "rltrain: error: replay.alpha=400.0: must be <= 1"  # (its priorities overflowed)
    assert not (tmp_path / "run").exists()


def test_pong_appo_is_atari_appo_with_pongs_id_and_stop() -> None:
    """configs/pong_appo.yaml builds on atari_appo.yaml (``base:``) and changes two keys."""
    atari = load_config(TrainConfig, ROOT / "configs" / "atari_appo.yaml")
    pong = load_config(TrainConfig, ROOT / "configs" / "pong_appo.yaml")
    assert atari.stop.mean_return is None and pong.stop.mean_return == 18
    assert pong.env.id == atari.env.id == "ALE/Pong-v5"
    assert pong == replace(atari, stop=replace(atari.stop, mean_return=18.0))  # the rest equal
    breakout = rltrain.Config.from_yaml(ROOT / "configs" / "atari_appo.yaml")
    assert breakout.with_overrides({"env.id": "ALE/Breakout-v5"}).value.stop.mean_return is None


def test_mujoco_appo_is_pendulum_appo_with_the_mujoco_protocol() -> None:
    """configs/mujoco_appo.yaml: pendulum_appo.yaml's network and batches, CleanRL's MuJoCo
    horizon, rate and anneal over a 1M-step budget (its Adam 1e-3 collapses HalfCheetah) and
    its minibatches of 64."""
    pendulum = load_config(TrainConfig, ROOT / "configs" / "pendulum_appo.yaml")
    mujoco = load_config(TrainConfig, ROOT / "configs" / "mujoco_appo.yaml")
    assert mujoco.env.id == "HalfCheetah-v5"
    assert (mujoco.algo.gamma, mujoco.algo.gae_lambda, mujoco.optimizer.lr) == (0.99, 0.95, 3e-4)
    assert (mujoco.schedule.lr_end, mujoco.stop.max_env_steps) == (0.0, 1_000_000)
    assert mujoco.stop.mean_return is None and mujoco.stop.max_seconds == 0
    samples = mujoco.algo.rollout_length * mujoco.env.num_envs * mujoco.impala.learner_batch
    assert samples // mujoco.ppo.minibatches == 64
    # (V-trace and no KL bound, as measured; pendulum_appo.yaml moved to GAE and a bound)
    assert (mujoco.impala.correction, mujoco.ppo.target_kl) == ("vtrace", 0.0)
    assert (pendulum.impala.correction, pendulum.ppo.target_kl) == ("none", 0.02)
    ppo = replace(mujoco.ppo, minibatches=4, target_kl=0.02)
    impala = replace(mujoco.impala, correction="none")
    assert (ppo, impala, mujoco.model, mujoco.normalize) == (
        pendulum.ppo,
        pendulum.impala,
        pendulum.model,
        pendulum.normalize,
    )


def test_a_base_file_lies_beneath_a_config_and_set_wins(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "root.yaml").write_text(
        "workers: 3\noptimizer: {name: sgd, lr: 0.5}\nmodel: cnn\nmodes: [sync]\n"
    )
    (tmp_path / "sub" / "mid.yaml").write_text("base: ../root.yaml\noptimizer: {lr: 0.2}\n")
    (tmp_path / "top.yaml").write_text("base: sub/mid.yaml\nmodel: {stages: 2}\n")
    cfg = load_config(BenchConfig, tmp_path / "top.yaml", ["workers=2"])
    assert cfg.workers == 2  # --set over the files
    assert (cfg.optimizer.name, cfg.optimizer.lr) == ("sgd", 0.2)  # a section merges key by key
    assert (cfg.model.name, cfg.model.stages) == ("cnn", 2)  # a section named by a string too
    assert cfg.modes == ("sync",)


def test_a_bad_base_is_a_one_line_error(tmp_path: Path) -> None:
    cases = {
        "base: missing.yaml\n": "base file not found: .*missing.yaml; give a YAML config file",
        "base: 3\n": "base must be the path of the YAML config this one builds on.*got 3",
        "base: b.yaml\n": r"base files go round in a loop \(a.yaml -> b.yaml -> a.yaml\)",
    }
    (tmp_path / "b.yaml").write_text("base: a.yaml\nworkers: 2\n")
    for text, message in cases.items():
        (tmp_path / "a.yaml").write_text(text)
        with pytest.raises(ConfigError, match=message) as e:
            load_config(BenchConfig, tmp_path / "a.yaml")
        assert "\n" not in str(e.value)


def test_a_run_folder_with_a_server_k_its_rule_never_read_still_loads(tmp_path: Path) -> None:
    """server.k under sync or async is refused since session 77; a run folder written before,
    which set it and never read it, is still evaluated and resumed (review77 L3)."""
    import yaml

    from rltrain.config import to_dict
    from rltrain.rl.config import StopConfig, TrainConfig, load_run_config

    data = to_dict(TrainConfig(stop=StopConfig(max_env_steps=100)))
    data["server"]["k"] = 2  # (async, the default rule)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(data))
    assert load_run_config(TrainConfig, tmp_path / "config.yaml").server.k == 0
    data["server"]["rule"] = "soft_sync"  # read there: kept (and checked)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(data))
    assert load_run_config(TrainConfig, tmp_path / "config.yaml").server.k == 2


def test_an_older_a3c_run_folder_that_targeted_its_workers_as_actors_still_loads(
    tmp_path: Path,
) -> None:
    """a3c/a2c/ppo workers were the fault target actor before session 84 (and actor is the
    default target): such a run folder is read with them as worker (review 84: refused by
    --resume and eval, and grouped by plot as its config's rule, not the one it ran)."""
    import yaml

    from rltrain.config import to_dict
    from rltrain.rl.config import StopConfig, TrainConfig, load_run_config

    data = to_dict(TrainConfig(stop=StopConfig(max_env_steps=100), actors=2))
    data["faults"]["events"] = [{"action": "kill", "index": 1, "at": 1.0}, {"target": "shard"}]
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(data))
    events = load_run_config(TrainConfig, tmp_path / "config.yaml").faults.events
    assert [(e.target, e.index) for e in events] == [("worker", 1), ("shard", 0)]
    data["algo"]["name"] = "appo"  # its actors are actors
    data["faults"]["events"] = [{"target": "actor", "index": 1}]
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(data))
    assert load_run_config(TrainConfig, tmp_path / "config.yaml").faults.events[0].target == "actor"


def test_a_run_folder_without_a_newer_key_acts_as_the_rltrain_that_wrote_it(
    tmp_path: Path,
) -> None:
    """Each key of OLDER_RUNS names a real key; a config.yaml that lacks it reads it at what the
    older rltrain did (env.fire_reset, review78 L7: true even if its default changes)."""
    import yaml

    from rltrain.config import to_dict
    from rltrain.envs import EnvConfig
    from rltrain.rl.config import StopConfig, TrainConfig, load_run_config
    from rltrain.rl.config.run_folder import OLDER_RUNS

    pong = EnvConfig(id="ALE/Pong-v5")
    data = to_dict(TrainConfig(env=pong, stop=StopConfig(max_env_steps=100)))
    for dotted in OLDER_RUNS:
        section, key = dotted.split(".")
        del data[section][key]
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(data))
    cfg = load_run_config(TrainConfig, tmp_path / "config.yaml")
    for dotted, value in OLDER_RUNS.items():
        section, key = dotted.split(".")
        assert getattr(cfg.section(section), key) == value, dotted


@pytest.mark.parametrize(
    ("config", "sets", "said"),
    [
        ("cartpole_a3c.yaml", ["dqn.n_step=3", "replay.capacity=1000"], "dqn.n_step=3, replay"),
        ("cartpole_gorila.yaml", ["algo.name=appo"], "not read by algo.name=appo"),
        ("cartpole_gorila.yaml", [], None),
        ("cartpole_appo.yaml", [], None),
        ("pendulum_appo.yaml", ["algo.name=a2c"], "ppo.epochs=10, ppo.target_kl=0.02: not read"),
        ("cartpole_a3c.yaml", ["ppo.overlap_push=true"], None),  # (every learner reads it)
    ],
)
def test_keys_of_a_section_the_algorithm_does_not_read_are_said(
    config: str, sets: list[str], said: str | None
) -> None:
    """explore95: dqn.n_step on a3c ran and said nothing. Said at the start, not refused: a
    config file switched to another algorithm by --set keeps its sections."""
    from rltrain.rl.config.notes import unread_notes

    notes = unread_notes(load_config(TrainConfig, ROOT / "configs" / config, sets))
    assert (said in notes[0]) if said is not None else notes == []


@pytest.mark.parametrize(
    ("config", "sets", "said"),
    [
        ("pong_a3c.yaml", ["env.id=ALE/SpaceInvaders-v5"], "pong_a3c.yaml's, a score of"),
        ("pong_appo.yaml", ["env.id=ALE/Breakout-v5"], "this run plays ALE/Breakout-v5: set"),
        ("pong_a3c.yaml", ["env.id=ALE/SpaceInvaders-v5", "stop.mean_return=500"], None),
        ("pong_a3c.yaml", ["env.id=ALE/SpaceInvaders-v5", "stop.mean_return=null"], None),
        ("pong_appo.yaml", ["env.sticky_actions=0"], None),  # the file's game
        ("atari_appo.yaml", ["env.id=ALE/Breakout-v5"], None),  # no score stop
    ],
)
def test_a_score_stop_of_the_files_game_is_said_for_another_game(
    config: str, sets: list[str], said: str | None
) -> None:
    """explore103: pong_a3c.yaml's stop at 18 ended a SpaceInvaders run at a random player's
    199.5 in 29 s, unsaid. Said at the start, not refused: the score may be meant."""
    from rltrain.rl.config.notes import carried_stop_note

    path = str(ROOT / "configs" / config)
    notes = carried_stop_note(path, load_config(TrainConfig, path, sets))
    assert (said in notes[0] and "stop.mean_return=18 is" in notes[0]) if said else notes == []


def test_a_score_stop_is_said_where_a_file_over_its_base_changes_the_game(
    tmp_path: Path,
) -> None:
    """review 86b: a file whose base: is pong_a3c.yaml and whose env.id is another game's kept
    the base's score stop unsaid; the same game under another id is no other game."""
    from rltrain.rl.config.notes import carried_stop_note

    for game, said in (("ALE/SpaceInvaders-v5", True), ("PongNoFrameskip-v4", False)):
        child = tmp_path / "mine.yaml"
        child.write_text(f"base: {ROOT / 'configs' / 'pong_a3c.yaml'}\nenv:\n  id: {game}\n")
        notes = carried_stop_note(child, load_config(TrainConfig, child))
        assert notes[0].startswith("stop.mean_return=18 is pong_a3c.yaml's") if said else not notes


def test_an_ale_id_under_wrappers_says_the_atari_keys_are_not_applied() -> None:
    """explore103: PongNoFrameskip-v4 with env.wrappers (the route of a game's mode and of RAM
    observations) trained at one frame a step with raw rewards while config.yaml said
    frame_skip: 4; and ALE/Pong-ram-v5, which ale-py no longer registers, is named the route."""
    from rltrain.envs import EnvError, make_env
    from rltrain.envs.atari import wrapped_notes
    from rltrain.envs.config import EnvConfig

    wrapped = EnvConfig(
        id="PongNoFrameskip-v4", wrappers=("gymnasium.wrappers:RecordEpisodeStatistics",)
    )
    (note,) = wrapped_notes(wrapped)
    assert "env.frame_skip" in note and "a step is 1 frame(s) of the game" in note
    assert wrapped_notes(EnvConfig(id="PongNoFrameskip-v4")) == []  # rltrain's protocol
    assert wrapped_notes(EnvConfig(id="CartPole-v1")) == []
    with pytest.raises(EnvError) as info:
        make_env(EnvConfig(id="ALE/Pong-ram-v5"), seed=0)
    assert str(info.value) == (
        "unknown env id 'ALE/Pong-ram-v5': ale-py registers no -ram ids; RAM observations run "
        "as your own Gymnasium env: PongNoFrameskip-v4 with env.kwargs.obs_type=ram and "
        "env.wrappers (your frame skip; rltrain's Atari protocol is not applied)"
    )
    with pytest.raises(EnvError, match="; RAM observations run as .*: PongNoFrameskip-v4 with"):
        make_env(EnvConfig(id="ALE/Pong-v5", kwargs={"obs_type": "ram"}), seed=0)


BENCH_ONLY = ("server.n_push", "server.pipeline", "server.average_every", "server.record")
TRAIN_ONLY = ("server.device", "runtime.inference", "runtime.learner_threads")


def test_a_commands_dump_holds_the_keys_its_manual_lists() -> None:
    """A run's config.yaml holds every key `rltrain options <command>` lists and no other: a
    train run's held the bench's server.n_push, which train refuses (explore101 finding 9),
    and a bench run's train's runtime.inference."""
    from rltrain.config import to_dict
    from rltrain.config_keys import dotted
    from rltrain.rl.config import StopConfig

    train = TrainConfig(stop=StopConfig(max_env_steps=100))
    for cfg, command in ((train, "train"), (BenchConfig(), "bench")):
        listed = {r[0] for r in describe(type(cfg), command=command) if "[]" not in r[0]}
        listed -= {r[0] for r in describe(type(cfg), command=command) if r[1] == "mapping"}
        assert set(dotted(to_dict(cfg))) == listed, command
    assert not set(BENCH_ONLY) & set(dotted(to_dict(train)))
    assert set(BENCH_ONLY) <= set(dotted(to_dict(BenchConfig())))
    assert not set(TRAIN_ONLY) & set(dotted(to_dict(BenchConfig())))
    assert set(TRAIN_ONLY) <= set(dotted(to_dict(train, "train")))
    assert "n_push" in to_dict(train.server)  # a section alone: every key


def test_an_older_run_folder_with_the_bench_keys_still_loads_and_resumes(tmp_path: Path) -> None:
    """A train run folder written before explore101 holds the bench's keys at their defaults,
    in its config.yaml and its checkpoint's config: it still loads, and a --resume (and an
    eval of its checkpoint) sees no change in them."""
    from rltrain.config import to_dict
    from rltrain.launch import check_resume
    from rltrain.ps.config import ServerConfig
    from rltrain.rl.config import StopConfig, load_run_config
    from rltrain.rl.eval_args import check_played_as
    from rltrain.rl.run.resume import resume_changes

    cfg = TrainConfig(stop=StopConfig(max_env_steps=100))
    old = to_dict(cfg)
    old["server"] |= {k.split(".")[1]: getattr(ServerConfig(), k.split(".")[1]) for k in BENCH_ONLY}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(old))
    assert load_run_config(TrainConfig, tmp_path / "config.yaml") == cfg
    checkpoint = tmp_path / "checkpoints" / "ckpt-0000000001.pt"
    assert check_resume(checkpoint, {"config": old}, cfg) == []
    assert resume_changes(checkpoint, old, cfg) == []
    check_played_as(checkpoint, old, cfg, tmp_path)
    edited = {**old, "server": {**old["server"], "n_push": 3}}  # still refused when set
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(edited))
    with pytest.raises(ConfigError, match="server.n_push=3: rltrain bench only"):
        load_run_config(TrainConfig, tmp_path / "config.yaml")


def test_a_bench_run_folders_config_reloads_with_its_own_keys(tmp_path: Path) -> None:
    """bench's config.yaml keeps n_push, pipeline, average_every and record (reapply reads it
    back), set away from their defaults too."""
    cfg = from_dict(BenchConfig, {"server": {"n_push": 3, "average_every": 5, "record": True}})
    (tmp_path / "config.yaml").write_text(dump_yaml(cfg))
    again = load_config(BenchConfig, tmp_path / "config.yaml")
    assert again == cfg and again.server.n_push == 3 and again.server.record


def test_a_list_given_as_a_string_says_the_bracket_form() -> None:
    """explore106: --set "modes=sync, async" said "expected a list" and not how to give one."""
    with pytest.raises(ConfigError, match=r"expected a list, as --set 'imports=\[mymod\]'$"):
        load_config(TrainConfig, None, ["imports=mymod", "stop.max_env_steps=10"])


def test_a_runs_config_yaml_marks_the_atari_keys_a_gymnasium_env_does_not_read(
    tmp_path: Path,
) -> None:
    """CartPole's config.yaml said ``clip_rewards: true`` (explore110): each Atari-only key is
    marked unused there, and the file reads back as the same config; Pong's is unmarked."""
    from rltrain.envs.atari_text import mark_unused
    from rltrain.rl.config import load_run_config

    for name, marked in (("cartpole_a3c.yaml", True), ("pong_appo.yaml", False)):
        cfg = load_config(TrainConfig, ROOT / "configs" / name, [])
        text = mark_unused(mark_unused(dump_yaml(cfg), cfg.env), cfg.env)  # (marked once)
        (tmp_path / "config.yaml").write_text(text)
        note = f"  # Atari only: unused by {cfg.env.id}"
        assert ("clip_rewards: true" + note in text) is marked, text
        assert text.count("# Atari only") == (9 if marked else 0)
        assert "num_envs: 8\n" in text or not marked  # the other keys as they were
        assert load_run_config(TrainConfig, tmp_path / "config.yaml") == cfg
