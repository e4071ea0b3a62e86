"""A run whose Ray head is lost stops in seconds, through its own fault path.

The watch (:mod:`rltrain.runtime.ray.head`) is a plain class, tested here against a socket
that listens and then closes; the end-to-end test kills the GCS server of a run's own Ray
instance (as `ray stop` or the OOM killer would) and expects rltrain's one line, exit 1 and
summary.json, where Ray alone would leave the run hanging until its core worker ended it a
minute later with neither.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_multinode import _procs, training

from rltrain.faults import ClusterLost, RunFailed
from rltrain.runtime.ray import head
from rltrain.runtime.ray.head import HeadWatch

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    try:
        yield server
    finally:
        server.close()


def port_of(server: socket.socket) -> int:
    return int(server.getsockname()[1])


def test_a_head_that_answers_is_never_lost(listener: socket.socket) -> None:
    watch = HeadWatch("127.0.0.1", port_of(listener), patience=0.2, every=0.05).start()
    try:
        time.sleep(0.4)
        watch.check()
        watch.confirm()  # returns at once: the head answers
        assert watch.lost() == "" and watch.error == ""
    finally:
        watch.stop()


def test_a_head_that_stops_answering_is_lost_after_the_patience(listener: socket.socket) -> None:
    watch = HeadWatch("127.0.0.1", port_of(listener), patience=0.3, every=0.05).start()
    try:
        assert watch.probe()
        listener.close()
        watch.check()  # not yet: the patience has not passed
        with pytest.raises(ClusterLost, match="lost the Ray cluster: its head at 127.0.0.1"):
            watch.confirm()  # a lost call: waits for the head, then gives up
        with pytest.raises(ClusterLost, match="has not answered"):
            watch.check()  # and stays lost
    finally:
        watch.stop()
    assert issubclass(ClusterLost, RunFailed)  # the run's fault path: summary.json, exit 1


def test_a_silence_of_the_watch_s_own_thread_is_not_the_head_s(listener: socket.socket) -> None:
    """explore109: on a loaded box the thread went unscheduled for over the patience and two
    healthy runs ended as "has not answered for 5s (no answer)"; no connect had failed."""
    watch = HeadWatch("127.0.0.1", port_of(listener), patience=0.2, every=0.05)  # no thread
    time.sleep(0.3)  # silent past the patience: nothing asked the head
    watch.check()  # one connect now: it answers
    assert watch.lost() == "" and watch.failed == 0
    watch.failed, watch.last_ok = 2, time.monotonic() - 1  # a hiccup, then the thread starved
    assert watch.lost() == "" and watch.failed == 0  # (review88: old failures took it for lost)
    listener.close()
    time.sleep(0.3)
    assert watch.lost() == ""  # one failed connect is not yet a lost head
    with pytest.raises(ClusterLost, match=r"has not answered for \ds \("):
        watch.check()  # the second


def test_a_local_instance_is_named_as_the_runs_own(listener: socket.socket) -> None:
    watch = HeadWatch("127.0.0.1", port_of(listener), patience=0.0, local=True)
    listener.close()
    assert not watch.probe()
    assert watch.lost().startswith("lost the run's Ray instance: its GCS server at 127.0.0.1")


def test_only_a_head_that_answers_at_the_start_is_watched(listener: socket.socket) -> None:
    """A path to the head this process cannot connect to must never fail a healthy run."""
    port = port_of(listener)
    listener.close()
    try:
        head.watch(f"127.0.0.1:{port}")
        assert not head.watched()
        head.check()  # nothing watched: nothing raised
        head.confirm()
    finally:
        head.unwatch()


def test_watch_parses_the_address_forms(listener: socket.socket) -> None:
    port = port_of(listener)
    try:
        for address in (f"127.0.0.1:{port}", f"ray://127.0.0.1:{port}"):
            head.watch(address)
            assert head.watched(), address
        head.watch("auto")  # not an address to connect to
        assert not head.watched()
    finally:
        head.unwatch()


def _children(pid: int) -> dict[int, str]:
    """Every process under ``pid``: pid -> command line."""
    procs = _procs()
    under, grew = {pid}, True
    while grew:
        more = {p for p, (ppid, _) in procs.items() if ppid in under} - under
        under |= more
        grew = bool(more)
    return {p: procs[p][1] for p in under - {pid}}


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the GCS server through /proc")
def test_a_run_whose_ray_head_dies_stops_with_a_summary(tmp_path: Path) -> None:
    run = tmp_path / "run"
    argv = [sys.executable, "-m", "rltrain.cli", "train", "configs/cartpole_a3c.yaml"]
    argv += ["--run-dir", str(run), "--set", "runtime.backend=ray", "--set", "actors=1"]
    argv += ["--set", "stop.mean_return=null", "--set", "stop.max_seconds=120"]
    argv += ["--set", "log_every_seconds=1"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        deadline = time.monotonic() + 120
        while not training(run):  # every process is up
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0]
            time.sleep(0.5)
        gcs = [p for p, cmd in _children(proc.pid).items() if "gcs_server" in cmd]
        assert len(gcs) == 1, _children(proc.pid)
        os.kill(gcs[0], signal.SIGKILL)
        out, _ = proc.communicate(timeout=55)  # Ray alone: killed at 60 s, no summary
    finally:
        proc.kill()
    assert proc.returncode == 1, out[-3000:]
    assert "rltrain: run failed: lost the run's Ray instance: its GCS server at" in out
    summary = json.loads((run / "summary.json").read_text())
    assert summary["stopped_by"] == "fault"
    assert summary["failure"].startswith("lost the run's Ray instance")
    assert summary["env_steps"] > 0


def test_a_client_sessions_end_in_a_shard_health_check_is_the_clusters_loss(
    listener: socket.socket, monkeypatch: pytest.MonkeyPatch
) -> None:
    """explore99: a ray:// run whose head was killed crashed in the shard guard's health
    check ("Client is shutting down", an internal error, no summary.json): the loss of the
    cluster, as Ray's other gets and waits take it."""
    import ray

    from rltrain.runtime.ray import wire

    def shutting_down(*args: object, **kwargs: object) -> None:
        raise ConnectionError("Client is shutting down.")

    monkeypatch.setattr(ray, "get", shutting_down)
    monkeypatch.setattr(ray, "wait", shutting_down)
    head.watch(f"ray://127.0.0.1:{port_of(listener)}")
    try:
        shard = SimpleNamespace(index=0)
        with pytest.raises(
            ClusterLost,
            match=r"the connection to its head at .* ended \(Client is shutting down\), and",
        ):
            wire.shard_health(shard, object(), 1.0)  # type: ignore[arg-type]
        server = SimpleNamespace(shards=[shard])
        with pytest.raises(ClusterLost):
            wire.RayServer.answered(server, [object()])  # type: ignore[arg-type]
    finally:
        head.unwatch()


def test_a_run_that_lost_its_cluster_says_where_it_can_go_on_from(tmp_path: Path) -> None:
    """explore99: "run failed: lost the Ray cluster" said nothing more, though a periodic
    checkpoint was there and resumed on a fresh head."""
    from rltrain.rl.run.summary import lost_ray_advice

    lost = {"stopped_by": "fault", "failure": "lost the Ray cluster: its head at 10.0.0.1:6379"}
    assert lost_ray_advice(lost, tmp_path) == (
        "no checkpoint was written before the loss: nothing to resume"
    )
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "ckpt-0000003696.pt").write_bytes(b"")
    said = lost_ray_advice(lost, tmp_path)
    assert said.startswith("its last checkpoint is ckpt-0000003696.pt: continue with rltrain ")
    assert f"train --resume {tmp_path} once the cluster is back" in said
    assert lost_ray_advice({"failure": "env 'x': step() raised"}, tmp_path) == ""


def test_a_dead_shard_is_said_with_ray_s_own_cause() -> None:
    """explore109: a head stopped by SIGTERM was told as a shard whose restarts were spent,
    with none made; Ray's cause is said instead (its fields left out)."""
    from ray.core.generated.common_pb2 import ActorDiedErrorContext
    from ray.exceptions import ActorDiedError

    from rltrain.runtime.ray.wire import died_why

    cause = "The actor is dead because its owner has died. Owner Id: 01 Owner Ip address: 10.0.0.2"
    context = ActorDiedErrorContext(
        class_name="Shard", actor_id=b"\x01" * 16, pid=12, error_message=cause
    )
    assert died_why(ActorDiedError(context)) == cause
    assert died_why(ActorDiedError()) == "its restarts spent: faults.max_restarts"
    try:  # its constructor raised: Ray's own first line, not one of the traceback's
        raise ValueError("bad shard argument")
    except ValueError as err:
        import traceback

        from ray.exceptions import RayTaskError

        task = RayTaskError("Shard.__init__", traceback.format_exc(), err)
    said = died_why(ActorDiedError(task))
    assert said == "its constructor raised ValueError: bad shard argument"
