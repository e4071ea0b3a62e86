"""The `rltrain` command line: train, eval, plot, bench, reapply and options."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from rltrain import signals
from rltrain.cli_checks import meant_for
from rltrain.cli_parser import EXIT_USAGE, build_parser
from rltrain.config import load_config
from rltrain.errors import RLTrainError
from rltrain.faults import PeerLost, ProcessLost, RunFailed
from rltrain.launch import UserError, run_dir_arg, run_train
from rltrain.launch_bench import run_bench_config
from rltrain.options import describe, manual, select, terminal_columns
from rltrain.progress import stdout_failed, unfailing_output

if TYPE_CHECKING:  # (imported when eval runs: torch's import costs every command a second)
    from rltrain.rl.evaluate import EvalResult

EXIT_FAILED = 1  # a run that a fault stopped (the summary says which)
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: as `cat`/`ls` when `| head` stops reading


def _overrides(args: argparse.Namespace) -> list[str]:
    """--set items, with --address as one more (runtime.address), quoted: always a string."""
    extra = [f"runtime.address={json.dumps(args.address)}"] if args.address is not None else []
    return [*args.overrides, *extra]


def cmd_options(kind: str, imports: Sequence[str] = (), key: str | None = None) -> int:
    from rltrain.envs.user import import_env_modules
    from rltrain.rl.config import TrainConfig
    from rltrain.supervised.config import BenchConfig

    import_env_modules(imports, "--import")  # (from the current folder, as a run's imports)

    classes = {"bench": BenchConfig, "train": TrainConfig}
    other = "bench" if kind == "train" else "train"  # (a key of its own said as such)
    others = describe(classes[other], command=other) if key else []
    rows = select(describe(classes[kind], command=kind), key, kind, others)
    for line in manual(rows, terminal_columns()):
        print(line)
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
    from rltrain.rl.run.summary import final_line, interrupted_advice, lost_ray_advice, score_advice

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
        if advice := lost_ray_advice(summary, run):
            print(advice, file=sys.stderr)
        return EXIT_FAILED
    if summary["stopped_by"] == "interrupt" or signals.interrupted():  # (the final eval's too)
        print(interrupted_advice(summary, run, args.run_dir is not None), file=sys.stderr)
        return signals.EXIT_INTERRUPTED
    return 0


def score(x: float) -> str:
    """A raw score as eval prints it: 2 decimals, 3 significant digits below 1 (a return of
    -0.1125 printed as -0.1: explore97)."""
    return f"{x:.2f}" if abs(x) >= 0.995 or x == 0 else f"{x:.3g}"


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
    if args.json:
        print(json.dumps(eval_record(cfg.env.id, res, how, run_dir)))
        return 0
    print(
        f"{cfg.env.id}, checkpoint {own_name(res.checkpoint, run_dir)} (version {res.version}, "
        f"{how}, "
        f"seed {res.seed}): "
        f"{len(res.returns)} episode{'s' if len(res.returns) != 1 else ''}, "
        f"raw score mean {score(res.mean)} +- {score(res.std)} "
        f"(min {score(min(res.returns))}, max {score(max(res.returns))})"
    )
    if res.note:
        print(f"note: {res.note}")
    if res.video and res.filmed:
        ret, steps = res.filmed
        print(
            f"video: {res.video} ({res.view} view of the first game, seed {res.seed}: raw score "
            f"{score(ret)} in {steps} step{'s' if steps != 1 else ''})"
        )
    return 0


def eval_record(env_id: str, res: EvalResult, how: str, run_dir: Path) -> dict[str, Any]:
    """What ``rltrain eval --json`` prints: the line's figures, and each episode's."""
    filmed = None if res.filmed is None else {"return": res.filmed[0], "length": res.filmed[1]}
    return {
        "env": env_id,
        "checkpoint": own_name(res.checkpoint, run_dir),
        "version": res.version,
        "played": how,
        "deterministic": res.deterministic,
        "seed": res.seed,
        "episodes": len(res.returns),
        "mean": res.mean,
        "std": res.std,
        "min": min(res.returns),
        "max": max(res.returns),
        "returns": list(res.returns),
        "lengths": list(res.lengths),
        "video": None if res.video is None else str(res.video),
        "video_view": res.view,
        "filmed": filmed,
        "note": res.note or None,
    }


def own_name(checkpoint: Path, run_dir: Path) -> str:
    """A checkpoint of the run by its name; another run's by its path (explore107: another
    run's best.pt read as this run's own)."""
    inside = checkpoint.resolve().parent == (run_dir / "checkpoints").resolve()
    return checkpoint.name if inside else str(checkpoint)


def cmd_plot(args: argparse.Namespace) -> int:
    from rltrain.charts import NO_MATPLOTLIB, pyplot
    from rltrain.curves import PlotError
    from rltrain.plot_bench import out_path, plot_any

    out = out_path(args.out) if args.out else None
    runs = [Path(r).expanduser() for r in args.runs]
    csv = Path(args.csv).expanduser() if args.csv else None
    how = (args.smooth, args.marks, args.evals, args.group, csv)
    png, table = plot_any(runs, out, args.title, *how)
    if png is None and not table and pyplot() is None:
        raise PlotError(NO_MATPLOTLIB)
    if png is not None or (table and pyplot() is None):  # (else: evaluations alone, no curve
        print(png if png is not None else f"rltrain: {NO_MATPLOTLIB}; the table:")  # to draw)
    if png is None and not table and csv is not None:  # a CSV of evaluations alone
        print(csv)
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
    commands = {"options": lambda a: cmd_options(a.kind, a.imports, a.key), "bench": cmd_bench}
    commands["train"] = cmd_train
    commands |= {"eval": cmd_eval, "plot": cmd_plot, "reapply": cmd_reapply}
    commands["replay"] = cmd_reapply  # the old name of reapply, an alias
    try:
        # a first signal's line: train's says "a final checkpoint" once its server is up
        kept = {"train": signals.IN_START_UP, "bench": signals.BENCH_RESULTS}
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
    the emulators only costs time, which a whole-process time-to-solve counts. Its process,
    a run's trainer, hands its freed memory back once a minute (:mod:`rltrain.runtime.trim`),
    as every process that the runtimes start does."""
    from rltrain.runtime.trim import keep_trimmed

    keep_trimmed()
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
