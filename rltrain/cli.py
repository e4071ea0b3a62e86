"""The `rltrain` command line: train, eval, bench and options."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rltrain.config import describe, load_config
from rltrain.errors import RLTrainError

if TYPE_CHECKING:
    from rltrain.supervised.config import BenchConfig
    from rltrain.supervised.datasets import SplitDataset

EXIT_USAGE = 2


class UserError(RLTrainError):
    """A problem with what the user asked for: printed as one line, exit code 2."""


def _common(p: argparse.ArgumentParser, config_optional: bool = False) -> None:
    if config_optional:
        p.add_argument(
            "config", nargs="?", help="YAML config file (default with --resume: the run's)"
        )
    else:
        p.add_argument("config", help="YAML config file (see configs/)")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config field, e.g. --set optimizer.lr=0.01 (repeatable)",
    )
    p.add_argument("--run-dir", help="output folder (default: runs/<config-name>-<timestamp>)")
    p.add_argument(
        "--address",
        help="join a Ray cluster: 'auto' (started with `ray start`) or ray://host:port; "
        "default: a local Ray instance",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rltrain",
        description="Distributed RL and supervised training through a sharded parameter server.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser(
        "train",
        help="train an agent (a3c, impala, a2c) on a Gymnasium or Atari environment",
        description="Actors generate experience, learners push gradients to the parameter "
        "server; stops at the config's stop criteria.",
    )
    _common(train, config_optional=True)
    train.add_argument(
        "--resume", metavar="RUN_DIR", help="continue a run from its latest checkpoint"
    )
    ev = sub.add_parser("eval", help="play a run's latest checkpoint and print its raw score")
    ev.add_argument("run_dir", help="a run directory written by `rltrain train`")
    ev.add_argument("--episodes", type=int, default=10, help="episodes to play (default 10)")
    ev.add_argument("--video", action="store_true", help="write a GIF of one episode into RUN_DIR")
    ev.add_argument("--seed", type=int, default=12345, help="seed of the evaluation envs")
    bench = sub.add_parser(
        "bench",
        help="compare the update rules on MNIST / Fashion-MNIST / CIFAR-10",
        description="Train one model with each configured mode (baseline, sync, soft_sync, "
        "async, async_scale, async_drop, average, hogwild) and compare test accuracy vs time.",
    )
    _common(bench)
    opts = sub.add_parser("options", help="list every config option with its meaning")
    opts.add_argument("kind", choices=["train", "bench"], help="which command's config")
    return parser


def _overrides(args: argparse.Namespace) -> list[str]:
    """--set items, with --address as one more (runtime.address)."""
    extra = [f"runtime.address={args.address}"] if args.address else []
    return [*args.overrides, *extra]


def cmd_options(kind: str) -> int:
    from rltrain.rl.config import TrainConfig
    from rltrain.supervised.config import BenchConfig

    cls = {"bench": BenchConfig, "train": TrainConfig}[kind]
    rows = describe(cls)
    width = max(len(r[0]) for r in rows)
    for key, kind_, default, doc in rows:
        print(f"{key:<{width}}  {kind_}  (default {default})")
        if doc:
            print(f"{'':<{width}}  {doc}")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from rltrain.rundir import new_run_dir, write_config
    from rltrain.supervised.config import BenchConfig
    from rltrain.supervised.datasets import load_dataset

    overrides = _overrides(args)
    cfg = load_config(BenchConfig, args.config, overrides)  # all checks before anything starts
    data = load_dataset(cfg.data.dataset, cfg.data.root, cfg.data.download, log=print)
    run_dir = new_run_dir(args.config, args.run_dir)
    write_config(run_dir, cfg)
    print(f"rltrain bench: {cfg.data.dataset}, modes {', '.join(cfg.modes)}; writing {run_dir}")
    return _bench(cfg, data, run_dir)


def _bench(cfg: BenchConfig, data: SplitDataset, run_dir: Path) -> int:
    from rltrain import runtime
    from rltrain.progress import Progress
    from rltrain.supervised import report
    from rltrain.supervised.bench import run_mode

    started = time.time()
    needs_ray = any(m not in ("baseline", "hogwild") for m in cfg.modes)
    if needs_ray:
        need = cfg.workers * cfg.runtime.worker_cpus + cfg.server.shards * cfg.runtime.server_cpus
        where = runtime.init_ray(cfg.runtime, need)
        print(f"runtime: {where}")
    results, curves = [], {}
    try:
        for i, mode in enumerate(cfg.modes):
            label = f"[{i + 1}/{len(cfg.modes)} {mode}]"
            trace = run_mode(cfg, mode, data, Progress(label))
            prog = Progress(label)
            points = report.evaluate(
                cfg, data, trace, lambda k, n, p=prog: p.update(k / n, f"evaluating {k}/{n}")
            )
            prog.close()
            res = report.summarize(cfg, trace, points)
            report.write_tensorboard(run_dir / "tb", cfg, trace, points)
            results.append(res)
            curves[mode] = points
            reached = ", ".join(
                f"{k} in {v:.1f}s" if v is not None else f"{k} not reached"
                for k, v in res.seconds_to.items()
            )
            print(
                f"{label} accuracy {res.final_accuracy:.4f} ({reached}); "
                f"{res.samples_per_s:,.0f} samples/s, {res.updates_applied:,} updates, "
                f"{res.dropped} dropped, staleness {res.mean_staleness:.2f}"
            )
    finally:
        if needs_ray:
            runtime.shutdown()
    report.write_outputs(run_dir, cfg, results, curves)
    print()
    print(report.markdown_table(cfg, results))
    print(f"done in {time.time() - started:.0f}s: {run_dir}/results.md, results.csv, ")
    print(f"  accuracy_vs_time.png, summary.json; tensorboard --logdir {run_dir / 'tb'}")
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from rltrain.checkpoint import latest_checkpoint, load_checkpoint
    from rltrain.rl.config import TrainConfig
    from rltrain.rundir import new_run_dir, write_config

    overrides = _overrides(args)
    if args.resume:
        run_dir = Path(args.resume)
        saved = run_dir / "config.yaml"
        if not saved.is_file():
            raise UserError(f"--resume {run_dir}: not a run directory (no config.yaml)")
        ckpt = latest_checkpoint(run_dir)
        if ckpt is None:
            raise UserError(f"--resume {run_dir}: no checkpoints/ckpt-*.pt to resume from")
        load_checkpoint(ckpt)  # a damaged checkpoint fails here, before anything starts
        cfg = load_config(TrainConfig, args.config or saved, overrides)
    else:
        if not args.config:
            raise UserError("train: give a CONFIG file (see configs/) or --resume RUN_DIR")
        cfg = load_config(TrainConfig, args.config, overrides)
    from rltrain.rl.train import Trainer, probe_env

    spec = probe_env(cfg)  # an unknown env id fails here, before any folder is made
    if not args.resume:
        run_dir = new_run_dir(args.config, args.run_dir)
    trainer = Trainer(cfg, run_dir, resume=bool(args.resume), spec=spec)
    write_config(trainer.run_dir, cfg)
    print(f"rltrain train: {cfg.algo.name} on {cfg.env.id}; writing {trainer.run_dir}")
    summary = trainer.run()
    print(
        f"stopped by {summary['stopped_by']} after {summary['wall_seconds']:.0f}s: "
        f"{summary['env_steps']:,} steps, {summary['episodes']} episodes, "
        f"mean return {summary['mean_return']}; summary.json, checkpoints/, "
        f"tensorboard --logdir {trainer.run_dir / 'tb'}"
    )
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from rltrain.rl.config import TrainConfig
    from rltrain.rl.evaluate import evaluate

    run_dir = Path(args.run_dir)
    if not (run_dir / "config.yaml").is_file():
        raise UserError(f"{run_dir}: not a run directory (no config.yaml)")
    if args.episodes < 1:
        raise UserError(f"--episodes {args.episodes}: must be >= 1")
    cfg = load_config(TrainConfig, run_dir / "config.yaml")
    res = evaluate(cfg, run_dir, args.episodes, args.video, args.seed)
    print(
        f"{cfg.env.id}, checkpoint {res.checkpoint.name} (version {res.version}): "
        f"{len(res.returns)} episodes, raw score mean {res.mean:.2f} +- {res.std:.2f} "
        f"(min {min(res.returns):.1f}, max {max(res.returns):.1f})"
    )
    if res.video:
        print(f"video: {res.video}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "options":
            return cmd_options(args.kind)
        if args.command == "bench":
            return cmd_bench(args)
        if args.command == "train":
            return cmd_train(args)
        if args.command == "eval":
            return cmd_eval(args)
    except RLTrainError as e:
        print(f"rltrain: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("rltrain: interrupted", file=sys.stderr)
        return 130
    return EXIT_USAGE


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
