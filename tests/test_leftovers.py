"""Nothing is left behind: `rltrain train` on the process runtime, as a real subprocess,
leaves no process and no ``pymp-*`` directory (the forkserver's socket) in its temporary
directory: a run that ends normally after one of its actors was killed and restarted, and (in
test_interrupt, with ``train`` and ``assert_nothing_left`` from here) a run stopped by SIGINT."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
CONFIG = str(ROOT / "configs" / "cartpole_a3c.yaml")


def marked_processes(mark: str) -> list[int]:
    """The processes whose environment holds ``mark`` (the run's, and any child's)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if mark.encode() in (proc / "environ").read_bytes():
                found.append(int(proc.name))
        except OSError:  # gone, or not ours to read
            continue
    return found


def train(tmp: Path, *extra: str) -> tuple[subprocess.Popen, str]:
    mark = f"RLTRAIN_TEST_MARK={uuid.uuid4().hex}"
    argv = [sys.executable, "-m", "rltrain.cli", "train", CONFIG, "--run-dir", str(tmp / "run")]
    argv += ["--set", "stop.mean_return=null", *extra]
    env = {**os.environ, "TMPDIR": str(tmp), mark.split("=")[0]: mark.split("=")[1]}
    pipe = subprocess.PIPE
    proc = subprocess.Popen(argv, stdout=pipe, stderr=pipe, text=True, env=env)
    return proc, mark


def assert_nothing_left(tmp: Path, mark: str) -> None:
    deadline = time.time() + 10  # children see their parent gone and end by themselves
    while marked_processes(mark) and time.time() < deadline:
        time.sleep(0.2)
    assert marked_processes(mark) == []
    assert sorted(p.name for p in tmp.glob("pymp-*")) == []


def test_a_run_leaves_no_process_and_no_pymp_directory(tmp_path: Path) -> None:
    """A normal end (max_seconds, exit code 0), by the same teardown as one without a fault,
    after an actor's process was killed and a new one started in its place."""
    proc, mark = train(
        tmp_path,
        "--set",
        "runtime.backend=process",
        "--set",  # (the kill's clock starts once every process is up: seconds on a loaded
        "stop.max_seconds=8",  # 2-core box)
        "--set",
        "faults.events=[{action: kill, target: actor, index: 0, at: 1}]",
    )
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "actor 0 lost" in err
    assert_nothing_left(tmp_path, mark)
