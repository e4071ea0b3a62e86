"""Fault handling in one process: schedules, slowdowns, barriers that lose a worker, fenced
shards and restores (the Ray runs that kill real processes are in test_fault_runs.py)."""

from __future__ import annotations

import contextlib
import pickle
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from rltrain import pauses
from rltrain.config import ConfigError, from_dict
from rltrain.faults import (
    FaultCounters,
    FaultEvent,
    FaultSchedule,
    PeerLost,
    ProcessLost,
    ShardFenced,
    Slowdown,
)
from rltrain.pauses import pause, resume_all
from rltrain.ps.config import OptimizerConfig, ServerConfig
from rltrain.ps.shard import ParameterShard
from rltrain.records import GradUpdate
from rltrain.rl.config import TrainConfig


def shard(rule: str, workers: int = 3, **kw: object) -> ParameterShard:
    return ParameterShard(
        torch.zeros(4), OptimizerConfig(name="sgd", lr=1.0), ServerConfig(rule=rule, **kw), workers
    )


def grad(worker: int, version: int, value: float = 1.0) -> GradUpdate:
    return GradUpdate(worker, version, torch.full((4,), value), 8)


def test_schedule_fires_kills_and_pauses_once_in_time_order() -> None:
    events = [
        FaultEvent(action="pause", target="actor", index=1, at=2.0, seconds=3.0),
        FaultEvent(action="kill", target="shard", index=0, at=1.0),
        FaultEvent(action="slow", target="worker", index=0, at=0.0, factor=5),
    ]
    s = FaultSchedule(events, t0=100.0)
    assert s.next_in(100.0) == pytest.approx(1.0)
    assert s.due(100.5) == []
    assert [(a.signal, a.event.target) for a in s.due(102.0)] == [
        ("kill", "shard"),
        ("stop", "actor"),
    ]
    assert s.due(102.0) == []  # each action once
    assert s.next_in(105.0) == float("inf")


def test_a_schedule_armed_later_counts_from_its_arming_and_says_what_is_left() -> None:
    """Start-up is not training time: the trainer arms the clock once every process is up.
    What never fired is listed as the run ends (slow events are the workers' own)."""
    events = [
        FaultEvent(action="kill", target="actor", index=0, at=1.0),
        FaultEvent(action="slow", target="worker", index=0, at=0.0, factor=5),
    ]
    s = FaultSchedule(events, t0=None)
    assert s.due(1e9) == [] and s.next_in(1e9) == float("inf")
    assert [e.action for e in s.left()] == ["kill"]
    s.arm(50.0)
    s.arm(60.0)  # once
    assert s.next_in(50.5) == pytest.approx(0.5)
    assert [a.event.target for a in s.due(51.0)] == ["actor"] and s.left() == []


def test_a_pause_ends_by_itself_and_every_exit_path_can_end_it() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        pause(child.pid, 2.0)
        assert _until(lambda: _state(child.pid) == "T")  # stopped (a signal lands in a moment)
        # continued by its timer, with no one's help (on a loaded machine it may run late)
        assert _until(lambda: _state(child.pid) != "T")
        pause(child.pid, 60)
        assert _until(lambda: _state(child.pid) == "T")
        resume_all()  # what the end of a run and a second Ctrl-C do
        assert _until(lambda: _state(child.pid) != "T")
    finally:
        child.kill()
        child.wait()


def test_a_pause_ends_even_if_the_process_that_paused_is_gone() -> None:
    """A trainer SIGKILLed during a pause takes its timer with it, and the stopped child
    cannot see the trainer end: a process of the pause's own continues it a second late.
    A pause ended on time leaves that process behind neither running nor a zombie."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        pause(child.pid, 0.5)
        stopped = pauses._STOPPED[child.pid]
        stopped.timer.cancel()  # the trainer's thread, gone with the trainer
        assert stopped.backstop is not None
        assert _until(lambda: _state(child.pid) == "T")
        assert _until(lambda: _state(child.pid) != "T")  # after 1.5 s, from the backstop
        pause(child.pid, 0.2)
        backstop = pauses._STOPPED[child.pid].backstop
        assert backstop is not None
        # Its timer continued it and ended the backstop, its sleep included. The timer's
        # thread drops the pid before it reaps the backstop: wait for the reaping itself.
        assert _until(lambda: child.pid not in pauses._STOPPED)
        assert _until(lambda: backstop.poll() is not None)
        assert _until(lambda: not _in_group(backstop.pid))  # sh and its sleep
    finally:
        child.kill()
        child.wait()


def _until(condition: Callable[[], bool], seconds: float = 20.0) -> bool:
    """Wait for ``condition`` (a process's state: signals are delivered asynchronously)."""
    deadline = time.time() + seconds
    while not condition():
        if time.time() >= deadline:
            return False
        time.sleep(0.02)
    return True


def _in_group(pgid: int) -> list[int]:
    """The live processes of process group ``pgid`` (zombies are not alive)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid and fields[0] != "Z":
                found.append(int(stat.parent.name))
    return found


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_slowdown_applies_to_its_worker_inside_its_window() -> None:
    events = (FaultEvent(action="slow", target="worker", index=2, at=10, seconds=5, factor=5),)
    slow = Slowdown(events, index=2)
    slow.start(1000.0)
    assert slow.factor(1005.0) == 1.0
    assert slow.factor(1012.0) == 5.0
    assert slow.factor(1016.0) == 1.0
    assert not Slowdown(events, index=0)
    forever = Slowdown((FaultEvent(action="slow", target="worker", factor=3),), 0)
    forever.start(time.time())
    t = time.perf_counter()
    forever.stretch(0.02)
    assert time.perf_counter() - t >= 0.035  # 0.02 s of work made 3x as long


def test_fault_events_are_checked_against_the_run() -> None:
    stop = {"max_seconds": 10}
    ev = {"action": "kill", "target": "learner", "index": 0, "at": 1}
    with pytest.raises(ConfigError, match="no learner in this run"):
        from_dict(TrainConfig, {"stop": stop, "algo": {"name": "a3c"}, "faults": {"events": [ev]}})
    ev = {"action": "kill", "target": "actor", "index": 5}
    appo = {"stop": stop, "actors": 2, "algo": {"name": "appo"}}
    with pytest.raises(ConfigError, match=r"actor index 5 out of range 0..1"):
        from_dict(TrainConfig, appo | {"faults": {"events": [ev]}})
    # a3c's workers act and learn: the target worker, as their lines and restarts name them
    a3c = {"stop": stop, "actors": 2, "algo": {"name": "a3c"}}
    with pytest.raises(ConfigError, match=r"no actor in this run \(targets: worker, shard\)"):
        from_dict(TrainConfig, a3c | {"faults": {"events": [ev]}})
    with pytest.raises(ConfigError, match=r"worker index 5 out of range 0..1"):
        from_dict(TrainConfig, a3c | {"faults": {"events": [ev | {"target": "worker"}]}})
    slow = {"action": "slow", "target": "worker", "index": 0}
    with pytest.raises(ConfigError, match="action slow applies to rltrain bench's workers"):
        from_dict(TrainConfig, a3c | {"faults": {"events": [slow]}})
    cfg = from_dict(
        TrainConfig,
        {"stop": stop, "algo": {"name": "impala"}, "faults": {"events": [ev | {"index": 1}]}},
    )
    assert cfg.faults.events[0].index == 1


def test_counters_name_their_tensorboard_tags() -> None:
    c = FaultCounters()
    c.restart("actor")
    c.restart("learner")
    c.restart("worker")
    c.lost_updates = 7
    tags = c.tags()
    assert tags["faults/actor_restarts"] == 1 and tags["faults/learner_restarts"] == 1
    assert tags["faults/worker_restarts"] == 1 and tags["faults/lost_updates"] == 7
    assert c.total() == 10 and "lost_updates 7" in c.brief()


def test_lost_errors_survive_pickling_as_ray_sends_them() -> None:
    e = pickle.loads(pickle.dumps(ProcessLost("abc", True, "gone")))
    assert (e.actor_id, e.permanent, str(e)) == ("abc", True, "gone")
    p = pickle.loads(pickle.dumps(PeerLost("def", "shard died")))
    assert (p.actor_id, str(p)) == ("def", "shard died")


# --- barriers that lose a worker ---------------------------------------------------------------


def test_sync_barrier_continues_without_a_worker_that_left() -> None:
    s = shard("sync", workers=3)
    assert s.push(grad(0, 0)).status == "accumulated"
    assert s.push(grad(1, 0)).status == "accumulated"
    s.leave(2)  # worker 2 died: the two updates already there make the step
    assert s.version == 1
    assert s.push(grad(0, 1)).status == "accumulated"
    assert s.push(grad(1, 1)).status == "applied"  # N-1 now
    assert s.push(grad(2, 2)).status == "accumulated"  # back: it rejoins with its push
    assert s.push(grad(0, 2)).status == "accumulated"  # and N = 3 again
    assert s.push(grad(1, 2)).status == "applied"


def test_soft_sync_never_waits_for_more_workers_than_are_alive() -> None:
    s = shard("soft_sync", workers=3, k=3)
    s.leave(1)
    s.leave(2)
    assert s.push(grad(0, 0)).status == "applied"  # K capped at the one live worker


def test_barrier_waiter_wakes_when_the_shard_is_restored() -> None:
    s = shard("sync", workers=2)
    state = s.state_dict()
    s.push(grad(0, 0))
    woke: list[bool] = []
    t = threading.Thread(target=lambda: woke.append(s.wait_for_version(1, timeout=30)))
    t.start()
    time.sleep(0.1)
    s.load_state_dict(state)  # a restore: the waiter must not sit out its timeout
    t.join(timeout=5)
    assert woke and not t.is_alive()


def test_a_fenced_shard_serves_nothing_until_restored() -> None:
    s = shard("async")
    state = s.state_dict()
    s.fence()
    assert s.health() == (0, True)
    with pytest.raises(ShardFenced, match="awaits its restore"):
        s.pull()
    with pytest.raises(ShardFenced):
        s.push(grad(0, 0))
    s.load_state_dict(state)
    assert s.health() == (0, False)
    assert s.push(grad(0, 0)).status == "applied"


def test_a_barrier_call_rolled_back_by_a_restore_ends_with_the_restarted_calls() -> None:
    """A shard restore takes the version back (6 -> 1): the workers whose calls failed get
    new calls aiming at the next multiple of a call's steps after it (4); a worker still in
    its call (aiming at 8) must end at 4 too, or it would wait at the barrier for them."""
    from rltrain.config import load_config
    from rltrain.ps.server import LocalServer
    from rltrain.rl.config import TrainConfig, server_settings
    from rltrain.rl.env_spec import initial_params, probe_env
    from rltrain.rl.worker import Worker

    root = Path(__file__).resolve().parents[1]
    cfg = load_config(
        TrainConfig, root / "configs" / "cartpole_a3c.yaml", ["algo.name=a2c", "actors=1"]
    )
    server = LocalServer(
        initial_params(cfg, probe_env(cfg)), cfg.optimizer, server_settings(cfg), 1
    )
    saved: list = []

    class Restoring:  # the shard guard's restore, from the point saved at version 1
        def __getattr__(self, name: str):  # noqa: ANN204
            return getattr(server, name)

        def exchange_begin(self, *args):  # noqa: ANN002, ANN202
            finish = server.exchange_begin(*args)

            def done():  # noqa: ANN202
                result, params = finish()
                if params.version == 1:
                    saved.append(server.state_dicts())
                if params.version == 6 and len(saved) == 1:
                    server.load_state_dicts(saved.pop())
                    params = server.pull()
                return result, params

            return done

    worker = Worker(cfg, 0)
    worker.work(Restoring(), 4)
    assert server.stats().version == 4
    worker.work(Restoring(), 4)  # aims at 8; restored to 1 at 6
    assert server.stats().version == worker.actor.version == 4
