"""runtime.backend=local: the same plans and driver loop with every process a thread, no Ray."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import read_summary

from rltrain.cli import main
from rltrain.runtime import local

ROOT = Path(__file__).resolve().parents[1]
CFG = ROOT / "configs"


summary = read_summary


@pytest.mark.slow  # a learning run
def test_cartpole_ppo_learns_to_475_in_process(tmp_path: Path, no_ray: None) -> None:
    """The barrier (sync) of ppo's two workers works across threads; CI's learning test of the
    local backend (about 7 s on 2 cores)."""
    run_dir = tmp_path / "ppo"
    argv = ["train", str(CFG / "cartpole_ppo.yaml"), "--run-dir", str(run_dir)]
    assert main([*argv, "--set", "runtime.backend=local", "--set", "stop.max_seconds=120"]) == 0
    s = summary(run_dir)
    assert s["stopped_by"] == "mean_return" and s["mean_return"] >= 475
    assert s["mean_staleness"] == 0  # the barrier: every update fresh, as on Ray
    assert s["runtime"] == {"backend": "local", "placement": {"shard": [], "worker": [None, None]}}
    assert main(["eval", str(run_dir), "--episodes", "2"]) == 0


@pytest.mark.parametrize("algo", ["a3c", "a2c", "impala", "appo", "dqn"])
def test_every_algorithm_runs_in_process(
    tmp_path: Path, no_ray: None, algo: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each plan's actors (or workers) are spawned before the server starts, so that they
    build their envs while the shards start (Ray's shard processes; a resumed hosted
    learner); then the run trains, checkpoints and, for appo, resumes."""
    from rltrain.rl.run import train

    order: list[str] = []
    spawn, start_server = train.spawn_role, local.start_server

    def spawning(ctx: Any, cfg: Any, gpu: bool, role: str, *args: Any, **kw: Any) -> Any:
        order.append(role)
        return spawn(ctx, cfg, gpu, role, *args, **kw)  # type: ignore[arg-type]

    def starting(*args: Any, **kw: Any) -> Any:
        order.append("server")
        return start_server(*args, **kw)

    monkeypatch.setattr(train, "spawn_role", spawning)
    monkeypatch.setattr(local, "start_server", starting)
    config = {
        "impala": "cartpole_impala.yaml",
        "appo": "cartpole_appo.yaml",
        "dqn": "cartpole_gorila.yaml",  # its replay shards: objects of the process
    }.get(algo, "cartpole_a3c.yaml")
    run_dir = tmp_path / algo
    argv = ["train", str(CFG / config), "--run-dir", str(run_dir), "--set", f"algo.name={algo}"]
    argv += ["--set", "runtime.backend=local", "--set", "stop.max_env_steps=3000"]
    argv += ["--set", "stop.mean_return=null"]
    assert main(argv) == 0
    s = summary(run_dir)
    assert s["stopped_by"] == "max_env_steps" and s["env_steps"] >= 3000
    assert s["updates_applied"] > 0 and s["episodes"] > 0
    assert list((run_dir / "checkpoints").glob("ckpt-*.pt"))
    acting = "actor" if algo in ("impala", "appo", "dqn") else "worker"  # (a3c's act and learn)
    assert order.index(acting) < order.index("server")
    assert order.count(acting) == 1  # spawned early, not again after the server
    if algo == "appo":  # a local run resumes from its checkpoint as a Ray run does
        more = s["env_steps"] + 1000  # (the rollouts queued at the stop counted too)
        assert main(["train", "--resume", str(run_dir), "--set", f"stop.max_env_steps={more}"]) == 0
        assert summary(run_dir)["env_steps"] >= more


def test_a_call_that_raises_fails_the_run_with_its_own_error() -> None:
    class Broken:
        def work(self) -> None:
            raise ZeroDivisionError("in the worker")

    pool, remote = local.Pool(), local.Remote(Broken)
    pool.submit(remote, "work")
    with pytest.raises(ZeroDivisionError, match="in the worker"):
        pool.wait(5.0)
    remote.kill()


def test_calls_to_one_remote_run_in_order_on_its_own_thread() -> None:
    import threading

    class Recorder:
        def __init__(self) -> None:
            self.seen: list[tuple[int, str]] = []

        def note(self, i: int) -> list[tuple[int, str]]:
            self.seen.append((i, threading.current_thread().name))
            return list(self.seen)

    r = local.Remote(Recorder, role="learner", index=1)
    futures = [r.call("note", i) for i in range(5)]
    last = futures[-1].result(timeout=5)
    assert [i for i, _ in last] == [0, 1, 2, 3, 4]
    assert {name for _, name in last} == {"rltrain-learner1"}
    r.kill()


def test_kill_interrupts_a_long_call_of_an_instance_that_can_be_interrupted() -> None:
    """A thread cannot be killed as a Ray process is: kill asks the instance to stop."""
    import threading

    class Player:
        def __init__(self) -> None:
            self.stop = threading.Event()
            self.started = threading.Event()

        def play(self) -> str:
            self.started.set()
            return "stopped" if self.stop.wait(timeout=60) else "timed out"

        def interrupt(self) -> None:
            self.stop.set()

    r = local.Remote(Player, role="worker")
    future = r.call("play")
    assert r.instance.started.wait(timeout=5)
    r.kill()
    assert future.result(timeout=5) == "stopped"


def test_shutdown_waits_for_the_threads_to_close_their_instances() -> None:
    """A daemon thread still closing its envs as Python exits (an Atari vector's C++
    threads) aborted the process: rltrain.train on the local backend ended with rc 134."""
    import time

    class SlowToClose:
        closed = False

        def work(self) -> str:
            return "done"

        def close(self) -> None:
            time.sleep(0.3)
            SlowToClose.closed = True

    killed, left = local.Remote(SlowToClose), local.Remote(SlowToClose, index=1)
    assert killed.call("work").result(timeout=5) == "done"
    killed.kill()  # as the trainer kills its remotes; `left` it never killed
    local.shutdown()
    assert SlowToClose.closed
    assert not killed.thread.is_alive() and not left.thread.is_alive()


def test_a_bug_in_a_worker_raises_and_leaves_nothing_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unexpected error (not a fault) propagates with its traceback; the trainer still
    stops every thread and gives back the process-wide torch thread count."""
    import threading

    import torch

    from rltrain.rl.worker import Worker

    def boom(self: Worker, *args: object) -> None:
        raise ArithmeticError("a bug in the worker")

    monkeypatch.setattr(Worker, "work", boom)
    threads = torch.get_num_threads()
    argv = ["train", str(CFG / "cartpole_ppo.yaml"), "--run-dir", str(tmp_path / "run")]
    with pytest.raises(ArithmeticError, match="a bug in the worker"):
        main([*argv, "--set", "runtime.backend=local"])
    assert torch.get_num_threads() == threads
    for t in threading.enumerate():
        if t.name.startswith("rltrain-"):
            t.join(timeout=5)
            assert not t.is_alive(), t.name
