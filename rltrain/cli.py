"""The `rltrain` command line: train, eval, plot, bench, reapply and options."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from rltrain import signals
from rltrain.cli_checks import count_arg, episodes_arg, meant_for, score_arg, seed_arg
from rltrain.config import load_config
from rltrain.errors import RLTrainError
from rltrain.faults import PeerLost, ProcessLost, RunFailed
from rltrain.launch import UserError, run_bench_config, run_dir_arg, run_train
from rltrain.options import describe
from rltrain.progress import stdout_failed, unfailing_output
from rltrain.rl.algos import algo_names

EXIT_USAGE = 2
EXIT_FAILED = 1  # a run that a fault stopped (the summary says which)
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: as `cat`/`ls` when `| head` stops reading


class _Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line, like every other error of the CLI:
    ``rltrain: error: <message> (see rltrain <command> --help)``, exit code 2."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands: dict[str, _Parser] = {}

    def error(self, message: str) -> NoReturn:
        self.exit(
            EXIT_USAGE, f"rltrain: error: {' '.join(message.split())} (see {self.prog} --help)\n"
        )


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
        help="join a Ray cluster: 'auto' (started here with `ray start`), HOST:PORT (the head's "
        "GCS, as `ray start --address`) or ray://HOST:PORT (Ray Client); "
        "default: this machine (processes; a local Ray with runtime.backend=ray)",
    )


def build_parser() -> _Parser:
    parser = _Parser(
        prog="rltrain",
        description="Distributed RL and supervised training through a sharded parameter server.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser(
        "train",
        help=f"train an agent ({', '.join(algo_names())}) on a Gymnasium or Atari env",
        description="Actors generate experience, learners push gradients to the parameter "
        "server; stops at the config's stop criteria.",
    )
    _common(train, config_optional=True)
    train.add_argument(
        "--resume", metavar="RUN_DIR", help="continue a run from its latest checkpoint"
    )
    ev = sub.add_parser("eval", help="play a run's checkpoint and print its raw score")
    ev.add_argument("run_dir", help="a run directory written by `rltrain train`")
    ev.add_argument(
        "--episodes",
        type=episodes_arg,
        default=None,
        help="episodes to play (default: the run's eval.episodes, 10 unless it was set)",
    )
    ev.add_argument(
        "--video",
        action="store_true",
        help="record the first episode into RUN_DIR: eval-v<version>.mp4 (H.264, through "
        "imageio-ffmpeg), or .gif with --video-format gif or without imageio-ffmpeg",
    )
    ev.add_argument(
        "--video-format",
        choices=["mp4", "gif"],
        default=None,
        help="mp4 (default): H.264, a note and a GIF when imageio-ffmpeg is not installed; "
        "gif: an animated GIF",
    )
    ev.add_argument(
        "--video-view",
        choices=["game", "agent"],
        default=None,
        help="game (default): the screen as a person sees it (Atari: 210x160 RGB; other ids: "
        "env.render(); the agent's view when the env cannot draw); agent: what the network "
        "sees (Atari: the newest 84x84 frame)",
    )
    ev.add_argument(
        "--seed",
        type=seed_arg,
        default=None,
        help="seed of the evaluation envs (default: the run's eval.seed, so that `--checkpoint "
        "best --episodes N` replays the evaluation that chose it)",
    )
    ev.add_argument(
        "--max-steps",
        type=count_arg,
        default=None,
        metavar="N",
        help="agent steps per env before episodes still going are given up, with an error "
        "(default 1000000: an env without a time limit)",
    )
    ev.add_argument(
        "--checkpoint",
        default="latest",
        metavar="WHICH",
        help="latest (default: the newest checkpoints/ckpt-*.pt), best (checkpoints/best.pt, "
        "the best-scoring of the evaluations during training: eval.every_steps) or a path",
    )
    ev.add_argument(
        "--deterministic",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="act with the policy's most likely action (a Gaussian's mean, dqn's greedy one: "
        "SB3's evaluate_policy default) instead of sampling as training does (dqn: "
        "epsilon-greedy at dqn.eval_epsilon); default: the run's eval.deterministic",
    )
    plot = sub.add_parser(
        "plot",
        help="draw runs' episode return against frames and wall time (PNG)",
        description="Read the episode returns from each run's TensorBoard events (RUN/tb) and "
        "draw them against frames and against wall time, one line per run.",
    )
    plot.add_argument("runs", nargs="+", metavar="RUN", help="run directories (rltrain train)")
    plot.add_argument(
        "--out",
        "-o",
        metavar="FILE",
        help="image to write, .png (none: .png added), .svg or .pdf, or a folder (returns.png "
        "in it; default: RUN/returns.png for one run, ./returns.png for more)",
    )
    plot.add_argument("--title", help="title above the two panels")
    plot.add_argument(
        "--smooth",
        type=count_arg,
        default=None,
        metavar="N",
        help="draw the mean of the last N episodes (default: each run's, as its stop counts "
        "them: stop.window, at least as many as the envs; 1: raw returns)",
    )
    plot.add_argument(
        "--marks",
        type=score_arg,
        nargs="+",
        metavar="SCORE",
        default=(),
        help="also print a Markdown table of the wall time and frames at which each run's "
        "mean of the last N episodes first reached each score (e.g. --marks 0 10 18)",
    )
    plot.add_argument(
        "--evals",
        action="store_true",
        help="also print a Markdown table of each run's evaluations during training "
        "(eval/mean_return by frames; eval.every_steps) and, for several runs (seeds of one "
        "setting), their mean and standard deviation",
    )
    group = "group runs by their config's KEY (repeatable; e.g. server.rule): each group's mean"
    plot.add_argument("--group", action="append", default=[], metavar="KEY", help=group)
    plot.add_argument("--csv", metavar="FILE", help="also write the curves as CSV (pandas, R)")
    bench = sub.add_parser(
        "bench",
        help="compare the update rules on MNIST / Fashion-MNIST / CIFAR-10, or a toy problem "
        "with a known optimum",
        description="Train one model with each configured mode (baseline, sync, soft_sync, "
        "async, async_scale, async_drop, average, hogwild, sandblaster, allreduce) and compare "
        "test accuracy (a toy problem: the distance to its optimum) vs time.",
    )
    _common(bench)
    reapply = sub.add_parser(
        "reapply",
        aliases=["replay"],  # its name before the DQN replay memory's word was kept for that
        help="recompute a recorded bench run's updates serially; check the parameters bit for bit",
        description="Reapply each mode of a bench run recorded with server.record=true: the "
        "logged gradients are recomputed in the order the server received them, and the "
        "parameters compared (torch.equal) with the run's final ones. Exit code 1 if they differ.",
    )
    reapply.add_argument("run", metavar="RUN", help="a run directory written by `rltrain bench`")
    reapply.add_argument(
        "--mode", help="reapply this mode only, e.g. async (default: every recorded mode)"
    )
    opts = sub.add_parser("options", help="list every config option with its meaning")
    opts.add_argument("kind", choices=["train", "bench"], help="which command's config")
    parser.commands = {
        "train": train,
        "eval": ev,
        "plot": plot,
        "bench": bench,
        "reapply": reapply,
        "replay": reapply,
        "options": opts,
    }
    return parser


def _overrides(args: argparse.Namespace) -> list[str]:
    """--set items, with --address as one more (runtime.address), quoted: always a string."""
    extra = [f"runtime.address={json.dumps(args.address)}"] if args.address is not None else []
    return [*args.overrides, *extra]


def cmd_options(kind: str) -> int:
    from rltrain.rl.config import TrainConfig
    from rltrain.supervised.config import BenchConfig

    cls = {"bench": BenchConfig, "train": TrainConfig}[kind]
    rows = describe(cls, command=kind)
    width = max(len(r[0]) for r in rows)
    for key, kind_, default, doc in rows:
        print(f"{key:<{width}}  {kind_}  (default {default})")
        if doc:
            print(f"{'':<{width}}  {doc}")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from rltrain.supervised.config import BenchConfig

    with meant_for(args.config, "bench"):
        cfg = load_config(BenchConfig, args.config, _overrides(args))  # all checks first
    run_bench_config(cfg, args.run_dir, args.config)
    return 0


def cmd_reapply(args: argparse.Namespace) -> int:
    from rltrain.supervised.update_log import reapply_run

    run_dir = run_dir_arg(args.run, "", "rltrain bench")
    return 0 if reapply_run(run_dir, args.mode) else EXIT_FAILED


def cmd_train(args: argparse.Namespace) -> int:
    from rltrain.rl.config import TrainConfig, load_run_config
    from rltrain.rl.run.summary import final_line, interrupted_advice, score_advice

    overrides = _overrides(args)
    if args.resume is not None:
        if args.run_dir is not None:
            raise UserError(
                "--run-dir does not go with --resume: a resumed run writes into its RUN_DIR"
            )
        run_dir = run_dir_arg(args.resume, "--resume ")
        path = args.config or run_dir / "config.yaml"  # a run folder's: as its rltrain meant
        with meant_for(path, "train" if args.config else "resume", overrides):
            cfg = (load_config if args.config else load_run_config)(TrainConfig, path, overrides)
    else:
        if not args.config:
            raise UserError("train: give a CONFIG file (see configs/) or --resume RUN_DIR")
        with meant_for(args.config, "train"):
            cfg = load_config(TrainConfig, args.config, overrides)
    run, summary = run_train(cfg, args.run_dir, args.resume, args.config)
    print(final_line(summary, run))
    if advice := score_advice(summary, run):
        print(advice)
    if summary["stopped_by"] in ("fault", "diverged"):
        print(f"rltrain: run failed: {summary.get('failure', '')}", file=sys.stderr)
        return EXIT_FAILED
    if summary["stopped_by"] == "interrupt" or signals.interrupted():  # (the final eval's too)
        print(interrupted_advice(summary, run, args.run_dir is not None), file=sys.stderr)
        return signals.EXIT_INTERRUPTED
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from rltrain.rl.config import TrainConfig, load_run_config
    from rltrain.rl.evaluate import evaluate
    from rltrain.rl.played_policy import how_played

    run_dir = run_dir_arg(args.run_dir, "")
    with meant_for(run_dir / "config.yaml", "eval"):
        cfg = load_run_config(TrainConfig, run_dir / "config.yaml")
    flags = ("max_steps", "video_view", "video_format", "deterministic", "checkpoint")
    kwargs = {name: getattr(args, name) for name in flags if getattr(args, name) is not None}
    res = evaluate(cfg, run_dir, args.episodes, args.video, args.seed, **kwargs)
    how = how_played(cfg.algo_spec.q_network, res.deterministic, cfg.dqn.eval_epsilon)
    if args.deterministic is False and res.deterministic:  # (said, not silently ignored)
        how += ": dqn.eval_epsilon is 0, --no-deterministic changes nothing"
    print(
        f"{cfg.env.id}, checkpoint {res.checkpoint.name} (version {res.version}, {how}, "
        f"seed {res.seed}): "
        f"{len(res.returns)} episode{'s' if len(res.returns) != 1 else ''}, "
        f"raw score mean {res.mean:.2f} +- {res.std:.2f} "
        f"(min {min(res.returns):.1f}, max {max(res.returns):.1f})"
    )
    if res.note:
        print(f"note: {res.note}")
    if res.video:
        print(
            f"video: {res.video} ({res.view} view of episode 1: raw score "
            f"{res.returns[0]:.1f} in {res.lengths[0]} step{'s' if res.lengths[0] != 1 else ''})"
        )
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    from rltrain.charts import NO_MATPLOTLIB, pyplot
    from rltrain.curves import PlotError
    from rltrain.plot import plot_runs

    out = Path(args.out).expanduser() if args.out else None
    if args.out and args.out.endswith(("/", os.sep)) and not (out and out.is_dir()):
        raise PlotError(f"--out {args.out}: no such folder (give one that exists, or a file)")
    runs = [Path(r).expanduser() for r in args.runs]
    csv = Path(args.csv).expanduser() if args.csv else None
    how = (args.smooth, args.marks, args.evals, args.group, csv)
    png, table = plot_runs(runs, out, args.title, *how)
    if png is None and not table:
        raise PlotError(NO_MATPLOTLIB)
    if png is not None or pyplot() is None:  # (else: evaluations alone, no curve to draw)
        print(png if png is not None else f"rltrain: {NO_MATPLOTLIB}; the table:")
    if table:
        print(table)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
        if extra:  # named under the subcommand's usage, not the top-level one
            sub = parser.commands.get(getattr(args, "command", None) or "", parser)
            sub.error(f"unrecognized arguments: {' '.join(extra)}")
    except SystemExit as e:  # --help (0), or a usage error already printed as one line (2)
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    with unfailing_output() if args.command in ("train", "bench") else contextlib.nullcontext():
        return run_command(args)


def run_command(args: argparse.Namespace) -> int:
    """The command ``args`` names; its errors as one line. A run's progress lines are a log:
    a reader gone (``| head``) or a full disk does not end it (:func:`unfailing_output`)."""
    commands = {"options": lambda a: cmd_options(a.kind), "bench": cmd_bench, "train": cmd_train}
    commands |= {"eval": cmd_eval, "plot": cmd_plot, "reapply": cmd_reapply}
    commands["replay"] = cmd_reapply  # the old name of reapply, an alias
    try:
        kept = {"train": signals.FINAL_CHECKPOINT, "bench": signals.BENCH_RESULTS}
        stopping = kept.get(args.command, signals.STOPPING)  # (eval: no checkpoint to write)
        with signals.graceful(stopping):  # Ctrl-C / SIGTERM: a clean stop, at once the second
            code = commands[args.command](args)
            sys.stdout.flush()  # a reader that went away fails here, not at exit
            return code
    except OSError as e:  # stdout's reader closed it early (`rltrain options | head`), or full
        if not stdout_failed(e):
            raise
        if isinstance(e, BrokenPipeError):  # as `cat` does: quietly
            return EXIT_BROKEN_PIPE
        print(f"rltrain: error: cannot write the output ({e.strerror})", file=sys.stderr)
        return EXIT_FAILED
    except (RunFailed, ProcessLost, PeerLost) as e:  # not bad input: a fault it could not survive
        print(f"rltrain: run failed: {' '.join(str(e).splitlines())}", file=sys.stderr)
        return EXIT_FAILED
    except RLTrainError as e:
        print(f"rltrain: error: {' '.join(str(e).splitlines())}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("rltrain: interrupted", file=sys.stderr)
        return signals.EXIT_INTERRUPTED


def entry() -> NoReturn:
    """The `rltrain` command: :func:`main`, then exit without tearing the interpreter down:
    every command has closed what it wrote and shut Ray down, and unloading torch, Ray and
    the emulators only costs time, which a whole-process time-to-solve counts."""
    code = main()
    if "ray" in sys.modules or "multiprocessing.util" in sys.modules:
        from rltrain import runtime

        runtime.release()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe (`| head`) or stream
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    entry()
