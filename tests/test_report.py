"""The bench's results tables: time to a target split into statistical and hardware efficiency."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from rltrain.supervised.config import BenchConfig, EvalConfig
from rltrain.supervised.evaluation import eval_subset
from rltrain.supervised.report import mode_line
from rltrain.supervised.tables import ModeResult, efficiency_table


def result(mode: str, seconds: float | None, samples: int | None) -> ModeResult:
    per = None if seconds is None or not samples else seconds / samples * 1e6
    return ModeResult(
        mode, 2, 0.9, 0.9, 60.0, 4.0, 100_000, 1000.0, 10, 0, 0, 0.5,
        seconds_to={"85%": seconds}, samples_to={"85%": samples}, us_per_sample_to={"85%": per},
    )  # fmt: skip


def test_time_ratio_is_samples_ratio_times_speed_ratio() -> None:
    cfg = BenchConfig(modes=("baseline", "async", "sync"), eval=EvalConfig(targets=(0.85,)))
    rows = [
        result("baseline", 40.0, 20_000),  # 2000 us per sample
        result("async", 10.0, 40_000),  # twice the samples, at 250 us each: 4x faster
        result("sync", None, None),
    ]
    table = efficiency_table(cfg, rows).splitlines()
    assert table[0].startswith("| mode | s to 85% | samples to 85% (statistical)")
    async_row = [c.strip() for c in table[3].split("|")[1:-1]]
    assert async_row == ["async", "10.0", "40,000", "250.0", "4.00x", "0.50", "8.00"]
    assert float(async_row[5]) * float(async_row[6]) == pytest.approx(4.0)
    assert "not reached" in table[4]


def test_test_samples_are_a_seeded_random_subset_not_the_first_n() -> None:
    x, y = torch.arange(1000.0).unsqueeze(1), torch.arange(1000)
    cfg = BenchConfig(eval=EvalConfig(test_samples=100))
    sx, sy = eval_subset(cfg, x, y)
    assert len(sy) == 100 and len(set(sy.tolist())) == 100  # distinct samples
    assert sy.max() >= 500  # not the first 100 (MNIST's easier half comes first)
    assert torch.equal(sx.squeeze(1).long(), sy)  # images stay with their labels
    assert torch.equal(eval_subset(cfg, x, y)[1], sy)  # the same for every mode
    assert eval_subset(BenchConfig(), x, y)[1] is y  # 0: the whole test set


def test_the_rate_is_not_taken_over_the_ms_between_two_last_snapshots(tmp_path) -> None:  # noqa: ANN001
    """On Ray the final snapshot came 1 ms after the last periodic one: perf/samples_per_s
    ended at 0 (or half the rate) over that sliver."""
    from types import SimpleNamespace

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from rltrain.faults import FaultCounters
    from rltrain.records import STALENESS_BINS
    from rltrain.supervised.report import write_tensorboard

    stats = SimpleNamespace(
        version=1, dropped=0, rejected=0, bytes_pushed=0, bytes_pulled=0,
        staleness_hist=[0] * STALENESS_BINS,
    )  # fmt: skip
    times_samples = [(0.0, 0), (1.0, 5000), (2.0, 10000), (2.001, 10000)]
    points = [
        SimpleNamespace(
            t=t,
            samples=n,
            accuracy=0.5,
            distance=math.nan,
            train_loss=math.nan,
            validation=math.nan,
        )
        for t, n in times_samples
    ]
    trace = SimpleNamespace(
        mode="async", snapshots=[SimpleNamespace(stats=stats)] * 4, faults=FaultCounters(),
        reports=[],
    )  # fmt: skip
    write_tensorboard(tmp_path, BenchConfig(), trace, points)  # type: ignore[arg-type]
    acc = EventAccumulator(str(tmp_path / "async"))
    acc.Reload()
    assert [e.value for e in acc.Scalars("perf/samples_per_s")] == [5000.0, 5000.0]


def test_a_toy_run_climbing_away_from_the_optimum_diverged() -> None:
    """60x its start and rising was not flagged (the threshold was 1e3x); a run that ended
    near where it started, or came back from farther, did not diverge."""
    from rltrain.supervised.report import is_diverged

    assert is_diverged([1.0, 3.0, 12.0, 60.0])
    assert is_diverged([1.0, 0.5, math.inf]) and is_diverged([1.0, 2e3, 1.5e3])
    assert not is_diverged([1.0, 0.3, 0.01]) and not is_diverged([1.0, 5.0, 2.0])
    assert not is_diverged([math.nan, math.nan])  # (not a toy problem)


def test_a_validation_set_picks_the_snapshot_best_accuracy_is_of() -> None:
    """best_accuracy was the highest test accuracy of any snapshot, picked on the test set
    itself; with data.validation it is the test accuracy of the snapshot best on the
    held-out training samples, which every process holds out alike."""
    from types import SimpleNamespace

    from rltrain.errors import UserError
    from rltrain.faults import FaultCounters
    from rltrain.records import STALENESS_BINS
    from rltrain.supervised.evaluation import Point
    from rltrain.supervised.report import summarize
    from rltrain.supervised.sharding import hold_out
    from rltrain.supervised.splits import SplitDataset, VectorDataset

    x, y = torch.arange(100.0).unsqueeze(1), torch.arange(100.0)
    split = SplitDataset("toy", VectorDataset(x, y), VectorDataset(x[:5], y[:5]), 0, (0.0,), (1.0,))
    held = hold_out(split, 20)
    assert held.validation is not None and len(held.validation) == 20 and len(held.train) == 80
    kept, out = set(held.train.y.tolist()), set(held.validation.y.tolist())
    assert not kept & out and len(kept | out) == 100  # disjoint, all of them
    assert held.train.y.tolist() == sorted(kept)  # the rest keep their order
    assert torch.equal(hold_out(split, 20).validation.y, held.validation.y)  # one draw
    with pytest.raises(UserError, match=r"validation=100: the training set has 100 samples; hold"):
        hold_out(split, 100)

    stats = SimpleNamespace(
        samples=30, applied=3, dropped=0, rejected=0, mean_staleness=0.0, version=3,
        bytes_pushed=0, bytes_pulled=0, staleness_hist=[0] * STALENESS_BINS, dropped_by={},
    )  # fmt: skip
    trace = SimpleNamespace(
        mode="async", workers=2, snapshots=[SimpleNamespace(stats=stats)], reports=[],
        train_s=3.0, startup_s=1.0, faults=FaultCounters(),
    )  # fmt: skip
    # (t, samples, test accuracy, loss, updates, distance, validation accuracy)
    points = [Point(1, 10, 0.80, 1, 1, math.nan, 0.81), Point(2, 20, 0.86, 1, 2, math.nan, 0.79),
              Point(3, 30, 0.84, 1, 3, math.nan, 0.83)]  # fmt: skip
    cfg = BenchConfig(eval=EvalConfig(targets=(0.85,)))
    res = summarize(cfg, trace, points)  # type: ignore[arg-type]
    assert (res.best_accuracy, res.best_validation) == (0.84, 0.83)  # not the test's 0.86
    plain = [dataclasses.replace(p, validation=math.nan) for p in points]
    res = summarize(cfg, trace, plain)  # type: ignore[arg-type]
    assert (res.best_accuracy, res.best_validation) == (0.86, None)


def test_a_sync_line_says_why_fewer_gradients_than_workers_a_step() -> None:
    """2 workers, 420 steps, 839 gradients: a round a worker had left at the budget's end
    averaged the other's (explore94: it read as a miscount)."""
    short = dataclasses.replace(result("sync", None, None), updates_applied=839, steps=420)
    assert "839 gradients applied in 420 steps" in mode_line("[sync]", short)
    assert "(1 fewer than 2 a step: rounds a worker had left" in mode_line("[sync]", short)
    whole = dataclasses.replace(short, updates_applied=840)
    assert "fewer than" not in mode_line("[sync]", whole)
    assert "fewer than" not in mode_line("[async]", dataclasses.replace(short, mode="async"))


def test_the_line_and_csv_say_whose_updates_were_dropped(tmp_path: Path) -> None:
    """explore106: a soft_sync straggler's 10 drops were "10 dropped": its shard never
    trained, unsaid."""
    from rltrain.supervised.report import write_csv

    res = dataclasses.replace(result("soft_sync", None, None), dropped=10, dropped_by={"2": 10})
    assert ", 10 dropped (worker 2: 10), staleness" in mode_line("[soft_sync]", res)
    write_csv(tmp_path / "r.csv", [res])
    assert "dropped_by_2" in (tmp_path / "r.csv").read_text().splitlines()[0]
    assert "(worker" not in mode_line("[sync]", result("sync", None, None))


def test_a_bench_run_says_which_data_it_trained_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run_bench: Any
) -> None:
    """explore100: "mnist: 64 train / 20 test images from data/mnist" was printed and kept
    nowhere, and config.yaml kept a relative data.root (the working folder's): summary.json
    now says where the data was found, its sizes and CRC, results.md's title its sizes, and
    config.yaml the root made absolute (`rltrain reapply` and `rltrain bench RUN/config.yaml`
    from any folder read the same files)."""
    import yaml
    from conftest import write_mnist_like

    from rltrain.supervised.config import DataConfig
    from rltrain.supervised.sharding import load_data
    from rltrain.supervised.update_log import data_print

    write_mnist_like(tmp_path / "data" / "mnist", 64, 20)
    monkeypatch.chdir(tmp_path)
    out, summary = run_bench(
        "modes: [baseline]\nbatch_size: 16\nbudget: {max_seconds: 0, epochs: 1}\n"
        "data: {dataset: mnist, root: data, download: false, validation: 8}\n"
        "eval: {every_seconds: 0.5}\n"
    )
    root = str(tmp_path / "data")
    assert yaml.safe_load((out / "config.yaml").read_text())["data"]["root"] == root
    crc = data_print(load_data(DataConfig("mnist", root, validation=8)), root)["crc32"]
    assert summary["data"] == {
        "root": root, "folder": f"{root}/mnist", "train": 56, "test": 20, "validation": 8,
        "crc32": crc,
    }  # fmt: skip
    title = (out / "results.md").read_text().splitlines()[0]
    assert title.startswith("# rltrain bench: mnist (56 train, 8 held out / 20 test samples), ")


def test_results_say_which_modes_ran_off_the_cluster(tmp_path: Path) -> None:
    """explore109: on Ray, baseline and hogwild run on the bench's own machine; results.md
    did not say so, and its samples/s column compared machines as if rules."""
    from rltrain.runtime.config import RuntimeConfig
    from rltrain.supervised.report import write_markdown

    cfg = BenchConfig(
        modes=("baseline", "async", "hogwild"),
        eval=EvalConfig(targets=(0.85,)),
        runtime=RuntimeConfig(address="auto"),
    )
    rows = [result(m, 10.0, 1000) for m in cfg.modes]
    write_markdown(tmp_path / "results.md", cfg, rows)
    assert (
        "**Where they ran**: baseline, hogwild on the machine the bench was started from, "
        "async on the Ray cluster (--address auto)" in (tmp_path / "results.md").read_text()
    )
    write_markdown(tmp_path / "here.md", dataclasses.replace(cfg, runtime=RuntimeConfig()), rows)
    assert "Where they ran" not in (tmp_path / "here.md").read_text()


def test_the_title_says_how_each_replica_is_split() -> None:
    """explore114: a DNI run, a GPipe run and an unsplit one had the same results.md title."""
    from rltrain.supervised.config import BenchConfig, SupervisedModelConfig
    from rltrain.supervised.mode_keys import replicas_text

    def text(workers: int, **model: Any) -> str:
        modes = ("async",) if model else BenchConfig().modes
        cfg = BenchConfig(workers=workers, modes=modes, model=SupervisedModelConfig(**model))
        return replicas_text(cfg)

    assert text(1) == "1 worker" and text(4) == "4 workers"
    assert text(2, stages=2) == "2 workers of 2 stages each with the exact backward (GPipe)"
    dni = "1 worker of 3 stages with synthetic gradients (DNI, delay 2)"
    assert text(1, stages=3, synthetic="dni") == dni
    assert "label-conditioned synthetic gradients (cDNI, delay 4)" in text(
        1, stages=2, synthetic="cdni", synthetic_delay=4
    )
