"""Parameters travel only when a new version exists, and once per version for many pullers."""

from __future__ import annotations

import pytest
import torch

from rltrain.ps.config import OptimizerConfig, ServerConfig
from rltrain.ps.server import LocalServer
from rltrain.records import GradUpdate
from rltrain.runtime import ray as runtime
from rltrain.runtime.config import RuntimeConfig

P = 1000  # in-process tests: any size
BIG = 400_000  # 1.6 MB: over the size from which the Ray server fans out through the store


def one_step(server, version: int) -> None:  # noqa: ANN001
    server.push(GradUpdate(0, version, torch.ones(P), 1))


def test_pull_with_what_you_hold_sends_nothing_until_a_new_version() -> None:
    server = LocalServer(
        torch.zeros(P), OptimizerConfig(name="sgd", lr=0.1), ServerConfig(shards=2), 1
    )
    held = server.pull()
    assert server.pull(held) is held  # nothing new: the caller keeps what it has
    assert server.shards[0].pull(newer_than=held.version) is None
    one_step(server, 0)
    new = server.pull(held)
    assert new is not held and new.version == 1
    assert torch.allclose(new.values, torch.full((P,), -0.1))


def test_a_shard_that_has_not_moved_keeps_the_held_slice() -> None:
    server = LocalServer(
        torch.zeros(P), OptimizerConfig(name="sgd", lr=0.1), ServerConfig(shards=2), 1
    )
    held = server.pull()
    half = server.layout.sizes[1]
    server.shards[1].push(GradUpdate(0, 0, torch.ones(half), 1))  # only shard 1 steps
    new = server.pull(held)
    assert new.version == 0  # the server's version is its slowest shard's
    assert torch.equal(new.values[: server.layout.sizes[0]], held.values[: server.layout.sizes[0]])
    assert torch.allclose(new.values[server.layout.sizes[0] :], torch.full((half,), -0.1))


@pytest.mark.slow  # on Ray
@pytest.mark.shared_ray
def test_ray_server_puts_one_object_per_version_for_every_puller() -> None:
    server = runtime.start_server(
        torch.zeros(2 * BIG),
        OptimizerConfig(name="sgd", lr=0.1),
        ServerConfig(shards=2),
        1,
        RuntimeConfig(),
    )
    pulls = [server.pull() for _ in range(4)]  # four actors at the same version
    puts = runtime.get([h.fanout_puts.remote() for h in server.handles])
    assert puts == [1, 1]
    assert all(torch.equal(p.values, pulls[0].values) for p in pulls)
    held = pulls[0]
    assert server.pull(held) is held  # nothing new: not even a reference travels
    server.push(GradUpdate(0, 0, torch.ones(2 * BIG), 1))
    assert [server.pull().version for _ in range(3)] == [1, 1, 1]
    assert runtime.get([h.fanout_puts.remote() for h in server.handles]) == [2, 2]
    server.kill()
