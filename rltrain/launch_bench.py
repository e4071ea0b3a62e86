"""Starting `rltrain bench`: what it checks and makes before any mode trains (the Ray address,
the run folder and its config.yaml, the data and its sizes), shared by the command line
(:mod:`rltrain.cli`) and the Python API (:mod:`rltrain.api`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

from rltrain.cluster_address import check_address
from rltrain.errors import UserError

if TYPE_CHECKING:
    from rltrain.supervised.config import BenchConfig


def run_bench_config(cfg: BenchConfig, run_dir: str | Path | None, config_path: str | None) -> Path:
    """``rltrain bench`` after its config is read (also :func:`rltrain.api.bench`); returns
    the run folder. ``config_path`` names the default folder (runs/<name>-<time>)."""
    from rltrain.machine import mark_start
    from rltrain.progress import say
    from rltrain.rundir import check_run_dir, new_run_dir, write_config
    from rltrain.supervised.bench import run_bench
    from rltrain.supervised.mode_keys import start_notes
    from rltrain.supervised.sharding import load_data

    mark_start()  # (the load beside the bench: summary.json's machine)
    check_run_dir(run_dir)
    check_address(cfg.runtime.address)
    data = load_data(cfg.data, log=say)  # (its errors name data.root as it was typed)
    cfg = with_absolute_root(cfg)
    check_bench_sizes(cfg, len(data.train), len(data.test))
    if cfg.server.shards > 1:  # (one always fits) before any mode trains, not at the first
        from rltrain.ps.server import ShardLayout  # that starts a server
        from rltrain.supervised.modes import initial_params

        ShardLayout(initial_params(cfg, data).numel(), cfg.server.shards)
    name = Path(config_path).stem if config_path else f"bench_{cfg.data.dataset}"
    out = new_run_dir(name, run_dir)
    write_config(out, cfg)
    say(
        f"rltrain bench: {cfg.data.dataset}, modes {', '.join(cfg.modes)} "
        f"({bench_budget(cfg)}, and each run's start-up and evaluation"
        f"{evaluation_size(cfg, len(data.test))}); writing {out}"
    )
    for note in start_notes(cfg):
        say(note, note=True)
    run_bench(cfg, data, out)
    return out


def with_absolute_root(cfg: BenchConfig) -> BenchConfig:
    """``cfg`` with a relative data.root made absolute, as it runs and as config.yaml keeps
    it. explore100: config.yaml kept `root: root2`, the bench's working folder's, so
    `rltrain bench RUN/config.yaml` or `rltrain reapply RUN` elsewhere read other data, or
    none. A ``~`` root stays as typed: it names the same folder from any working folder
    (and on a cluster each node's own, as docs/supervised.md says)."""
    root = cfg.data.root
    if not root.strip() or root.startswith("~") or Path(root).is_absolute():
        return cfg  # (an empty one is refused by the dataset's loader, in its own words)
    data = dataclasses.replace(cfg.data, root=str(Path(root).absolute()))
    return dataclasses.replace(cfg, data=data)


def evaluation_size(cfg: BenchConfig, test_len: int) -> str:
    """``: about N snapshots x M test images``: what each run's evaluation scores after it
    trains, where a time budget tells the snapshots (explore110: a 15 s budget's evaluation
    took 147 s of a loaded box, unannounced; ``eval.test_samples`` scores fewer images)."""
    if not cfg.budget.max_seconds:
        return ""
    from rltrain.supervised.datasets import DATASETS as IMAGE_SETS
    from rltrain.supervised.modes import MAX_SNAPSHOTS

    snaps = min(MAX_SNAPSHOTS, int(cfg.budget.max_seconds / cfg.eval.every_seconds) + 1)
    images = min(cfg.eval.test_samples or test_len, test_len)
    fewer = "" if cfg.eval.test_samples else ", eval.test_samples for fewer"
    kind = "test images" if cfg.data.dataset in IMAGE_SETS else "test samples"
    return f": about {snaps} snapshots x {images:,} {kind}{fewer}"


def bench_budget(cfg: BenchConfig) -> str:
    """What the bench will take, in words: the modes x each one's training budget (each mode
    also starts its workers and evaluates its snapshots after it: seconds more)."""
    b, n = cfg.budget, len(cfg.modes) * cfg.seeds
    epochs = f"{b.epochs} epoch{'s' if b.epochs != 1 else ''}" if b.epochs else ""
    times = f"{len(cfg.modes)} x" if cfg.seeds == 1 else f"{cfg.seeds} seeds x"
    if cfg.seeds > 1 and len(cfg.modes) > 1:
        times = f"{len(cfg.modes)} modes x {times}"
    if not b.max_seconds:
        return f"{times} {epochs} of training"
    each = f"{b.max_seconds:g} s" + (f" or {epochs}, whichever is first" if epochs else "")
    if n == 1:
        return f"{each} of training"
    upto = "at most " if epochs else ""
    return f"{times} {each}: {upto}{n * b.max_seconds / 60:.1f} min of training"


def check_bench_sizes(cfg: BenchConfig, train_size: int, test_size: int) -> None:
    """UserError when a worker's shard has no full batch, a Sandblaster batch has fewer
    samples than portions (nothing could train), or ``eval.test_samples`` asks for more test
    samples than there are (checked once the data's size is known)."""
    if cfg.eval.test_samples > test_size:
        raise UserError(
            f"eval.test_samples={cfg.eval.test_samples}: {cfg.data.dataset} has {test_size} "
            f"test samples; use at most {test_size}, or 0 for all of them"
        )
    workers = 1 if set(cfg.modes) == {"baseline"} else cfg.workers  # (one loop, all the data)
    shard = train_size // workers
    if shard < cfg.batch_size:
        most = train_size // cfg.batch_size  # workers with a full batch each
        fewer = f" or at most {most} worker{'s' * (most != 1)}" if most else ""
        raise UserError(
            f"batch_size={cfg.batch_size}: each of the {workers} workers holds {shard} of the "
            f"{train_size} training samples; use a batch_size of at most {max(shard, 1)}{fewer}"
        )
    sb = cfg.sandblaster
    batch = sb.batch_size if 0 < sb.batch_size < train_size else train_size
    if "sandblaster" in cfg.modes and sb.portions > batch:
        raise UserError(
            f"sandblaster.portions={sb.portions} exceeds the {batch} samples per evaluation"
        )
