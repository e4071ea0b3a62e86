"""A new update rule written in this file alone: registered, accepted by the config, run end to
end by `rltrain bench` (workers in processes of the process runtime, and of Ray) and
reapplied, with its effect checked against the rule it changes."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from rltrain.cli import main
from rltrain.config import ConfigError, load_config
from rltrain.ps.rules import Async, UpdateRule, register_rule, rule_names, unregister_rule
from rltrain.supervised.config import BenchConfig
from rltrain.supervised.sharding import load_data
from rltrain.supervised.update_log import load_record, reapply_log, record_path


class HalfAsync(Async):
    """Async, with every update applied at half the learning rate."""

    name = "async_half"

    def lr_scale(self, server: Any, staleness: int) -> float:
        return 0.5 * super().lr_scale(server, staleness)


@pytest.fixture
def half_async() -> Iterator[UpdateRule]:
    rule = register_rule(HalfAsync())
    yield rule
    unregister_rule(rule.name)


BENCH = (
    "runtime: {backend: process}\nmodes: [async_half]\nworkers: 1\nbatch_size: 16\n"
    "data: {dataset: toy_quadratic, toy: {dim: 8, samples: 600}}\n"
    "budget: {max_seconds: 0, epochs: 2}\neval: {every_seconds: 0.5}\n"
    "optimizer: {name: sgd, lr: 0.1}\nserver: {record: true, pipeline: false}\n"
)


def test_a_rule_from_a_test_file_runs_through_rltrain_bench(
    half_async: UpdateRule,
    run_bench: Any,
    no_ray: None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out, summary = run_bench(BENCH)
    assert [r["mode"] for r in summary["results"]] == ["async_half"]
    assert summary["results"][0]["updates_applied"] > 0
    saved = load_record(record_path(out, "async_half"))
    assert saved.log and {p.status for p in saved.log} == {"applied"}
    # its effect: the logged pushes, applied by plain async at half the learning rate, give
    # exactly the parameters the run ended with (and at the full rate, others)
    cfg = load_config(BenchConfig, out / "config.yaml")
    data = load_data(cfg.data)
    half_lr = dataclasses.replace(cfg, optimizer=dataclasses.replace(cfg.optimizer, lr=0.05))
    expected, mismatches = reapply_log(half_lr, data, "async", saved.log)
    assert torch.equal(expected, saved.final) and mismatches == 0
    assert not torch.equal(reapply_log(cfg, data, "async", saved.log)[0], saved.final)
    # `rltrain reapply` runs the registered rule again, bit for bit
    capsys.readouterr()
    assert main(["reapply", str(out)]) == 0
    assert "reapply async_half: " in capsys.readouterr().out


@pytest.mark.slow
def test_a_rule_from_a_test_file_reaches_rays_processes(
    half_async: UpdateRule, run_bench: Any
) -> None:
    """Ray's shard and worker processes import rltrain afresh, and this file does not import
    there: the run's setup hook registers the rule in each (rltrain.extensions), its class
    pickled by value. Its effect is the same as on the process runtime."""
    out, summary = run_bench(BENCH.replace("backend: process", "backend: ray"))
    assert summary["results"][0]["updates_applied"] > 0
    saved = load_record(record_path(out, "async_half"))
    cfg = load_config(BenchConfig, out / "config.yaml")
    half_lr = dataclasses.replace(cfg, optimizer=dataclasses.replace(cfg.optimizer, lr=0.05))
    expected, mismatches = reapply_log(half_lr, load_data(cfg.data), "async", saved.log)
    assert torch.equal(expected, saved.final) and mismatches == 0


def test_the_config_accepts_a_rule_while_it_is_registered(
    half_async: UpdateRule, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "b.yaml"
    path.write_text("modes: [async_half, sync]\n")
    assert load_config(BenchConfig, path).modes == ("async_half", "sync")
    assert main(["options", "bench"]) == 0
    assert "async_half" in capsys.readouterr().out  # modes' choices come from the registry
    unregister_rule("async_half")
    with pytest.raises(ConfigError, match="modes\\[0\\]='async_half': allowed values are"):
        load_config(BenchConfig, path)
    register_rule(half_async)  # for the fixture's teardown
    assert "async_half" in rule_names()


@pytest.mark.slow
def test_a_rule_defined_in_one_module_and_registered_in_another(tmp_path: Path) -> None:
    """The two-file layout (the class in one module, the register_rule call in the one that
    ``imports`` names): a child process holds the driver's rule, unpickled, which imports the
    defining module alone, then imports the registering module, whose registration of the
    same rule is nothing new (it was refused: "registered already", every run a fault)."""
    import subprocess
    import sys

    (tmp_path / "ruledefs.py").write_text(
        "from rltrain.ps.rules import Async\n\n\n"
        "class ThirdAsync(Async):\n    name = 'async_third'\n"
    )
    (tmp_path / "ruleuse.py").write_text(
        "from rltrain.ps.rules import register_rule\nfrom ruledefs import ThirdAsync\n\n"
        "register_rule(ThirdAsync())\n"
    )
    config = Path(__file__).resolve().parents[1] / "configs" / "cartpole_a3c.yaml"
    argv = ["train", str(config), "--run-dir", str(tmp_path / "run")]
    for kv in (
        "imports=[ruleuse]",
        "server.rule=async_third",
        "actors=1",
        "runtime.backend=process",
    ):
        argv += ["--set", kv]
    argv += ["--set", "stop.mean_return=null", "--set", "stop.max_env_steps=2000"]
    # the bench's imports (first, in a fresh process): the rule is a mode of the command line,
    # and reapply knows it; then the run, whose children unpickle the rule (one process for
    # the three commands: an interpreter's start-up each would triple the test's time)
    bench = Path(__file__).resolve().parents[1] / "configs" / "bench_toy.yaml"
    bench_argv = ["bench", str(bench), "--run-dir", str(tmp_path / "bench")]
    for kv in ("imports=[ruleuse]", "modes=[async_third]", "runtime.backend=process"):
        bench_argv += ["--set", kv]
    bench_argv += ["--set", "server.record=true", "--set", "budget.max_seconds=0"]
    bench_argv += ["--set", "budget.epochs=1", "--set", "data.toy.samples=600"]
    code = "import sys; from rltrain.cli import main; "
    code += f"sys.exit(main({bench_argv!r}) or main(['reapply', {str(tmp_path / 'bench')!r}])"
    code += f" or main({argv!r}))"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr[-600:]
    assert "stopped by max_env_steps" in done.stdout
    assert "reapply async_third:" in done.stdout and "final parameters equal" in done.stdout


def test_a_registration_that_cannot_travel_is_named_in_one_line() -> None:
    """explore108: a rule holding a threading.Lock failed every process-runtime run, whatever
    rule it ran, as "an internal error (a bug)"."""
    import threading

    from rltrain.errors import UserError
    from rltrain.extensions import packed

    class Locked(Async):
        name = "async_locked_test"

        def __init__(self) -> None:
            self.lock = threading.Lock()

    register_rule(Locked())
    try:
        with pytest.raises(UserError, match=r"^Locked 'async_locked_test', registered in this"):
            packed()
    finally:
        unregister_rule("async_locked_test")


def test_a_run_of_a_rule_no_module_registers_says_how_to_read_it(tmp_path: Path) -> None:
    """explore108: `rltrain eval` of a run whose rule its script registered said only the
    allowed values; the algorithm's case said how to register it."""
    import yaml

    from rltrain.config import to_dict
    from rltrain.rl.config import TrainConfig, load_run_config

    root = Path(__file__).resolve().parents[1]
    cfg = to_dict(load_config(TrainConfig, root / "configs" / "cartpole_a3c.yaml"))
    cfg["server"]["rule"] = "async_scripts_own"
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    with pytest.raises(ConfigError, match=r"server.rule='async_scripts_own' is none of this "):
        load_run_config(TrainConfig, tmp_path / "config.yaml")
