"""The comparison of Dean et al. (2012), "Large Scale Distributed Deep Networks", figure 4, on
Fashion-MNIST: Downpour SGD with Adagrad, Downpour SGD with a fixed learning rate, Sandblaster
L-BFGS, and synchronous SGD, with the same workers, model and training-time budget.

Each row is one `rltrain bench` mode (the optimizer is a per-bench setting, so each row is its
own bench run, one after the other on the same machine). Usage:

    python benchmarks/distbelief.py --seconds 90 --out runs/distbelief.md
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

import rltrain

ROWS: list[tuple[str, str, dict[str, Any]]] = [
    ("Downpour SGD + Adagrad", "async", {"optimizer__name": "adagrad", "optimizer__lr": 0.02}),
    ("Downpour SGD, fixed lr", "async", {"optimizer__name": "sgd", "optimizer__lr": 0.05}),
    ("Sandblaster L-BFGS", "sandblaster", {"sandblaster__batch_size": 6000}),
    ("sync SGD", "sync", {"optimizer__name": "sgd", "optimizer__lr": 0.05}),
]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seconds", type=float, default=90.0, help="training seconds per row")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--out", type=Path, default=None)
    a = p.parse_args()
    config = Path(__file__).resolve().parents[1] / "configs" / "bench_fashion_mnist.yaml"
    rows = []
    for label, mode, overrides in ROWS:
        with tempfile.TemporaryDirectory() as tmp:
            result = rltrain.bench(
                config,
                run_dir=Path(tmp) / "run",
                modes=[mode],
                workers=a.workers,
                budget__max_seconds=a.seconds,
                budget__epochs=0,
                **overrides,
            )
        r = result.results[0]
        rows.append((label, r))
        print(label, r["final_accuracy"], r["seconds_to"], flush=True)
    keys = list(rows[0][1]["seconds_to"])
    head = ["method", "final acc", "best acc", *[f"s to {k}" for k in keys]]
    head += [*[f"samples to {k}" for k in keys], "samples/s"]
    lines = [
        f"Fashion-MNIST, small CNN, {a.workers} workers, {a.seconds:g} s of training each",
        "",
        "| " + " | ".join(head) + " |",
        "|---" * len(head) + "|",
    ]
    for label, r in rows:
        cells = [label, f"{r['final_accuracy']:.4f}", f"{r['best_accuracy']:.4f}"]
        cells += [_fmt(r["seconds_to"][k], ".1f") for k in keys]
        cells += [_fmt(r["samples_to"][k], ",") for k in keys]
        cells += [f"{r['samples_per_s']:,.0f}"]
        lines.append("| " + " | ".join(cells) + " |")
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out is not None:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(text)


def _fmt(v: float | int | None, spec: str) -> str:
    return "not reached" if v is None else format(v, spec)


if __name__ == "__main__":
    main()
