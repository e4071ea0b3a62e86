"""The Ray edge: real shard actors speak the same contract as the in-process shards."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from rltrain import runtime
from rltrain.ps.config import OptimizerConfig, ServerConfig
from rltrain.records import GradUpdate
from rltrain.runtime_config import RuntimeConfig

pytestmark = pytest.mark.slow


def test_unreachable_cluster_is_a_clear_error() -> None:
    """Runs first, before this module starts its local Ray: nothing is listening at port 1."""
    for address in ("ray://127.0.0.1:1", "127.0.0.1:1"):
        with pytest.raises(runtime.RuntimeError_, match="cannot join the Ray cluster"):
            runtime.init_ray(RuntimeConfig(address=address))
    with pytest.raises(runtime.RuntimeError_, match="expected 'auto'"):
        runtime.init_ray(RuntimeConfig(address="nonsense"))


@pytest.fixture(scope="module")
def ray_local() -> Iterator[None]:
    runtime.init_ray(RuntimeConfig(num_cpus=2))
    yield
    runtime.shutdown()


class Idle:
    """A process that is never placed."""


def test_a_process_no_node_can_hold_is_named(ray_local: None) -> None:
    """Ray waits in silence for a node with room; rltrain says which process waits and why."""
    r = runtime.Remote(Idle, role="worker", index=7, num_cpus=64)
    try:
        assert not r.is_up()
        note = runtime.placement_note([r])
        assert "waiting for Ray to start worker 7 (64 CPU each)" in note
        assert "nodes have 2 CPUs" in note
    finally:
        r.kill()


def test_ray_server_contract(ray_local: None) -> None:
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


def test_ray_sync_barrier_across_actors(ray_local: None) -> None:
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
