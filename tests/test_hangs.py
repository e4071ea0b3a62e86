"""Hung processes (faults.hang_timeout_s): the watch kills the process of a call that has run
too long, and the runtime restarts it as after a crash."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from rltrain.cli import main
from rltrain.faults import FaultAction, FaultCounters
from rltrain.rl.run.hangs import HangWatch, stopped

ROOT = Path(__file__).resolve().parents[1]


@dataclass(eq=False)
class FakeProcess:
    """A process of the process runtime as the watch sees it."""

    role: str
    index: int
    pid_: int = 0
    killed: list[str] = field(default_factory=list)

    def is_up(self) -> bool:
        return True

    def node(self) -> str | None:
        return None

    def pid(self) -> int:
        return self.pid_

    def signal(self, action: FaultAction) -> str:
        self.killed.append(action.signal)
        return f"kill {self.role} {self.index} (pid {self.pid_})"


@dataclass(eq=False)
class FakeThread:
    """A thread of the trainer's (runtime.backend=local): no signal to send."""

    role: str
    index: int

    def is_up(self) -> bool:
        return True

    def node(self) -> str | None:
        return None


def watch(limit: float | None = 5.0) -> tuple[HangWatch, dict[Any, Any], list[str]]:
    calls: dict[Any, Any] = {}
    said: list[str] = []
    return HangWatch(calls, limit, said.append, FaultCounters()), calls, said


def test_a_call_past_the_limit_is_killed_but_never_a_first_call() -> None:
    w, calls, said = watch(5.0)
    a = FakeProcess("actor", 0)
    calls["c1"] = (a, None, True)
    assert w.check(0.0) is None
    assert w.check(100.0) is None and not a.killed  # its first call: the start-up, untimed
    del calls["c1"]
    calls["c2"] = (a, None, True)
    w.check(100.0)
    assert w.longest == {}  # a start-up's time is no call's time
    del calls["c2"]  # a call of 2 s: the limit is 10x that, past the configured 5 s
    calls["c3"] = (a, None, True)
    w.check(102.0)
    assert w.longest == {"actor": 2.0}
    assert w.check(121.0) is None
    assert w.check(122.0) == "actor 0" and a.killed == ["kill"]
    assert w.counters.hung == 1
    assert said == [
        "actor 0's call has run 20s (faults.hang_timeout_s=5, 10x its longest: 2.0s): taken "
        "for hung and killed (kill actor 0 (pid 0)); it restarts as after a crash"
    ]
    assert w.check(200.0) is None  # once per call; its failure is on its way
    del calls["c3"]  # ... it failed: not a call duration to learn from
    w.check(201.0)
    assert w.longest == {"actor": 2.0}


def test_the_oldest_call_is_killed_and_the_others_clocks_start_again() -> None:
    w, calls, _ = watch(5.0)
    learner, actor = FakeProcess("learner", 0), FakeProcess("actor", 0)
    w.answered |= {id(learner), id(actor)}  # past their first calls
    calls["learn"] = (learner, None, True)
    w.check(0.0)
    calls["collect"] = (actor, None, True)  # it waits for the learner
    w.check(2.0)
    assert w.check(6.0) == "learner 0" and not actor.killed
    assert w.check(10.0) is None  # the actor's clock started again at 6 s
    assert w.check(11.0) == "actor 0"


def test_no_clock_runs_while_a_process_restarts_or_makes_its_first_call() -> None:
    """At a barrier the live workers wait for a restarted one: neither they nor it are
    killed while it starts (a restart of tens of seconds on a busy cluster)."""
    back: list[Any] = []
    calls: dict[Any, Any] = {}
    w = HangWatch(calls, 5.0, [].append, FaultCounters(), lambda: back)
    live, restarted = FakeProcess("actor", 0), FakeProcess("actor", 1)
    w.answered |= {id(live), id(restarted)}
    calls["waits"] = (live, None, True)
    w.check(0.0)
    back.append(restarted)  # Ray (or the trainer) restarts it
    assert w.check(60.0) is None
    back.clear()
    calls["first"] = (restarted, None, True)  # its new process's first call
    assert w.check(120.0) is None and w.check(500.0) is None
    del calls["first"]  # done: from now on every clock runs
    w.check(501.0)
    assert w.check(504.0) is None and w.check(505.0) == "actor 0"  # from the last start, 500
    assert w.longest == {}  # a first call's time is not a role's call time


def test_a_stopped_process_goes_before_an_older_call_that_waits_for_it() -> None:
    """Under a barrier the live worker's call waits as long as the stopped one's."""
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        sleeper.send_signal(signal.SIGSTOP)
        w, calls, _ = watch(5.0)
        waiting, hung = FakeProcess("actor", 0, 1), FakeProcess("actor", 1, sleeper.pid)
        w.answered |= {id(waiting), id(hung)}
        calls["waits"] = (waiting, None, True)
        w.check(0.0)
        calls["hung"] = (hung, None, True)
        w.check(1.0)
        for _ in range(200):  # the signal lands asynchronously
            if stopped(hung):
                break
            time.sleep(0.05)
        assert stopped(hung) and not stopped(waiting)
        assert w.check(7.0) == "actor 1" and not waiting.killed
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_thread_is_said_once_and_the_policy_worker_never_timed() -> None:
    w, calls, said = watch(5.0)
    thread, policy = FakeThread("actor", 0), FakeProcess("policy", 0)
    w.answered |= {id(thread), id(policy)}
    calls["t"], calls["serve"] = (thread, None, True), (policy, None, True)
    w.check(0.0)
    assert w.check(60.0) is None and w.check(120.0) is None
    assert len(said) == 1 and said[0].endswith("a thread cannot be killed; the run waits for it")
    assert not policy.killed and w.counters.hung == 0
    w, calls, said = watch(None)  # null: never
    calls["t"] = (FakeProcess("actor", 0), None, True)
    w.answered.add(id(calls["t"][0]))
    w.check(0.0)
    assert w.check(1e6) is None and not said


@pytest.mark.slow
def test_a_stopped_learner_that_holds_the_shards_is_killed_and_the_run_goes_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """appo on the process runtime: the learner's process holds the shards, and the trainer
    waits for their statistics there; a pause far past the limit is a hang."""
    run_dir = tmp_path / "run"
    code = main(
        [
            "train",
            str(ROOT / "configs" / "cartpole_appo.yaml"),
            "--run-dir",
            str(run_dir),
            "--set",
            "stop.mean_return=null",
            "--set",
            "stop.max_env_steps=40000",
            "--set",
            "faults.hang_timeout_s=8",  # (not 3: on a loaded 2-core box a call may take 3s)
            "--set",
            "faults.events=[{action: pause, target: learner, index: 0, at: 2, seconds: 300}]",
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stopped_by"] == "max_env_steps"
    kills = [line for line in (out + err).splitlines() if "taken for hung" in line]
    assert summary["faults"]["hung"] == 1, kills
    assert summary["faults"]["learner_restarts"] == 1, kills
    assert "learner 0's call has run" in out + err and "taken for hung and killed" in out + err
