"""`rltrain bench` end to end: real Ray actors, 2 workers, tiny generated data files."""

from __future__ import annotations

import csv
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from rltrain.cli import main
from rltrain.supervised import evaluation

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def many_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    """The start notes of these tests, whatever the box: no note of more worker threads
    than cores (review87: a one-core runner failed six of them)."""
    from rltrain.supervised import mode_keys

    monkeypatch.setattr(mode_keys, "usable_cores", lambda: 64)


def test_bench_sync_async_and_friends(tiny_root: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    started = time.time()
    code = main(
        [
            "bench",
            str(ROOT / "configs" / "bench_fashion_mnist.yaml"),
            "--run-dir",
            str(run_dir),
            "--set",
            f"data.root={tiny_root}",
            "--set",
            "data.download=false",
            "--set",
            "modes=[baseline, sync, async, hogwild]",
            "--set",
            "budget.epochs=2",
            "--set",
            "budget.max_seconds=60",
            "--set",
            "batch_size=32",
            "--set",
            "eval.every_seconds=0.5",
            "--set",
            "runtime.num_cpus=2",
        ]
    )
    assert code == 0
    for name in (
        "config.yaml",
        "results.csv",
        "results.md",
        "accuracy_vs_time.png",
        "accuracy_vs_samples.png",
        "summary.json",
    ):
        assert (run_dir / name).is_file(), name

    assert "## Statistical vs hardware efficiency" in (run_dir / "results.md").read_text()
    resolved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert resolved["modes"] == ["baseline", "sync", "async", "hogwild"]

    rows = {r["mode"]: r for r in csv.DictReader((run_dir / "results.csv").open())}
    assert set(rows) == {"baseline", "sync", "async", "hogwild"}
    # 640 images, 2 workers x 320, batch 32: 10 steps per worker per epoch, 2 epochs
    assert int(rows["sync"]["updates_applied"]) == 40
    assert int(rows["async"]["updates_applied"]) == 40
    assert int(rows["hogwild"]["updates_applied"]) == 40
    assert int(rows["baseline"]["updates_applied"]) == 40
    # sync's steps are rounds of 2 workers' gradients; async's one per gradient
    assert [int(rows[m]["steps"]) for m in ("baseline", "sync", "async")] == [40, 20, 40]
    for r in rows.values():
        assert int(r["samples"]) == 1280
        assert int(r["rejected"]) == 0

    summary = json.loads((run_dir / "summary.json").read_text())
    assert [r["mode"] for r in summary["results"]] == ["baseline", "sync", "async", "hogwild"]
    assert summary["stopped_by"] == "done" and summary["modes"] == resolved["modes"]
    assert summary["results"][1]["mean_staleness"] == 0

    acc = EventAccumulator(str(run_dir / "tb" / "async"), size_guidance={"histograms": 0})
    acc.Reload()
    scalars = set(acc.Tags()["scalars"])
    assert {"supervised/test_accuracy", "supervised/train_loss", "perf/samples_per_s"} <= scalars
    assert {"ps/version", "ps/dropped", "ps/rejected", "net/bytes_pushed"} <= scalars
    assert summary["results"][2]["bytes_pushed"] > 0
    assert "ps/staleness" in acc.Tags()["histograms"]
    final = acc.Scalars("supervised/test_accuracy")[-1]
    assert final.value > 0.5  # the tiny patterns are learnable in two epochs
    assert final.step == 1280
    # the bench's start plus the training time: a real date, every mode from one start
    # (explore110: a fixed epoch of 1e9 put every point in 2001)
    first = acc.Scalars("supervised/test_accuracy")[0]
    assert started <= first.wall_time <= final.wall_time <= time.time()
    for mode, none in (("baseline", {"ps/dropped", "net/bytes_pushed"}), ("hogwild", {"net/"})):
        acc = EventAccumulator(str(run_dir / "tb" / mode))  # no server, no network: no zeros
        acc.Reload()
        tags = acc.Tags()["scalars"]
        assert "ps/version" in tags and not [t for t in tags if t.startswith(tuple(none))]


def two_modes(tiny_root: Path, run_dir: Path) -> list[str]:
    """``rltrain bench``'s arguments: baseline and hogwild, an epoch each, on the tiny data."""
    args = ["bench", str(ROOT / "configs" / "bench_fashion_mnist.yaml"), "--run-dir", str(run_dir)]
    for kv in (f"data.root={tiny_root}", "modes=[baseline, hogwild]", "budget.epochs=1"):
        args += ["--set", kv]
    return args


def test_ctrl_c_while_a_mode_is_evaluated_keeps_its_results(
    tiny_root: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A mode that has trained is evaluated before the bench stops (exit 130), from then on
    HURRIED more snapshots, the last included; the outputs say what was asked for and what
    did not run, and the command that runs it (explore100: nothing said how)."""
    evaluate = evaluation.evaluate

    def interrupted(*args: object, **kwargs: object) -> object:
        os.kill(os.getpid(), signal.SIGINT)  # as a terminal's Ctrl-C, mid-evaluation
        return evaluate(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(evaluation, "evaluate", interrupted)
    run_dir = tmp_path / "run"
    args = two_modes(tiny_root, run_dir)
    args += ["--set", "budget.max_seconds=0", "--set", "eval.every_seconds=0.001"]
    assert main(args) == 130
    acc = EventAccumulator(str(next((run_dir / "tb" / "baseline").glob("events.*"))))
    acc.Reload()
    scored = acc.Scalars("supervised/test_accuracy")
    assert 1 < len(scored) <= 1 + evaluation.HURRIED  # of many more snapshots (1 ms apart)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert [r["mode"] for r in summary["results"]] == ["baseline"]
    assert summary["stopped_by"] == "interrupt" and summary["modes"] == ["baseline", "hogwild"]
    table = (run_dir / "results.md").read_text()
    assert "**Stopped by interrupt**: no results for hogwild." in table
    rest = f"rltrain bench {run_dir}/config.yaml --set 'modes=[hogwild]'"
    assert f"  to run the rest, into a new run folder: {rest}\n" in capsys.readouterr().out


def test_ctrl_c_under_the_api_returns_the_finished_runs(
    tiny_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """explore106: rltrain.bench() raised a bare KeyboardInterrupt, where the API's Ctrl-C
    returns (as train's); and a stop in the last run's evaluation said "no results for ."."""
    import rltrain

    evaluate = evaluation.evaluate

    def interrupted(*args: object, **kwargs: object) -> object:
        os.kill(os.getpid(), signal.SIGINT)  # as a notebook's interrupt, mid-evaluation
        return evaluate(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(evaluation, "evaluate", interrupted)
    res = rltrain.bench(
        ROOT / "configs" / "bench_fashion_mnist.yaml",
        run_dir=tmp_path / "run",
        quiet=True,
        data__root=str(tiny_root),
        modes=["baseline"],
        budget__epochs=1,
    )
    assert res.stopped_by == "interrupt" and [r["mode"] for r in res.results] == ["baseline"]
    table = (tmp_path / "run" / "results.md").read_text()
    assert "**Stopped by interrupt**: every run has its results." in table


def test_ctrl_c_before_any_mode_finished_leaves_a_summary_that_says_so(
    tiny_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """explore94: stopped in its first mode, a bench's folder held config.yaml alone; now
    summary.json says it was interrupted, with no results and no empty plots."""
    from rltrain.supervised import bench

    def interrupted(*args: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(bench, "run_mode", interrupted)
    run_dir = tmp_path / "run"
    args = two_modes(tiny_root, run_dir)
    assert main(args) == 130
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stopped_by"] == "interrupt" and summary["results"] == []
    assert not list(run_dir.glob("*.png"))


def test_a_mode_that_cannot_start_keeps_the_finished_modes_results(
    tiny_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker whose data.root lost the dataset (a cluster node's) fails the next mode: the
    modes that finished keep their results, and the error is one line."""
    from rltrain.supervised import bench
    from rltrain.supervised.formats import DatasetError

    run_mode = bench.run_mode

    def second_fails(cfg: Any, mode: str, *args: Any) -> Any:
        if mode == "hogwild":
            raise DatasetError("mnist not found: put ... into data.root")
        return run_mode(cfg, mode, *args)

    monkeypatch.setattr(bench, "run_mode", second_fails)
    run_dir = tmp_path / "run"
    args = two_modes(tiny_root, run_dir)
    assert main(args) == 2
    summary = json.loads((run_dir / "summary.json").read_text())
    assert [r["mode"] for r in summary["results"]] == ["baseline"]
    assert summary["stopped_by"] == "fault"


def test_soft_sync_that_waits_for_every_worker_says_it_steps_as_sync() -> None:
    """soft_sync with one worker (K = N - 1 raised to 1), or server.k = N, has no backup
    worker: it gave sync's very results without a word."""
    from rltrain.config import load_config
    from rltrain.supervised.config import BenchConfig
    from rltrain.supervised.mode_keys import start_notes

    def notes(*sets: str) -> list[str]:
        config = ROOT / "configs" / "bench_fashion_mnist.yaml"
        return start_notes(load_config(BenchConfig, config, ["modes=[sync, soft_sync]", *sets]))

    assert notes("workers=1") == [
        "note: soft_sync waits for K = 1 of 1 workers (N - 1 of 1 worker, raised to 1): no "
        "backup worker, so it steps as sync does; set workers >= 2"
    ]
    assert "(server.k=3): no backup worker" in notes("workers=3", "server.k=3")[0]
    assert notes("workers=3", "server.k=3")[0].endswith("set server.k below 3")
    assert notes("workers=3") == [] and notes("workers=3", "server.k=2") == []


@pytest.mark.parametrize(
    ("config", "sets", "said"),
    [
        ("bench_toy.yaml", ["eval.targets=[0.5]"], "note: eval.targets=[0.5] is not read: "),
        ("bench_mnist.yaml", ["data.dataset=toy_quadratic"], "eval.targets=[0.97, 0.98] is not"),
        ("bench_fashion_mnist.yaml", ["eval.distance_targets=[0.5]"], "judged by its test acc"),
        ("bench_toy.yaml", [], None),
        ("bench_fashion_mnist.yaml", [], None),
    ],
)
def test_targets_of_the_other_kind_than_the_datasets_are_said_unread(
    config: str, sets: list[str], said: str | None
) -> None:
    """explore94: a toy problem's accuracy targets (or an image dataset's distance targets)
    ran and said nothing; said at the start, not refused, since a config file switched to a
    toy problem by --set keeps its own targets. A toy problem's data keys on an image dataset
    are refused (docs/bad_input.md)."""
    from rltrain.config import ConfigError, load_config
    from rltrain.supervised.config import BenchConfig
    from rltrain.supervised.mode_keys import start_notes

    notes = start_notes(load_config(BenchConfig, ROOT / "configs" / config, sets))
    assert [n for n in notes if said is not None and said in n] == notes and len(notes) == (
        said is not None
    )
    with pytest.raises(ConfigError, match=r"data.toy.dim=5: read only with a toy problem"):
        load_config(BenchConfig, ROOT / "configs" / "bench_mnist.yaml", ["data.toy.dim=5"])
    logistic = ["data.dataset=toy_logistic", "data.toy.noise=0.5"]  # (the quadratic's noise)
    with pytest.raises(ConfigError, match=r"noise=0.5: read only with data.dataset=toy_quadr"):
        load_config(BenchConfig, ROOT / "configs" / "bench_toy.yaml", logistic)


def test_a_cluster_bench_says_which_modes_run_on_this_machine() -> None:
    """explore99: with --address, hogwild and the baseline ran on the launching machine and
    nothing said so; backend process with an address dropped the address unsaid."""
    from rltrain.config import ConfigError, load_config
    from rltrain.supervised.config import BenchConfig
    from rltrain.supervised.mode_keys import start_notes

    config = ROOT / "configs" / "bench_toy.yaml"
    at = "runtime.address=10.0.0.1:6379"
    (note,) = start_notes(load_config(BenchConfig, config, ["modes=[hogwild, sync]", at]))
    assert note.startswith("note: mode hogwild runs on this machine, not on the cluster at 10.0")
    (note,) = start_notes(load_config(BenchConfig, config, ["modes=[baseline, hogwild]", at]))
    assert note.startswith("note: modes baseline, hogwild run on this machine")
    assert start_notes(load_config(BenchConfig, config, ["modes=[hogwild]"])) == []
    with pytest.raises(ConfigError, match="runtime.backend=process runs on this machine"):
        load_config(BenchConfig, config, ["modes=[sync]", at, "runtime.backend=process"])


def test_the_start_says_what_the_budget_adds_up_to() -> None:
    """The default command trains 7 modes x 90 s, and nothing said so before it began."""
    from rltrain.config import load_config
    from rltrain.launch_bench import bench_budget
    from rltrain.supervised.config import BenchConfig

    def said(*sets: str) -> str:
        config = ROOT / "configs" / "bench_fashion_mnist.yaml"
        return bench_budget(load_config(BenchConfig, config, list(sets)))

    assert said() == "7 x 90 s: 10.5 min of training"
    assert said("budget.epochs=1").endswith("whichever is first: at most 10.5 min of training")
    assert said("budget.max_seconds=0", "budget.epochs=2") == "7 x 2 epochs of training"
    assert said("modes=[sync]") == "90 s of training"
    # and what each run's evaluation scores after it (explore110: 147 s of a 15 s run's)
    from rltrain.launch_bench import evaluation_size

    config = load_config(BenchConfig, ROOT / "configs" / "bench_fashion_mnist.yaml", [])
    every = config.eval.every_seconds
    snaps = int(90 / every) + 1
    assert evaluation_size(config, 10_000) == (
        f": about {snaps} snapshots x 10,000 test images, eval.test_samples for fewer"
    )
    fewer = load_config(
        BenchConfig, ROOT / "configs" / "bench_fashion_mnist.yaml", ["eval.test_samples=500"]
    )
    assert evaluation_size(fewer, 10_000) == f": about {snaps} snapshots x 500 test images"


def test_a_slow_worker_is_said_and_counted() -> None:
    """A slow event printed nothing and was not counted in faults.injected (two events, a
    kill and a slow, gave injected 1): the workers apply it, so the bench says it at each
    mode's start; the baseline, the reference, runs none."""
    import io

    from rltrain.config import load_config
    from rltrain.progress import Progress
    from rltrain.supervised.bench import say_slow_events
    from rltrain.supervised.config import BenchConfig

    events = "[{action: slow, target: worker, index: 1, factor: 5, at: 2, seconds: 3}]"
    config = ROOT / "configs" / "bench_fashion_mnist.yaml"
    cfg = load_config(BenchConfig, config, [f"faults.events={events}"])
    out = io.StringIO()
    assert say_slow_events(cfg, "sync", Progress("[2/7 sync]", stream=out)) == 1
    assert out.getvalue() == (
        "[2/7 sync] injected fault: worker 1 runs 5x slower from 2s to 5s (it stretches its "
        "own steps)\n"
    )
    assert say_slow_events(cfg, "baseline", Progress("[1/7 baseline]", stream=out)) == 0


def test_a_mode_that_applied_nothing_says_its_score_is_the_initial_one(
    capsys: pytest.CaptureFixture[str], run_bench: Any
) -> None:
    """average with a budget shorter than its server.average_every local steps pushed
    nothing and reported the initial parameters' score without a word."""
    out, summary = run_bench(
        "modes: [average]\nworkers: 2\nbatch_size: 16\nserver: {average_every: 100000}\n"
        "data: {dataset: toy_quadratic, toy: {dim: 8, samples: 600, noise: 0.0}}\n"
        "budget: {max_seconds: 0.5}\neval: {every_seconds: 0.5, save_models: false}\n"
    )
    assert not (out / "models").exists()  # (eval.save_models: false)
    assert summary["results"][0]["updates_applied"] == 0
    assert (
        "; no update was applied in the budget: the score is the initial" in capsys.readouterr().out
    )


def test_more_worker_threads_than_cores_are_said(monkeypatch: pytest.MonkeyPatch) -> None:
    """explore106: 3 workers on 2 cores made async 5,330 samples/s against 12,766 with 2, read
    as "async scales negatively", unsaid; summary.json says the machine and its load."""
    from rltrain.config import load_config
    from rltrain.machine import machine
    from rltrain.supervised import mode_keys
    from rltrain.supervised.config import BenchConfig

    monkeypatch.setattr(mode_keys, "usable_cores", lambda: 2)
    config = ROOT / "configs" / "bench_fashion_mnist.yaml"
    said = mode_keys.start_notes(load_config(BenchConfig, config, ["workers=3"]))
    assert said == [
        "note: 3 workers x 1 thread(s) on 2 cores: they take turns, so samples/s measures the "
        "cores as much as the rule (summary.json's machine: the cores and the load)"
    ]
    assert mode_keys.start_notes(load_config(BenchConfig, config, ["workers=2"])) == []
    assert (
        mode_keys.start_notes(load_config(BenchConfig, config, ["workers=3", "modes=[baseline]"]))
        == []
    )
    box = machine()
    assert box["cores"] >= 1 and box["torch"] and box["cpu"] and box["load_1min_at_end"] is not None


def test_bench_runs_plot_together(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """explore106: `rltrain plot` refused bench runs, and nothing overlaid two benches of
    other settings (1 worker against 2): one chart, a line per run and mode, and a table."""
    runs = []
    for w in (1, 2):
        run = tmp_path / f"w{w}"
        args = ["bench", str(ROOT / "configs" / "bench_toy.yaml"), "--run-dir", str(run)]
        for kv in (f"workers={w}", "modes=[async]", "budget.max_seconds=0", "budget.epochs=2"):
            args += ["--set", kv]
        assert main(args) == 0
        runs.append(str(run))
    capsys.readouterr()
    png = tmp_path / "both.png"
    assert main(["plot", *runs, "--out", str(png), "--title", "1 or 2 workers"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == str(png) and png.read_bytes()[:4] == b"\x89PNG"
    assert out[1] == "| run | mode | seed | final distance | seconds |"
    assert [line.split(" | ")[:2] for line in out[3:]] == [["| w1", "async"], ["| w2", "async"]]
    assert main(["plot", runs[0], "--marks", "0.1"]) == 2
    assert "--marks: for `rltrain train` runs" in capsys.readouterr().err
