"""Nothing is left behind: `rltrain train` on the process runtime, as a real subprocess,
leaves no process and no ``pymp-*`` directory (the forkserver's socket) in its temporary
directory, whether it ends normally, by SIGINT, or after one of its actors was killed."""

from __future__ import annotations

import os
import signal
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


@pytest.mark.parametrize("how", ["normal", "sigint", "actor_killed"])
def test_a_run_leaves_no_process_and_no_pymp_directory(tmp_path: Path, how: str) -> None:
    extra = {
        "normal": ["--set", "stop.max_env_steps=2000"],
        "sigint": ["--set", "stop.max_seconds=120"],
        "actor_killed": [  # (the kill's clock starts once every process is up: seconds
            "--set",  # on a loaded 2-core box)
            "stop.max_seconds=8",
            "--set",
            "faults.events=[{action: kill, target: actor, index: 0, at: 1}]",
        ],
    }[how]
    proc, mark = train(tmp_path, "--set", "runtime.backend=process", *extra)
    if how == "sigint":
        deadline = time.time() + 60
        while not (tmp_path / "run" / "tb").exists() and time.time() < deadline:
            time.sleep(0.2)
        time.sleep(2)
        proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == (130 if how == "sigint" else 0), err
    if how == "actor_killed":
        assert "actor 0 lost" in err
    assert_nothing_left(tmp_path, mark)
