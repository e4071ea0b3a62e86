"""Config loading: YAML + --set overrides onto typed dataclasses, with one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rltrain.config import ConfigError, dump_yaml, from_dict, load_config, parse_overrides
from rltrain.options import describe
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
        ({"workers": True}, ["workers=True", "integer"]),
        ({"optimizer": {"name": "adamw"}}, ["optimizer.name='adamw'", "adam", "sgd"]),
        ({"modes": ["sync", "fast"]}, ["modes[1]='fast'", "allowed"]),
        ({"modes": "sync"}, ["modes='sync'", "list"]),
        ({"eval": {"targets": [1.5]}}, ["eval.targets[0]=1.5", "<= 1"]),
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


def test_resolved_config_round_trips_through_yaml() -> None:
    cfg = from_dict(BenchConfig, {"modes": ["sync"], "server": {"k": 1}})
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
    from rltrain.rl.config import TrainConfig

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
