"""Bench mode allreduce: gradients averaged by torch.distributed among Ray processes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


@pytest.mark.slow
@pytest.mark.shared_ray
def test_allreduce_takes_the_same_steps_as_sync_without_a_server(
    tmp_path: Path, run_bench: Any
) -> None:
    out, summary = run_bench(
        "modes: [sync, allreduce]\nworkers: 2\nbatch_size: 16\n"
        "data: {dataset: toy_quadratic, toy: {dim: 8, samples: 600, condition: 10, noise: 0.0}}\n"
        "budget: {max_seconds: 0, epochs: 5}\neval: {every_seconds: 0.5}\n"
        "optimizer: {name: sgd, lr: 0.3}\n"
    )
    rows = {r["mode"]: r for r in summary["results"]}
    sync, allreduce = rows["sync"], rows["allreduce"]
    # the same averaged gradient and the same SGD step, from the same start, on the same
    # batches: the two land on the same parameters, one through a server, one without
    assert allreduce["final_distance"] == pytest.approx(sync["final_distance"], rel=1e-4)
    assert allreduce["samples"] == sync["samples"] == 2 * 5 * (300 // 16) * 16
    assert allreduce["final_distance"] < 0.05
