"""Checkpoints: atomic, pruned, loaded with weights_only, damage is a one-line error."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rltrain.checkpoint import (
    CheckpointError,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    save_checkpoint,
)
from rltrain.ps.config import OptimizerConfig, ServerConfig
from rltrain.ps.server import LocalServer
from rltrain.records import GradUpdate


def state(version: int) -> dict:
    server = LocalServer(torch.zeros(5), OptimizerConfig(name="adam"), ServerConfig(shards=2), 1)
    for v in range(version):
        server.push(GradUpdate(0, v, torch.ones(5), 1))
    return {"shards": server.state_dicts(), "counters": {"env_steps": 10 * version}, "config": {}}


def test_save_load_keep_and_latest(tmp_path: Path) -> None:
    for v in (1, 2, 3, 4):
        save_checkpoint(tmp_path, v, state(v), keep=2)
    names = [p.name for p in list_checkpoints(tmp_path)]
    assert names == ["ckpt-0000000003.pt", "ckpt-0000000004.pt"]
    loaded = load_checkpoint(latest_checkpoint(tmp_path))  # type: ignore[arg-type]
    assert loaded["counters"]["env_steps"] == 40
    restored = LocalServer(torch.zeros(5), OptimizerConfig(name="adam"), ServerConfig(shards=2), 1)
    restored.load_state_dicts(loaded["shards"])
    assert restored.pull().version == 4
    assert not list((tmp_path / "checkpoints").glob(".ckpt-*"))  # no temporary files left


def test_flipped_parameter_bytes_fail_the_archives_crc(tmp_path: Path) -> None:
    """explore97: bytes flipped inside a parameter tensor loaded as parameters (torch.load
    reads no checksum), resumed and played; the archive's CRC-32 of each entry now judges.
    A damaged best.pt is told to play the newest instead (it has no older one)."""
    import zipfile

    server = LocalServer(torch.randn(20_000), OptimizerConfig(name="adam"), ServerConfig(), 1)
    big = {**state(1), "shards": server.state_dicts()}
    path = save_checkpoint(tmp_path, 1, big, keep=3)
    with zipfile.ZipFile(path) as archive:
        entry = max(archive.infolist(), key=lambda i: i.file_size)
    data = bytearray(path.read_bytes())
    extra = int.from_bytes(data[entry.header_offset + 28 : entry.header_offset + 30], "little")
    payload = entry.header_offset + 30 + len(entry.filename.encode()) + extra  # local header
    for i in range(payload + 4000, payload + 4400):  # 100 of its floats
        data[i] ^= 0x5A
    path.write_bytes(bytes(data))
    assert torch.load(path, weights_only=True)  # (torch itself takes it)
    with pytest.raises(CheckpointError, match="do not match their CRC-32") as e:
        load_checkpoint(path)
    assert "\n" not in str(e.value) and entry.filename in str(e.value)
    best = tmp_path / "checkpoints" / "best.pt"
    best.write_bytes(bytes(data))  # flipped bytes: best.pt has no older one to fall back on
    with pytest.raises(CheckpointError, match="CRC-32.*; play --checkpoint latest"):
        load_checkpoint(best)
    best.write_bytes(bytes(data[: len(data) // 2]))
    with pytest.raises(CheckpointError, match="play --checkpoint latest"):
        load_checkpoint(best)
    from rltrain.rl.run.scores import best_record  # what a resume says: the cause, whole

    record, said = best_record(tmp_path)
    assert record is None and said.endswith(")")
    assert said.startswith(f"checkpoint {best} is corrupt or truncated (")


def test_an_archive_written_without_crcs_is_not_judged_by_them(tmp_path: Path) -> None:
    """torch.serialization.set_crc32_options(False) writes every entry's CRC as 0: such a
    checkpoint is good, not damaged (review 83)."""
    from rltrain.checkpoint import damaged_entry

    path = tmp_path / "nocrc.pt"
    torch.serialization.set_crc32_options(False)
    try:
        torch.save(state(1), path)
    finally:
        torch.serialization.set_crc32_options(True)
    assert damaged_entry(path) == ""
    assert load_checkpoint(path)["counters"]["env_steps"] == 10


def test_truncated_and_foreign_files_are_clear_errors(tmp_path: Path) -> None:
    path = save_checkpoint(tmp_path, 1, state(1), keep=3)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="corrupt or truncated") as e:
        load_checkpoint(path)
    assert "\n" not in str(e.value)
    other = tmp_path / "other.pt"
    torch.save({"weights": torch.zeros(2)}, other)
    with pytest.raises(CheckpointError, match="not an rltrain checkpoint"):
        load_checkpoint(other)
    with pytest.raises(CheckpointError, match="not found"):
        load_checkpoint(tmp_path / "missing.pt")
    config = tmp_path / "config.yaml"  # `rltrain eval RUN --checkpoint RUN/config.yaml`
    config.write_text("seed: 0\n")
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(config)
    assert str(e.value) == (
        f"{config} is not an rltrain checkpoint (8 bytes that are not a complete torch.save "
        "archive); a run's are its checkpoints/ckpt-*.pt"
    )  # not "delete it", the advice for a damaged checkpoint


def test_code_in_a_checkpoint_is_never_run(tmp_path: Path) -> None:
    evil = tmp_path / "evil.pt"

    class Boom:
        def __reduce__(self):  # noqa: ANN204
            return (print, ("pwned",))

    torch.save({"shards": [Boom()], "counters": {}}, evil)
    with pytest.raises(CheckpointError):
        load_checkpoint(evil)


def test_a_checkpoint_that_cannot_be_written_stops_the_run_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk or a read-only folder: RunFailed (the run stops as after a fault, with
    summary.json), not an OSError's traceback; the older checkpoints stay."""
    import errno

    from rltrain import checkpoint
    from rltrain.faults import RunFailed

    save_checkpoint(tmp_path, 1, state(1), keep=2)

    def full(fd: int) -> None:
        # the disk says no as the file is made durable (torch's own writes turned a full
        # disk's OSError into a RuntimeError, "unexpected pos": a traceback, explore104)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoint.os, "fsync", full)
    with pytest.raises(RunFailed) as e:
        save_checkpoint(tmp_path, 2, state(2), keep=2)
    assert str(e.value) == (
        f"cannot write a checkpoint in {tmp_path / 'checkpoints'} (No space left on device); "
        "free space or allow writes there, then --resume from the last one"
    )
    assert [p.name for p in list_checkpoints(tmp_path)] == ["ckpt-0000000001.pt"]
    assert not list((tmp_path / "checkpoints").glob(".ckpt-*"))  # no temporary file left


def test_a_resume_removes_the_temporary_file_a_crash_left(tmp_path: Path) -> None:
    from rltrain.rundir import check_writable

    save_checkpoint(tmp_path, 1, state(1), keep=2)
    torn = tmp_path / "checkpoints" / ".ckpt-abc123.tmp"  # killed mid-write
    torn.write_bytes(b"half")
    check_writable(tmp_path)
    assert not torn.exists() and latest_checkpoint(tmp_path) is not None


def test_a_config_of_yaml_only_values_is_kept_loadable(tmp_path: Path) -> None:
    """env.kwargs with a YAML date (a datetime.date) made every checkpoint one that
    weights_only=True refuses: eval, resume and best.pt failed as 'corrupt or truncated'."""
    import datetime

    from rltrain.checkpoint import as_saved, write_state

    config = {"env": {"id": "X-v0", "kwargs": {"tag": datetime.date(2020, 1, 1)}}}
    state = {"shards": [{"param": torch.zeros(2), "version": 0}], "counters": {}}
    path = write_state(tmp_path / "ckpt-0000000000.pt", {**state, "config": config})
    saved = load_checkpoint(path)["config"]
    assert saved == as_saved(config) == {"env": {"id": "X-v0", "kwargs": {"tag": "2020-01-01"}}}
