"""Checkpoints: the server's shards (parameters, optimizer state, versions, counters),
the run's counters and config, in ``runs/<run>/checkpoints/ckpt-<version>.pt``.

Saved through a temporary file and an atomic rename; loaded with ``weights_only=True`` so a
checkpoint file can never run code.
"""

from __future__ import annotations

import os
import pickle
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import torch

from rltrain.errors import RLTrainError

CKPT_DIR = "checkpoints"


class CheckpointError(RLTrainError, ValueError):
    """A missing, truncated or foreign checkpoint; the message is one line."""


def save_checkpoint(run_dir: Path, version: int, state: dict[str, Any], keep: int) -> Path:
    """Write ``state`` as ``ckpt-<version>.pt`` and keep only the ``keep`` newest."""
    folder = run_dir / CKPT_DIR
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"ckpt-{version:010d}.pt"
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".ckpt-", suffix=".tmp")
    os.close(fd)
    try:
        with open(tmp, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())  # durable before older checkpoints are pruned
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)
    for old in list_checkpoints(run_dir)[:-keep]:
        old.unlink(missing_ok=True)
    return path


def list_checkpoints(run_dir: Path) -> list[Path]:
    return sorted((run_dir / CKPT_DIR).glob("ckpt-*.pt"))


def latest_checkpoint(run_dir: Path) -> Path | None:
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Load with ``weights_only=True``; any damage is a one-line CheckpointError."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint not found: {path}") from None
    except (RuntimeError, EOFError, OSError, pickle.UnpicklingError, zipfile.BadZipFile) as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
        raise CheckpointError(f"checkpoint {path} is corrupt or truncated ({first})") from None
    if not isinstance(state, dict) or "shards" not in state or "counters" not in state:
        raise CheckpointError(f"{path} is not an rltrain checkpoint")
    return state
