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


@pytest.mark.parametrize("bad", [torch.tensor([float("nan"), 0.0, 0.0, 0.0]), torch.zeros(3)])
def test_a_refused_update_waits_for_nothing_at_the_barrier(bad: torch.Tensor) -> None:
    """A non-finite or misshapen push under `sync` is rejected and the exchange returns at
    once, as a shard's own refusal does: it must not sit out the barrier's timeout waiting for
    a version its update will never help make (issue 11, bug 3)."""
    import threading

    server = LocalServer(
        torch.zeros(4), OptimizerConfig(name="sgd", lr=0.1), ServerConfig(rule="sync"), 2
    )
    out: list = []
    t = threading.Thread(
        target=lambda: out.append(server.exchange(GradUpdate(0, 0, bad, 1), 1, 60.0))
    )
    t.start()
    t.join(timeout=10.0)  # the bug waits the full 60 s for worker 1, who never pushes
    assert not t.is_alive()
    result, params = out[0]
    assert result.status == "rejected" and params.version == 0


def _hammer(server: LocalServer, workers: int, steps: int, barrier: bool) -> None:
    """``workers`` threads push and pull at once; every shard call is delayed at random so
    that the shards see the pushes in different orders, as Ray's independent calls can."""
    import random
    import threading
    import time

    rngs = {}

    def jittered(method):  # noqa: ANN001, ANN202
        def call(*a, **k):  # noqa: ANN002, ANN003, ANN202
            rng = rngs.setdefault(threading.get_ident(), random.Random(threading.get_ident()))
            time.sleep(rng.random() * 0.002)
            return method(*a, **k)

        return call

    for shard in server.shards:
        shard.push = jittered(shard.push)  # type: ignore[method-assign]

    def work(w: int) -> None:
        for _ in range(steps):
            p = server.pull()
            update = GradUpdate(w, p.version, torch.full((server.layout.numel,), 0.1 * (w + 1)), 1)
            server.exchange(update, p.version + 1 if barrier else 0, 0.5)  # the last ones alone

    threads = [threading.Thread(target=work, args=(w,)) for w in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


@pytest.mark.parametrize(
    "rule",
    [
        ServerConfig(rule="async", staleness="drop", max_staleness=0, shards=3),
        ServerConfig(rule="async", staleness="scale", shards=3),
        ServerConfig(rule="soft_sync", k=2, shards=3),
    ],
    ids=["async-drop", "async-scale", "soft_sync"],
)
def test_shards_decide_each_update_once(rule: ServerConfig) -> None:
    """With 3 shards, pushes racing in different orders to each shard are applied on every
    shard or on none, at one scale: the shards' versions, counters and parameters never
    diverge (issue 11, bug 2; before, each shard decided by its own version and order)."""
    server = LocalServer(torch.zeros(9), OptimizerConfig(name="sgd", lr=1.0), rule, 3)
    _hammer(server, workers=3, steps=8, barrier=rule.rule != "async")
    stats = [s.stats() for s in server.shards]
    assert len({s.version for s in stats}) == 1
    assert len({(s.applied, s.dropped, s.rejected) for s in stats}) == 1
    if rule.staleness == "drop":
        assert stats[0].dropped > 0  # the race was real: some pushes were late
    values = server.pull().values
    # each worker's update has its own value: every shard took the same ones, at one scale
    assert torch.allclose(values, values[0].expand_as(values))


def test_coordinated_shards_are_saved_at_one_version(monkeypatch: pytest.MonkeyPatch) -> None:
    """Shard 0 steps a moment before the others take its decision: a state read in between
    is read again, so that a checkpoint never restores the shards at different versions."""
    server = LocalServer(torch.zeros(6), OptimizerConfig(name="sgd"), ServerConfig("sync", 3), 1)
    assert server.coordinated
    read = server._call
    versions = iter([[1, 0, 0], [1, 1, 0], [1, 1, 1]])

    def mid_step(method: str, args: list) -> list:
        states = read(method, args)
        if method == "state_dict":
            states = [{**s, "version": v} for s, v in zip(states, next(versions), strict=True)]
        return states

    monkeypatch.setattr(server, "_call", mid_step)
    assert [s["version"] for s in server.state_dicts()] == [1, 1, 1]
