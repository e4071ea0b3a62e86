"""Hung processes (faults.hang_timeout_s): the watch kills the process of a call that has run
too long, and the runtime restarts it as after a crash."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from rltrain.cli import main
from rltrain.driver import Done, note_answers
from rltrain.faults import FaultAction, FaultCounters, ProcessLost
from rltrain.rl.run.hangs import Beats, HangWatch, stopped

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


@dataclass(eq=False)
class FakeShard(FakeProcess):
    """A Ray shard process: it answers a no-op call, or (hung) does not."""

    hung: bool = False
    asked: list[float] = field(default_factory=list)

    def answers(self, timeout: float) -> bool:
        self.asked.append(timeout)
        return not self.hung


def test_a_call_waiting_on_a_hung_shard_has_the_shard_killed_not_the_caller() -> None:
    """A stopped Ray shard held the learner's push: the learner was killed, restarted, and
    waited on the shard again. The shard is asked first (a no-op call within 5 s)."""
    shard = FakeShard("shard", 0, pid_=7)
    calls: dict[Any, Any] = {}
    said: list[str] = []
    w = HangWatch(calls, 5.0, said.append, FaultCounters(), shards=lambda: [shard])
    learner = FakeProcess("learner", 0)
    w.answered.add(id(learner))
    calls["learn"] = (learner, None, True)
    w.check(0.0)
    assert w.check(6.0) == "learner 0" and learner.killed == ["kill"]  # the shard answered
    assert shard.asked == [5.0] and not shard.killed
    del calls["learn"]
    calls["again"] = (learner, None, True)
    w.answered.add(id(learner))
    w.check(10.0)
    shard.hung = True
    assert w.check(16.0) == "shard 0" and shard.killed == ["kill"]
    assert learner.killed == ["kill"] and w.counters.hung == 2
    assert said[-1] == (
        "learner 0's call has run 6s and shard 0 does not answer (5s): the shard is taken "
        "for hung and killed (kill shard 0 (pid 7)); it is restored as after a crash"
    )
    assert w.check(17.0) is None  # the learner's clock started again


def test_time_the_watch_itself_was_stopped_counts_on_no_clock() -> None:
    """Ctrl-Z stops the whole process group, the watch too; after `fg` every call had run
    as long as the stop, and the oldest was killed."""
    w, calls, _ = watch(5.0)
    actor = FakeProcess("actor", 0)
    w.answered.add(id(actor))
    calls["c"] = (actor, None, True)
    w.check(0.0)
    w.skip(100.0)  # the watch's next look came 100 s late
    assert w.check(104.0) is None and not actor.killed
    assert w.check(105.0) == "actor 0"


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


def test_a_restart_whose_first_call_outlasts_the_roles_start_up_is_killed() -> None:
    """A user env that hangs in its first rollout: the restarted actor's first call never
    ended, no clock ran while it started, and the run (stop.max_seconds too) waited for
    good. Once a start-up of its role has been seen to end, a start-up is timed as 10x it."""
    back: list[Any] = []
    calls: dict[Any, Any] = {}
    said: list[str] = []
    w = HangWatch(calls, 5.0, said.append, FaultCounters(), lambda: back)
    a, b = FakeProcess("actor", 0), FakeProcess("actor", 1)
    calls["a1"], calls["b1"] = (a, None, True), (b, None, True)
    w.check(0.0)
    del calls["a1"], calls["b1"]  # both start-ups took 2 s
    calls["a2"], calls["b2"] = (a, None, True), (b, None, True)
    w.check(2.0)
    assert w.start_up == {"actor": 2.0} and w.longest == {}
    assert w.check(7.0) == "actor 0"  # no call of an actor ended yet: the configured 5 s
    assert said[0].startswith("actor 0's call has run 5s (faults.hang_timeout_s=5): taken")
    del calls["a2"]  # it failed; its new process makes its first call
    calls["a3"] = (a, None, True)
    assert w.check(8.0) is None
    assert w.check(27.0) is None and not b.killed  # the others wait for its start-up
    assert w.check(28.0) == "actor 0" and a.killed == ["kill", "kill"]
    assert said[1].startswith(
        "actor 0's first call (its start-up) has run 20s (faults.hang_timeout_s=5, 10x the "
        "longest actor start-up: 2.0s): taken for hung"
    )


def test_a_first_call_that_ended_between_looks_is_no_start_up() -> None:
    """The watch looks once a second (and starts with the run's first tick): a first call it
    never saw left the second taken for the start-up, untimed. The pool's record of the
    processes that answered (``Pool.answered``) tells."""
    calls: dict[Any, Any] = {}
    answered: set[int] = set()
    w = HangWatch(calls, 5.0, [].append, FaultCounters(), answered=answered)
    a = FakeProcess("actor", 0)
    answered.add(id(a))  # as the pool's wait() does when a call returns
    calls["second"] = (a, None, True)
    w.check(0.0)
    assert w.check(5.0) == "actor 0"
    assert id(a) not in answered  # killed: its next process starts again
    note_answers(answered, [Done(a, value=1)])
    assert id(a) in answered
    note_answers(answered, [Done(a, error=ProcessLost("a", False, "died"))])
    assert id(a) not in answered  # lost: its next call is a new process's first
    note_answers(answered, [Done(a, value=1), Done(a, revived=True)])
    assert id(a) not in answered


@pytest.fixture
def stopped_pid() -> Iterator[int]:
    """A process stopped by SIGSTOP (state T in /proc, waited for: the signal lands
    asynchronously)."""
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        sleeper.send_signal(signal.SIGSTOP)
        for _ in range(200):
            if stopped(FakeProcess("any", 0, sleeper.pid)):
                break
            time.sleep(0.05)
        yield sleeper.pid
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_stopped_process_goes_before_an_older_call_that_waits_for_it(stopped_pid: int) -> None:
    """Under a barrier the live worker's call waits as long as the stopped one's."""
    w, calls, _ = watch(5.0)
    waiting, hung = FakeProcess("actor", 0, 1), FakeProcess("actor", 1, stopped_pid)
    w.answered |= {id(waiting), id(hung)}
    calls["waits"] = (waiting, None, True)
    w.check(0.0)
    calls["hung"] = (hung, None, True)
    w.check(1.0)
    assert stopped(hung) and not stopped(waiting)
    assert w.check(7.0) == "actor 1" and not waiting.killed


def test_a_stopped_process_past_the_limit_goes_before_a_caller_over_its_own(
    stopped_pid: int,
) -> None:
    """A SIGSTOPped learner (the shards' holder; its calls take 1.5 s, so 10x is 15 s) and an
    actor whose call waits on it (10x 1.0 s): the actor went over its 10 s first and was
    killed, then the learner (CI saw hung == 2). The stopped one goes once past the limit."""
    w, calls, _ = watch(8.0)
    actor, learner = FakeProcess("actor", 1, 1), FakeProcess("learner", 0, stopped_pid)
    w.answered |= {id(actor), id(learner)}
    w.longest.update(actor=1.0, learner=1.5)
    calls["learn"] = (learner, None, True)
    calls["act"] = (actor, None, True)
    w.check(0.0)
    assert w.check(10.5) == "learner 0" and not actor.killed


def test_a_process_stopped_in_its_start_up_is_killed() -> None:
    """No clock runs while a process starts, but a stopped one's: SIGSTOP in a start-up
    (the policy worker's, before its first beat) held the run for good."""
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        w, calls, said = watch(5.0)
        starting, hung = FakeProcess("actor", 0, 1), FakeProcess("policy", 0, sleeper.pid)
        w.beating(Beats("policy", lambda: 0, lambda r: False))
        calls["first"], calls["serve"] = (starting, None, True), (hung, None, True)
        assert w.check(0.0) is None and w.check(30.0) is None  # both start: untimed
        sleeper.send_signal(signal.SIGSTOP)
        for _ in range(200):  # the signal lands asynchronously
            if stopped(hung):
                break
            time.sleep(0.05)
        assert w.check(31.0) is None and w.check(35.0) == "policy 0" and not starting.killed
        assert said[0].startswith("policy 0 has been stopped (SIGSTOP?) 5s in its start-up")
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_policy_worker_that_stops_beating_is_killed_not_the_actors_waiting_on_it() -> None:
    """runtime.inference=server: the policy worker's one call serves the run, so its
    heartbeat is timed; the actors' calls that wait for its answer are not (a deadlocked
    worker is no older than they: killing them first would leave it hung)."""
    w, calls, said = watch(5.0)
    policy, actors = FakeProcess("policy", 0), [FakeProcess("actor", i) for i in range(2)]
    count, waiting = [0], {0, 1}
    w.beating(Beats("policy", lambda: count[0], lambda r: r.role == "actor" and r.index in waiting))
    w.answered |= {id(a) for a in actors}  # past their first calls
    calls["serve"] = (policy, None, True)
    for a in actors:
        calls[a.index] = (a, None, True)
    assert w.check(0.0) is None and w.check(30.0) is None  # no beat yet: it starts
    for t in range(31, 60):  # it beats: alive, however long its call
        count[0] += 1
        assert w.check(float(t)) is None
    assert w.check(63.0) is None  # (its last beat: 59 s)
    assert w.check(64.0) == "policy 0" and not any(a.killed for a in actors)
    assert said[0].startswith("policy 0's heartbeat stopped 5s ago (faults.hang_timeout_s=5)")
    waiting.clear()  # an actor that does not wait on it is timed as ever
    del calls["serve"]
    assert w.check(65.0) is None and w.check(70.0) == "actor 0"


def test_a_thread_is_said_once_and_the_policy_worker_never_timed() -> None:
    w, calls, said = watch(5.0)
    thread, policy = FakeThread("actor", 0), FakeProcess("policy", 0)
    w.answered |= {id(thread), id(policy)}
    calls["t"], calls["serve"] = (thread, None, True), (policy, None, True)
    w.check(0.0)
    assert w.check(60.0) is None and w.check(120.0) is None
    assert len(said) == 1 and said[0].endswith("its stop does not wait for it")
    assert not policy.killed and w.counters.hung == 1 and w.is_hung_thread(thread)
    w, calls, said = watch(None)  # null: never
    calls["t"] = (FakeProcess("actor", 0), None, True)
    w.answered.add(id(calls["t"][0]))
    w.check(0.0)
    assert w.check(1e6) is None and not said


def paused_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], target: str, steps: int, *sets: str
) -> tuple[dict, list[str]]:
    """An appo CartPole run whose ``target`` 0 is stopped (SIGSTOP) 2 s in, for 300 s:
    its summary.json and the watch's kill lines. The limit is 8 s, not 3: on a loaded
    2-core box (CI's) a healthy call took 3 s."""
    run_dir, pause = tmp_path / "run", f"{{action: pause, target: {target}, at: 2, seconds: 300}}"
    argv = ["train", str(ROOT / "configs" / "cartpole_appo.yaml"), "--run-dir", str(run_dir)]
    for value in ("stop.mean_return=null", f"stop.max_env_steps={steps}", *sets):
        argv += ["--set", value]
    argv += ["--set", "faults.hang_timeout_s=8", "--set", f"faults.events=[{pause}]"]
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 0, err
    kills = [line for line in (out + err).splitlines() if "taken for hung" in line]
    return json.loads((run_dir / "summary.json").read_text()), kills


@pytest.mark.slow
def test_a_stopped_policy_worker_is_killed_and_restarted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """runtime.inference=server: the actors wait on a stopped policy worker; it is the one
    killed (the actors were, before its heartbeat, and the run then waited for good)."""
    summary, kills = paused_run(tmp_path, capsys, "policy", 30000, "runtime.inference=server")
    assert summary["stopped_by"] == "max_env_steps"
    assert summary["faults"]["hung"] == 1 and summary["faults"]["policy_restarts"] == 1, kills
    assert "policy 0's heartbeat stopped" in kills[0]


@pytest.mark.slow
def test_a_stopped_learner_that_holds_the_shards_is_killed_and_the_run_goes_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """appo on the process runtime: the learner's process holds the shards, and the trainer
    waits for their statistics there; a pause far past the limit is a hang."""
    summary, kills = paused_run(tmp_path, capsys, "learner", 40000)
    assert summary["stopped_by"] == "max_env_steps"
    assert summary["faults"]["hung"] == 1 and summary["faults"]["learner_restarts"] == 1, kills
    assert "learner 0's call has run" in kills[0]


@pytest.mark.slow
def test_a_user_env_that_hangs_in_step_is_killed_and_the_run_stops_on_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """step() that never returns, in every actor and in each that replaces it: the restarted
    actors' calls were taken for start-ups, untimed, and the stop (stop.max_seconds) waited
    for them for good. Now each is killed, and the stop waits only as long as that."""
    run_dir = tmp_path / "run"
    argv = ["train", str(ROOT / "configs" / "cartpole_appo.yaml"), "--run-dir", str(run_dir)]
    for value in (
        "env.id=rltrain_test/StepHangs-v0",
        "imports=[custom_envs]",
        "env.num_envs=2",
        "stop.mean_return=null",
        "stop.max_seconds=6",
        "eval.every_steps=0",
        "faults.hang_timeout_s=8",
    ):
        argv += ["--set", value]
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 0, err
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stopped_by"] == "max_seconds"
    assert summary["faults"]["hung"] >= 1 and summary["faults"]["actor_restarts"] >= 1
    assert "stopping: waiting for the calls in flight of actor" in out + err


def test_the_last_process_lost_after_the_watch_killed_it_is_said_hung() -> None:
    """ "every actor died ...: the last one, actor 0's process died (signal 9)" hid that the
    hang watch had killed it; a process back since then dies of its own causes."""
    from rltrain.faults import RunFailed
    from rltrain.runtime.context import RunContext

    actor = FakeProcess("actor", 0)
    ctx = RunContext(runtime=None, faults=FaultCounters(), say=print)  # type: ignore[arg-type]
    ctx.add("actor", [actor])
    ctx.hung.add(id(actor))
    with pytest.raises(RunFailed, match="the last one, actor 0, killed as hung"):
        ctx.forget(actor, RuntimeError("actor 0's process died (signal 9)"))


def test_a_process_not_up_yet_is_not_waited_for_by_the_watch() -> None:
    """A Ray process waiting for CPUs on a busy cluster: the watch's look at /proc waited in
    its pid() for as long, timing nothing else, and raised ActorDiedError (printed raw) when
    the stop killed it unstarted."""

    @dataclass(eq=False)
    class Waiting(FakeProcess):
        def is_up(self) -> bool:
            return False

        def pid(self) -> int:
            raise AssertionError("waited for a process that is not up")

    assert not stopped(Waiting("actor", 1))
