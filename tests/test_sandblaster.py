"""Sandblaster L-BFGS: the sharded two-loop recursion, the coordinator's traffic, load
balancing with backup tasks, and convergence on a problem with a known optimum."""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path
from typing import Any

import pytest
import torch

from rltrain.config import ConfigError, load_config
from rltrain.faults import FaultEvent
from rltrain.ps.lbfgs import G, LbfgsCoordinator, LocalStore, dense_direction
from rltrain.supervised.config import BenchConfig, DataConfig, SandblasterConfig, ToyConfig
from rltrain.supervised.modes import initial_params, worker_specs
from rltrain.supervised.sandblaster import (
    Portion,
    Sandblaster,
    SandblasterWorker,
    Scheduler,
    ThreadExecutor,
    portion_indices,
)
from rltrain.supervised.sharding import load_data
from rltrain.supervised.toys import relative_distance


def put(store: LocalStore, name: str, v: torch.Tensor) -> None:
    """Write a full vector into the shards' slices (test set-up only)."""
    for shard, piece in zip(store.shards, torch.split(v, store.sizes), strict=True):
        shard.vectors[name] = piece.clone()


def gather(store: LocalStore, name: str) -> torch.Tensor:
    return torch.cat(store.each("values", name))


def test_the_sharded_two_loop_direction_equals_single_process_lbfgs() -> None:
    torch.manual_seed(0)
    n = 37  # not a multiple of the shard count: uneven slices
    a = torch.randn(n, n, dtype=torch.float64)
    hessian = a @ a.T / n + torch.eye(n, dtype=torch.float64)  # SPD: every y.s > 0
    store = LocalStore(torch.zeros(n), shards=3)
    coordinator = LbfgsCoordinator(store, memory=4)
    history = []
    for _ in range(6):  # more pairs than the memory: the oldest two are forgotten
        g_old = torch.randn(n, dtype=torch.float64)
        s = torch.randn(n, dtype=torch.float64)
        put(store, "g_old", g_old.float())
        put(store, "d", (s / 0.5).float())  # s = 0.5 d, as after a halved line-search step
        put(store, G, (g_old + hessian @ s).float())
        assert coordinator.add_pair("d", 0.5, "g_old")
        newest = coordinator.pairs[-1]
        history.append((gather(store, newest.s).double(), gather(store, newest.y).double()))
    assert len(coordinator.pairs) == 4
    g = torch.randn(n)
    put(store, G, g)
    gd = coordinator.direction("d")
    expected = dense_direction(g.double(), history[-4:])
    torch.testing.assert_close(gather(store, "d").double(), expected, rtol=1e-6, atol=1e-6)
    assert gd == pytest.approx(float(g.double() @ expected), rel=1e-6)
    assert gd < 0  # a descent direction


def test_a_pair_without_positive_curvature_is_not_kept() -> None:
    store = LocalStore(torch.zeros(4))
    coordinator = LbfgsCoordinator(store, memory=3)
    put(store, "g_old", torch.zeros(4))
    put(store, "d", torch.ones(4))
    put(store, G, -torch.ones(4))  # y.s < 0
    assert not coordinator.add_pair("d", 1.0, "g_old")
    assert coordinator.pairs == []


TOY = ToyConfig(dim=20, samples=600, curvature=1.0, condition=50.0, noise=0.0, seed=1)


def setup(
    dim: int = 20, workers: int = 2, events: tuple[FaultEvent, ...] = (), **sb: Any
) -> tuple[BenchConfig, Any, LocalStore, list[SandblasterWorker]]:
    cfg = BenchConfig(
        modes=("sandblaster",),
        workers=workers,
        data=DataConfig(dataset="toy_quadratic", toy=dataclasses.replace(TOY, dim=dim)),
        sandblaster=SandblasterConfig(**sb),
    )
    data = load_data(cfg.data)
    store = LocalStore(initial_params(cfg, data), shards=2)
    specs = worker_specs(cfg, "sandblaster", data, workers)
    specs = [dataclasses.replace(s, faults=events) for s in specs]
    return cfg, data, store, [SandblasterWorker(s, data.train, store) for s in specs]


def test_sandblaster_reaches_the_optimum_of_a_quadratic() -> None:
    cfg, data, store, workers = setup(portions=6)
    ex = ThreadExecutor(workers)
    try:
        sb = Sandblaster(cfg.sandblaster, store, Scheduler(ex, 0.8), len(data.train), 0)
        sb.run(lambda: sb.iterations < 60, lambda: None)
    finally:
        ex.close()
    start = initial_params(cfg, data)
    assert relative_distance(store.pull(), data.optimum, start) < 1e-3
    # one fixed batch: a batch evaluation per line-search trial, no extra pass per iteration
    assert len(sb.batches) <= 1 + sb.iterations * cfg.sandblaster.max_line_search


class CountingStore:
    """The store as the coordinator sees it, counting the pickled bytes both ways."""

    def __init__(self, inner: LocalStore) -> None:
        self.inner, self.bytes, self.largest = inner, 0, 0

    def each(self, method: str, *args: Any) -> list[Any]:
        out = self.inner.each(method, *args)
        for shard_result in out:
            size = len(pickle.dumps((method, args))) + len(pickle.dumps(shard_result))
            self.bytes, self.largest = self.bytes + size, max(self.largest, size)
        return out

    def pull(self) -> torch.Tensor:
        return self.inner.pull()

    def accumulate(self, round_id: int, portion: int, grad: torch.Tensor) -> None:
        self.inner.accumulate(round_id, portion, grad)


def test_bytes_through_the_coordinator_do_not_grow_with_the_parameter_count() -> None:
    per_iteration = {}
    for dim in (10, 500):  # 50x the parameters
        cfg, data, store, workers = setup(dim=dim, portions=4)
        counting = CountingStore(store)
        ex = ThreadExecutor(workers)
        try:
            sb = Sandblaster(cfg.sandblaster, counting, Scheduler(ex, 1.0), len(data.train), 0)
            sb.run(lambda sb=sb: sb.iterations < 5, lambda: None)
        finally:
            ex.close()
        per_iteration[dim] = counting.bytes / len(sb.batches)
        assert counting.largest < 300  # names and scalars; w alone is 4 x dim bytes
    assert per_iteration[500] <= 1.5 * per_iteration[10], per_iteration
    # what the workers hear from the coordinator is a portion's numbers, whatever the model
    assert len(pickle.dumps(Portion(1, 2, 16, 123, 0))) < 200


def test_portions_cover_the_batch_once() -> None:
    for size in (0, 250):
        parts = [portion_indices(Portion(0, i, 7, 5, size), 600) for i in range(7)]
        joined = torch.cat(parts)
        assert len(joined) == (600 if size == 0 else 250) and len(set(joined.tolist())) == len(
            joined
        )


def test_backup_tasks_copy_a_stragglers_portions_and_the_first_result_wins() -> None:
    # so slow that the fast two finish every other portion first, whatever the load
    slow = (FaultEvent(action="slow", target="worker", index=2, factor=300.0),)
    cfg, data, store, workers = setup(dim=200, workers=3, events=slow, portions=12)
    ex = ThreadExecutor(workers)
    try:
        sched = Scheduler(ex, backup_after=0.5)
        store.each("begin", 1)
        stats = sched.run([Portion(1, i, 12, 0, 0) for i in range(12)])
    finally:
        ex.close()
    assert stats.backups > 0  # the straggler's outstanding portions were handed out again
    assert sum(stats.per_worker.values()) == 12 and stats.samples == len(data.train)
    # the straggler counted for fewer portions than a fast worker (load balancing; on a
    # loaded machine one fast thread can take every portion before the other is scheduled)
    fast = max(stats.per_worker.get(0, 0), stats.per_worker.get(1, 0))
    assert stats.per_worker.get(2, 0) < fast, stats.per_worker
    # each portion counted once: the accumulated gradient is the whole batch's
    model = workers[0].model
    for p in model.parameters():
        p.grad = None
    loss = (
        torch.nn.functional.mse_loss(model(workers[0].x).squeeze(1), workers[0].y, reduction="sum")
        / 2
    )
    loss.backward()
    full = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    torch.testing.assert_close(gather(store, G), full, rtol=1e-4, atol=1e-3)


def test_config_errors(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    for text, message in {
        "sandblaster: {portions: 0}\n": "sandblaster.portions",
        "sandblaster: {backup_after: 1.5}\n": "sandblaster.backup_after",
        "sandblaster: {memory: 0}\n": "sandblaster.memory",
    }.items():
        path.write_text(text)
        with pytest.raises(ConfigError, match=message):
            load_config(BenchConfig, path)


@pytest.mark.slow
@pytest.mark.shared_ray
def test_bench_mode_sandblaster_through_ray(tmp_path: Path, run_bench: Any) -> None:
    out, summary = run_bench(
        "modes: [sandblaster]\nworkers: 2\n"
        "data: {dataset: toy_quadratic, toy: {dim: 20, samples: 600, noise: 0.0}}\n"
        "budget: {max_seconds: 0, epochs: 40}\neval: {every_seconds: 0.2}\n"
        "server: {shards: 2}\nsandblaster: {portions: 6}\n"
    )
    row = summary["results"][0]
    assert row["mode"] == "sandblaster" and row["final_distance"] < 0.01, row
