"""The toy problems with a known optimum, and server.momentum_correction."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.nn.utils import parameters_to_vector

from rltrain.config import ConfigError, load_config
from rltrain.ps.config import (
    OptimizerConfig,
    ServerConfig,
    corrected_optimizer,
    implicit_momentum,
)
from rltrain.ps.shard import ParameterShard
from rltrain.supervised.config import BenchConfig, BudgetConfig, DataConfig, ToyConfig
from rltrain.supervised.modes import initial_params, worker_specs
from rltrain.supervised.sharding import load_data
from rltrain.supervised.toys import logistic_optimum, make_toy, relative_distance
from rltrain.supervised.worker import SupervisedWorker

TOY = ToyConfig(dim=8, samples=400, curvature=2.0, condition=10.0, noise=0.1, seed=3)


def test_quadratic_hessian_has_exactly_the_chosen_spectrum_and_the_optimum_zero_gradient() -> None:
    data = make_toy("toy_quadratic", TOY)
    x, y = data.train.x.double(), data.train.y.double()
    hessian = x.T @ x / len(x)
    eig = torch.linalg.eigvalsh(hessian)
    expected = torch.logspace(torch.log10(torch.tensor(0.2)), torch.log10(torch.tensor(2.0)), 8)
    torch.testing.assert_close(eig, expected.double(), rtol=1e-5, atol=1e-6)
    grad = x.T @ (x @ data.optimum.double() - y) / len(x)
    assert float(grad.norm()) < 1e-5  # float32-rounded optimum of an exact float64 solve
    assert data.objective == "squared" and data.l2 == 0.0


def test_logistic_data_is_separable_and_newton_finds_the_regularised_optimum() -> None:
    data = make_toy("toy_logistic", TOY)
    x, y = data.train.x.double(), data.train.y.double()
    assert set(y.unique().tolist()) == {0.0, 1.0}
    w = logistic_optimum(x, y, TOY.l2)
    grad = x.T @ (torch.sigmoid(x @ w) - y) / len(x) + TOY.l2 * w
    assert float(grad.norm()) < 1e-10
    # the same optimum the dataset carries; and it classifies the separable data well
    torch.testing.assert_close(data.optimum.double(), w, rtol=1e-5, atol=1e-6)
    assert float(((x @ w > 0).double() == y).double().mean()) > 0.95


def test_generation_is_deterministic_in_the_seed() -> None:
    a, b = make_toy("toy_quadratic", TOY), make_toy("toy_quadratic", TOY)
    assert torch.equal(a.train.x, b.train.x) and torch.equal(a.optimum, b.optimum)
    c = make_toy("toy_quadratic", dataclasses.replace(TOY, seed=4))
    assert not torch.equal(a.train.x, c.train.x)


@pytest.mark.parametrize("name", ["toy_quadratic", "toy_logistic"])
def test_the_baseline_loop_converges_to_the_known_optimum(name: str) -> None:
    cfg = _bench_cfg(name)
    data = load_data(cfg.data)
    spec = worker_specs(cfg, "baseline", data, 1)[0]
    worker = SupervisedWorker(spec, data.train)
    start = initial_params(cfg, data)
    worker.run_standalone()
    w = parameters_to_vector(worker.model.parameters()).detach()
    # SGD with a constant step ends in a noise ball around w*; far inside the start distance
    assert relative_distance(w, data.optimum, start) < 0.05


def _bench_cfg(name: str) -> BenchConfig:
    return BenchConfig(
        modes=("baseline",),
        batch_size=16,
        data=DataConfig(dataset=name, toy=TOY),
        optimizer=OptimizerConfig(name="sgd", lr=0.3),
        budget=BudgetConfig(max_seconds=0, epochs=60),
    )


def test_bench_config_refuses_misuse_with_one_line_errors(tmp_path: Path) -> None:
    cases = {
        "model: cnn\ndata: {dataset: toy_quadratic}\n": "model=cnn needs images",
        "data: {dataset: toy_cubic}\n": "data.dataset",
        "server: {momentum_correction: true}\noptimizer: {name: adam}\n": (
            "momentum_correction=true needs optimizer.name momentum or nesterov, got adam"
        ),
    }
    for i, (text, message) in enumerate(cases.items()):
        path = tmp_path / f"c{i}.yaml"
        path.write_text(text)
        with pytest.raises(ConfigError, match=message):
            load_config(BenchConfig, path)


def test_toy_sizes_are_checked_where_a_toy_is_made() -> None:
    """data.toy.samples below data.toy.dim: refused for a toy problem, and never read by
    another dataset (whose bench refuses a data.toy key set: test_bench_cli.py)."""
    from rltrain.supervised.formats import DatasetError

    bad = ToyConfig(dim=50, samples=10)
    with pytest.raises(DatasetError, match="data.toy.samples=10 is below data.toy.dim=50"):
        make_toy("toy_quadratic", bad)
    assert DataConfig(dataset="mnist", toy=bad).toy == bad


def test_momentum_correction_lowers_the_explicit_momentum_by_the_implicit() -> None:
    opt = OptimizerConfig(name="momentum", momentum=0.9)
    on = ServerConfig(rule="async", momentum_correction=True)
    assert implicit_momentum(1) == 0.0 and implicit_momentum(4) == 0.75
    assert corrected_optimizer(opt, on, 1).momentum == 0.9
    assert corrected_optimizer(opt, on, 4).momentum == pytest.approx(0.15)
    # more workers than the total allows: no explicit momentum left (torch refuses negative)
    assert corrected_optimizer(opt, on, 20).momentum == 0.0
    nesterov = corrected_optimizer(dataclasses.replace(opt, name="nesterov"), on, 20)
    assert nesterov.name == "momentum" and nesterov.momentum == 0.0
    # only the async rule has implicit momentum; and it is off unless asked for
    assert corrected_optimizer(opt, dataclasses.replace(on, rule="sync"), 4) == opt
    assert corrected_optimizer(opt, ServerConfig(rule="async"), 4) == opt
    # the shard's torch optimizer runs the corrected value
    shard = ParameterShard(torch.zeros(3), opt, on, num_workers=4)
    assert shard._slice.opt.param_groups[0]["momentum"] == pytest.approx(0.15)


@pytest.mark.slow
def test_bench_on_a_toy_problem_reports_the_distance_to_the_optimum(
    tmp_path: Path, run_bench: Any
) -> None:
    out, summary = run_bench(
        "modes: [baseline, async, hogwild]\nworkers: 2\nbatch_size: 16\n"
        "data: {dataset: toy_quadratic, toy: {dim: 8, samples: 400, noise: 0.0}}\n"
        "budget: {max_seconds: 0, epochs: 60}\neval: {every_seconds: 0.5}\n"
        "optimizer: {name: sgd, lr: 0.3}\n"
    )
    table = (out / "results.md").read_text()
    assert "final dist" in table and "steps to dist 0.01" in table
    assert "final acc" not in table  # least squares has no classes
    for name in ("distance_vs_time.png", "distance_vs_samples.png", "distance_vs_updates.png"):
        assert (out / name).stat().st_size > 0
    assert summary["target_metric"] == "distance"
    for row in summary["results"]:
        assert row["final_distance"] < 0.01, row  # noise 0: both go to the optimum
        curve = summary["curves"][row["mode"]]
        # the first snapshot is w0, taken before any worker runs (it was racy: a worker on
        # this small problem could push before the driver's first look)
        assert curve[0]["distance"] == pytest.approx(1.0)


def test_a_batch_larger_than_a_workers_shard_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from rltrain.cli import main

    config = tmp_path / "big.yaml"
    config.write_text(
        "modes: [async]\nworkers: 2\nbatch_size: 64\n"
        "data: {dataset: toy_quadratic, toy: {dim: 8, samples: 100}}\n"
    )
    assert main(["bench", str(config), "--run-dir", str(tmp_path / "run")]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith(
        "batch_size=64: each of the 2 workers holds 50 of the 100 training samples; use a "
        "batch_size of at most 50 or at most 1 worker"
    )
    # more workers than samples: the advice is a count of workers, never a batch_size of 0
    config.write_text(config.read_text().replace("workers: 2", "workers: 700"))
    assert main(["bench", str(config), "--run-dir", str(tmp_path / "run")]) != 0
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith(
            "each of the 700 workers holds 0 of the 100 training samples; use a batch_size of at "
            "most 1 or at most 1 worker"
        )
    )
    # the baseline alone trains one loop on all of them: workers do not split it
    config.write_text(config.read_text().replace("[async]", "[baseline]").replace("64", "80"))
    config.write_text(config.read_text() + "budget: {max_seconds: 0.5}\n")
    assert main(["bench", str(config), "--run-dir", str(tmp_path / "base")]) == 0


@pytest.mark.slow
def test_a_worker_that_finished_its_share_leaves_the_barriers(
    tmp_path: Path, run_bench: Any
) -> None:
    """Workers under a barrier rule end their epochs at different times (soft_sync's do not
    wait for each other; uneven shards): one that has finished is not waited for. soft_sync's
    K of 3 (or 4) workers then waited server.barrier_timeout_s at every round once fewer than
    K were left: a 5-epoch toy bench trained 245 s, or never ended."""
    _, summary = run_bench(
        "modes: [sync, soft_sync]\nworkers: 3\nbatch_size: 16\n"
        "data: {dataset: toy_quadratic, toy: {dim: 8, samples: 401, noise: 0.0}}\n"
        "budget: {max_seconds: 0, epochs: 3}\neval: {every_seconds: 0.5}\n"
        "server: {barrier_timeout_s: 60}\noptimizer: {name: sgd, lr: 0.3}\n"
    )
    for row in summary["results"]:
        assert row["train_seconds"] < 60, row  # no barrier waited out its timeout
        assert row["samples"] >= 3 * 3 * 8 * 16, row  # 3 epochs of 3 shards of 8 batches
