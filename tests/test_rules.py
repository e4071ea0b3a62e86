"""The update rules as objects (rltrain.ps.rules): what each built-in rule answers, the
registry, and the config's choices read from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from rltrain.config import ConfigError, load_config
from rltrain.faults import on_pusher_loss
from rltrain.ps.config import ServerConfig, decides_per_update
from rltrain.ps.rules import (
    ASYNC,
    AVERAGE,
    BENCH_MODE_NAMES,
    SOFT_SYNC,
    SYNC,
    Async,
    Sync,
    register_rule,
    rule_named,
    rule_names,
    unregister_rule,
)
from rltrain.supervised.config import BenchConfig


def test_the_built_in_rules_answer_what_their_names_meant() -> None:
    assert rule_names() == ("sync", "soft_sync", "async", "average")
    assert [r.barrier for r in (SYNC, SOFT_SYNC, ASYNC, AVERAGE)] == [True, True, False, True]
    assert [r.name for r in (SYNC, SOFT_SYNC, ASYNC, AVERAGE) if r.supervised_only] == ["average"]
    assert [r.name for r in (SYNC, SOFT_SYNC, ASYNC, AVERAGE) if not r.records_gradients] == [
        "average"
    ]
    assert ASYNC.corrects_momentum and not SYNC.corrects_momentum
    assert ASYNC.max_concurrency(4) == 1 and SOFT_SYNC.max_concurrency(4) == 12
    server = ServerConfig(k=2)
    assert SYNC.aggregate_count(server, 4) == 4 and SYNC.aggregate_count(server, 4, live=3) == 3
    assert (
        SOFT_SYNC.aggregate_count(server, 4) == 2 and SOFT_SYNC.aggregate_count(server, 4, 1) == 1
    )
    assert SOFT_SYNC.aggregate_count(ServerConfig(), 4) == 3  # k 0: N - 1
    with pytest.raises(ValueError, match="server.k=5 is larger than the number of workers"):
        SOFT_SYNC.aggregate_count(ServerConfig(k=5), 4)
    scale, drop = ServerConfig(staleness="scale"), ServerConfig(staleness="drop", max_staleness=1)
    assert ASYNC.lr_scale(scale, 4) == 0.25 and ASYNC.lr_scale(ServerConfig(), 4) == 1.0
    assert ASYNC.drop_reason(drop, 2) == "staleness 2 > max_staleness 1"
    assert not ASYNC.drop_reason(drop, 1)
    assert not decides_per_update(ServerConfig(shards=2))  # async, no staleness policy
    assert decides_per_update(ServerConfig(shards=2, staleness="scale"))
    assert decides_per_update(ServerConfig(shards=2, rule="sync"))


def test_a_lost_pusher_is_answered_by_the_rule_given_by_object_or_name() -> None:
    assert on_pusher_loss(ASYNC, "wait", False) == (False, "")
    assert on_pusher_loss(SYNC, "wait", False) == (
        False,
        "; sync waits for it (faults.on_worker_loss=wait)",
    )
    assert on_pusher_loss(SYNC, "continue", False)[0]
    assert on_pusher_loss(AVERAGE, "wait", True) == (
        True,
        "; average goes on with the live workers",
    )
    assert on_pusher_loss(SOFT_SYNC, "wait", False) == (
        True,
        "; soft_sync continues without it until it is back",
    )


def test_the_registry_refuses_clashes_and_unknown_names() -> None:
    class Other(Sync):
        pass

    with pytest.raises(ValueError, match="'sync' is registered already"):
        register_rule(Other())
    assert register_rule(SYNC) is SYNC  # the same object again: nothing to do
    # the same rule again (a child process holds the driver's, unpickled, then imports the
    # module that registers it): nothing to do, the registered one stays
    assert register_rule(Sync()) is SYNC
    with pytest.raises(ValueError, match="is built in"):
        unregister_rule("async")
    with pytest.raises(ValueError, match="server.rule='nope': allowed values are sync, soft_sync"):
        rule_named("nope")


def test_a_bad_rule_is_one_line_that_lists_the_registered_names(tmp_path: Path) -> None:
    path = tmp_path / "b.yaml"
    path.write_text("server: {rule: asnyc}\n")
    with pytest.raises(ConfigError) as e:
        load_config(BenchConfig, path)
    message = str(e.value)
    assert "\n" not in message
    assert "server.rule='asnyc': allowed values are sync, soft_sync, async, average" in message
    assert "(did you mean async?)" in message


def test_a_rule_that_meets_one_pusher_is_said_to_change_nothing() -> None:
    """explore85: impala/appo/dqn with one learner took staleness=drop and soft_sync without
    a word, and ran as async (one pusher is never stale and waits for no other)."""
    from rltrain.rl.config import TrainConfig
    from rltrain.rl.config.notes import rule_notes

    root = Path(__file__).resolve().parents[1] / "configs"

    def notes(name: str, *sets: str) -> list[str]:
        return rule_notes(load_config(TrainConfig, root / name, list(sets)))

    (note,) = notes("cartpole_appo.yaml", "server.staleness=drop", "server.max_staleness=2")
    assert note.startswith("server.staleness=drop with 1 learner: one pusher") and "lag_kl" in note
    (note,) = notes("cartpole_gorila.yaml", "server.rule=soft_sync")
    assert note.startswith("server.rule=soft_sync with 1 learner")
    assert "lag_kl" not in note  # (dqn writes none: explore112)
    assert notes("cartpole_appo.yaml", "server.staleness=drop", "learners=2") == []
    assert notes("cartpole_a3c.yaml", "server.staleness=drop") == []  # its 2 workers push
    assert notes("cartpole_appo.yaml") == []
    # one worker (explore98: a2c with actors=1 ran sync as async, unsaid)
    (note,) = notes("cartpole_a3c.yaml", "algo.name=a2c", "actors=1")
    assert note.startswith("server.rule=sync with 1 worker: one pusher") and "lag_kl" not in note
    assert note.endswith("raise actors to compare rules")
    assert notes("cartpole_a3c.yaml", "actors=1") == []  # async: nothing to say
    # keys only a barrier reads, under async (explore98: taken without a word)
    (note,) = notes(
        "cartpole_a3c.yaml", "server.barrier_timeout_s=5", "faults.on_worker_loss=continue"
    )
    assert note == (
        "server.barrier_timeout_s=5, faults.on_worker_loss=continue: read at a barrier "
        "(server.rule sync, soft_sync) only; this run's rule is async: they change nothing"
    )
    assert notes("cartpole_a3c.yaml", "algo.name=a2c", "server.barrier_timeout_s=5") == []


def test_rules_named_as_bench_modes_or_pushing_parameters_in_train_are_refused() -> None:
    """explore86: a rule called async_scale replaced that bench mode and one called baseline
    was ignored, each without a word; a rule that pushes parameters, not marked bench-only,
    trained a network overwritten by the mean gradient at every step."""
    from rltrain.rl.config import TrainConfig

    with pytest.raises(ValueError, match="the name of a bench mode that is no rule"):
        register_rule(type("Clash", (ASYNC.__class__,), {"name": "async_scale"})())
    mine = type("MyAverage", (Sync,), {"name": "my_average", "pushes_parameters": True})()
    register_rule(mine)
    try:
        config = Path(__file__).resolve().parents[1] / "configs" / "cartpole_a3c.yaml"
        with pytest.raises(ValueError, match="server.rule=my_average: rltrain bench only"):
            load_config(TrainConfig, config, ["server.rule=my_average"])
    finally:
        unregister_rule("my_average")
    from rltrain.supervised.config import MODES

    assert {m for m in MODES if m not in rule_names()} == set(BENCH_MODE_NAMES)


def test_a_rule_of_its_own_lr_scale_is_decided_once_for_every_shard() -> None:
    """explore86: with server.shards=2 a rule whose lr_scale reads the staleness scaled the
    two halves of 9% of the updates differently (each shard saw its own staleness)."""

    class Decay(Async):
        name = "decay_test"

        def lr_scale(self, server: object, staleness: int) -> float:
            return 0.8**staleness

    plain = ServerConfig()
    assert Decay().decides(plain) and not ASYNC.decides(plain) and SYNC.decides(plain)
    assert ASYNC.decides(ServerConfig(staleness="scale"))


def test_a_rule_that_raises_leaves_no_shard_a_step_ahead() -> None:
    """Review 77 L2: the rule's own code runs on shard 0 alone, before any shard steps (the
    others take shard 0's factor), so a rule that raises leaves the shards at one version and
    the final checkpoint of a failed run holds no half of an update."""
    import torch

    from rltrain.ps.config import OptimizerConfig
    from rltrain.ps.server import LocalServer
    from rltrain.records import GradUpdate

    calls: list[int] = []

    class Flaky(Async):
        name = "flaky_test"

        def lr_scale(self, server: object, staleness: int) -> float:
            calls.append(staleness)
            if len(calls) > 1:  # the first update's second call (on shard 1, before the fix)
                raise RuntimeError("flaky")
            return 0.5

    register_rule(Flaky())
    try:
        server = LocalServer(
            torch.zeros(6),
            OptimizerConfig(name="sgd", lr=1.0),
            ServerConfig(rule="flaky_test", shards=2),
            1,
        )
        assert server.coordinated
        first = server.push(GradUpdate(0, 0, torch.ones(6), 1))
        assert first.status == "applied" and calls == [0]  # shard 1 stepped by shard 0's 0.5
        assert server.pull().values.tolist() == [-0.5] * 6
        with pytest.raises(RuntimeError, match="flaky"):
            server.push(GradUpdate(0, 1, torch.ones(6), 1))
        states = server.state_dicts(tries=1)
        assert {int(s["version"]) for s in states} == {1}  # no shard stepped
        assert server.pull().values.tolist() == [-0.5] * 6
    finally:
        unregister_rule("flaky_test")


def test_a_barrier_rule_whose_count_is_no_count_stops_in_one_line() -> None:
    """explore108: aggregate_count N + 3 waited for updates that never came, past every stop;
    a float ran as another count. A whole number from 1 to N, else one line at the start."""
    from rltrain.ps.barrier import BarrierRound
    from rltrain.ps.rules import Sync

    class Counted(Sync):
        name = "counted_test"

        def __init__(self, value: object) -> None:
            self.value = value

        def aggregate_count(self, server: object, n: int, live: int | None = None) -> int:
            return self.value  # type: ignore[return-value]

    try:
        for value in (5, 0, 1.0, True, None):
            register_rule(Counted(value))
            with pytest.raises(ValueError, match=r"aggregate_count returned .* for 2 workers"):
                BarrierRound(ServerConfig(rule="counted_test"), 2)
            unregister_rule("counted_test")
        register_rule(Counted(2))
        assert BarrierRound(ServerConfig(rule="counted_test"), 2).needed == 2
    finally:
        unregister_rule("counted_test")


def test_a_rule_whose_lr_scale_is_no_factor_stops_in_one_line() -> None:
    """A rule of your own whose lr_scale returned NaN stepped the parameters to NaN, and the run
    ended many refused updates later as "diverged"; a negative factor would climb the loss."""
    import numpy as np

    class Bad(Async):
        name = "bad_scale_test"

        def __init__(self, value: object) -> None:
            self.value = value

        def lr_scale(self, server: object, staleness: int) -> float:
            return self.value  # type: ignore[return-value]

    for value in (float("nan"), -0.5, float("inf"), "0.5", None, True):
        with pytest.raises(ValueError, match=r"lr_scale returned .* for staleness 2; it returns"):
            Bad(value).checked_scale(ServerConfig(), 2)
    assert Bad(np.float32(0.5)).checked_scale(ServerConfig(), 2) == 0.5

    class Judged(Async):  # explore108: a predicate's bool dropped by truthiness, unsaid
        name = "judged_test"

        def drop_reason(self, server: object, staleness: int) -> str:
            return staleness > 1  # type: ignore[return-value]

    with pytest.raises(ValueError, match=r"drop_reason returned True for staleness 2; it ret"):
        Judged().checked_drop(ServerConfig(), 2)
    assert Bad(0).checked_scale(ServerConfig(), 2) == 0.0
