"""`rltrain bench` end to end: real Ray actors, 2 workers, tiny generated data files."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from rltrain.cli import main

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]


def test_bench_sync_async_and_friends(tiny_root: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
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
    for r in rows.values():
        assert int(r["samples"]) == 1280
        assert int(r["rejected"]) == 0

    summary = json.loads((run_dir / "summary.json").read_text())
    assert [r["mode"] for r in summary["results"]] == ["baseline", "sync", "async", "hogwild"]
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
