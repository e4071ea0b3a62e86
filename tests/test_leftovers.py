"""Nothing is left behind: `rltrain train` on the process runtime, as a real subprocess,
leaves no process and no ``pymp-*`` directory (the forkserver's socket) in its temporary
directory: a run that ends normally after one of its actors was killed and restarted, a run
whose trainer was killed (SIGKILL), one stopped by SIGTERM to its whole process group, and (in
test_interrupt, with ``train`` and ``assert_nothing_left`` from here) a run stopped by SIGINT."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import checkpoint_when

from rltrain.checkpoint import latest_checkpoint

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
CONFIG = str(ROOT / "configs" / "cartpole_a3c.yaml")
APPO = str(ROOT / "configs" / "cartpole_appo.yaml")  # a learner process holds the shards
UNTIL_STOPPED = ("--set", "checkpoint.every_seconds=1", "--set", "stop.max_seconds=300")


def session_processes(session: int) -> list[int]:
    """The processes of the session ``session`` (the run's own: children do not leave it).
    Not by a mark in their environment: a child's title (setproctitle) overwrites it."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError):  # gone, or not ours to ask
                ended = (proc / "stat").read_text().rpartition(")")[2].split()[0] == "Z"
                if os.getsid(int(proc.name)) == session and not ended:  # (a zombie has ended:
                    found.append(int(proc.name))  # a container's pid 1 may never reap it)
    return found


def train(tmp: Path, *extra: str, config: str = CONFIG) -> tuple[subprocess.Popen, int]:
    """``rltrain train`` in its own temporary directory and its own session (as a
    scheduler's job step is), and that session's id."""
    argv = [sys.executable, "-m", "rltrain.cli", "train", config, "--run-dir", str(tmp / "run")]
    argv += ["--set", "stop.mean_return=null", *extra]
    env = {**os.environ, "TMPDIR": str(tmp)}
    pipe = subprocess.PIPE
    proc = subprocess.Popen(
        argv, stdout=pipe, stderr=pipe, text=True, env=env, start_new_session=True
    )
    return proc, proc.pid


def wait_for_checkpoint(proc: subprocess.Popen, run: Path, timeout: float = 120) -> None:
    """Until a checkpoint past version 0 exists: every process is up and training."""
    running = lambda: proc.poll() is None  # noqa: E731
    past_zero = lambda ck: ck["shards"][0]["version"] > 0  # noqa: E731
    trained = checkpoint_when(run, past_zero, timeout, alive=running)
    if trained is not None:
        return
    assert running(), proc.communicate()
    proc.kill()
    raise AssertionError("no training progress")


def assert_nothing_left(tmp: Path, session: int) -> None:
    deadline = time.time() + 60  # children see the trainer gone and end by themselves (the
    # forkserver once its imports are done: seconds on a loaded 2-core box)
    while session_processes(session) and time.time() < deadline:
        time.sleep(0.2)
    assert session_processes(session) == []
    assert sorted(p.name for p in tmp.glob("pymp-*")) == []


def test_a_run_leaves_no_process_and_no_pymp_directory(tmp_path: Path) -> None:
    """A normal end (max_env_steps, exit code 0), by the same teardown as one without a
    fault, after a worker's process was killed and a new one started in its place."""
    proc, session = train(
        tmp_path,
        "--set",
        "runtime.backend=process",
        "--set",  # steps, not seconds: the kill's clock starts once every process is up,
        "stop.max_env_steps=60000",  # and a loaded box's start-up outlasted 8 s and 12 s
        "--set",  # (and a quiet AVX-512 box ran 30,000 steps before a kill at 1 s)
        "stop.mean_return=null",
        "--set",
        "faults.events=[{action: kill, target: worker, index: 0, at: 0.5}]",
    )
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "worker 0 lost" in err  # (a3c's: it acts and learns)
    assert_nothing_left(tmp_path, session)


def test_a_killed_trainer_takes_its_processes_and_pymp_directory_with_it(tmp_path: Path) -> None:
    """SIGKILL (or the OOM killer) leaves the trainer no time to stop anything: its children
    end by themselves, the policy worker and the actors in the middle of their long calls
    included, and the first to see it gone removes its ``pymp-*`` directory."""
    server = ("--set", "runtime.inference=server")  # a policy worker: it reads no pipe
    proc, session = train(tmp_path, *server, *UNTIL_STOPPED, config=APPO)  # while it serves
    try:
        wait_for_checkpoint(proc, tmp_path / "run")
        assert len(session_processes(session)) >= 5  # trainer, forkserver, learner, policy, actor
        proc.kill()
        proc.communicate(timeout=60)
        assert_nothing_left(tmp_path, session)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(session, signal.SIGKILL)


def test_sigterm_to_the_whole_group_keeps_the_final_checkpoint(tmp_path: Path) -> None:
    """A scheduler's SIGTERM (Slurm's scancel, systemd's stop) reaches every process of the
    job: the children ignore it and the trainer stops as on Ctrl-C, so the learner process
    that holds the shards is there for the final checkpoint."""
    proc, session = train(tmp_path, *UNTIL_STOPPED, config=APPO)
    try:
        wait_for_checkpoint(proc, tmp_path / "run")
        os.killpg(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 130, err
        assert "Traceback" not in err and "lost" not in err and "final checkpoint" in err
        summary = json.loads((tmp_path / "run" / "summary.json").read_text())
        assert summary["stopped_by"] == "interrupt"
        state = torch.load(latest_checkpoint(tmp_path / "run"), weights_only=True)
        assert state["counters"]["env_steps"] == summary["env_steps"] > 0
        assert_nothing_left(tmp_path, session)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


@pytest.mark.parametrize("pidfd", [True, False], ids=["pidfd", "polled"])
def test_a_child_ends_with_its_trainer_and_removes_its_socket(tmp_path: Path, pidfd: bool) -> None:
    """watch_trainer, in a forked process, on a stand-in trainer: by a pidfd, and by polling
    where there is none. Only the socket and its then empty directory go."""
    from rltrain.runtime.process.child import watch_trainer

    folder = tmp_path / "pymp-test"
    folder.mkdir()
    (folder / "listener-test").write_text("")
    trainer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1)"])
    pid = os.fork()
    if pid == 0:  # the child: never back into pytest
        try:
            if not pidfd:
                del os.pidfd_open
            watch_trainer(trainer.pid, str(folder / "listener-test"))
        finally:
            os._exit(2)
    trainer.wait()  # reaped, as the trainer's shell does
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 1
    assert not folder.exists()


def test_a_child_drops_stop_signals_and_what_it_starts_does_not() -> None:
    """A child outlives a group's SIGTERM (the trainer stops it), but what it forks or execs
    (an env's workers) keeps the default: their terminate() works."""
    from rltrain.runtime.process.child import hold_stops

    pid = os.fork()
    if pid == 0:
        code = 3
        try:
            hold_stops()
            os.kill(os.getpid(), signal.SIGTERM)  # dropped
            forked = os.fork()
            if forked == 0:
                os._exit(0 if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL else 4)
            _, status = os.waitpid(forked, 0)
            execd = subprocess.Popen(["sleep", "30"])
            execd.terminate()
            ended = execd.wait(timeout=10) == -signal.SIGTERM
            code = os.waitstatus_to_exitcode(status) if ended else 5
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_ctrl_c_in_a_hogwild_mode_stops_it_and_leaves_nothing(tmp_path: Path) -> None:
    """Hogwild's workers are forkserver children, which ignore Ctrl-C and SIGTERM: the bench
    joined each for 10 s, then sent SIGTERM, and left both running for good."""
    bench = str(ROOT / "configs" / "bench_toy.yaml")
    argv = [sys.executable, "-m", "rltrain.cli", "bench", bench, "--run-dir", str(tmp_path / "b")]
    for kv in ("budget.epochs=0", "budget.max_seconds=60", "modes=[hogwild]"):
        argv += ["--set", kv]
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    pipe = subprocess.PIPE
    proc = subprocess.Popen(
        argv, stdout=pipe, stderr=pipe, text=True, env=env, start_new_session=True
    )
    try:
        deadline = time.time() + 60  # until both workers are up (the forkserver's children)
        while len(session_processes(proc.pid)) < 4 and time.time() < deadline:
            time.sleep(0.2)
        time.sleep(1.0)
        os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C: the whole group
        _, err = proc.communicate(timeout=15)  # (it took 20 s with 2 workers)
        assert proc.returncode == 130 and "rltrain: interrupted" in err, err
        assert_nothing_left(tmp_path, proc.pid)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
