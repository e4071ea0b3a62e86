"""`seeds`: each bench mode run at several seeds, round by round, and reported as each mode's
mean and standard deviation beside every run's row."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from rltrain.supervised.config import BenchConfig, EvalConfig
from rltrain.supervised.stopped import not_run, rest_command
from rltrain.supervised.tables import ModeResult, efficiency_table, seeds_table, spread


def result(mode: str, seed: int, acc: float, seconds: float | None) -> ModeResult:
    samples = None if seconds is None else int(seconds * 1000)
    per = None if seconds is None else 1000.0
    return ModeResult(
        mode, 2, acc, acc, 60.0, 4.0, 100_000, 1000.0, 10, 0, 0, 0.5,
        seconds_to={"85%": seconds}, samples_to={"85%": samples}, us_per_sample_to={"85%": per},
        seed=seed,
    )  # fmt: skip


CFG = BenchConfig(modes=("baseline", "async"), seeds=3, eval=EvalConfig(targets=(0.85,)))
ROWS = [
    result("baseline", 0, 0.86, 10.0),
    result("async", 0, 0.84, None),  # never reached 85%
    result("baseline", 1, 0.88, 12.0),
    result("async", 1, 0.87, 6.0),
    result("baseline", 2, 0.90, 14.0),
    result("async", 2, 0.89, 4.0),
]


def test_each_mode_gets_its_mean_and_sample_std_and_how_many_reached() -> None:
    assert spread([1.0, 2.0, 3.0]) == {"mean": 2.0, "std": 1.0, "n": 3, "of": 3}
    assert spread([None, math.nan, 5.0]) == {"mean": 5.0, "std": None, "n": 1, "of": 3}
    lines = seeds_table(CFG, ROWS).splitlines()
    assert (
        lines[0]
        == "| mode | runs | final acc | s to 85% | samples to 85% | samples/s | mean staleness |"
    )
    baseline = [c.strip() for c in lines[2].split("|")[1:-1]]
    assert baseline[:5] == ["baseline", "3", "0.8800 ± 0.0200", "12.0 ± 2.0", "12,000 ± 2,000"]
    async_ = [c.strip() for c in lines[3].split("|")[1:-1]]
    assert async_[3] == "5.0 ± 1.4 (2/3)"  # the mean of the 2 runs of 3 that reached it


def test_the_efficiency_split_compares_each_run_with_the_reference_at_its_seed() -> None:
    lines = efficiency_table(CFG, ROWS).splitlines()
    assert lines[0].startswith("| mode | seed | s to 85%")
    rows = {tuple(c.strip() for c in line.split("|")[1:3]): line for line in lines[2:]}
    assert "| 2.00x |" in rows[("async", "1")]  # 6 s against seed 1's baseline, 12 s
    assert "| 3.50x |" in rows[("async", "2")]  # 4 s against 14 s


def test_a_stopped_bench_names_the_runs_it_has_no_results_for() -> None:
    assert not_run(CFG, ROWS[:3]) == "baseline (seed 2), async (seeds 1, 2)"
    one = BenchConfig(modes=("baseline", "async", "hogwild"))
    assert not_run(one, [result("baseline", 0, 0.9, 1.0)]) == "async, hogwild"


def test_a_stopped_bench_says_the_command_that_runs_the_rest(tmp_path: Path) -> None:
    """explore100: "stopped: results of 1 finished mode(s)" said nothing of how to run the
    others: the command runs them into a new run folder, from the first seed one misses."""
    run = tmp_path / "my run"
    config = f"rltrain bench '{run}/config.yaml'"
    one = BenchConfig(modes=("baseline", "async", "hogwild"))
    done = [result("baseline", 0, 0.9, 1.0)]
    assert rest_command(one, done, run) == f"{config} --set 'modes=[async, hogwild]'"
    assert rest_command(one, [], run) == config
    assert rest_command(CFG, ROWS[:4], run) == f"{config} --set seed=2 --set seeds=1"
    assert rest_command(CFG, [*ROWS[:2], ROWS[3], ROWS[5]], run) == (
        f"{config} --set 'modes=[baseline]' --set seed=1 --set seeds=2"
    )
    # explore106: a round stopped part-way: its finished runs do not run again
    assert rest_command(CFG, ROWS[:3], run) == (
        f"{config} --set 'modes=[async]' --set seed=1 --set seeds=2; "
        f"{config} --set 'modes=[baseline]' --set seed=2 --set seeds=1"
    )
    assert rest_command(CFG, ROWS, run) is None


def test_the_seeds_run_round_by_round_and_are_reported_per_mode(
    run_bench: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from rltrain.api import BenchResult

    out, summary = run_bench(
        "modes: [baseline, async]\nworkers: 2\nbatch_size: 16\nseed: 5\nseeds: 2\n"
        "data: {dataset: toy_quadratic, toy: {dim: 8, samples: 400, noise: 0.0}}\n"
        "budget: {max_seconds: 0, epochs: 10}\neval: {every_seconds: 0.5}\n"
        "optimizer: {name: sgd, lr: 0.3}\n"
    )
    printed, said = capsys.readouterr()
    assert "(2 modes x 2 seeds x 10 epochs of training, and each run's start-up" in printed
    labels = [line.split("]")[0] + "]" for line in printed.splitlines() if "distance to" in line]
    assert labels == [
        "[1/4 baseline seed 5]", "[2/4 async seed 5]", "[3/4 baseline seed 6]", "[4/4 async seed 6]"
    ]  # fmt: skip
    assert "over 2 seeds (mean ± standard deviation" in printed
    assert "[4/4 async seed 6] about " in said and " min left: 1 run to go at " in said
    assert summary["seeds"] == [5, 6]
    assert [(r["mode"], r["seed"]) for r in summary["results"]] == [
        ("baseline", 5), ("baseline", 6), ("async", 5), ("async", 6)
    ]  # fmt: skip
    with (out / "results.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [(r["mode"], r["seed"]) for r in rows] == [("baseline", "5"), ("baseline", "6"),
                                                      ("async", "5"), ("async", "6")]  # fmt: skip
    # the seeds differ: another initialisation and data order each
    assert rows[2]["final_distance"] != rows[3]["final_distance"]
    assert sorted(summary["curves"]) == sorted(
        f"{m} seed {s}" for m in ("baseline", "async") for s in (5, 6)
    )
    assert sorted(p.name for p in (out / "tb" / "async").iterdir()) == ["seed5", "seed6"]
    # each run's final model, rebuilt as its file says (explore106: a bench kept none)
    from rltrain.supervised.models import build_model

    names = [f"{m}-seed{s}.pt" for m in ("async", "baseline") for s in (5, 6)]
    assert sorted(p.name for p in (out / "models").iterdir()) == names
    saved = torch.load(out / "models" / "async-seed6.pt", weights_only=True)
    net = build_model(saved["model"], saved["in_shape"], saved["num_classes"])
    net.load_state_dict(saved["state_dict"])
    assert saved["mode"] == "async" and saved["version"] > 0
    table = (out / "results.md").read_text()
    assert "2 seeds from 5" in table and "## Every run" in table
    result = BenchResult.from_run_dir(str(out))  # (a str crashed)
    with pytest.raises(ValueError, match=r"ran 2 seeds of each mode; spread\(\) gives"):
        result.by_mode()
    spread_ = result.spread()["async"]["final_distance"]
    finals = [float(r["final_distance"]) for r in rows[2:]]
    assert spread_["n"] == 2 and spread_["mean"] == pytest.approx(sum(finals) / 2)
