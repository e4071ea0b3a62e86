"""Supervised workers against the in-process server: every rule's loop, in threads."""

from __future__ import annotations

import dataclasses
import threading

import pytest
import torch
from conftest import tiny_dataset
from torch.nn.utils import parameters_to_vector

from rltrain.ps.config import OptimizerConfig, ServerConfig
from rltrain.ps.server import LocalServer
from rltrain.supervised.worker import SupervisedWorker, WorkerReport, WorkerSpec, make_model


def spec(settings: ServerConfig, worker_id: int = 0, epochs: int = 1) -> WorkerSpec:
    return WorkerSpec(
        worker_id=worker_id,
        server=settings,
        optimizer=OptimizerConfig(name="adam", lr=0.003),
        model="cnn",
        num_classes=10,
        mean=(0.2,),
        std=(0.3,),
        batch_size=32,
        max_epochs=epochs,
        max_seconds=0,
        seed=worker_id,
    )


def run_workers(
    settings: ServerConfig, n: int, epochs: int = 1
) -> tuple[LocalServer, list[WorkerReport]]:
    s0 = spec(settings)
    init = parameters_to_vector(make_model(s0, (1, 28, 28)).parameters()).detach()
    server = LocalServer(init, s0.optimizer, settings, n)
    workers = [
        SupervisedWorker(spec(settings, i, epochs), tiny_dataset(128, seed=i)) for i in range(n)
    ]
    reports: list[WorkerReport] = [None] * n  # type: ignore[list-item]

    def go(i: int) -> None:
        reports[i] = workers[i].run(server)

    threads = [threading.Thread(target=go, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return server, reports


def test_sync_takes_one_step_per_round_of_n() -> None:
    server, reports = run_workers(ServerConfig(rule="sync"), 2)
    steps = reports[0].steps
    assert steps == reports[1].steps == 4  # 128 samples / batch 32, one epoch
    st = server.stats()
    assert st.version == steps and st.applied == 2 * steps and st.dropped == 0


def test_soft_sync_with_backup_worker_drops_late_updates() -> None:
    server, reports = run_workers(ServerConfig(rule="soft_sync", k=1), 2)
    st = server.stats()
    assert st.applied + st.dropped == sum(r.pushes for r in reports)
    assert st.version == st.applied


@pytest.mark.parametrize("pipeline", [True, False])
def test_async_applies_every_push(pipeline: bool) -> None:
    server, reports = run_workers(ServerConfig(rule="async", pipeline=pipeline), 2)
    st = server.stats()
    assert st.version == st.applied == sum(r.pushes for r in reports) == 8
    assert st.samples == 256


def test_async_n_push_accumulates() -> None:
    server, reports = run_workers(ServerConfig(rule="async", n_push=2, n_fetch=2), 1)
    assert reports[0].pushes == 2 and server.stats().samples == 128


def test_average_averages_every_k_steps() -> None:
    server, reports = run_workers(ServerConfig(rule="average", average_every=2), 2)
    assert server.stats().version == 2  # 4 steps each / k=2


def test_average_pushes_the_steps_left_over_at_the_end() -> None:
    server, reports = run_workers(ServerConfig(rule="average", average_every=3), 2)
    st = server.stats()
    assert st.version == 2  # 4 steps each: a round after step 3, the last step's after 4
    assert st.samples == 256 and [r.pushes for r in reports] == [2, 2]


def test_time_budget_and_report() -> None:
    rule = ServerConfig(rule="async")
    w = SupervisedWorker(
        dataclasses.replace(spec(rule, epochs=0), max_seconds=0.3), tiny_dataset(64)
    )
    server = LocalServer(
        parameters_to_vector(w.model.parameters()).detach(), w.spec.optimizer, rule, 1
    )
    r = w.run(server)
    assert 0.25 < r.end_time - r.start_time < 5
    assert r.samples == r.steps * 32 and len(r.log) == r.steps


def test_async_worker_learns_the_tiny_problem() -> None:
    torch.manual_seed(0)
    server, _ = run_workers(ServerConfig(rule="async"), 2, epochs=6)
    model = make_model(spec(ServerConfig()), (1, 28, 28))
    torch.nn.utils.vector_to_parameters(server.pull().values, model.parameters())
    test = tiny_dataset(200, seed=99)
    x = (test.images.float() / 255 - 0.2) / 0.3
    acc = (model(x).argmax(1) == test.labels).float().mean().item()
    assert acc > 0.8
