"""A real Ray cluster of three nodes on this machine, started with the README's commands
(`ray start --head`, then `ray start --address` for each other node).

`rltrain bench` and `rltrain train` join it with `--address`; Ray's own actor table (the GCS's,
read by a separate driver) shows where their processes ran. Then a worker node is removed mid
run (its raylet and every process under it killed, as when a machine dies): the run finishes,
the lost process is restarted on a node that is left, and summary.json counts the fault.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import checkpoint_when

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
RAY_CLI = Path(sys.executable).with_name("ray")
OBJECT_STORE = str(80 * 1024 * 1024)  # Ray's minimum is 75 MB; three nodes share this machine

# Read by a separate driver: Ray's records of nodes and actors, as JSON.
QUERY = """
import json, sys
import ray
from ray._private import state
ray.init(address=sys.argv[1], logging_level="ERROR")
nodes = [
    {"id": n["NodeID"], "alive": n["Alive"], "head": "node:__internal_head__" in n["Resources"]}
    for n in ray.nodes()
]
actors = [
    {
        "id": a["ActorID"],
        "cls": a.get("ActorClassName") or a.get("ClassName"),
        "job": a["JobID"],
        "node": a["Address"]["NodeID"],
        "restarts": a.get("NumRestarts", 0),
    }
    for a in state.actors().values()
]
print(json.dumps({"nodes": nodes, "actors": actors}))
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _procs() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command line) of this user's processes, from /proc."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid != os.getuid():
                continue
            stat = (entry / "stat").read_text()
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        out[int(entry.name)] = (ppid, cmd)
    return out


def _kill_tree(match: str) -> int:
    """SIGKILL every process whose command line contains ``match``, and all under them."""
    procs = _procs()
    doomed = {pid for pid, (_, cmd) in procs.items() if match in cmd}
    grew = True
    while grew:
        more = {pid for pid, (ppid, _) in procs.items() if ppid in doomed} - doomed
        doomed |= more
        grew = bool(more)
    for pid in doomed:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return len(doomed)


class Cluster:
    """Three Ray nodes of one CPU each on this machine, in their own temp folder."""

    def __init__(self) -> None:
        # short: Ray's Unix sockets live under it (108-byte limit)
        self.temp = tempfile.mkdtemp(prefix="rtc", dir="/tmp")
        self.address = f"127.0.0.1:{_free_port()}"
        self.client_port = _free_port()  # the Ray Client's (ray://)
        self.env = {
            **os.environ,
            # Ray >= 2.59 guards a cluster with a token; every node and driver shares it
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN": secrets.token_hex(16),
            # notice a dead node within seconds (the default takes about half a minute)
            "RAY_health_check_period_ms": "500",
            "RAY_health_check_timeout_ms": "1000",
            "RAY_health_check_failure_threshold": "3",
        }
        common = ["--num-cpus", "1", "--object-store-memory", OBJECT_STORE]
        common += ["--node-ip-address", "127.0.0.1", "--disable-usage-stats"]
        port = self.address.rsplit(":", 1)[1]
        try:
            self.ray(
                "start", "--head", "--port", port, "--temp-dir", self.temp, *common,
                "--include-dashboard", "false", "--ray-client-server-port", str(self.client_port),
                "--dashboard-agent-listen-port", str(_free_port()),
                # workers at the driver's priority, as docs/cluster.md advises (Ray's nice
                # 15 left them starved beside any busy process on this machine)
                "--system-config", json.dumps({"worker_niceness": 0}),
            )  # fmt: skip
            for _ in range(2):
                agent = str(_free_port())
                self.ray("start", "--address", self.address, *common,
                         "--dashboard-agent-listen-port", agent)  # fmt: skip
        except BaseException:
            self.shutdown()
            raise

    def ray(self, *args: str) -> None:
        done = subprocess.run(
            [str(RAY_CLI), *args], env=self.env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]

    def records(self) -> dict[str, Any]:
        done = subprocess.run(
            [sys.executable, "-c", QUERY, self.address],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    def rltrain(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "rltrain.cli", *args, "--address", self.address],
            cwd=REPO,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def remove_node(self, node_id: str) -> None:
        """A machine lost: its raylet and every process under it killed at once."""
        assert _kill_tree(f"--node_id={node_id}") > 0

    def shutdown(self) -> None:
        _kill_tree(self.temp + "/")  # GCS, raylets, monitors: their command lines name it
        shutil.rmtree(self.temp, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    if not RAY_CLI.exists():
        pytest.skip(f"no `ray` command beside {sys.executable}")
    c = Cluster()
    try:
        nodes = [n for n in c.records()["nodes"] if n["alive"]]
        assert len(nodes) == 3, nodes
        yield c
    finally:
        c.shutdown()


def finish(proc: subprocess.Popen[str], timeout: float = 240, code: int = 0) -> str:
    try:
        out, _ = proc.communicate(timeout=timeout)
    finally:
        proc.kill()  # a run that hangs must not outlive the test
    assert proc.returncode == code, out[-3000:]
    return out


def role_of(cls: str | None) -> str:
    """The role a Ray process was placed as: its class is named for it ("rltrain: actor 0",
    rltrain.runtime.ray.remote.titled)."""
    return (cls or "").removeprefix("rltrain: ").rpartition(" ")[0]


def job_actors(records: dict[str, Any], job: str) -> list[dict[str, Any]]:
    return [a for a in records["actors"] if a["job"] == job]


def training(run: Path) -> bool:
    """An episode's return is in the run's TensorBoard: its processes are up and working."""
    from rltrain.curves import PlotError, read_curve

    try:
        read_curve(run)
    except (PlotError, OSError):
        return False
    return True


def test_bench_workers_and_shards_spread_over_the_nodes(cluster: Cluster, tmp_path: Path) -> None:
    run = tmp_path / "bench"
    out = finish(
        cluster.rltrain(
            "bench",
            "configs/bench_toy.yaml",
            "--run-dir",
            str(run),
            "--set",
            "modes=[async]",
            "--set",
            "workers=3",
            "--set",
            "server.shards=2",
            "--set",
            "budget.epochs=1",
            "--set",
            "data.toy.samples=4000",  # where the processes ran is what counts, not the data
            "--set",
            "runtime.num_cpus=1",  # a local Ray's: said to be ignored
        )
    )
    assert "on 3 nodes" in out
    assert "runtime.num_cpus=1 is for a local Ray: a cluster has its nodes'" in out
    ray = json.loads((run / "summary.json").read_text())["runtime"]
    assert ray["nodes"] == 3 and ray["backend"] == "ray"
    assert ray["address"].endswith(cluster.address.rpartition(":")[2])  # (the head's own IP)
    actors = job_actors(cluster.records(), ray["job_id"])
    workers = [a["node"] for a in actors if role_of(a["cls"]) == "worker"]
    shards = [a["node"] for a in actors if role_of(a["cls"]) == "shard"]
    assert len(workers) == 3 and len(shards) == 2
    assert len(set(workers)) == 3  # one 1-CPU worker per 1-CPU node


def test_a_wrong_token_or_the_client_port_fails_the_join_in_a_line(cluster: Cluster) -> None:
    """Ray retries either for 20 s, a warning line a second, and then says "Failed to
    connect"; one ask of the head's calls says which in a second."""
    code = "import sys\nfrom rltrain.runtime.ray import RayStartError, check_address\n"
    code += "for a in sys.argv[1:]:\n    try:\n        check_address(a)\n"
    code += "    except RayStartError as e:\n        print(e)\n"
    client = f"127.0.0.1:{cluster.client_port}"
    done = subprocess.run(
        [sys.executable, "-c", code, cluster.address, client],
        env={**cluster.env, "RAY_AUTH_TOKEN": "0" * 32},
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = done.stdout.splitlines()
    assert len(lines) == 2, done.stdout + done.stderr[-2000:]
    assert lines[0].endswith(
        "its head refused this shell's RAY_AUTH_TOKEN; export RAY_AUTH_MODE=token "
        "RAY_AUTH_TOKEN=<the token the cluster was started with> (docs/cluster.md)"
    )
    assert "not a Ray head's" in lines[1] and f"give ray://{client}" in lines[1]


def test_train_spreads_and_survives_the_loss_of_a_node(cluster: Cluster, tmp_path: Path) -> None:
    run = tmp_path / "train"
    proc = cluster.rltrain(
        "train",
        "configs/cartpole_appo.yaml",
        "--run-dir",
        str(run),
        "--set",
        "actors=1",
        "--set",
        "learners=1",
        "--set",
        "log_every_seconds=1",
        "--set",
        # a cap: the run is stopped (SIGINT) once the lost process is back and training on
        "stop.max_seconds=180",
        "--set",
        "stop.mean_return=null",
        "--set",
        "checkpoint.every_seconds=1",
    )
    lines = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # up to the runtime's line, which names the run's Ray job
            lines.append(line)
            if line.startswith("runtime:") and "job " in line:
                break
        job = lines[-1].rsplit("job ", 1)[1].split(")")[0]
        deadline = time.time() + 120
        while not training(run):  # (the progress lines come every 10 s through a pipe)
            assert proc.poll() is None and time.time() < deadline, "".join(lines)
            time.sleep(0.5)
        before = cluster.records()
        heads = {n["id"] for n in before["nodes"] if n["head"]}
        mine = [a for a in job_actors(before, job) if role_of(a["cls"]) in ("actor", "learner")]
        assert len({a["node"] for a in mine}) == 2  # actor and learner: one 1-CPU node each
        victim = next(a for a in mine if a["node"] not in heads)
        role = role_of(victim["cls"])
        cluster.remove_node(victim["node"])
        back: list[int] = []  # env steps in the first checkpoint that counts the restart

        def trained_on_after_the_restart(ckpt: dict[str, Any]) -> bool:
            if not ckpt["faults"][f"{role}_restarts"]:
                return False
            back[:1] = back[:1] or [ckpt["counters"]["env_steps"]]
            return bool(ckpt["counters"]["env_steps"] > back[0])

        running = lambda: proc.poll() is None  # noqa: E731
        assert checkpoint_when(run, trained_on_after_the_restart, alive=running), "".join(lines)
        proc.send_signal(signal.SIGINT)
        out = "".join(lines) + finish(proc, code=130)  # the interrupt's, after a checkpoint
    finally:
        proc.kill()

    summary = json.loads((run / "summary.json").read_text())
    assert summary["stopped_by"] == "interrupt", out[-3000:]
    faults = summary["faults"]
    assert faults[f"{role}_restarts"] >= 1, faults
    after = {a["id"]: a for a in cluster.records()["actors"]}[victim["id"]]
    assert after["restarts"] >= 1 and after["node"] != victim["node"]
    assert summary["runtime"]["placement"][role] == [after["node"]]
    assert summary["env_steps"] > 0
