"""The `rltrain` command line's arguments: every command's flags and their help (the commands
themselves are :mod:`rltrain.cli`'s)."""

from __future__ import annotations

import argparse
from typing import Any, NoReturn

from rltrain.cli_checks import count_arg, episodes_arg, score_arg, seed_arg
from rltrain.rl.algos import algo_names

EXIT_USAGE = 2


class Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line, like every other error of the CLI:
    ``rltrain: error: <message> (see rltrain <command> --help)``, exit code 2."""

    intermixed = False
    """Whether positionals may follow options, as ``rltrain options train --import m vpg``'s
    KEY (argparse gives an optional positional nothing as it reads the one before it, then
    refuses vpg; explore101)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands: dict[str, Parser] = {}

    def parse_known_args(  # type: ignore[override]
        self, args: Any = None, namespace: Any = None
    ) -> tuple[argparse.Namespace, list[str]]:
        if not self.intermixed:
            return super().parse_known_args(args, namespace)
        self.intermixed = False  # (parse_known_intermixed_args calls this again, plainly)
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self.intermixed = True

    def error(self, message: str) -> NoReturn:
        self.exit(
            EXIT_USAGE, f"rltrain: error: {' '.join(message.split())} (see {self.prog} --help)\n"
        )


def common_args(p: argparse.ArgumentParser, config_optional: bool = False) -> None:
    """config, --set, --run-dir and --address; ``config_optional``: train's (its --resume
    reads the run's), whose examples name its own keys (bench's name the bench's: explore109)."""
    train = config_optional
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
        help="override a config field, e.g. --set optimizer.lr=0.01 (repeatable); "
        + (
            "a mapping field set whole by its key is replaced: --set env.kwargs={} drops the "
            "file's kwargs"
            if train
            else "a list is given whole: --set modes=[sync,async] runs those two modes"
        ),
    )
    p.add_argument(
        "--run-dir",
        help="output folder (default: runs/<config-name>-<timestamp>"
        + ("; with the env id and the algorithm where --set changed them)" if train else ")"),
    )
    p.add_argument(
        "--address",
        help="join a Ray cluster: 'auto' (started here with `ray start`), HOST:PORT (the head's "
        "GCS, as `ray start --address`) or ray://HOST:PORT (Ray Client); "
        "default: this machine (processes; a local Ray with runtime.backend=ray)",
    )


def build_parser() -> Parser:
    parser = Parser(
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
    common_args(train, config_optional=True)
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
        help="also film the first game (env 0's, replayed: the score is unchanged) into RUN_DIR: "
        "eval-v<version>.mp4 (H.264, through "
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
        "--json",
        action="store_true",
        help="print one JSON object instead of the line: the score, each episode's raw score "
        "and length, the checkpoint, its version, the seed, how it played and the video",
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
    plot.add_argument(
        "runs", nargs="+", metavar="RUN", help="run directories (rltrain train, or rltrain bench)"
    )
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
    common_args(bench)
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
    opts = sub.add_parser(
        "options",
        help="list every config option with its meaning",
        description="Every config key of rltrain train or bench: its type (with its allowed "
        "range, and auto where it is taken), default and meaning. On a terminal the meanings "
        "are wrapped to its width; piped, each stays on one line (for grep).",
    )
    opts.intermixed = True  # (KEY after --import MODULE)
    opts.add_argument("kind", choices=["train", "bench"], help="which command's config")
    opts.add_argument(  # explore101: one key's line needed grep -A1 over 264 lines
        "key",
        nargs="?",
        metavar="KEY",
        help="list this key only, or every key of a section or prefix (algo.gamma, ppo, "
        "faults.events)",
    )
    opts.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE first, as a config's imports does, so that the algorithms, rules "
        "and sections it registers are listed too (repeatable)",
    )
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
