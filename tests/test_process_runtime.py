"""runtime.backend=process: actors and workers as OS processes, tensors through shared memory."""

from __future__ import annotations

import collections
import os
import pickle
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import read_summary

from rltrain.cli import main
from rltrain.faults import ProcessLost
from rltrain.runtime import local, process
from rltrain.runtime.process.shm import Inbox, Outbox, SlotRef, SmallTensor, shm_note

ROOT = Path(__file__).resolve().parents[1]
CFG = ROOT / "configs"


summary = read_summary


def carry(out: Outbox, inbox: Inbox, obj: object) -> object:
    """``obj`` packed, its new slots handed over as a pipe would (descriptors duplicated:
    both ends live in this process), and unpacked."""
    packed = out.pack(obj)
    slots, fds = out.take_fresh()
    inbox.attach(slots, [os.dup(fd) for fd in fds])
    out.sent(slots)
    return packed


# --- shared memory ---------------------------------------------------------------------------


def test_slots_are_reused_across_100_rollouts_and_values_arrive_intact() -> None:
    out, inbox = Outbox(), Inbox()
    g = torch.Generator().manual_seed(0)
    for i in range(100):
        obs = torch.rand(32, 8, 4, generator=g)
        msg = {"obs": obs, "actions": np.arange(2048) + i, "small": torch.ones(3), "i": i}
        packed = carry(out, inbox, msg)
        assert isinstance(packed["obs"], SlotRef) and isinstance(packed["actions"], SlotRef)
        assert isinstance(packed["small"], SmallTensor)  # under MIN_BYTES: in the pickle
        got = inbox.unpack(packed)
        assert torch.equal(got["obs"], obs) and (got["actions"] == np.arange(2048) + i).all()
        assert isinstance(got["small"], torch.Tensor) and torch.equal(got["small"], torch.ones(3))
        assert got["i"] == i
        if i == 0:
            held = out.nbytes()
    assert len(out.slots) == 2 and out.nbytes() == held  # no growth after the first message


def test_small_tensors_cross_as_numpy_arrays_and_come_back_as_they_were() -> None:
    """An act's reply (8 actions, their logits, a verdict) is pickled as numpy arrays, not
    torch tensors (7x cheaper to pickle and unpickle); numpy's missing dtypes stay tensors."""
    out, inbox = Outbox(), Inbox()
    msg = (torch.arange(8), torch.randn(8, 6)[:, :3], torch.tensor(True), torch.ones(2).bfloat16())
    packed = carry(out, inbox, msg)
    assert [type(x) for x in packed] == [SmallTensor, SmallTensor, SmallTensor, torch.Tensor]
    got = inbox.unpack(pickle.loads(pickle.dumps(packed)))
    for a, b in zip(got, msg, strict=True):
        assert isinstance(a, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)


def test_a_slot_not_yet_read_is_not_overwritten() -> None:
    out, inbox = Outbox(), Inbox()
    a, b = torch.zeros(2048), torch.ones(2048)
    first, second = carry(out, inbox, a), carry(out, inbox, b)  # both in flight: two slots
    assert first.slot != second.slot
    assert torch.equal(inbox.unpack(first), a) and torch.equal(inbox.unpack(second), b)
    third = out.pack(a)  # both read: a freed slot is reused
    assert third.slot in (first.slot, second.slot) and out.take_fresh() == ([], [])


def test_a_dataclass_that_checks_its_fields_crosses_whole() -> None:
    """A record is rebuilt without running its checks on the slot references (a
    TransitionBlock of Atari frames reads their shape in __post_init__)."""
    from rltrain.replay import TransitionBlock

    T, B = 4, 2
    obs = np.random.default_rng(0).integers(0, 255, (T + 1, B, 1, 84, 84), dtype=np.uint8)
    no = np.zeros((T, B), dtype=bool)
    actions, rewards = np.zeros((T, B), np.int64), np.zeros((T, B), np.float32)
    block = TransitionBlock.from_steps(
        3, obs, actions, rewards, no, no, frame_stack=1, final_obs=obs[:0, 0]
    )
    out, inbox = Outbox(), Inbox()
    packed = carry(out, inbox, block)
    assert isinstance(packed.frames, SlotRef)
    got = inbox.unpack(packed)
    assert type(got) is TransitionBlock and (got.frames == block.frames).all()
    assert (got.obs0 == block.obs0).all() and got.stream == 3


def test_little_shared_memory_is_said_on_the_runtime_line(tmp_path: Path) -> None:
    assert shm_note(str(tmp_path)) in ("", shm_note(str(tmp_path)))
    assert shm_note(str(tmp_path / "missing")) == ""


# --- processes -------------------------------------------------------------------------------


class Counter:
    def __init__(self, start: int) -> None:
        self.n = start

    def add(self, k: int) -> int:
        self.n += k
        return self.n

    def big(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2

    def pid(self) -> int:
        import os

        return os.getpid()

    def boom(self) -> None:
        raise ZeroDivisionError("in the child")


def test_calls_run_in_order_in_a_child_and_tensors_come_back() -> None:
    r = process.Remote(Counter, 10, role="actor", index=0)
    try:
        futures = [r.call("add", k) for k in (1, 2, 3)]
        assert [f.result(timeout=60) for f in futures] == [11, 13, 16]
        x = torch.arange(10_000, dtype=torch.float32)
        assert torch.equal(r.call("big", x).result(timeout=60), x * 2)
        import os

        assert r.call("pid").result(timeout=60) != os.getpid()
    finally:
        r.kill()
        process.shutdown()


@pytest.mark.parametrize(("role", "index"), [("actor", 3), ("policy", 0), ("learner", 1)])
def test_a_child_process_says_what_it_is_in_ps_and_top(role: str, index: int) -> None:
    # (a learner is a thread of the trainer unless it has its own process: the GPU box's)
    r = process.Remote(Counter, 0, role=role, index=index, own_process=True)  # type: ignore[arg-type]
    try:
        pid = r.call("pid").result(timeout=60)
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
        comm = Path(f"/proc/{pid}/comm").read_text().strip()  # the kernel keeps 15 characters
        assert cmdline == f"rltrain: {role} {index}" and comm == cmdline[:15].strip()
    finally:
        r.kill()
        process.shutdown()


class Where:
    def comm(self) -> str:
        """The kernel's name of the thread this call runs in."""
        return Path(f"/proc/self/task/{threading.get_native_id()}/comm").read_text().strip()


def test_a_thread_runtime_role_names_its_thread() -> None:
    """On the thread runtime (and for the process runtime's learners, threads of the trainer)
    each role names its thread for top -H and ps -L, in the kernel's 15 characters."""
    r = local.Remote(Where, role="learner", index=0)
    try:
        assert r.call("comm").result(timeout=60) == "rl learner 0"
    finally:
        r.kill()


def test_a_call_that_raises_fails_the_run_with_its_own_error() -> None:
    pool, r = process.Pool(), process.Remote(Counter, 0)
    try:
        pool.submit(r, "boom")
        with pytest.raises(ZeroDivisionError, match="in the child"):
            while True:
                pool.wait(30.0)
    finally:
        r.kill()
        process.shutdown()


def test_a_killed_process_is_lost_then_restarted_and_reported_back() -> None:
    """As on Ray: the call in flight fails with ProcessLost, the pool reports the process
    revived once its constructor ran again, and a process out of restarts is gone."""
    import os
    import signal

    pool, r = process.Pool(), process.Remote(Counter, 5, max_restarts=1)
    try:
        first = r.pid()
        os.kill(first, signal.SIGKILL)
        pool.submit(r, "add", 1)
        seen = []
        while not any(d.revived for d in seen):
            seen += pool.wait(30.0)
        lost = [d for d in seen if d.error is not None]
        assert isinstance(lost[0].error, ProcessLost) and not lost[0].error.permanent
        assert r.mark_lost() and not r.mark_lost()  # one death, noted once
        assert r.pid() != first and r.restarts == 1
        assert r.call("add", 1).result(timeout=60) == 6  # a fresh instance: the constructor's 5
        os.kill(r.pid(), signal.SIGKILL)  # no restarts left
        pool.submit(r, "add", 1)
        done = []
        while not done:
            done = pool.wait(30.0)
        assert isinstance(done[0].error, ProcessLost) and done[0].error.permanent
    finally:
        r.kill()
        process.shutdown()


def test_100_rollouts_of_a_real_actor_process_reuse_the_same_shared_memory() -> None:
    """A CartPole actor in its own process: each rollout's tensors arrive through the same
    slots (the trainer's inbox holds as many as the first rollout made, after 100 of them),
    and its pulls through the same parameter slot."""
    from rltrain.config import load_config
    from rltrain.rl.actor import Actor
    from rltrain.rl.config import TrainConfig, server_settings
    from rltrain.rl.env_spec import initial_params, probe_env
    from rltrain.runtime.local import start_server

    cfg = load_config(TrainConfig, str(CFG / "cartpole_appo.yaml"), ["env.num_envs=16"])
    server = start_server(
        initial_params(cfg, probe_env(cfg)), cfg.optimizer, server_settings(cfg), 1
    )
    r = process.Remote(Actor, cfg, 0)
    try:
        first = r.call("collect", server).result(timeout=120)
        slots = dict(r.calls.inbox.slots)
        assert slots, "a rollout's tensors came through shared memory"
        for _ in range(99):
            rollout = r.call("collect", server).result(timeout=120)
        assert r.calls.inbox.slots == slots  # the same slots, none added
        assert rollout.obs.shape == first.obs.shape and rollout.env_steps == first.env_steps
        assert not rollout.obs.is_shared()  # the trainer holds a copy: the slot is free again
    finally:
        r.kill()
        process.shutdown()


class Flaky:
    """Builds once; later builds read a flag file: "exit" dies before it is up (once), "raise"
    raises."""

    def __init__(self, flag: str) -> None:
        import os

        path = Path(flag)
        what = path.read_text() if path.exists() else ""
        if what == "exit":
            path.unlink()
            os._exit(3)
        if what == "raise":
            raise ValueError("the env cannot be made now")

    def pid(self) -> int:
        import os

        return os.getpid()


def test_a_process_that_dies_again_while_restarting_is_still_reported_back(
    tmp_path: Path,
) -> None:
    import os
    import signal

    flag = tmp_path / "flag"
    pool, r = process.Pool(), process.Remote(Flaky, str(flag), max_restarts=3)
    try:
        first = r.pid()  # up before the flag is set
        flag.write_text("exit")
        os.kill(first, signal.SIGKILL)
        pool.submit(r, "pid")
        seen = []
        while not any(d.revived for d in seen):
            seen += pool.wait(30.0)
        lost = [d for d in seen if d.error is not None]
        assert len(lost) == 2 and all(not d.error.permanent for d in lost)
        assert r.restarts == 2 and r.call("pid").result(timeout=60) == r.pid()
    finally:
        r.kill()
        process.shutdown()


def test_a_restart_whose_constructor_raises_is_a_permanent_loss(tmp_path: Path) -> None:
    """As Ray's ActorDiedError: the process is gone for good, with the constructor's error in
    the message, not a traceback that ends the run."""
    import os
    import signal

    flag = tmp_path / "flag"
    pool, r = process.Pool(), process.Remote(Flaky, str(flag), max_restarts=3)
    try:
        first = r.pid()
        flag.write_text("raise")
        os.kill(first, signal.SIGKILL)
        pool.submit(r, "pid")
        seen = []
        while not any(d.error is not None and d.error.permanent for d in seen):
            seen += pool.wait(30.0)
        final = seen[-1].error
        assert isinstance(final, ProcessLost) and "the env cannot be made now" in str(final)
    finally:
        r.kill()
        process.shutdown()


class NeverUp:
    """A constructor that fails at once in the child: raises, exits, or raises while a thread
    of its own keeps the process from ending; or one that never ends."""

    def __init__(self, how: str) -> None:
        import os
        import time

        if how == "exit":
            os._exit(3)
        if how == "linger":  # a non-daemon thread: the process ends only after it
            threading.Thread(target=time.sleep, args=(60,)).start()
        if how == "hang":
            time.sleep(600)
        raise ValueError(f"no env here ({how})")

    def f(self) -> int:
        return 1


@pytest.mark.parametrize("how,restarts", [("raise", 0), ("exit", 0), ("exit", 1)])
def test_a_call_submitted_after_the_constructor_failed_fails_too(how: str, restarts: int) -> None:
    """The process's failure comes before the driver's first call (a driver slow to build its
    learners, on a busy machine): that call fails at once, with the constructor's error, or
    as a permanent loss once the restarts are spent, instead of waiting forever on a pipe
    nobody reads."""
    pool, r = process.Pool(), process.Remote(NeverUp, how, max_restarts=restarts)
    try:
        assert r.up.exception(timeout=60) is not None  # failed (after any restarts)
        assert r.restarts == restarts
        for _ in range(2):  # every later call, not only the first
            pool.submit(r, "f")
            if how == "raise":
                with pytest.raises(ValueError, match=r"no env here \(raise\)"):
                    pool.wait(5.0)
            else:
                done = pool.wait(5.0)
                assert len(done) == 1, "the call waits on a process that is gone"
                if restarts and not done[0].error.permanent:  # the death it restarted from,
                    done = pool.wait(5.0)  # reported first; then the probe of the new one
                assert isinstance(done[0].error, ProcessLost) and done[0].error.permanent
                assert "exit code 3" in str(done[0].error)
    finally:
        r.kill()
        process.shutdown()


class SlowUp:
    """A constructor that takes a while (an env being built), then a process that answers."""

    def __init__(self, seconds: float) -> None:
        import time

        time.sleep(seconds)

    def f(self) -> int:
        return 1


def test_a_death_before_the_first_call_is_reported_and_counted_once() -> None:
    """Killed while its constructor runs, before the driver's first call: the process is
    restarted, and that first call reports the death (as Ray's would), so the driver counts
    the restart; the pool then waits for the new process, and the next call runs."""
    import signal
    import time

    pool, r = process.Pool(), process.Remote(SlowUp, 3.0, max_restarts=1)
    try:
        os.kill(r.process.pid, signal.SIGKILL)
        start = time.time()
        while r.restarts == 0 and time.time() - start < 30:
            time.sleep(0.05)
        assert r.restarts == 1
        pool.submit(r, "f")
        (done,) = pool.wait(30.0)
        assert isinstance(done.error, ProcessLost) and not done.error.permanent
        assert r.mark_lost() and not r.mark_lost()  # one death, counted once
        (back,) = pool.wait(60.0)
        assert back.revived
        pool.submit(r, "f")
        (ok,) = pool.wait(30.0)
        assert ok.value == 1
    finally:
        r.kill()
        process.shutdown()


def test_wait_up_waits_out_a_death_it_restarts_from() -> None:
    import signal

    r = process.Remote(SlowUp, 3.0, max_restarts=1)
    try:
        os.kill(r.process.pid, signal.SIGKILL)
        process.wait_up([r], print, patience=60.0)
        assert r.is_up() and r.restarts == 1
    finally:
        r.kill()
        process.shutdown()


def test_a_constructor_error_arrives_before_its_process_has_ended() -> None:
    import time

    pool, r = process.Pool(), process.Remote(NeverUp, "linger")
    try:
        pool.submit(r, "f")
        start = time.time()
        with pytest.raises(ValueError, match=r"no env here \(linger\)"):
            while time.time() - start < 20:
                pool.wait(1.0)
        assert time.time() - start < 20  # not after the child's thread ended (60 s)
    finally:
        r.kill()
        process.shutdown()


def test_a_stop_does_not_wait_for_processes_that_never_came_up() -> None:
    """stop.max_seconds, or a fault, ends a run whose processes are still starting: the
    driver waits for the calls of the processes that are up, not for the others, and no
    barrier waits for those either (a2c: the worker that is up waits at one for the other)."""
    from types import SimpleNamespace

    from rltrain.config import load_config
    from rltrain.rl.config import TrainConfig
    from rltrain.rl.run.plans import WorkerPlan

    cfg = load_config(TrainConfig, str(CFG / "cartpole_a3c.yaml"), ["algo.name=a2c"])
    notes: list[str] = []
    left: list[int] = []
    guard = SimpleNamespace(leave=left.append)
    ctx = SimpleNamespace(
        server=None, say=notes.append, guard=guard, shard_guard=lambda: guard, faults=None
    )
    ctx.hung = set()  # (RunContext's: the processes the hang watch killed)
    host = SimpleNamespace(ctx=ctx, hosted=False)
    host.cfg, host.stopped_by = cfg, ""
    plan = WorkerPlan(host, process)  # type: ignore[arg-type]
    up, stuck = process.Remote(Counter, 0), process.Remote(NeverUp, "hang", index=1)
    try:
        up.pid()
        plan.pool.submit(stuck, "f")
        assert plan.keep_going()  # running: it may come up yet
        plan.pool.submit(up, "add", 1)
        host.stopped_by = "max_seconds"
        assert plan.keep_going()  # the call of the process that is up is still awaited
        assert left == [1]  # ... and no barrier waits for the one that is not
        done = []
        while not done:
            done = plan.pool.wait(30.0)
        assert done[0].value == 1 and not plan.keep_going()
        assert notes == [
            "the stop does not wait for processes not up (still starting: actor 1 "
            "(their constructors: env and model set-up))"
        ]
        assert left == [1]  # once
    finally:
        up.kill()
        stuck.kill()
        process.shutdown()


def test_a_stop_ends_the_policy_workers_serving_while_actors_are_still_starting() -> None:
    """appo with runtime.inference=server, stopped before any actor is up (a loaded machine
    still building their envs): the policy worker's serve call is the one call of a process
    that is up, so the stop waits for it; it must be told to end now, not once the actors
    have come up and returned their first rollouts."""
    from types import SimpleNamespace

    from rltrain.config import load_config
    from rltrain.rl.config import TrainConfig
    from rltrain.rl.run.plans import ActorLearnerPlan

    cfg = load_config(TrainConfig, str(CFG / "cartpole_appo.yaml"), [])
    ctx = SimpleNamespace(server=None, say=print, faults=None, hung=set())
    host = SimpleNamespace(ctx=ctx, cfg=cfg, stopped_by="", hosted=False)
    plan = ActorLearnerPlan(host, process)  # type: ignore[arg-type]
    stopped: list[bool] = []
    plan.slots = SimpleNamespace(stop=lambda: stopped.append(True))  # type: ignore[assignment]
    plan.idle_learners, plan.idle_actors, plan.ready = [], [], collections.deque()
    stuck = process.Remote(NeverUp, "hang", role="actor", index=0)
    try:
        plan.pool.submit(stuck, "f")
        host.stopped_by = "max_seconds"
        plan.refill()
        assert stopped == [True]
        assert not plan.keep_going()  # nothing else to wait for
    finally:
        stuck.kill()
        process.shutdown()


def test_learners_stay_in_the_trainers_process() -> None:
    r = process.Remote(Counter, 0, role="learner", index=0)
    assert isinstance(r, process.ThreadRemote)
    r.kill()


# --- runs ------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    "algo,config",
    [
        # a2c, ppo and impala: test_train_cli's short runs, on the process runtime too
        ("a3c", "cartpole_a3c.yaml"),
        ("appo", "cartpole_appo.yaml"),
        ("dqn", "cartpole_gorila.yaml"),
    ],
)
def test_every_algorithm_runs_on_processes(
    tmp_path: Path, no_ray: None, algo: str, config: str
) -> None:
    run_dir = tmp_path / algo
    argv = ["train", str(CFG / config), "--run-dir", str(run_dir), "--set", f"algo.name={algo}"]
    argv += ["--set", "runtime.backend=process", "--set", "stop.max_env_steps=3000"]
    argv += ["--set", "stop.mean_return=null"]
    assert main(argv) == 0
    s = summary(run_dir)
    assert s["stopped_by"] == "max_env_steps" and s["env_steps"] >= 3000
    assert s["updates_applied"] > 0 and s["episodes"] > 0
    assert s["runtime"]["backend"] == "process"
    assert list((run_dir / "checkpoints").glob("ckpt-*.pt"))


@pytest.mark.slow
def test_auto_is_the_process_runtime_on_one_machine(
    tmp_path: Path, no_ray: None, capsys: pytest.CaptureFixture
) -> None:
    run_dir = tmp_path / "auto"
    argv = ["train", str(CFG / "cartpole_a3c.yaml"), "--run-dir", str(run_dir)]
    assert main([*argv, "--set", "stop.max_env_steps=2000", "--set", "stop.mean_return=null"]) == 0
    out = capsys.readouterr().out
    assert "runtime: processes on this machine" in out
    assert "chosen by runtime.backend=auto without --address: one machine" in out
    assert summary(run_dir)["runtime"]["backend"] == "process"


@pytest.mark.slow
def test_a_killed_actor_process_is_restarted_and_the_run_goes_on(
    tmp_path: Path, no_ray: None, capsys: pytest.CaptureFixture
) -> None:
    run_dir = tmp_path / "kill"
    argv = ["train", str(CFG / "cartpole_appo.yaml"), "--run-dir", str(run_dir)]
    argv += ["--set", "runtime.backend=process", "--set", "stop.mean_return=null"]
    # killed at 0.5 s, back within a second (a fork of the forkserver); the steps left take
    # seconds more (2,000 a second on 2 cores)
    argv += ["--set", "stop.max_env_steps=16000", "--set", "faults.max_restarts=2"]
    argv += ["--set", "faults.events=[{at: 0.5, target: actor, index: 0, action: kill}]"]
    assert main(argv) == 0
    s = summary(run_dir)
    assert s["stopped_by"] == "max_env_steps"
    assert s["faults"]["injected"] == 1 and s["faults"]["actor_restarts"] == 1
    out = "".join(capsys.readouterr())
    assert "injected fault: kill actor 0 (pid" in out
    assert "actor 0 lost: its process died; the trainer restarts it" in out
    assert "actor 0 is back" in out


def test_replay_add_and_sample_from_many_threads_at_once() -> None:
    """The process runtime's replay memory is served by one thread per actor process while
    learner threads sample it: concurrent adds and samples lose nothing and never fail."""
    from rltrain.replay import ReplayMemory, TransitionBlock
    from rltrain.replay.local import LocalReplay

    replay = LocalReplay([ReplayMemory(4096, (4,), "float32", seed=0)])
    errors: list[BaseException] = []
    T, B = 8, 4
    no = np.zeros((T, B), dtype=bool)

    def add(k: int) -> None:
        try:
            for i in range(50):
                obs = np.full((T + 1, B, 4), k * 1000 + i, dtype=np.float32)
                actions, rewards = np.zeros((T, B), np.int64), np.ones((T, B), np.float32)
                block = TransitionBlock.from_steps(
                    k, obs, actions, rewards, no, no, frame_stack=1, final_obs=obs[:0, 0]
                )
                replay.add(0, block)
        except BaseException as e:  # pragma: no cover - the failure the test looks for
            errors.append(e)

    def sample() -> None:
        try:
            for _ in range(200):
                if replay.sizes()[0] >= 64:
                    batch = replay.sample(0, 32)
                    obs = np.asarray(batch.obs)
                    # each observation whole: one block's value in all 4 features, never two
                    assert (obs == obs[:, :1]).all()
        except BaseException as e:  # pragma: no cover
            errors.append(e)

    threads = [threading.Thread(target=add, args=(k,)) for k in range(4)]
    threads += [threading.Thread(target=sample) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors[0]
    assert 0 < replay.sizes()[0] <= 4096


def test_the_forkserver_starts_before_the_command_imports_torch() -> None:
    """``rltrain train`` on processes starts the forkserver first thing: torch-free, so that
    its imports run beside the command's own (issue 36: the first env step sooner)."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from multiprocessing import forkserver\n"
        "from rltrain.config import load_config\n"
        "from rltrain.launch import start_forkserver_early\n"
        "from rltrain.rl.config import TrainConfig\n"
        f"cfg = load_config(TrainConfig, {str(CFG / 'pong_appo.yaml')!r})\n"
        "start_forkserver_early(cfg)\n"
        "print('torch' in sys.modules, forkserver._forkserver._forkserver_pid is not None)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.split() == ["False", "True"]


def test_ray_address_in_the_environment_is_said_not_followed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """RAY_ADDRESS is Ray's own way to name a cluster: a default run stays on this machine
    (as documented) but no longer says nothing of it."""
    from rltrain.runtime.config import RuntimeConfig, chosen_backend

    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    assert chosen_backend(RuntimeConfig()) == (
        "process",
        "runtime.backend=auto without --address: one machine (RAY_ADDRESS=10.0.0.1:6379: "
        "--address auto joins it)",
    )
    monkeypatch.delenv("RAY_ADDRESS")
    assert chosen_backend(RuntimeConfig())[1].endswith("one machine")


class Closing:
    """Leaves a file as it closes; ``wait`` keeps it busy in a call."""

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def wait(self, seconds: float) -> None:
        import time

        time.sleep(seconds)

    def close(self) -> None:
        Path(self.folder, f"closed-{os.getpid()}").touch()


def test_threads_joining_one_child_at_once_all_read_its_exit_code() -> None:
    """CI, session 86: the reader thread's join beside the trainer's read a child that
    exited 0 as 255 (multiprocessing's forkserver Popen reads the code from its sentinel once;
    a second waiting thread read the pipe's end)."""
    import time

    from rltrain.runtime.process.forkstart import Process, context

    context()
    for _ in range(3):
        p = Process(target=time.sleep, args=(0.3,))
        p.start()
        joins = [threading.Thread(target=p.join, args=(10.0,)) for _ in range(8)]
        joins.append(threading.Thread(target=p.join))  # (one without a timeout)
        for t in joins:
            t.start()
        for t in joins:
            t.join(20.0)
        assert p.exitcode == 0


def test_a_session_end_lets_idle_processes_close_and_kills_busy_ones_at_once(
    tmp_path: Path,
) -> None:
    """explore92, review79b: at a session's end an idle child closes its object (an actor's
    envs) and exits by itself, counted as no death; one busy in a call is killed at once,
    not after the grace; the whole end is bounded."""
    import time

    from rltrain.faults import FaultCounters
    from rltrain.runtime.context import RunContext

    idle = process.Remote(Closing, str(tmp_path), index=0)
    busy = process.Remote(Closing, str(tmp_path), index=1)
    ctx = RunContext(process, FaultCounters(), print)  # type: ignore[arg-type]
    ctx.add("actor", [idle, busy])
    try:
        idle.pid(), busy.pid()
        busy.call("wait", 60.0)
        start = time.monotonic()
        ctx.kill_all(grace=30.0)
        assert time.monotonic() - start < 10.0  # (not the grace: nothing waits for busy)
        assert [p.name for p in tmp_path.iterdir()] == [f"closed-{idle.pid()}"]
        idle.process.join(10.0)
        assert idle.process.exitcode == 0 and idle.restarts == 0 and idle._deaths == 0
    finally:
        process.shutdown()


def test_a_scripts_classes_travel_by_value_for_a_start_only() -> None:
    """review79b: the reductions registered for ``__main__``'s classes are taken back after
    the start, so that a user's own pool or queue pickles them as it did."""
    import sys
    from multiprocessing.reduction import ForkingPickler

    from rltrain.runtime.process.forkserver import by_value, no_main

    main = sys.modules["__main__"]
    mine = type("Mine", (), {"__module__": "__main__"})
    main.Mine = mine
    try:
        with no_main():
            assert ForkingPickler._extra_reducers.get(mine) is by_value  # type: ignore[attr-defined]
        assert mine not in ForkingPickler._extra_reducers  # type: ignore[attr-defined]
    finally:
        delattr(main, "Mine")


def test_a_quit_at_once_unlinks_the_semaphores_it_made() -> None:
    """A second Ctrl-C exits skipping multiprocessing's finalizers: its quit hook unlinks the
    policy worker's semaphores itself, so the resource tracker has none to clean up and
    warn about ("leaked semaphore objects", explore93). They go on working for their holders."""
    from rltrain.runtime.process import forkstart

    made = forkstart.Semaphore(0)
    where = Path("/dev/shm") / f"sem.{made._semlock.name.lstrip('/')}"  # type: ignore[attr-defined]
    assert where.exists()
    forkstart.unlink_semaphores()
    assert not where.exists()
    made.release()
    assert made.acquire(timeout=1)
    forkstart.unlink_semaphores()  # twice: nothing left to do
