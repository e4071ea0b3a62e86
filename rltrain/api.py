"""The Python API: train, bench, evaluate and act from a script or a notebook.

    import rltrain

    cfg = rltrain.Config.from_yaml("configs/cartpole_appo.yaml").with_overrides(
        {"env.id": "Acrobot-v1", "stop.mean_return": -100}
    )
    run = rltrain.train(cfg, run_dir="runs/acrobot")      # a RunResult: summary.json's figures
    print(run.stopped_by, run.mean_return, run.env_steps)
    print(rltrain.evaluate(run.run_dir, episodes=10).mean)
    policy = rltrain.load_policy(run.run_dir)             # obs -> action, outside rltrain
    env = rltrain.make_env(run.run_dir)                   # the env as the run made it
    action = policy(env.reset(seed=0)[0])

Each call does what the command line does (``rltrain train`` / ``bench`` / ``eval``), with the
same validation and the same one-line errors (raised as :class:`~rltrain.errors.RLTrainError`
subclasses instead of printed). Ctrl-C stops a run gracefully, as on the command line: it
writes a final checkpoint and ``summary.json`` and returns with ``stopped_by == "interrupt"``;
a fault or divergence raises :class:`~rltrain.faults.TrainFailed` (``.result``: the RunResult);
a bench whose modes an error in your code failed, once the others ran,
:class:`~rltrain.faults.BenchFailed` (``.result``: their BenchResult).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from collections.abc import Hashable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar, cast

import gymnasium

from rltrain import signals
from rltrain.api_args import arg_typo, checkpoint_arg, choice_arg, path_arg, whole_arg
from rltrain.api_results import BenchResult, PlotResult, RunResult
from rltrain.config import ConfigError, from_dict, merge, nested, plain_copy, read_config, to_dict
from rltrain.faults import BenchFailed, TrainFailed
from rltrain.progress import silenced
from rltrain.rl.config import TrainConfig, load_run_config
from rltrain.rl.eval_args import DEFAULT_MAX_STEPS, EPISODES, MAX_STEPS, SEED
from rltrain.rl.evaluate import EvalResult, VideoView
from rltrain.rl.loaded_policy import LoadedPolicy, scales_frames
from rltrain.supervised.config import BenchConfig

Kind = Literal["train", "bench"]
KINDS: dict[str, type] = {"train": TrainConfig, "bench": BenchConfig}
T = TypeVar("T", TrainConfig, BenchConfig)


@dataclasses.dataclass(frozen=True)
class Config(Generic[T]):
    """A config, validated as the command line validates it; ``value`` is the typed config
    (``Config.value.env.id``). Immutable: :meth:`with_overrides` returns a new one."""

    data: Mapping[str, Any]
    kind: Kind = "train"
    value: T = dataclasses.field(init=False, repr=False, compare=False)
    source: str | None = dataclasses.field(default=None, repr=False, compare=False)
    """The YAML file it was read from (``from_yaml``), kept by ``with_overrides``: a run's
    folder is named after it, and its score stop is compared with the game played."""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"Config kind {self.kind!r}: allowed are train, bench")
        if not isinstance(self.data, Mapping):
            raise ConfigError(
                f"Config: expected a mapping of config keys, got {type(self.data).__name__} "
                "(Config.from_yaml(path) reads a YAML file)"
            )
        object.__setattr__(self, "data", plain_copy(self.data))  # the caller's dict may change
        object.__setattr__(self, "value", from_dict(KINDS[self.kind], dict(self.data)))

    @classmethod
    def from_yaml(cls, path: str | Path, kind: Kind = "train") -> Config:
        """A YAML config file (as ``rltrain train PATH``); ``kind="bench"`` for ``bench``."""
        return cls(read_config(path, KINDS.get(kind)), kind, source=os.fspath(path))

    def with_overrides(self, overrides: Mapping[str, Any] | None = None, **kw: Any) -> Config:
        """Dotted keys as ``--set`` takes them, with Python values:
        ``{"env.id": "Acrobot-v1", "optimizer.lr": 3e-4}``, or as ``train`` takes them,
        ``env__id="Acrobot-v1"`` (explore119: refused here)."""
        cls = KINDS[self.kind]
        given: Any = {} if overrides is None else overrides
        if isinstance(given, Mapping):  # (a dotted key keeps its "__": an env kwarg's own)
            given = {plain(k): v for k, v in [*given.items(), *kw.items()]}
        if not isinstance(given, Mapping):
            raise ConfigError(
                "with_overrides: expected a mapping of dotted keys to values, got "
                f"{type(overrides).__name__}"
            )
        data = merge(dict(self.data), nested(given, cls=cls), cls)
        return Config(data, self.kind, source=self.source)

    def to_dict(self) -> dict[str, Any]:
        """Every key, defaults included (what ``config.yaml`` of a run holds)."""
        return to_dict(self.value)

    def __hash__(self) -> int:
        """Equal configs hash equal (a key of ``functools.lru_cache``, a set's member): the
        dataclass's own hash failed on its dict (explore102)."""
        return hash((self.kind, _frozen(self.data)))

    def __getattr__(self, name: str) -> Any:
        """``cfg.env`` reads ``cfg.value.env``: the typed config's fields, as users try."""
        if name.startswith("_") or name in ("value", "data", "kind", "source"):  # (a copy)
            raise AttributeError(name)
        return getattr(self.value, name)


def _frozen(value: Any) -> Any:
    """``value`` with its mappings and lists as tuples: hashable, equal where it was equal."""
    if isinstance(value, Mapping):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, set | frozenset):  # (its repr's order is not its equality's)
        return frozenset(_frozen(v) for v in value)
    return value if isinstance(value, Hashable) else repr(value)  # (an array: as written)


ConfigLike = Config | Mapping[str, Any] | str | Path
"""What ``train`` and ``bench`` take as their config: a Config, a dict of config keys (as
``Config(dict)``), a YAML file's path, or the typed config itself."""


def _config(config: ConfigLike | TrainConfig | BenchConfig, kind: Kind, **kw: Any) -> Any:
    """The typed config of ``config`` plus ``kw`` overrides (dotted keys, or ``__`` for dots)."""
    arg_typo(kw, ("run_dir", "resume", "quiet") if kind == "train" else ("run_dir", "quiet"))
    if isinstance(config, TrainConfig | BenchConfig):
        config = Config(to_dict(config), "train" if isinstance(config, TrainConfig) else "bench")
    elif isinstance(config, Mapping):
        config = Config(config, kind)
    elif isinstance(config, Config):
        pass
    elif isinstance(config, str | os.PathLike):
        from rltrain.cli_checks import meant_for

        path = cast("str | Path", config)  # (Config's __getattr__ reads as os.PathLike's)
        with meant_for(path, kind):  # a config of the other command: which one it is for
            config = Config.from_yaml(path, kind)
    else:
        raise ConfigError(
            f"config: expected a Config, a dict of config keys, a YAML file's path (str or Path) "
            f"or a {KINDS[kind].__name__}; got {type(config).__name__}"
        )
    if config.kind != kind:
        raise ValueError(f"a {config.kind} config given to rltrain.{kind}()")
    if kw:
        config = config.with_overrides(kw)
    return config.value


def _run_dir(value: Any, arg: str = "run_dir") -> Path:
    """An existing run folder (``run_dir=`` of evaluate, load_policy; ``resume=``), else the
    one-line error ``rltrain train --resume`` gives, in the API's words."""
    from rltrain.launch import run_dir_arg

    return run_dir_arg(path_arg(value, arg), f"{arg}=")


def _run_config(run_dir: Path, use: str) -> TrainConfig:
    """A run folder's config; a bench run's named as the command line's ``use`` names it."""
    from rltrain.cli_checks import meant_for

    with meant_for(run_dir / "config.yaml", use):
        return load_run_config(TrainConfig, run_dir / "config.yaml")


def _new_run_dir(run_dir: Any) -> str | None:
    """``run_dir=`` of train and bench: new or empty, checked in the API's words (the run
    checks it again as the command line does)."""
    from rltrain.rundir import check_run_dir

    path = None if run_dir is None else path_arg(run_dir, "run_dir")
    check_run_dir(path, name="run_dir=")
    return path


def train(
    config: ConfigLike | TrainConfig | None = None,
    run_dir: str | Path | None = None,
    resume: str | Path | None = None,
    quiet: bool = False,
    **overrides: Any,
) -> RunResult:
    """Train as ``rltrain train`` does; ``overrides`` as ``--set`` (``env__id="Acrobot-v1"``
    or ``**{"env.id": "Acrobot-v1"}``). ``resume``: continue that run from its latest
    checkpoint (its own config, plus ``config`` or ``overrides`` if given). ``quiet``: none of
    the command's own lines (its start lines on stdout, the live ``[train]`` line) but its
    notes (a setting that changes nothing, a fault, a restore), said on stderr with warnings
    and errors."""
    from rltrain.launch import UserError, run_train
    from rltrain.rundir import summary_text

    quiet = choice_arg(quiet, "quiet", (True, False))

    if resume is not None:
        if run_dir is not None:
            raise UserError(
                "run_dir= does not go with resume=: a resumed run writes into its own folder"
            )
        resume = _run_dir(resume, "resume")  # a one-line error if it is no run
        base = _run_config(resume, "resume") if config is None else config
        cfg = _config(base, "train", **overrides)
    elif config is None:
        raise ValueError("rltrain.train: give a config (a Config, a YAML path) or resume=RUN_DIR")
    else:
        cfg = _config(config, "train", **overrides)
        run_dir = _new_run_dir(run_dir)
    # a YAML file's name names the run, and its game and score stop are compared with cfg's
    path = os.fspath(config) if isinstance(config, str | os.PathLike) else None
    path = config.source if isinstance(config, Config) else path
    # (a final checkpoint once the server is up)
    with signals.graceful(signals.IN_START_UP), silenced(quiet):
        out, summary = run_train(cfg, run_dir, resume, path, time.time(), resume_flag="resume=")
    # what summary.json holds (NaN as null), from memory: the file may be unwritable
    result = RunResult.from_summary(out, json.loads(summary_text(summary)))
    if result.stopped_by in ("fault", "diverged"):  # the command line's exit code 1
        raise TrainFailed(str(result.summary.get("failure", result.stopped_by)), result)
    return result


def bench(
    config: ConfigLike | BenchConfig,
    run_dir: str | Path | None = None,
    quiet: bool = False,
    **overrides: Any,
) -> BenchResult:
    """Run the supervised benchmark as ``rltrain bench`` does; ``quiet`` as :func:`train`'s."""
    from rltrain.launch_bench import run_bench_config

    quiet = choice_arg(quiet, "quiet", (True, False))
    cfg = _config(config, "bench", **overrides)
    run_dir = _new_run_dir(run_dir)
    with signals.graceful(signals.BENCH_RESULTS), silenced(quiet):
        try:
            out = run_bench_config(cfg, None if run_dir is None else Path(run_dir), None)
        except BenchFailed as e:  # the modes that ran keep their figures
            e.result = BenchResult.from_run_dir(e.run_dir)
            raise
        except KeyboardInterrupt as e:  # stopped gracefully, as train(): its summary.json
            folder = getattr(e, "run_dir", None)  # (before its folder: nothing written)
            if folder is None or not (Path(folder) / "summary.json").is_file():
                raise
            out = folder
    return BenchResult.from_run_dir(out)


def evaluate(
    run_dir: str | Path,
    episodes: int | None = None,
    video: bool = False,
    seed: int | None = None,
    deterministic: bool | None = None,
    checkpoint: str | Path = "latest",
    video_view: VideoView | None = None,
    video_format: Literal["mp4", "gif"] | None = None,
    max_steps: int = DEFAULT_MAX_STEPS,
) -> EvalResult:
    """Play a run's checkpoint as ``rltrain eval`` does; ``.mean``, ``.std``, ``.returns``,
    ``.video``. ``deterministic``: the most likely actions, not samples. ``checkpoint``:
    ``latest``, ``best`` (kept by ``eval.every_steps``) or a checkpoint file's path.
    ``episodes``, ``seed`` and ``deterministic`` default to the run's ``eval.*``. With
    ``video``: ``video_view`` ``"game"`` or ``"agent"`` (default: the game's screen if the env
    can draw it) and ``video_format`` ``"mp4"`` or ``"gif"``, as ``rltrain eval``'s flags.
    ``max_steps``: agent steps per env before episodes still going are given up (an
    EvalError); a line on stderr shows the progress of an evaluation longer than 2 s."""
    from rltrain.rl.evaluate import evaluate as play

    n, first_seed = whole_arg(episodes, "episodes", EPISODES), whole_arg(seed, "seed", SEED)
    steps = whole_arg(max_steps, "max_steps", MAX_STEPS)
    video = choice_arg(video, "video", (True, False))
    deterministic = choice_arg(deterministic, "deterministic", (True, False, None))
    view = choice_arg(video_view, "video_view", ("game", "agent", None))
    fmt = choice_arg(video_format, "video_format", ("mp4", "gif", None))
    which = checkpoint_arg(checkpoint)
    run_dir = _run_dir(run_dir)
    cfg = _run_config(run_dir, "eval")
    return play(
        cfg,
        run_dir,
        n,
        video,
        first_seed,
        max_steps=steps or DEFAULT_MAX_STEPS,
        video_view=view,
        deterministic=deterministic,
        checkpoint=which,
        video_format=fmt,
        style="api",
    )


def plot_runs(
    runs: str | Path | Sequence[str | Path],
    out: str | Path | None = None,
    title: str | None = None,
    smooth: int | None = None,
    marks: Sequence[float] = (),
    evals: bool = False,
    group: Sequence[str] = (),
    csv: str | Path | None = None,
) -> PlotResult:
    """Draw runs as ``rltrain plot`` does (its flags are these arguments): each run's mean
    episode return against frames and wall time, ``marks`` and ``evals`` tables, runs grouped
    by config ``group`` keys, the curves as ``csv``; bench runs side by side. ``.image`` is the
    file written (default: RUN/returns.png for one run, ./returns.png for more), ``.table``
    the Markdown tables."""
    from rltrain.plot_bench import out_path, plot_any

    paths = [Path(path_arg(runs, "runs"))] if isinstance(runs, str | os.PathLike) else None
    if paths is None:
        if not isinstance(runs, Sequence) or not runs:
            raise ConfigError(f"runs={runs!r}: expected a run folder or a list of them")
        paths = [Path(path_arg(r, "runs")) for r in runs]
    smooth = whole_arg(smooth, "smooth", EPISODES)
    marks = list(marks) if isinstance(marks, Iterable) and not isinstance(marks, str) else marks
    if isinstance(marks, str | bytes) or not all(_finite(m) for m in marks):
        raise ConfigError(f"marks={marks!r}: expected a list of finite numbers (scores)")
    if isinstance(group, str) or not all(isinstance(g, str) for g in group):
        raise ConfigError(f"group={group!r}: expected a list of config keys (e.g. ['seed'])")
    evals = choice_arg(evals, "evals", (True, False))
    image_at = None if out is None else out_path(path_arg(out, "out"))
    csv_at = None if csv is None else Path(path_arg(csv, "csv")).expanduser()
    scores = tuple(float(m) for m in marks)
    runs_at = [p.expanduser() for p in paths]
    image, table = plot_any(runs_at, image_at, title, smooth, scores, evals, tuple(group), csv_at)
    return PlotResult(image, table)


def _finite(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def load_policy(run_dir: str | Path, checkpoint: str | Path = "latest") -> LoadedPolicy:
    """A checkpoint of ``run_dir`` (``latest``, ``best`` or a path) as a callable
    ``obs -> action``: sampled as in training, or with ``deterministic=True`` the most likely
    action (a dqn run: epsilon-greedy at dqn.eval_epsilon, or greedy). torch's threads are
    the caller's: beside a running training, ``torch.set_num_threads(1)`` keeps its small
    forward passes fast (on every core's threads one took 77 ms, on one 0.73 ms)."""
    from rltrain.rl.env_spec import probe_env
    from rltrain.rl.evaluate import checkpoint_params
    from rltrain.rl.evaluate import load_policy as build

    which = checkpoint_arg(checkpoint)
    run_dir = _run_dir(run_dir)
    cfg = _run_config(run_dir, "eval")
    spec = probe_env(cfg, training=False)
    path, _, values, norm = checkpoint_params(run_dir, which, "api", cfg)
    policy = build(cfg, run_dir, (path, values, norm), spec.obs_shape, spec.actions)
    return LoadedPolicy(
        policy,
        spec.obs_shape,
        spec.actions,
        spec.flattened_from,
        spec.transposed,
        spec.stacked,
        spec.obs_dtype if scales_frames(policy.model) else None,  # (an MLP takes any number)
    )


def make_env(run_dir: str | Path, seed: int = 0, render_mode: str | None = None) -> gymnasium.Env:
    """The run's environment as one Gymnasium env, with the run's protocol and wrappers (the
    Atari frames, the frame stack, channels first, ``env.wrappers``, flattened spaces), so
    that ``load_policy(run_dir)(obs)`` acts on its observations. Rewards are the raw score
    (no clipping, a lost life not an end), and ``env.reset(seed=s)`` plays the game that
    ``rltrain eval --episodes 1 --seed s`` plays first (:class:`rltrain.envs.single.
    SingleEnv`). ``render_mode``: "human" draws it as it steps, "rgb_array" gives
    ``env.render()`` frames (Gymnasium envs; for Atari ``rltrain eval --video``)."""
    from rltrain.envs.single import SingleEnv

    first_seed = whole_arg(seed, "seed", SEED)
    cfg = _run_config(_run_dir(run_dir), "eval")
    return SingleEnv(cfg.env, 0 if first_seed is None else first_seed, render_mode)


def plain(key: Any) -> Any:
    """``env__id`` as ``env.id``; a dotted key as it is (an env kwarg's own ``__`` kept)."""
    return key.replace("__", ".") if isinstance(key, str) and "." not in key else key
