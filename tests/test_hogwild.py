"""Hogwild: shared-memory parameters and optimizer state, updated lock-free by processes."""

from __future__ import annotations

import torch
import torch.multiprocessing as mp

from rltrain.ps.config import OptimizerConfig
from rltrain.ps.hogwild import HogwildServer
from rltrain.records import GradUpdate


def test_push_pull_and_rejects_in_process() -> None:
    server = HogwildServer(torch.zeros(3), OptimizerConfig(name="sgd", lr=0.5))
    r = server.push(GradUpdate(0, 0, torch.ones(3), 4))
    assert r.status == "applied" and server.pull().version == 1
    torch.testing.assert_close(server.pull().values, torch.full((3,), -0.5))
    bad = server.push(GradUpdate(0, 1, torch.tensor([float("nan"), 0, 0]), 4))
    assert bad.status == "rejected"
    assert server.pull().version == 1
    st = server.stats()
    assert (st.applied, st.rejected, st.samples) == (1, 1, 8)


def _pusher(server: HogwildServer, worker: int, n: int) -> None:
    for _ in range(n):
        p = server.pull()
        server.push(GradUpdate(worker, p.version, torch.ones(4), 1))


def test_processes_share_parameters_and_optimizer_state() -> None:
    """Two spawned processes, 25 pushes each: every push lands on the one shared model."""
    server = HogwildServer(torch.zeros(4), OptimizerConfig(name="momentum", lr=0.01, momentum=0.5))
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_pusher, args=(server, i, 25)) for i in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    st = server.stats()
    assert st.version == st.applied == 50
    # constant gradient 1 with momentum 0.5: the buffer, shared, converges towards 2
    assert server.pull().values[0].item() < -0.5
