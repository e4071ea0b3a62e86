"""Checkpoints: the server's shards (parameters, optimizer state, versions, counters),
the run's counters and config, in ``runs/<run>/checkpoints/ckpt-<version>.pt``.

Saved through a temporary file and an atomic rename; loaded with ``weights_only=True`` so a
checkpoint file can never run code.
"""

from __future__ import annotations

import io
import json
import os
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import torch

from rltrain.errors import RLTrainError
from rltrain.faults import RunFailed
from rltrain.rundir import folder_gone

CKPT_DIR = "checkpoints"
PLAIN = ("config", "eval", "stop", "changes")
"""A state's entries of plain values (no tensors), written as JSON reads them back."""


class CheckpointError(RLTrainError, ValueError):
    """A missing, truncated or foreign checkpoint; the message is one line: its ``reason``,
    then what to do (``advice``), where there is something. (Not ``cause``: Ray's errors
    name the exception they wrap so, which the runtime follows.)"""

    def __init__(self, reason: str, advice: str = "") -> None:
        super().__init__(f"{reason}; {advice}" if advice else reason)
        self.reason, self.advice = reason, advice


def save_checkpoint(run_dir: Path, version: int, state: dict[str, Any], keep: int) -> Path:
    """Write ``state`` as ``ckpt-<version>.pt`` and keep only the ``keep`` newest; a write that
    fails (a full disk, permissions) stops the run: :class:`RunFailed` in one line."""
    if not run_dir.is_dir():
        raise RunFailed(folder_gone(run_dir))
    try:
        path = write_state(run_dir / CKPT_DIR / f"ckpt-{version:010d}.pt", state)
    except OSError as e:
        raise RunFailed(
            f"cannot write a checkpoint in {run_dir / CKPT_DIR} ({e.strerror or e}); free "
            "space or allow writes there, then --resume from the last one"
        ) from None
    for old in list_checkpoints(run_dir)[:-keep]:
        old.unlink(missing_ok=True)
    return path


def best_checkpoint(run_dir: Path) -> Path:
    """Where the best-scoring evaluated checkpoint is kept (``eval.every_steps``); never pruned,
    never resumed from (a resume continues from the newest ``ckpt-*.pt``)."""
    return run_dir / CKPT_DIR / "best.pt"


def write_state(path: Path, state: dict[str, Any]) -> Path:
    """``torch.save`` through a temporary file, fsync and an atomic rename: a crash leaves the
    old file or the new one, never a torn one."""
    # the config and eval record as plain JSON: a YAML date in env.kwargs (a datetime.date)
    # would make the file one that weights_only=True refuses, for eval and resume alike
    plain = {k: as_saved(state[k]) for k in PLAIN if k in state}
    state = {**state, **plain}
    # serialised in memory first (before the temporary file: a Ctrl-C in it leaves none):
    # torch's zip writer turns a full disk's OSError into a RuntimeError ("unexpected pos"),
    # which read as a bug with a traceback (explore104)
    data = io.BytesIO()
    torch.save(state, data)
    folder = path.parent
    folder.mkdir(exist_ok=True)  # (never its parent: a run folder moved away stays away)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".ckpt-", suffix=".tmp")
    os.close(fd)
    try:
        with open(tmp, "wb") as f:
            f.write(data.getbuffer())
            f.flush()
            os.fsync(f.fileno())  # durable before older checkpoints are pruned
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return path


def as_saved(value: Any) -> Any:
    """``value`` (a config's dict) as a checkpoint keeps it: plain JSON, other scalars (a YAML
    date) as their text. Compare a config with a checkpoint's through it."""
    return json.loads(json.dumps(value, default=str))


def list_checkpoints(run_dir: Path) -> list[Path]:
    return sorted((run_dir / CKPT_DIR).glob("ckpt-*.pt"))


def latest_checkpoint(run_dir: Path) -> Path | None:
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Load with ``weights_only=True``; any damage is a one-line CheckpointError."""
    advice = (  # (best.pt has no older one: the run's newest plays instead)
        "play --checkpoint latest; a resumed run's next evaluation writes a new one"
        if path.name == "best.pt"
        else "delete it to fall back on an older checkpoint, if any"
    )
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint not found: {path}") from None
    except Exception as e:  # noqa: BLE001 - flipped bytes can surface as any decoding error
        # (UnpicklingError, BadZipFile, EOFError, UnicodeDecodeError, ValueError, ...)
        if not _is_checkpoint_name(path):  # a user's --checkpoint: config.yaml, a .py, ...
            raise CheckpointError(
                f"{path} is not an rltrain checkpoint ({damage(path, e)}); a run's are its "
                f"{CKPT_DIR}/ckpt-*.pt"
            ) from None
        raise CheckpointError(
            f"checkpoint {path} is corrupt or truncated ({damage(path, e)})", advice
        ) from None
    if not _is_rltrain_state(state):
        raise CheckpointError(
            f"{path} is not an rltrain checkpoint (no parameter shards and counters in it)"
        )
    bad = damaged_entry(path)
    if bad:  # (torch.load reads no checksum: flipped parameter bytes loaded as parameters)
        raise CheckpointError(
            f"checkpoint {path} is corrupt ({bad}'s bytes do not match their CRC-32: damaged "
            "on disk)",
            advice,
        )
    return state


def damaged_entry(path: Path) -> str:
    """The first entry of a ``torch.save`` archive whose bytes fail the CRC-32 the archive
    keeps for it ("" for none): torch.load checks none (explore97: 100 parameters changed by
    flipped bytes resumed and played). An entry of CRC 0 is not judged: torch writes 0 for
    every entry under ``torch.serialization.set_crc32_options(False)``. ~1 ms per 4 MB."""
    try:
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                if info.CRC == 0:
                    continue
                try:
                    with archive.open(info) as entry:  # (its CRC is checked at its end)
                        while entry.read(1 << 22):
                            pass
                except zipfile.BadZipFile:
                    return info.filename
    except (OSError, zipfile.BadZipFile, RuntimeError, EOFError):  # (torch.load read it)
        return ""
    return ""


def _is_checkpoint_name(path: Path) -> bool:
    """A ``.pt`` file (a run's ``ckpt-*.pt`` or ``best.pt``, or a copy of one): only then is
    "delete it to fall back on an older one" the advice, not for a file that never was one
    (``--checkpoint config.yaml``)."""
    return path.suffix == ".pt"


def damage(path: Path, error: BaseException) -> str:
    """A short description of why a file ``torch.save`` wrote (a checkpoint, a record) did
    not load."""
    try:
        size = path.stat().st_size
        path.open("rb").close()
    except OSError as e:
        return e.strerror or type(e).__name__
    if size == 0:
        return "the file is empty"
    if not zipfile.is_zipfile(path):  # torch.save writes a zip archive; a cut one has no index
        return f"{size:,} bytes that are not a complete torch.save archive"
    first = " ".join(str(error).split()).split(". ")[0]
    return f"{size:,} bytes; torch: {first[:120] or type(error).__name__}"


def _is_rltrain_state(state: Any) -> bool:
    if not isinstance(state, dict) or not isinstance(state.get("counters"), dict):
        return False
    shards = state.get("shards")
    return (
        isinstance(shards, list)
        and len(shards) > 0
        and all(
            isinstance(s, dict) and isinstance(s.get("param"), torch.Tensor) and "version" in s
            for s in shards
        )
    )
