"""Starting a run: what `rltrain train` and `rltrain bench` check and make before anything
runs (the Ray address, the run folder and its config.yaml, a resumable checkpoint, the env),
shared by the command line (:mod:`rltrain.cli`) and the Python API (:mod:`rltrain.api`)."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from rltrain.errors import RLTrainError


class UserError(RLTrainError):
    """A problem with what the user asked for: printed as one line, exit code 2."""


def check_address(address: str | None) -> None:
    """An unreachable Ray cluster fails here, in seconds, before any folder or file is written.

    ``auto`` is resolved the way ``ray.init(address="auto")`` does for a cluster started with
    ``ray start``: RAY_ADDRESS, else the address file ``ray start`` writes. Ray itself would
    retry a stale address for minutes, printing a warning every few seconds.
    """
    if address is None:
        return
    from rltrain import runtime

    if address != "auto":
        _check_address_form(address)
        runtime.check_address(address)
        return
    found, source = _auto_address()
    if found is None:
        raise UserError(
            f"--address auto: no Ray cluster was started on this machine ({source}); start one "
            "with `ray start --head`, give --address HOST:PORT, or leave --address out for a "
            "local Ray"
        )
    try:
        _check_address_form(found)
        runtime.check_address(found)
    except RLTrainError as e:
        raise UserError(f"--address auto: {source} names {found}: {e}") from None


def _check_address_form(address: str) -> None:
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UserError(
            f"--address {address or repr(address)}: expected 'auto', HOST:PORT or "
            "ray://HOST:PORT (port 1-65535)"
        )


def _auto_address() -> tuple[str | None, str]:
    """The address ``auto`` means (and where it was found), or None and what was looked at."""
    env = os.environ.get("RAY_ADDRESS", "").strip()
    if env and env != "auto":
        return env, "RAY_ADDRESS"
    # Ray's temp dir: $RAY_TMPDIR, else $TMPDIR on Linux, else /tmp (ray._common.utils)
    if "RAY_TMPDIR" in os.environ:
        tmp = os.environ["RAY_TMPDIR"]
    elif sys.platform.startswith("linux") and "TMPDIR" in os.environ:
        tmp = os.environ["TMPDIR"]
    else:
        tmp = "/tmp"
    file = Path(tmp) / "ray" / "ray_current_cluster"
    try:
        found = file.read_text().strip()
    except (OSError, UnicodeDecodeError):
        found = ""
    if found:
        return found, str(file)
    return None, f"RAY_ADDRESS is unset and {file} does not exist"


def run_dir_arg(text: str, flag: str, command: str = "rltrain train") -> Path:
    """An existing run directory (one with config.yaml), or a one-line UserError saying why not
    (and that ``command`` writes one)."""
    path = Path(text).expanduser()
    if not path.exists():
        why = "it does not exist"
    elif not path.is_dir():
        why = "it is a file"
    elif not (path / "config.yaml").is_file():
        why = "no config.yaml in it"
    else:
        return path
    raise UserError(
        f"{flag}{path}: not a run directory ({why}); give a folder written by `{command}`"
    )


def run_bench_config(cfg: Any, run_dir: str | Path | None, config_path: str | None) -> Path:
    """``rltrain bench`` after its config is read (also :func:`rltrain.api.bench`); returns
    the run folder. ``config_path`` names the default folder (runs/<name>-<time>)."""
    from rltrain.rundir import check_run_dir, new_run_dir, write_config
    from rltrain.supervised.bench import run_bench
    from rltrain.supervised.sharding import load_data

    check_run_dir(run_dir)
    check_address(cfg.runtime.address)
    data = load_data(cfg.data, log=print)
    check_bench_sizes(cfg, len(data.train), len(data.test))
    out = new_run_dir(config_path or f"bench_{cfg.data.dataset}", run_dir)
    write_config(out, cfg)
    print(f"rltrain bench: {cfg.data.dataset}, modes {', '.join(cfg.modes)}; writing {out}")
    run_bench(cfg, data, out)
    return out


def starts_ray_early(cfg: Any) -> bool:
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
        and not cfg.env.imports
        and not cfg.env.wrappers
    )


def start_ray_then_probe(cfg: Any) -> tuple[Any, tuple[str, float]]:
    """Start Ray, then probe the env; returns the env's spec, Ray's description and when Ray
    was up.

    In this order the slow parts overlap across processes: Ray's worker processes import
    torch as they start (``PRELOAD``) while this one imports torch and the emulators for
    the probe, on other cores. (Measured on 2 cores: a probe in a thread beside ``ray.init``
    saved nothing, the two contend for this process's interpreter lock.) A probe that fails
    shuts Ray down again and raises its one-line error.
    """
    from rltrain import runtime, signals

    where = runtime.start(cfg.runtime)
    up = time.time()
    signals.install()  # again: ray.init replaces the SIGTERM handler
    try:
        from rltrain.rl.setup import probe_env

        return probe_env(cfg), (where, up)
    except BaseException:
        runtime.shutdown()
        raise


def check_bench_sizes(cfg: Any, train_size: int, test_size: int) -> None:
    """UserError when a worker's shard has no full batch, a Sandblaster batch has fewer
    samples than portions (nothing could train), or ``eval.test_samples`` asks for more test
    samples than there are (checked once the data's size is known)."""
    if cfg.eval.test_samples > test_size:
        raise UserError(
            f"eval.test_samples={cfg.eval.test_samples}: {cfg.data.dataset} has {test_size} "
            f"test samples; use at most {test_size}, or 0 for all of them"
        )
    shard = train_size // cfg.workers
    if shard < cfg.batch_size:
        raise UserError(
            f"batch_size={cfg.batch_size}: each of the {cfg.workers} workers holds "
            f"{shard} training samples; use a batch_size of at most {shard}"
        )
    sb = cfg.sandblaster
    batch = sb.batch_size if 0 < sb.batch_size < train_size else train_size
    if "sandblaster" in cfg.modes and sb.portions > batch:
        raise UserError(
            f"sandblaster.portions={sb.portions} exceeds the {batch} samples per evaluation"
        )


def prepare_train(
    cfg: Any,
    run_dir: str | Path | None,
    resume: str | Path | None = None,
    config_path: str | None = None,
    started: float | None = None,
    resume_flag: str = "--resume ",
) -> Any:
    """Everything ``rltrain train`` checks and makes before the run starts (also
    :func:`rltrain.api.train`): the trainer, with the run folder and its config.yaml written.
    ``resume``: the run folder to continue (its latest checkpoint is checked first).
    ``started``: when start-up began (default: when this process started); ``resume_flag``:
    how errors name ``resume`` (the API's keyword, or the command line's flag)."""
    # torch-free until the env is probed (see start_ray_then_probe)
    from rltrain.progress import process_start_time
    from rltrain.rundir import check_run_dir, lock_run_dir, new_run_dir, unlock, write_config

    started = process_start_time() if started is None else started  # from the command
    if resume is not None:
        from rltrain.checkpoint import latest_checkpoint, load_checkpoint

        flag = resume_flag
        out = run_dir_arg(str(resume), flag)
        ckpt = latest_checkpoint(out)
        if ckpt is None:
            raise UserError(
                f"{flag}{out}: no checkpoints/ckpt-*.pt to resume from; "
                "start a new run with `rltrain train CONFIG`"
            )
        load_checkpoint(ckpt)  # a damaged checkpoint fails here, before anything starts
        lock = lock_run_dir(out)
    else:
        check_run_dir(run_dir)
        lock = None
    try:
        check_address(cfg.runtime.address)  # before the run dir, config.yaml, tb/ are written
        if resume is None and starts_ray_early(cfg):
            spec, ray_up = start_ray_then_probe(cfg)
        else:  # an unknown env id fails here, before any folder is made or Ray starts
            from rltrain.rl.setup import probe_env

            spec, ray_up = probe_env(cfg), None
    except BaseException:
        unlock(lock)
        raise
    try:
        from rltrain.rl.inputs import resolve_obs_norm
        from rltrain.rl.train import Trainer

        # (also on resume: a CONFIG given with --resume says auto, as the run's first did)
        cfg = resolve_obs_norm(cfg, spec.obs_shape, spec.one_hot)
        if resume is None:
            name = config_path or f"{cfg.algo.name}_{cfg.env.id.replace('/', '_')}"
            out = new_run_dir(name, run_dir)
            lock = lock_run_dir(out)
        trainer = Trainer(cfg, out, resume is not None, spec, started, ray_up)
        trainer.run_lock = lock
        write_config(trainer.run_dir, cfg)
    except BaseException:
        unlock(lock)
        if ray_up is not None:
            from rltrain import runtime

            runtime.shutdown()
        raise
    print(f"rltrain train: {cfg.algo.name} on {cfg.env.id}; writing {trainer.run_dir}")
    return trainer
