"""The Ray edge: real shard actors speak the same contract as the in-process shards."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from conftest import GRPC_SETTINGS, fake_server

from rltrain.ps.config import OptimizerConfig, ServerConfig
from rltrain.records import GradUpdate
from rltrain.runtime import ray as runtime
from rltrain.runtime.config import RuntimeConfig
from rltrain.runtime.ray.sandblaster import RayStore

pytestmark = pytest.mark.slow


def test_unreachable_cluster_is_a_clear_error() -> None:
    """Without a Ray running (start() joins none then): nothing is listening at port 1."""
    for address in ("ray://127.0.0.1:1", "127.0.0.1:1"):
        with pytest.raises(runtime.RayStartError, match="cannot join the Ray cluster"):
            runtime.start(RuntimeConfig(address=address))
    with pytest.raises(runtime.RayStartError, match="expected 'auto'"):
        runtime.start(RuntimeConfig(address="nonsense"))
    # nothing joined, nothing to stop: a Ray the caller starts afterwards is theirs
    from rltrain.runtime.ray import startup

    assert not startup._ours


def test_a_local_ray_is_its_own_and_runs_its_workers_at_the_drivers_priority(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without --address a run starts its own Ray, even where RAY_ADDRESS names a cluster that
    answers (ray.init alone would join it, and refuse num_cpus), and says that --address auto
    would join it. Ray lowers its workers to nice 15; the local instance rltrain starts does
    not: they are the run, and at 15 any busy process beside them took nearly all of the CPU."""
    import ray

    with fake_server(GRPC_SETTINGS) as other:  # answers as a Ray head's GCS
        monkeypatch.setenv("RAY_ADDRESS", other)
        where = runtime.start(RuntimeConfig(num_cpus=1))
    try:
        assert where.startswith("local ray (1 CPUs; a Ray cluster runs at 127.0.0.1:"), where
        assert where.endswith(", RAY_ADDRESS: --address auto joins it)"), where
        assert runtime.cluster_cpus() == 1

        @ray.remote(num_cpus=1)
        def niceness() -> int:
            return os.nice(0)

        assert ray.get(niceness.remote(), timeout=120) == os.nice(0)
    finally:
        runtime.shutdown()


def test_a_ctrl_c_inside_ray_init_leaves_no_ray_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGINT while ray.init had started the local node (a Ctrl-C 4-5 s into a run): the
    command exited 130, and Ray's dashboard and runtime-env agents lived on, re-parented to
    init, ignoring SIGTERM. The node goes with the interrupt now."""
    import ray
    from ray._private import worker

    from rltrain.runtime.ray import startup

    real, session = ray.init, []

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        real(*args, **kwargs)
        session.append(worker._global_node.get_session_dir_path())
        raise KeyboardInterrupt

    monkeypatch.setattr(startup.ray, "init", interrupted)
    with pytest.raises(KeyboardInterrupt):
        runtime.start(RuntimeConfig(num_cpus=1))
    assert session and not ray.is_initialized()

    def left() -> list[str]:
        out = []
        for entry in Path("/proc").iterdir():
            with contextlib.suppress(OSError):
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                if entry.name.isdigit() and session[0] in cmd:
                    out.append(cmd[:120])
        return out

    deadline = time.monotonic() + 30
    while left() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left()


class Idle:
    """A process that is never placed."""


@pytest.mark.shared_ray
def test_a_process_no_node_can_hold_is_named() -> None:
    """Ray waits in silence for a node with room; rltrain says which process waits and why."""
    r = runtime.Remote(Idle, role="worker", index=7, num_cpus=64)
    try:
        assert not r.is_up()
        note = runtime.placement_note([r])
        assert "waiting for Ray to start worker 7 (64 CPU)" in note
        assert "nodes have 2 CPUs" in note and "fits on no node" in note
        # one that fits is only slow to start (its imports, on a busy machine)
        small = SimpleNamespace(role="actor", index=1, cpus=2.0, gpus=0.0)
        note = runtime.placement_note([small])  # type: ignore[list-item]
        assert "actor 1 (2 CPU)" in note and "each fits on a node, so it is still starting" in note
    finally:
        r.kill()


@pytest.mark.shared_ray
def test_a_ray_process_says_what_it_is_in_ps_and_top() -> None:
    """Ray titles its processes after the class placed there: ps shows the role and index,
    between calls and during one, and the class is still the class."""
    r = runtime.Remote(RayStore, [], [], role="policy", index=2, num_cpus=0)
    try:
        pid = r.pid()
        call = r.handle.__ray_call__  # (a lambda travels by value; this module would not)
        during = runtime.result(call.remote(lambda s: (Path("/proc/self/cmdline").read_text(), s)))
        assert during[0].startswith("ray::rltrain: policy 2.") and isinstance(during[1], RayStore)
        between = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
        assert between.startswith("ray::rltrain: policy 2")
        threads = runtime.result(call.remote(lambda s: [t.name for t in threading.enumerate()]))
        assert "rltrain-trim" in threads  # its constructor's too (rltrain.runtime.trim)
    finally:
        r.kill()


def _workers_counted(server: runtime.RayServer) -> list[int]:
    """N as each shard's barrier counts it (read inside the shard process)."""
    return [
        runtime.result(r.handle.__ray_call__.remote(lambda shard: shard.num_workers))
        for r in server.shards
    ]


@pytest.mark.shared_ray
def test_a_restored_shard_is_told_the_workers_that_joined() -> None:
    """Elastic add, then a shard lost: Ray rebuilds it with the first N, and the guard tells
    it of the join again, so that every shard's barrier counts the same workers."""
    from rltrain.faults import FaultCounters, RestorePoint

    rule = ServerConfig(rule="sync", shards=2)
    opt = OptimizerConfig(name="sgd", lr=1.0)
    server = runtime.start_server(torch.zeros(10), opt, rule, 2, RuntimeConfig(), max_restarts=1)
    try:
        counters, notes = FaultCounters(), []
        guard = runtime.ServerGuard(server, counters, notes.append)
        guard.remember(RestorePoint(0, server.state_dicts(), "the start"))
        guard.join(2)
        assert _workers_counted(server) == [3, 3]
        assert server.shards[1].answers(5.0)  # what the hang watch asks a shard
        os.kill(server.shards[1].pid(), signal.SIGSTOP)
        try:
            assert not server.shards[1].answers(1.0)
        finally:
            os.kill(server.shards[1].pid(), signal.SIGCONT)
        assert server.shards[1].answers(5.0)
        os.kill(server.shards[1].pid(), signal.SIGKILL)
        deadline = time.time() + 60
        while not guard.check():
            assert time.time() < deadline, notes
            time.sleep(0.2)
        assert counters.shard_restores == 1
        assert _workers_counted(server) == [3, 3]
    finally:
        server.kill()


@pytest.mark.shared_ray
def test_ray_server_contract() -> None:
    server = runtime.start_server(
        torch.zeros(10),
        OptimizerConfig(name="sgd", lr=1.0),
        ServerConfig(shards=2),
        1,
        RuntimeConfig(),
    )
    try:
        assert server.push(GradUpdate(0, 0, torch.ones(10), 5)).status == "applied"
        bad = torch.ones(10)
        bad[9] = float("nan")
        assert server.push(GradUpdate(0, 1, bad, 5)).status == "rejected"
        result, params = server.exchange(GradUpdate(0, 1, torch.ones(10), 5))
        assert result.status == "applied" and params.version == 2
        torch.testing.assert_close(params.values, torch.full((10,), -2.0))
        st = server.stats()
        assert (st.version, st.applied, st.rejected, st.samples) == (2, 2, 1, 15)
    finally:
        server.kill()


@pytest.mark.shared_ray
def test_ray_sync_barrier_across_actors() -> None:
    server = runtime.start_server(
        torch.zeros(4),
        OptimizerConfig(name="sgd", lr=1.0),
        ServerConfig(rule="sync"),
        2,
        RuntimeConfig(),
    )
    try:
        first = server.exchange_begin(
            GradUpdate(0, 0, torch.ones(4), 1), wait_version=1, timeout=30
        )
        result, params = server.exchange(GradUpdate(1, 0, 3 * torch.ones(4), 1), 1, 30)
        assert params.version == 1
        torch.testing.assert_close(params.values, torch.full((4,), -2.0))  # mean of 1 and 3
        first_result, first_params = first()
        assert first_params.version == 1
        # whichever push the shard served second made the step (both reach the barrier)
        assert {result.status, first_result.status} == {"accumulated", "applied"}
    finally:
        server.kill()


@pytest.mark.shared_ray
def test_a_death_before_the_first_call_is_reported_and_counted_once(tmp_path) -> None:  # noqa: ANN001
    """Killed while its constructor runs: Ray restarts it and runs the first call on the new
    process, so that call would succeed and the death go uncounted. The pool reports it as
    the process runtime does: the first call says the process died, the driver counts one
    restart, the pool sees it back, and the next call runs."""
    import ray

    from rltrain.faults import ProcessLost

    class SlowUp:  # (defined here: Ray's processes pickle it by value, not import this file)
        """A constructor that takes a while (an env being built) and writes its pid."""

        def __init__(self, path: str, seconds: float) -> None:
            with open(path, "a") as f:
                f.write(f"{os.getpid()}\n")
            time.sleep(seconds)

        def f(self) -> int:
            return 1

    pids = tmp_path / "pids"
    pool, r = runtime.Pool(), runtime.Remote(SlowUp, str(pids), 3.0, max_restarts=1)
    try:
        deadline = time.time() + 60
        while not (pids.exists() and pids.read_text().endswith("\n")):  # (created, then
            assert time.time() < deadline  # written: a read between the two finds it empty)
            time.sleep(0.05)
        os.kill(int(pids.read_text().split()[0]), signal.SIGKILL)
        pool.submit(r, "f")
        (done,) = pool.wait(60.0)
        assert isinstance(done.error, ProcessLost) and not done.error.permanent
        assert "before its first call" in str(done.error)
        assert r.mark_lost()
        answered, _ = ray.wait([r._where], timeout=30)  # the restarted process answers the
        assert answered and not r.mark_lost()  # loss's probe: still one death, counted once
        (back,) = pool.wait(60.0)
        assert back.revived
        pool.submit(r, "f")
        (ok,) = pool.wait(30.0)
        assert ok.value == 1 and len(pids.read_text().split()) == 2
    finally:
        r.kill()


@pytest.mark.shared_ray
def test_a_process_whose_constructor_raised_is_one_line_at_start_up() -> None:
    """A bench worker whose node lacks the dataset: wait_up said it as an ActorDiedError
    traceback (and the finished modes' results were lost)."""
    from rltrain.faults import RunFailed

    class NoData:  # (defined here: Ray's processes pickle it by value)
        def __init__(self) -> None:
            from rltrain.supervised.formats import DatasetError

            raise DatasetError("mnist not found: put ... into data/mnist")

    r = runtime.Remote(NoData, role="worker", index=2, max_restarts=0)
    try:
        with pytest.raises(RunFailed, match=r"^worker 2 could not start: mnist not found: put"):
            runtime.wait_up([r], print, patience=60.0)
    finally:
        r.kill()


def test_a_constructor_error_is_named_by_its_own_line() -> None:
    """Ray reports a process whose constructor raised as a dead actor, its message ending with
    the exception's line: the run names that error (an env's, in one line), not "died"."""
    from rltrain.runtime.ray.errors import creation_error

    text = (
        "The actor died because of an error raised in its creation task, "
        "ray::RemoteActor.__init__() (pid=1, ip=127.0.0.1)\n"
        '  File "/x/gym_vector.py", line 150, in reset\n'
        "rltrain.faults.EnvFailed: env 'qa/Raises-v0': reset() raised RuntimeError: boom"
    )
    assert creation_error(text) == "env 'qa/Raises-v0': reset() raised RuntimeError: boom"
    other = "The actor died ...\n  File 'y'\nModuleNotFoundError: No module named 'mine'"
    assert creation_error(other) == "ModuleNotFoundError: No module named 'mine'"
    assert creation_error("") == "a process's constructor failed"


def test_the_users_own_modules_are_shipped_and_installed_ones_are_not() -> None:
    """``imports`` that live beside the user's script (here the tests' ``custom_envs``) go to
    every Ray worker with ``runtime_env.py_modules``; an installed package (numpy) and a
    module that was never imported are left to each node."""
    import custom_envs
    import numpy

    from rltrain.runtime.ray.startup import user_code

    shipped = user_code(["custom_envs", "custom_envs", "numpy.linalg", "never_imported_xyz"])
    assert shipped == [custom_envs]
    assert numpy not in shipped


def passed_records(logger: str, *messages: str) -> list[str]:
    """The ``messages``, warned on ``logger``, that its filters let through."""
    import logging

    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
    log = logging.getLogger(logger)
    log.addHandler(handler)
    # (a ray.init earlier in this process may have raised the level or disabled the logger)
    was = log.level, log.disabled
    log.setLevel(logging.WARNING)
    log.disabled = False
    try:
        for message in messages:
            log.warning(message)
    finally:
        log.removeHandler(handler)
        log.setLevel(was[0])
        log.disabled = was[1]
    return seen


def test_rays_note_that_it_enabled_token_auth_on_the_runs_own_instance_is_dropped() -> None:
    """Ray 2.5x warns at every local start that it turned token authentication on; rltrain's
    local instance is the run's own, so that one record is dropped, and nothing else."""
    from rltrain.runtime.ray import startup

    other = "Token authentication is disabled for this Ray cluster. Anyone with access"
    passed = passed_records(
        "ray._private.authentication.authentication_token_setup",
        f"{startup.AUTH_DEFAULT_NOTE}. Set RAY_AUTH_MODE=disabled to opt out.",
        other,
    )
    assert passed == [other]


def test_a_join_a_head_refused_names_the_token(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Ray says only "Failed to connect" where a head with token authentication refused this
    shell's token (after 20 s of retries); the message names the token this shell has."""
    from rltrain.runtime.ray.reach import _why

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    failed = "Failed to connect to Ray cluster at 10.0.0.1:6379"
    none = "wants a token, and none was sent (RAY_AUTH_MODE is not token): export RAY_AUTH_MODE"
    assert none + "=token RAY_AUTH_TOKEN=<the token the cluster" in _why(failed)
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("x" * 32)
    # `ray start` turned tokens on by itself, with its own file: the mode alone sends it
    assert none + "=token (Ray then sends ~/.ray/auth_token's" in _why(failed)
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    assert "refused ~/.ray/auth_token's token" in _why("ray client connection timeout")
    (tmp_path / ".ray" / "auth_token").unlink()
    assert "none was sent (RAY_AUTH_TOKEN is unset): export RAY_AUTH_MODE=token" in _why(failed)
    monkeypatch.setenv("RAY_AUTH_TOKEN", "y" * 32)
    assert "refused this shell's RAY_AUTH_TOKEN" in _why(failed)
    assert _why("Version mismatch: The cluster was started with Ray 2.59") == ""
    # the two default ports mixed up were said to be a refused token (the token was right)
    assert _why(failed, "127.0.0.1:10001") == (
        "; 10001 is the Ray Client's port: join it as ray://127.0.0.1:10001"
    )
    assert _why("ray client connection timeout", "ray://10.0.0.1:6379") == (
        "; 6379 is the Ray head's own port: give 10.0.0.1:6379 without ray://, or "
        "ray://10.0.0.1:10001, the Ray Client's"
    )
    assert "refused this shell's RAY_AUTH_TOKEN" in _why(failed, "10.0.0.1:6379")


def test_a_join_of_auto_sends_no_token_file_to_a_cluster_without_tokens(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """explore109: after a local Ray run wrote ~/.ray/auth_token, `--address auto` sent its
    token to a cluster started without tokens, whose processes all died at their start. The
    head is asked without one first: one that answers has none, and the run sends none."""
    from rltrain.runtime.ray import tokens

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("RAY_AUTH_MODE", "")  # (recorded: the mode set below is undone)
    monkeypatch.delenv("RAY_AUTH_MODE")
    answers: list[object] = [None]
    monkeypatch.setattr(tokens, "_ask", lambda address: answers[0])
    assert tokens.token_note("auto", "10.0.0.1:6379") == ""  # no file: Ray sends nothing
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("x" * 32)
    assert (
        tokens.token_note("10.0.0.1:6379", None) == ""
    )  # an address given: Ray sends none unasked
    answers[0] = RuntimeError("Unauthenticated")  # a head with tokens: the file's goes to it
    assert tokens.token_note("auto", "10.0.0.1:6379") == "" and "RAY_AUTH_MODE" not in os.environ
    answers[0] = None  # a head that answers without a token has none
    assert "this run sends no token" in tokens.token_note("auto", "10.0.0.1:6379")
    assert os.environ["RAY_AUTH_MODE"] == "disabled"
    assert tokens.token_note("auto", "10.0.0.1:6379") == ""  # the mode is set now
    tokens.undo_auth()  # (the session's end: shutdown) takes it back (review88b)
    assert "RAY_AUTH_MODE" not in os.environ


def test_ray_clients_notes_are_kept_to_what_concerns_the_run() -> None:
    """A ``ray://`` run's server-side SIGTERM warning is dropped; an error that leads with a
    colon keeps its next line."""
    from rltrain.runtime.ray import startup

    passed = passed_records(
        "ray.util.client.logsclient",
        f"{startup.CLIENT_SIGTERM_NOTE}.",
        "Log channel is reconnecting.",
    )
    assert passed == ["Log channel is reconnecting."]
    error = ConnectionError("Initialization failure from server:\n  Traceback ...\nmore")
    assert startup.said(error) == "Initialization failure from server: Traceback ..."
    assert startup.said(RuntimeError("")) == "RuntimeError"


def test_a_grpc_server_that_knows_no_head_call_is_no_ray_head(
    capfd: pytest.CaptureFixture[str],
) -> None:
    """explore109: an HTTP/2 server answering 404 (gRPC's UNIMPLEMENTED) was retried by Ray
    for 43 s, then blamed on a token; and the C++ client's warning of a Ray Client's port
    (the expected answer there) began every ray:// run."""
    import os

    from ray.exceptions import RpcError

    from rltrain.runtime.ray.reach import _quiet_stderr, _refusal

    said = _refusal(RpcError("Received http2 header with status: 404", rpc_code=12), "h:80")
    assert said.startswith("--address h:80: a gRPC server answers there, but not a Ray head's")
    assert _refusal(RpcError("deadline exceeded", rpc_code=4), "h:80") == ""
    with _quiet_stderr():
        os.write(2, b"gcs_client.cc:210: Failed to get cluster ID\n")
    os.write(2, b"after\n")
    assert capfd.readouterr().err == "after\n"
