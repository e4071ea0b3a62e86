"""Run directories: `runs/<config-name>-<timestamp>/` with config.yaml, tb/ and summary.json."""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from rltrain.config import ConfigError, dump_yaml
from rltrain.failure import FAILURE_LOG
from rltrain.faults import RunFailed

EVALS_FILE = "evals.jsonl"
"""A run's evaluations during training, one JSON record per line (rl.run.periodic)."""

RECORDED_BEFORE = {"epsilon": 0.0}
"""What an evaluation record that lacks a setting was played with: dqn evaluated greedily
before dqn.eval_epsilon."""


def same_protocol(saved: dict[str, Any], now: dict[str, Any]) -> bool:
    """Whether two protocols agree on the keys both name (older runs kept Gym envs' Atari keys)."""
    return all(saved[k] == now[k] for k in saved.keys() & now.keys())


def check_run_dir(
    run_dir: str | Path | None, root: str | Path = "runs", name: str = "--run-dir "
) -> None:
    """Refuse, without creating anything, a run folder that :func:`new_run_dir` could not make.

    An explicit ``--run-dir`` must be new or an empty folder, and its nearest existing parent
    a writable folder; the default goes under ``root``. ``name``: how errors name the run
    folder given (the command line's ``--run-dir ``, the Python API's ``run_dir=``).
    """
    flag = name if run_dir is not None else "run folder under "
    path = Path(run_dir if run_dir is not None else root).expanduser()
    if run_dir is not None and path.exists():
        if not path.is_dir():
            raise ConfigError(f"{name}{path}: is a file; give a new or empty folder")
        if any(path.iterdir()):
            raise ConfigError(f"{name}{path}: already exists and is not empty; choose a new folder")
    parent = path
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise ConfigError(f"{flag}{path}: {parent} is a file, not a folder; give another path")
    if not os.access(parent, os.W_OK | os.X_OK):
        other = name.strip(" =")
        raise ConfigError(f"{flag}{path}: {parent} is not writable; give another {other}")


def check_writable(run_dir: Path, flag: str = "--resume ") -> None:
    """A run folder a resumed session can write in: the folder, ``checkpoints/`` and ``tb/``,
    each tried with a file (write permission bits do not stop root, an immutable or read-only
    file system does). Temporary checkpoints a crash left mid-write are removed (the caller
    holds the run's lock: no other process writes them)."""
    for folder in (run_dir, run_dir / "checkpoints", run_dir / "tb"):
        if folder.exists() and not folder.is_dir():
            raise ConfigError(f"{flag}{run_dir}: {folder} is a file; a run keeps a folder there")
        if not folder.exists():
            continue
        try:
            with tempfile.TemporaryFile(dir=folder):
                pass
        except OSError as e:
            raise ConfigError(
                f"{flag}{run_dir}: cannot write in {folder} ({e.strerror or e}); a resumed run "
                "writes its checkpoints, tb/ and summary.json in its folder"
            ) from None
    for stale in (run_dir / "checkpoints").glob(".ckpt-*.tmp"):
        stale.unlink(missing_ok=True)


def new_run_dir(
    name: str,
    run_dir: str | Path | None,
    root: str | Path = "runs",
    created: list[Path] | None = None,
) -> Path:
    """Create the run's folder: ``run_dir``, which must be new or empty, or else
    ``root/<name>-<time>``.

    Refusing a non-empty folder means a typo never overwrites an earlier run's results.
    ``created`` gets the folders this call made, the run's own first (when it was new), then
    the parents it made: what :func:`remove_new_run_dir` takes away again.
    """
    check_run_dir(run_dir, root)

    def made(path: Path, exist_ok: bool) -> bool:
        missing, up = [], path
        while not up.exists() and up != up.parent:
            missing.append(up)
            up = up.parent
        try:
            path.mkdir(parents=True, exist_ok=exist_ok)
        except FileExistsError:
            return False
        except OSError as e:
            flag = "--run-dir " if run_dir is not None else "run folder "
            raise ConfigError(f"{flag}{path}: cannot create it ({e.strerror or e})") from None
        if created is not None:
            created.extend(missing)
        return True

    if run_dir is not None:
        path = Path(run_dir).expanduser()
        made(path, exist_ok=True)  # new or empty (checked)
        return path
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = Path(root) / f"{name}-{stamp}"
    path, i = base, 1
    while not made(path, exist_ok=False):  # taken, maybe by a launch in the same second
        path, i = Path(f"{base}-{i}"), i + 1
    return path


def remove_new_run_dir(path: Path, created: list[Path]) -> None:
    """Take away a new run's folder that :func:`new_run_dir` made (``created``: what it said
    it made) once the run failed before it trained: the folder and the parents it made, if
    they are empty by then. A folder that was there before (new_run_dir took it only empty)
    is emptied and kept. Either way the same command can run again."""
    if path in created:
        shutil.rmtree(path, ignore_errors=True)
        for parent in created[created.index(path) + 1 :]:
            with contextlib.suppress(OSError):  # not empty: another run's folder is in it
                parent.rmdir()
        return
    for item in path.iterdir() if path.is_dir() else ():
        if item.is_dir() and not item.is_symlink():
            shutil.rmtree(item, ignore_errors=True)
        else:
            item.unlink(missing_ok=True)


def lock_run_dir(run_dir: Path) -> int:
    """Lock ``run_dir`` (the folder itself: nothing is written) until the returned descriptor
    is closed or the process ends: a second trainer on the run (``--resume`` while it still
    trains) is refused in one line instead of both writing and pruning its checkpoints."""
    fd = os.open(run_dir, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise ConfigError(
            f"{run_dir}: another rltrain process is training this run; wait for it to end "
            "or stop it first"
        ) from None
    return fd


def unlock(lock: int | None) -> None:
    """Release a run folder's lock (:func:`lock_run_dir`), if held."""
    if lock is not None:
        os.close(lock)


def write_atomic(path: Path, text: str) -> None:
    """Write through a temporary file and rename, so a crash never leaves half a file."""
    write_atomic_with(path, lambda f: f.write(text.encode()))


def write_atomic_with(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """:func:`write_atomic` for any writer of a binary file (e.g. ``torch.save``)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.chmod(tmp, 0o666 & ~umask())  # mkstemp makes 0600; outputs are ordinary files
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def umask() -> int:
    """The process's file-mode mask (``os.umask`` can only be read by setting it)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_config(run_dir: Path, cfg: Any) -> None:
    write_atomic(run_dir / "config.yaml", dump_yaml(cfg))


def size_note(sizes: str, actors: int, groups: int, batch: str) -> str:
    """The comment lines a session appends to config.yaml to say what ``auto`` chose for it
    (the keys keep saying auto, so that a --resume on another machine sizes the run to that
    one); :func:`sized_actors` reads them back. ``sizes``: what it was sized against."""
    return f"# sized at {sizes}:\n# actors: {actors}\n# env.groups: {groups}\n# {batch}\n"


def sized_actors(run_dir: Path) -> int:
    """The actors the latest session sized, from the last :func:`size_note` in the run's
    config.yaml; 0 where there is none (the actors were set, or no session has sized it)."""
    try:
        text = (run_dir / "config.yaml").read_text()
    except (OSError, UnicodeDecodeError):
        return 0
    found = re.findall(r"^# actors: (\d+)$", text, re.M)
    return int(found[-1]) if found else 0


def folder_gone(run_dir: Path) -> str:
    """Why a run cannot go on writing where it began: its folder was moved or deleted. Its
    files are written by path, so a write would re-create the old folder and split the run
    in two (explore89: TensorBoard's writer failed, then the trainer hung)."""
    return (
        f"the run folder {run_dir} is gone (moved or deleted while the run trained); "
        "--resume it where it is now, from its last checkpoint"
    )


def write_summary(
    run_dir: Path, summary: dict[str, Any], say: Callable[[str], None] | None = None
) -> None:
    """summary.json, strict JSON: a non-finite number (an env's NaN reward in a mean) is
    written as null, which every JSON reader takes, where NaN is not JSON. A session that did
    not fail removes the failure.log an earlier one left (a run resumed after a failure):
    the folder then says what its summary says. ``say``: where a write that fails (a folder
    gone read-only or full: a traceback, explore104) is said in one line instead of raised."""
    text = summary_text(summary)
    if not run_dir.is_dir():
        raise RunFailed(folder_gone(run_dir))
    try:
        write_atomic(run_dir / "summary.json", text + "\n")
    except OSError as e:
        if say is None:
            raise
        say(f"summary.json not written ({e.strerror or e})")
        return
    if not summary.get("failure"):
        with contextlib.suppress(OSError):
            (run_dir / FAILURE_LOG).unlink(missing_ok=True)


def summary_text(summary: dict[str, Any]) -> str:
    """summary.json's text: strict JSON, a non-finite number as null."""
    return json.dumps(_finite(summary), indent=2, allow_nan=False, default=str)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value
