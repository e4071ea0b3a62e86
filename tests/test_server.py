"""The sharded server client: split by size, join, validate whole updates, exchange."""

from __future__ import annotations

import pytest
import torch

from rltrain.config import ConfigError
from rltrain.ps.config import OptimizerConfig, ServerConfig
from rltrain.ps.server import LocalServer, ShardLayout
from rltrain.records import GradUpdate


@pytest.mark.parametrize(("numel", "shards"), [(10, 1), (10, 3), (7, 7), (1000, 4)])
def test_sharding_then_joining_returns_the_original(numel: int, shards: int) -> None:
    layout = ShardLayout(numel, shards)
    flat = torch.randn(numel, generator=torch.Generator().manual_seed(0))
    pieces = layout.split(flat)
    assert len(pieces) == shards
    assert max(layout.sizes) - min(layout.sizes) <= 1  # split by size
    assert torch.equal(layout.join(pieces), flat)


def test_bad_shard_counts() -> None:
    with pytest.raises(ConfigError, match="server.shards"):  # a one-line CLI error
        ShardLayout(3, 4)
    with pytest.raises(ValueError, match="server.shards"):
        ShardLayout(3, 0)


def test_sharded_server_matches_one_shard() -> None:
    """Element-wise optimizers: splitting the vector must not change a single value."""
    init = torch.randn(50, generator=torch.Generator().manual_seed(1))
    opt = OptimizerConfig(name="adam", lr=0.05)
    one = LocalServer(init, opt, ServerConfig(shards=1), 1)
    four = LocalServer(init, opt, ServerConfig(shards=4), 1)
    g = torch.Generator().manual_seed(2)
    for v in range(5):
        grad = torch.randn(50, generator=g)
        one.push(GradUpdate(0, v, grad, 4))
        four.push(GradUpdate(0, v, grad, 4))
    a, b = one.pull(), four.pull()
    assert a.version == b.version == 5
    torch.testing.assert_close(a.values, b.values)


def test_nan_in_one_shard_slice_is_rejected_by_every_shard() -> None:
    server = LocalServer(
        torch.zeros(8), OptimizerConfig(name="sgd", lr=1.0), ServerConfig(shards=2), 1
    )
    bad = torch.ones(8)
    bad[7] = float("nan")  # only in the second shard's slice
    r = server.push(GradUpdate(0, 0, bad, 1))
    assert r.status == "rejected"
    p = server.pull()
    assert p.version == 0 and torch.equal(p.values, torch.zeros(8))
    assert all(s.stats().rejected == 1 for s in server.shards)
    assert server.stats().rejected == 1


def test_exchange_and_exchange_begin() -> None:
    server = LocalServer(
        torch.zeros(4), OptimizerConfig(name="sgd", lr=1.0), ServerConfig(shards=2), 1
    )
    result, params = server.exchange(GradUpdate(0, 0, torch.ones(4), 1))
    assert result.status == "applied" and params.version == 1
    torch.testing.assert_close(params.values, -torch.ones(4))
    finish = server.exchange_begin(GradUpdate(0, 1, torch.ones(4), 1))
    result, params = finish()
    assert params.version == 2
    torch.testing.assert_close(params.values, -2 * torch.ones(4))
    st = server.stats()
    assert (st.version, st.applied, st.samples) == (2, 2, 2)


def test_state_dicts_round_trip() -> None:
    opt, rule = OptimizerConfig(name="momentum", lr=0.1), ServerConfig(shards=3)
    a = LocalServer(torch.zeros(9), opt, rule, 1)
    a.push(GradUpdate(0, 0, torch.arange(9.0), 1))
    b = LocalServer(torch.zeros(9), opt, rule, 1)
    b.load_state_dicts(a.state_dicts())
    assert torch.equal(a.pull().values, b.pull().values) and b.pull().version == 1
    with pytest.raises(ValueError, match="shards"):
        b.load_state_dicts(a.state_dicts()[:2])
