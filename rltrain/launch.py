"""Starting a run: what `rltrain train` checks and makes before anything runs (the Ray
address, the run folder and its config.yaml, a resumable checkpoint, the env), shared by the
command line (:mod:`rltrain.cli`) and the Python API (:mod:`rltrain.api`); `rltrain bench`'s
is :mod:`rltrain.launch_bench`."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from pathlib import Path
from shlex import quote
from typing import TYPE_CHECKING, Any

from rltrain.cluster_address import check_address, own_address
from rltrain.errors import RLTrainError, UserError
from rltrain.machine import mark_start

if TYPE_CHECKING:  # for annotations: this module imports the run's parts only as they are used
    from rltrain.rl.config import TrainConfig
    from rltrain.rl.env_spec import EnvSpec
    from rltrain.rl.run.train import Trainer


def run_dir_arg(text: str, flag: str, command: str = "rltrain train") -> Path:
    """An existing run directory (one with config.yaml), or a one-line UserError saying why not
    (and that ``command`` writes one)."""
    path = Path(text).expanduser()
    if not path.exists():
        why = "it does not exist"
    elif not path.is_dir():
        why = "it is a file"
    elif not (path / "config.yaml").is_file():
        if any((path / d).is_dir() for d in ("checkpoints", "tb", "record")):  # a run's, once
            raise UserError(
                f"{flag}{path}: its config.yaml is missing (a run writes it as it starts, and "
                "reads it back); put it back to use the run"
            )
        why = "no config.yaml in it"
        runs = runs_in(path)
        if runs:  # (explore107: `rltrain eval runs`, the folder of runs)
            more = f", ... ({len(runs)} runs)" if len(runs) > 3 else ""
            why += f"; it holds runs: {', '.join(map(str, runs[:3]))}{more}"
    else:
        return path
    raise UserError(
        f"{flag}{path}: not a run directory ({why}); give a folder written by `{command}`"
    )


def runs_in(folder: Path) -> list[Path]:
    """The run folders (with a config.yaml) right inside ``folder``; one that cannot be read
    is left out (a traceback named another user's folder: review87)."""
    runs: list[Path] = []
    try:
        entries = sorted(folder.iterdir())
    except OSError:
        return runs
    for d in entries:
        with contextlib.suppress(OSError):
            if (d / "config.yaml").is_file():
                runs.append(d)
    return runs


def starts_ray_early(cfg: TrainConfig) -> bool:
    """Whether :func:`start_ray_then_probe` may start Ray before the env is probed: from the
    main thread (``ray.init`` needs it), for an id gymnasium knows (an unknown one fails
    before anything starts) and without user modules (they are imported first, to ship
    them)."""
    from rltrain.envs import registered
    from rltrain.runtime.config import chosen_backend

    return (
        chosen_backend(cfg.runtime)[0] == "ray"
        and threading.current_thread() is threading.main_thread()
        and registered(cfg.env.id)
        and not cfg.imports
        and not cfg.env.wrappers
    )


def start_forkserver_early(cfg: TrainConfig) -> None:
    """On the process runtime, start its forkserver before this process imports torch (the
    checkpoint, the env probe): the forkserver's own imports then run beside these, on
    another core, and the learner's and actors' processes can be forked sooner. (A run that
    fails before it starts them leaves nothing behind: the forkserver ends with this
    process, and :func:`rltrain.runtime.release` removes its socket's folder.)"""
    from rltrain.runtime.config import chosen_backend

    if chosen_backend(cfg.runtime)[0] == "process":
        from rltrain.runtime.process.forkstart import context

        context()


def start_ray_then_probe(cfg: TrainConfig) -> tuple[EnvSpec, tuple[str, float]]:
    """Start Ray, then probe the env; returns the env's spec, Ray's description and when Ray
    was up.

    In this order the slow parts overlap across processes: Ray's worker processes import
    torch as they start (``PRELOAD``) while this one imports torch and the emulators for
    the probe, on other cores. (Not a probe in a thread beside ``ray.init``: the two contend
    for this process's interpreter lock.) A probe that fails
    shuts Ray down again and raises its one-line error.
    """
    from rltrain import signals
    from rltrain.runtime import ray as ray_runtime

    where = ray_runtime.start(cfg.runtime)
    up = time.time()
    signals.install()  # again: ray.init replaces the SIGTERM handler
    try:
        from rltrain.rl.env_spec import probe_env

        return probe_env(cfg), (where, up)
    except BaseException:
        ray_runtime.shutdown()
        raise


def run_name(config_path: str | None, cfg: TrainConfig) -> str:
    """A new run's folder name before its time stamp (runs/<name>-<time>): the config's
    stem, and the env id and the algorithm where the command set others than the file's, so
    that one config run over several tasks makes folders that tell them apart
    (pendulum_appo-LunarLanderContinuous-v3-...); without a file, ``<algo>_<env id>``."""
    env = cfg.env.id.replace("/", "_")
    if not config_path:
        return f"{cfg.algo.name}_{env}"
    from rltrain.envs.config import EnvConfig
    from rltrain.rl.algos.base import AlgoConfig

    name = Path(config_path).stem
    own = _file_keys(config_path)
    if own is None:
        return name
    if (own.get("env") or {}).get("id", EnvConfig.id) != cfg.env.id:
        name += f"-{env}"
    if (own.get("algo") or {}).get("name", AlgoConfig.name) != cfg.algo.name:
        name += f"-{cfg.algo.name}"
    return name


def check_startup(cfg: TrainConfig, spec: EnvSpec, new_run: bool = True) -> None:
    """What a session would otherwise find only as it starts its processes, after the run
    folder is made, checked once the env's shapes are known: ``env.groups`` against
    ``env.num_envs``, ``runtime.inference`` against the runtime and the algorithm, and
    ``server.shards`` against the parameter count. (Sizing by the machine's CPUs and GPUs
    waits for the runtime.)"""
    from rltrain.envs import env_groups
    from rltrain.envs.atari import check_atari_only
    from rltrain.envs.user import check_wrappers_travel
    from rltrain.ps.server import ShardLayout
    from rltrain.rl.env_spec import initial_params
    from rltrain.rl.run.placement import inference_device
    from rltrain.rl.run.sizing import check_model_memory, check_rollout_memory
    from rltrain.runtime.config import chosen_backend

    if new_run:  # (a resumed run's config.yaml, which an older rltrain took, is not refused)
        check_atari_only(cfg.env)
    env_groups(cfg.env)
    check_wrappers_travel(cfg.env.wrappers, chosen_backend(cfg.runtime)[0])
    inference_device(cfg, False, chosen_backend(cfg.runtime)[0])
    if cfg.server.shards > 1:  # (one always fits)
        ShardLayout(initial_params(cfg, spec).numel(), cfg.server.shards)
    check_model_memory(cfg, spec)  # (rl.run.sizing)
    check_rollout_memory(cfg, spec)


KEPT_FIRST = "env.id"
"""The kept key checked first: another env's network would otherwise be reported as a
parameter count that does not fit (and its env made before that)."""


def check_resume(path: Path, state: dict[str, Any], cfg: TrainConfig) -> list[str]:
    """Before the env is made: ``cfg`` keeps the keys a resumed run keeps
    (:data:`rltrain.rl.run.resume.KEPT_ON_RESUME`, ``env.id`` first) against the config the
    checkpoint at ``path`` (``state``) was saved under; CheckpointError for one it changes.

    Returns the changes, ``key: old -> new``, of every key outside the sections the trainer
    names itself (:data:`~rltrain.rl.run.resume.TOLD_ON_RESUME`): top-level keys such as actors,
    learners, seed, learner_gpus, and dqn, replay, checkpoint, eval, faults, runtime. These
    are compared with the run's config.yaml (what its last session asked for), not with the
    checkpoint's config, which holds what the trainer resolved (actors: auto, the session's
    seed, the runtime fitted to the machine)."""
    from rltrain.checkpoint import CheckpointError
    from rltrain.config import moved_keys, to_dict
    from rltrain.config_keys import dotted
    from rltrain.rl.config import TrainConfig, run_yaml
    from rltrain.rl.run.resume import (
        KEPT_ON_RESUME,
        KEPT_SINCE,
        TOLD_ON_RESUME,
        as_yaml,
        kept_refusal,
    )

    new = dotted(to_dict(cfg))
    saved = state.get("config")
    old = dotted(moved_keys(TrainConfig, saved)) if isinstance(saved, dict) else {}
    for key in sorted(KEPT_ON_RESUME, key=lambda k: k != KEPT_FIRST):
        was = old.get(key, KEPT_SINCE.get(key, new[key]) if old else new[key])
        if was != new[key] and "auto" not in (was, new[key]):  # auto: decided later
            raise CheckpointError(kept_refusal(key, new[key], was, path.parent.parent))
    try:
        asked = dotted(run_yaml(path.parent.parent / "config.yaml"))
    except (RLTrainError, OSError):  # unreadable: the checkpoint's checks still hold
        return []
    return [
        f"{k}: {as_yaml(asked[k])} -> {as_yaml(v)}"
        for k, v in new.items()
        if k.split(".")[0] not in TOLD_ON_RESUME and k in asked and asked[k] != v
    ]


def prepare_train(
    cfg: TrainConfig,
    run_dir: str | Path | None,
    resume: str | Path | None = None,
    config_path: str | None = None,
    started: float | None = None,
    resume_flag: str = "--resume ",
) -> Trainer:
    """Everything ``rltrain train`` checks and makes before the run starts (also
    :func:`rltrain.api.train`): the trainer, with the run folder and its config.yaml written.
    ``resume``: the run folder to continue (its latest checkpoint is checked first).
    ``started``: when start-up began (default: when this process started); ``resume_flag``:
    how errors name ``resume`` (the API's keyword, or the command line's flag)."""
    return _prepare(cfg, run_dir, resume, config_path, started, resume_flag)[0]


def run_train(
    cfg: TrainConfig,
    run_dir: str | Path | None,
    resume: str | Path | None = None,
    config_path: str | None = None,
    started: float | None = None,
    resume_flag: str = "--resume ",
) -> tuple[Path, dict[str, Any]]:
    """:func:`prepare_train`, then the run to its stop: the run folder and its summary.

    A new run that a user error (an :class:`RLTrainError` other than a fault) stops before
    its first checkpoint or episode leaves no folder behind (e.g. ``server.shards`` above the
    parameter count, or a GPU share Ray cannot place, found once the runtime is up): the
    same command runs again once the option is fixed. A resumed run's folder is kept."""
    mark_start()  # (the load beside the run: summary.json's machine)
    trainer, created = _prepare(cfg, run_dir, resume, config_path, started, resume_flag)
    try:
        return trainer.run_dir, trainer.run()
    except BaseException as e:
        if created is not None and _user_error(e) and not _trained(trainer):
            from rltrain.rundir import remove_new_run_dir

            remove_new_run_dir(trainer.run_dir, created)
        raise


def _user_error(error: BaseException) -> bool:
    """A one-line error of what the user asked for, not a fault the run met."""
    from rltrain.faults import RunFailed, ShardFenced

    return isinstance(error, RLTrainError) and not isinstance(error, RunFailed | ShardFenced)


def _trained(trainer: Trainer) -> bool:
    """Whether the run wrote a checkpoint or finished an episode: it has results to keep."""
    from rltrain.checkpoint import latest_checkpoint

    return trainer.counters.episodes > 0 or latest_checkpoint(trainer.run_dir) is not None


def _file_keys(config_path: str) -> dict[str, Any] | None:
    """A config file's own keys (its base's beneath), not validated (it may need the --set);
    None where it cannot be read (it was read once already: only a race gets here)."""
    from rltrain.config import read_config

    try:
        return read_config(config_path)
    except (OSError, ValueError):
        return None


def _prepare(
    cfg: TrainConfig,
    run_dir: str | Path | None,
    resume: str | Path | None,
    config_path: str | None,
    started: float | None,
    resume_flag: str,
) -> tuple[Trainer, list[Path] | None]:
    """:func:`prepare_train`; also, for a new run, the folders it made (None on resume)."""
    from rltrain.extensions import run_imports

    cfg = dataclasses.replace(cfg, imports=run_imports(cfg))  # (before Ray starts: it ships them)
    # torch-free until the env is probed (see start_ray_then_probe)
    from rltrain.progress import process_start_time, say
    from rltrain.rl.config.notes import carried_stop_note
    from rltrain.rundir import (
        check_run_dir,
        check_writable,
        lock_run_dir,
        new_run_dir,
        remove_new_run_dir,
        unlock,
        write_config,
    )

    started = process_start_time() if started is None else started  # from the command
    told: list[str] = []
    state: dict[str, Any] | None = None  # a resumed run's newest checkpoint
    start_forkserver_early(cfg)
    if resume is not None:
        from rltrain.checkpoint import latest_checkpoint, load_checkpoint
        from rltrain.rl.run.resume import check_unmet

        flag = resume_flag
        out = run_dir_arg(str(resume), flag)
        lock = lock_run_dir(out)  # first: a run still training is said to be, checkpoint or not
        try:
            ckpt = latest_checkpoint(out)
            if ckpt is None:
                again = f"rltrain train {quote(str(out / 'config.yaml'))} --run-dir NEW_DIR"
                if flag.endswith("="):  # the API's words (explore102)
                    again = f"rltrain.train({str(out / 'config.yaml')!r}, run_dir=NEW_DIR)"
                raise UserError(
                    f"{flag}{out}: no checkpoints/ckpt-*.pt to resume from (stopped before its "
                    f"first); start again: {again} (or remove {out} first to reuse its name)"
                )
            check_writable(out, flag)  # (and its stale temporary files gone: we hold the lock)
            # a damaged checkpoint, or another env.id, fails here: before anything starts
            state = load_checkpoint(ckpt)
            told = check_resume(ckpt, state, cfg)
            check_unmet(ckpt, state, cfg, "stop__" if flag.endswith("=") else "--set stop.")
        except BaseException:
            unlock(lock)
            raise
    else:
        check_run_dir(run_dir)
        lock = None
    try:
        try:  # before the run dir, config.yaml, tb/ are written
            check_address(cfg.runtime.address)
        except RLTrainError as e:  # a cluster run resumed where its cluster is gone
            raise type(e)(own_address(str(e), state, cfg.runtime.address)) from None
        if resume is None and starts_ray_early(cfg):
            spec, ray_up = start_ray_then_probe(cfg)
        else:  # an unknown env id fails here, before any folder is made or Ray starts
            from rltrain.rl.env_spec import probe_env

            spec, ray_up = probe_env(cfg), None
    except BaseException:
        unlock(lock)
        raise
    created: list[Path] | None = None
    try:
        from rltrain.envs.atari import resolve_sticky
        from rltrain.envs.user import ship_registration
        from rltrain.rl.inputs import resolve_obs_norm
        from rltrain.rl.run.resume import changes_history
        from rltrain.rl.run.train import Trainer

        # (also on resume: a CONFIG given with --resume says auto, as the run's first did)
        cfg = resolve_obs_norm(cfg, spec.obs_shape, spec.one_hot)
        cfg = dataclasses.replace(cfg, env=resolve_sticky(cfg.env))  # null: the id's
        cfg = dataclasses.replace(cfg, env=ship_registration(cfg.env))  # a script's register
        check_startup(cfg, spec, resume is None)  # before the run dir is made, as the env tells
        if resume is None:
            made: list[Path] = []
            out = new_run_dir(run_name(config_path, cfg), run_dir, created=made)
            created = made
            lock = lock_run_dir(out)
        trainer = Trainer(cfg, out, resume is not None, spec, started, ray_up)
        trainer.run_lock = lock
        trainer.file_notes = carried_stop_note(config_path, cfg)
        if trainer.resumed:  # which (an older one where the newest is gone: explore97)
            c = trainer.resumed.counters
            say(
                f"resuming from {trainer.resumed.path.name}: {c.env_steps:,} env steps, "
                f"{c.episodes:,} episodes, {c.wall_seconds:,.0f}s trained"
            )
        if trainer.resumed and (gone := trainer.resumed.evals_dropped):
            say(f"evals.jsonl: {gone} evaluation(s) of checkpoints past it left out (gone)", True)
        changes = [*(trainer.resumed.changes if trainer.resumed else []), *told]
        if changes:  # the checkpoint's sections, then the keys outside them
            say(f"resumed with config changes: {'; '.join(changes)}")
        trainer.record.changes = changes_history(trainer.resumed, changes)
        write_config(trainer.run_dir, cfg)
    except BaseException as e:
        unlock(lock)
        if created is not None and _user_error(e):
            remove_new_run_dir(out, created)
        if ray_up is not None:
            from rltrain.runtime import ray as ray_runtime

            ray_runtime.shutdown()
        raise
    say(f"rltrain train: {cfg.algo.name} on {cfg.env.id}; writing {trainer.run_dir}")
    return trainer, created
