"""The parameter-server contract, on one plain in-process shard."""

from __future__ import annotations

import dataclasses
import threading
import time

import pytest
import torch

from rltrain.ps.config import OptimizerConfig, ServerConfig
from rltrain.ps.shard import ParameterShard
from rltrain.records import GradUpdate

SGD = OptimizerConfig(name="sgd", lr=0.5)


def shard(rule: str = "async", workers: int = 1, **kw: object) -> ParameterShard:
    return ParameterShard(torch.zeros(3), SGD, ServerConfig(rule=rule, **kw), workers)  # type: ignore[arg-type]


def upd(version: int, values: list[float] | torch.Tensor, worker: int = 0) -> GradUpdate:
    return GradUpdate(worker, version, torch.as_tensor(values, dtype=torch.float32), 8)


def test_push_moves_parameters_and_bumps_version() -> None:
    s = shard()
    r = s.push(upd(0, [1.0, 2.0, 3.0]))
    assert (r.status, r.version, r.staleness) == ("applied", 1, 0)
    p = s.pull()
    assert p.version == 1
    torch.testing.assert_close(p.values, torch.tensor([-0.5, -1.0, -1.5]))
    st = s.stats()
    assert (st.applied, st.samples, st.dropped, st.rejected) == (1, 8, 0, 0)


def test_sync_applies_exactly_once_per_n_pushes_with_the_mean() -> None:
    s = shard("sync", workers=3)
    assert s.push(upd(0, [1.0, 0, 0], 0)).status == "accumulated"
    assert s.push(upd(0, [2.0, 0, 0], 1)).status == "accumulated"
    assert s.pull().version == 0  # nothing applied before the N-th push
    assert s.push(upd(0, [3.0, 0, 0], 2)).status == "applied"
    p = s.pull()
    assert p.version == 1
    assert p.values[0].item() == pytest.approx(-0.5 * 2.0)  # lr * mean(1, 2, 3)
    for w in range(3):  # the next version needs N fresh pushes again
        s.push(upd(1, [0.0, 0, 0], w))
    assert s.pull().version == 2
    assert s.stats().applied == 6


def test_soft_sync_steps_after_k_and_drops_the_late_ones() -> None:
    s = shard("soft_sync", workers=3, k=2)
    assert s.push(upd(0, [2.0, 0, 0], 0)).status == "accumulated"
    assert s.push(upd(0, [4.0, 0, 0], 1)).status == "applied"
    late = s.push(upd(0, [100.0, 0, 0], 2))  # the backup worker's update for version 0
    assert late.status == "dropped" and late.staleness == 1
    p = s.pull()
    assert p.version == 1
    assert p.values[0].item() == pytest.approx(-0.5 * 3.0)  # only the first K=2 count
    st = s.stats()
    assert (st.applied, st.dropped) == (2, 1)
    assert st.dropped_by == {2: 1}  # whose (explore106: a straggler's shard never trained)
    restored = shard("soft_sync", workers=3, k=2)  # (a checkpoint keeps them)
    restored.load_state_dict(s.state_dict())
    assert restored.stats().dropped_by == {2: 1}


def test_barrier_counts_distinct_workers() -> None:
    """A worker that pushes twice for one version (after a barrier timeout) is not two."""
    s = shard("sync", workers=2)
    assert s.push(upd(0, [1.0, 0, 0], 0)).status == "accumulated"
    again = s.push(upd(0, [1.0, 0, 0], 0))
    assert again.status == "dropped" and "second update from worker 0" in again.reason
    assert s.pull().version == 0
    assert s.push(upd(0, [1.0, 0, 0], 1)).status == "applied"


def test_soft_sync_default_k_is_n_minus_one() -> None:
    s = shard("soft_sync", workers=3)
    s.push(upd(0, [1.0, 0, 0], 0))
    assert s.push(upd(0, [1.0, 0, 0], 1)).status == "applied"


def test_scale_divides_learning_rate_by_staleness() -> None:
    s = shard(staleness="scale")
    s.push(upd(0, [0.0, 0, 0]))
    s.push(upd(1, [0.0, 0, 0]))
    s.push(upd(2, [0.0, 0, 0]))  # server is now at version 3
    before = s.pull().values.clone()
    r = s.push(upd(0, [1.0, 0, 0]))  # computed from version 0: staleness 3
    assert r.staleness == 3
    step = s.pull().values - before
    assert step[0].item() == pytest.approx(-0.5 / 3)
    r = s.push(upd(4, [1.0, 0, 0]))  # fresh: full learning rate
    assert r.staleness == 0
    assert (s.pull().values - before)[0].item() == pytest.approx(-0.5 / 3 - 0.5)


def test_drop_refuses_updates_above_the_bound() -> None:
    s = shard(staleness="drop", max_staleness=1)
    for v in range(3):
        s.push(upd(v, [0.0, 0, 0]))
    assert s.push(upd(2, [1.0, 0, 0])).status == "applied"  # staleness 1: allowed
    before = s.pull()
    r = s.push(upd(1, [1.0, 0, 0]))  # staleness 3 > 1
    assert r.status == "dropped" and "staleness 3" in r.reason
    after = s.pull()
    assert after.version == before.version
    assert torch.equal(after.values, before.values)
    assert s.stats().dropped == 1


@pytest.mark.parametrize(
    ("values", "version", "reason"),
    [
        ([float("nan"), 0.0, 0.0], 0, "non-finite"),
        ([float("inf"), 0.0, 0.0], 0, "non-finite"),
        ([1.0, 2.0], 0, "wrong shape"),
        ([1.0, 2.0, 3.0], 7, "unknown version"),
        ([1.0, 2.0, 3.0], -1, "unknown version"),
    ],
)
@pytest.mark.parametrize("rule", ["async", "sync", "soft_sync", "average"])
def test_bad_updates_are_rejected_and_change_nothing(
    rule: str, values: list[float], version: int, reason: str
) -> None:
    s = shard(rule, workers=1)
    before = s.pull()
    r = s.push(upd(version, values))
    assert r.status == "rejected" and reason in r.reason
    after = s.pull()
    assert after.version == before.version
    assert torch.equal(after.values, before.values)
    st = s.stats()
    assert st.rejected == 1 and st.applied == 0 and reason in st.last_reject
    # and the shard still works afterwards
    assert s.push(upd(0, [1.0, 1.0, 1.0])).status == "applied"


def test_average_replaces_parameters_with_the_mean() -> None:
    s = shard("average", workers=2)
    s.push(upd(0, [1.0, 2.0, 3.0], 0))
    s.push(upd(0, [3.0, 4.0, 5.0], 1))
    p = s.pull()
    assert p.version == 1
    torch.testing.assert_close(p.values, torch.tensor([2.0, 3.0, 4.0]))


def test_async_staleness_histogram_and_mean() -> None:
    s = shard()
    s.push(upd(0, [0.0, 0, 0]))
    s.push(upd(0, [0.0, 0, 0]))  # staleness 1
    s.push(upd(0, [0.0, 0, 0]))  # staleness 2
    st = s.stats()
    assert st.staleness_hist[:3] == (1, 1, 1)
    assert st.mean_staleness == pytest.approx(1.0)


def test_barrier_releases_waiting_workers() -> None:
    s = shard("sync", workers=2)
    released: list[bool] = []
    s.push(upd(0, [1.0, 0, 0], 0))
    t = threading.Thread(target=lambda: released.append(s.wait_for_version(1, timeout=5)))
    t.start()
    time.sleep(0.05)
    assert not released  # still waiting for the second worker
    s.push(upd(0, [1.0, 0, 0], 1))
    t.join(timeout=5)
    assert released == [True]
    assert s.wait_for_version(5, timeout=0.01) is False


def test_exchange_pushes_waits_and_pulls() -> None:
    s = shard("sync", workers=2)
    out: list[object] = []
    t = threading.Thread(target=lambda: out.append(s.exchange(upd(0, [1.0, 0, 0], 0), 1, 5.0)))
    t.start()
    while s.stats().samples < 8:  # the exchange's push has landed and it now waits
        time.sleep(0.001)
    s.push(upd(0, [1.0, 0, 0], 1))
    t.join(timeout=5)
    result, params = out[0]  # type: ignore[misc]
    assert result.status == "accumulated" and params.version == 1


def test_state_dict_round_trip_keeps_version_counters_and_optimizer() -> None:
    cfg = OptimizerConfig(name="adam", lr=0.1)
    a = ParameterShard(torch.zeros(3), cfg, ServerConfig(), 1)
    for v in range(3):
        a.push(upd(v, [1.0, -1.0, 0.5]))
    b = ParameterShard(torch.zeros(3), cfg, ServerConfig(), 1)
    b.load_state_dict(a.state_dict())
    assert b.stats() == a.stats()
    a.push(upd(3, [0.3, 0.2, 0.1]))
    b.push(upd(3, [0.3, 0.2, 0.1]))  # same Adam moments: same next step
    assert torch.equal(a.pull().values, b.pull().values)
    with pytest.raises(ValueError, match="has 3 values, expected 4"):
        ParameterShard(torch.zeros(4), cfg, ServerConfig(), 1).load_state_dict(a.state_dict())


def test_a_shard_made_from_its_size_takes_its_values_by_a_call() -> None:
    """Ray keeps constructor arguments to replay on a restart: a shard is made from its size
    (small) and given its initial values afterwards."""
    shard = ParameterShard(3, OptimizerConfig(name="sgd", lr=0.1), ServerConfig(), 1)
    assert torch.equal(shard.pull().values, torch.zeros(3))
    shard.set_values(torch.tensor([1.0, 2.0, 3.0]))
    assert torch.equal(shard.pull().values, torch.tensor([1.0, 2.0, 3.0]))
    with pytest.raises(ValueError, match="2 values for 3"):
        shard.set_values(torch.ones(2))


def _verdict(values: list[float], version: int) -> GradUpdate:
    """An update whose sender's finiteness verdict travels unread (a tensor), as a learner's."""
    v = torch.tensor(values)
    return GradUpdate(0, version, v, 8, finite=torch.isfinite(v.norm()))


@pytest.mark.parametrize("name", ["adam", "momentum", "adagrad"])
def test_an_unread_non_finite_verdict_is_a_step_of_zero_then_a_rejection(name: str) -> None:
    """A fused optimizer steps with the verdict unread (found_inf): a non-finite update leaves
    the parameters and the optimizer's state as they were, the version counts a step of zero,
    and reading the verdicts (stats) moves it from applied to rejected. The next steps equal
    those of a shard that never saw it."""
    opt = OptimizerConfig(name=name, lr=0.1)
    a = ParameterShard(torch.ones(3), opt, ServerConfig(), 1)
    b = ParameterShard(torch.ones(3), opt, ServerConfig(), 1)
    assert a.push(_verdict([1.0, 2.0, 3.0], 0)).deferred
    b.push(_verdict([1.0, 2.0, 3.0], 0))
    before = a.pull()
    bad = a.push(_verdict([1.0, float("nan"), 3.0], 1))
    assert (bad.status, bad.deferred, bad.version) == ("applied", True, 2)
    assert torch.equal(a.pull().values, before.values)
    a.push(_verdict([0.5, -1.0, 2.0], 2))
    b.push(_verdict([0.5, -1.0, 2.0], 1))
    torch.testing.assert_close(a.pull().values, b.pull().values, rtol=0, atol=1e-7)
    st = a.stats()
    assert (st.version, st.applied, st.rejected, st.zero_steps) == (3, 2, 1, 1)
    assert st.last_reject == "non-finite values (NaN or inf)" and sum(st.staleness_hist) == 2
    restored = ParameterShard(torch.ones(3), opt, ServerConfig(), 1)
    restored.load_state_dict(a.state_dict())
    assert restored.stats() == dataclasses.replace(st, last_reject="")  # (not checkpointed)


def test_a_verdict_is_read_where_the_step_cannot_skip_on_the_device() -> None:
    """An optimizer without a fused kernel (rmsprop), a barrier rule or a push log: the shard
    reads the verdict and refuses a non-finite update as before, at once."""
    for opt, rule, record in [
        (OptimizerConfig(name="rmsprop"), ServerConfig(), False),
        (OptimizerConfig(name="adam"), ServerConfig(rule="sync"), False),
        (OptimizerConfig(name="adam"), ServerConfig(), True),
    ]:
        s = ParameterShard(torch.ones(3), opt, rule, 1, record=record)
        r = s.push(_verdict([float("inf"), 0.0, 0.0], 0))
        assert (r.status, r.deferred, s.stats().version) == ("rejected", False, 0)
        assert s.push(_verdict([1.0, 0.0, 0.0], 0)).status == "applied"


def test_a_slice_decides_without_a_lock_and_a_peer_follows_it() -> None:
    # ParameterSlice is the rule's half of a shard: shard 0's decisions, replayed by a follower,
    # leave both at one version with the same steps (a sync round of two, then a late update)
    from rltrain.ps.slice import ParameterSlice

    server = ServerConfig(rule="sync")
    first, second = (
        ParameterSlice(torch.zeros(3), SGD, server, 2, False, torch.device("cpu")) for _ in "ab"
    )
    for u in (upd(0, [1.0, 0, 0], 0), upd(0, [3.0, 0, 0], 1), upd(0, [9.0, 0, 0], 0)):
        decided = first.decide(u)
        assert second.follow(u, decided).status == decided.status
    assert first.version == second.version == 1
    torch.testing.assert_close(first.param.detach(), torch.tensor([-1.0, 0.0, 0.0]))
    torch.testing.assert_close(second.param.detach(), first.param.detach())
    assert first.counts.dropped == second.counts.dropped == 1


@pytest.mark.parametrize("how", ["leave", "follow_leave", "push"])
def test_a_waiter_wakes_when_the_version_moves_however_it_moves(how: str) -> None:
    """A barrier's waiter wakes on every step: the last push of a round, and a leave that
    completes one (on shard 0, or on a follower at shard 0's count)."""
    s = shard("sync", workers=2)
    assert s.push(upd(0, [1.0, 0, 0], 0)).status == "accumulated"
    woke: list[bool] = []
    waiter = threading.Thread(target=lambda: woke.append(s.wait_for_version(1, 10.0)))
    waiter.start()
    time.sleep(0.05)  # (the waiter is waiting)
    if how == "leave":
        assert s.leave(1) == 1
    elif how == "follow_leave":
        assert s.leave(1, step_at=1) == 1
    else:
        assert s.push(upd(0, [1.0, 0, 0], 1)).status == "applied"
    waiter.join(5.0)
    assert woke == [True] and s.version == 1
