"""Synthetic gradients against GPipe and one process: issue 39's table, from one command.

Each row is one ``rltrain bench`` run (a fresh process; ``--backend``: its runtime) of the config
(``configs/bench_fashion_mnist.yaml`` by default, its ``data.root`` given with ``--root``),
one worker, ``--seconds`` of training: one process (mode ``baseline``), GPipe stages
(``model.stages`` K, mode ``async``), DNI and cDNI stages (``model.synthetic``), and GPipe and
cDNI with a slow link between stages (``model.link_ms``; cDNI also with
``model.synthetic_delay=1``, its true gradients taken at the next batch). It prints a
Markdown table: samples per second, training seconds to each ``eval.targets`` accuracy, and
the final test accuracy (all rows train for the same time; ``--problem toy``: the
least-squares toy problem with model deep_linear, its distance to the optimum), and for DNI
and cDNI the synthetic gradients' mean cosine and relative L2 error against the true ones
and their staleness.

    python benchmarks/synthetic_gradients.py [--problem fashion_mnist|toy]
        [--root /usr/share/datasets/fashion-mnist]
        [--seconds 60] [--stages 2 3] [--link-ms 5 20] [--hidden 0]
        [--backend auto|process|ray]
        [--out table.md]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def variants(stages: list[int], links_ms: list[float]) -> list[tuple[str, list[str]]]:
    """(row name, --set overrides) of every run."""
    rows: list[tuple[str, list[str]]] = [("one process", ["modes=[baseline]"])]
    for k in stages:
        base = ["modes=[async]", f"model.stages={k}"]
        rows.append((f"GPipe, {k} stages", base))
        for kind in ("dni", "cdni"):
            rows.append((f"{kind.upper()}, {k} stages", [*base, f"model.synthetic={kind}"]))
    for link_ms in [ms for ms in links_ms if ms]:
        slow = ["modes=[async]", f"model.stages={stages[0]}", f"model.link_ms={link_ms:g}"]
        name = f"{stages[0]} stages, {link_ms:g} ms links"
        rows.append((f"GPipe, {name}", slow))
        rows.append((f"CDNI, {name}", [*slow, "model.synthetic=cdni"]))
        # the true gradients at the next batch: each batch waits for the link's round trip
        late = [*slow, "model.synthetic=cdni", "model.synthetic_delay=1"]
        rows.append((f"CDNI, {name}, delay 1", late))
    return rows


def run(config: str, sets: list[str], out: Path) -> dict:
    """One ``rltrain bench``; its results row."""
    argv = [sys.executable, "-m", "rltrain.cli", "bench", config, "--run-dir", str(out)]
    for s in sets:
        argv += ["--set", s]
    subprocess.run(argv, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    summary = json.loads((out / "summary.json").read_text())
    (row,) = summary["results"]
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "--problem",
        choices=["fashion_mnist", "toy"],
        default="fashion_mnist",
        help="toy: configs/bench_toy.yaml with model deep_linear (a known optimum)",
    )
    p.add_argument("--config", help="the bench config (default: the problem's)")
    p.add_argument("--root", help="data.root (the dataset's folder)")
    p.add_argument("--seconds", type=float, default=60.0, help="training seconds per row")
    p.add_argument("--stages", type=int, nargs="+", default=[2, 3])
    p.add_argument(
        "--link-ms",
        type=float,
        nargs="+",
        default=[5.0, 20.0],
        help="the slow links' rows (0: none): GPipe, cDNI, and cDNI with model.synthetic_delay=1",
    )
    p.add_argument("--hidden", type=int, default=0, help="model.synthetic_hidden")
    p.add_argument(
        "--backend",
        choices=["auto", "process", "ray"],
        default="auto",
        help="runtime.backend (auto: the process runtime on one machine)",
    )
    p.add_argument("--out", help="also write the table to this file")
    args = p.parse_args()
    toy = args.problem == "toy"
    config = args.config or str(ROOT / "configs" / f"bench_{args.problem}.yaml")
    common = ["workers=1", f"budget.max_seconds={args.seconds:g}", "budget.epochs=0"]
    common += ["model.name=deep_linear"] if toy else []
    hidden = [f"model.synthetic_hidden={args.hidden}"]  # (synthetic rows only: read there)
    common += [f"data.root={args.root}"] if args.root else []
    common += [f"runtime.backend={args.backend}"]
    lines = [
        f"| run | samples/s | s to targets | final {'distance' if toy else 'accuracy'} | "
        "synthetic gradient: cosine, "
        "relative L2, staleness |",
        "|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, sets) in enumerate(variants(args.stages, args.link_ms)):
            dni = any(s.startswith("model.synthetic=") for s in sets)
            row = run(config, [*common, *(hidden if dni else []), *sets], Path(tmp) / f"run{i}")
            reach = ", ".join(
                f"{k}: {'-' if v is None else f'{v:.1f}'}" for k, v in row["seconds_to"].items()
            )
            final = f"{row['final_distance']:.2e}" if toy else f"{row['final_accuracy']:.4f}"
            syn = row.get("synthetic") or {}
            counters = (
                f"{syn['cosine']:.3f}, {syn['relative_l2']:.3f}, {syn['staleness']:.2f}"
                if syn
                else "-"
            )
            line = f"| {name} | {row['samples_per_s']:,.0f} | {reach} | {final} | {counters} |"
            lines.append(line)
            print(line, flush=True)
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
