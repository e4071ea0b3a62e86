"""The bench's results tables: time to a target split into statistical and hardware efficiency."""

from __future__ import annotations

import pytest

from rltrain.supervised.config import BenchConfig, EvalConfig
from rltrain.supervised.report import ModeResult, efficiency_table


def result(mode: str, seconds: float | None, samples: int | None) -> ModeResult:
    per = None if seconds is None or not samples else seconds / samples * 1e6
    return ModeResult(
        mode, 2, 0.9, 0.9, 60.0, 4.0, 100_000, 1000.0, 10, 0, 0, 0.5,
        seconds_to={"85%": seconds}, samples_to={"85%": samples}, us_per_sample_to={"85%": per},
    )  # fmt: skip


def test_time_ratio_is_samples_ratio_times_speed_ratio() -> None:
    cfg = BenchConfig(eval=EvalConfig(targets=(0.85,)))
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
