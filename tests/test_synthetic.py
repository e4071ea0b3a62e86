"""Synthetic gradients (DNI): stages that step on a predicted gradient, and the predictor's
training on the true one (Jaderberg et al. 2017)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from test_pipeline import spec_for, stage_server

from rltrain.ps.config import OptimizerConfig, ServerConfig
from rltrain.ps.server import LocalServer
from rltrain.supervised.pipeline import (
    LocalStages,
    PipelineStage,
    layers,
    plan_stages,
    split_points,
    stage_sizes,
)
from rltrain.supervised.synthetic import (
    Decoupled,
    SyntheticGradient,
    SyntheticStage,
    decoupled,
    gradient_error,
    regress,
)
from rltrain.supervised.worker import flat_grad, make_model, objective


def stages_for(spec, shape: tuple[int, ...], k: int, cuts=None, **kw: object) -> list:  # noqa: ANN001
    """k stages cut at ``cuts`` (plan_stages times the layers: cut once per test)."""
    cuts = cuts or plan_stages(spec, shape, k)
    return [SyntheticStage(spec, shape, cuts, s, **kw) for s in range(k - 1)] + [
        PipelineStage(spec, shape, cuts, k - 1)
    ]


@pytest.mark.parametrize("k", [2, 3])
def test_oracle_stages_equal_backprop(k: int) -> None:
    """With the true gradient in place of the prediction, the stages' gradients are the
    unsplit model's to 1e-6: the decoupled schedule adds nothing of its own."""
    spec = spec_for("cnn")
    shape = (1, 28, 28)
    torch.manual_seed(0)
    x, y = torch.randn(16, *shape), torch.randint(0, 10, (16,))
    whole = make_model(spec, shape)
    objective(spec, whole, x, y).backward()
    stages = stages_for(spec, shape, k, oracle=True)
    assert decoupled(LocalStages(stages), x, y, 4, [], 0, oracle=True)[0] == []
    grads = torch.cat([st.grad()[0] for st in stages])
    torch.testing.assert_close(grads, flat_grad(whole), atol=1e-6, rtol=0)


def test_the_module_learns_a_linear_gradient_field() -> None:
    """dL/dh = A h + b, a field M can represent: the regression drives M's error to ~0."""
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(6, 6, generator=gen) * 0.3, torch.randn(6, generator=gen)
    module = SyntheticGradient((6,))
    assert torch.equal(module(torch.randn(3, 6)), torch.zeros(3, 6))  # zero at the start
    opt = torch.optim.Adam(module.parameters(), lr=1e-2)
    for _ in range(1500):
        h = torch.randn(64, 6, generator=gen)
        regress(module, opt, h, None, h @ a.T + b)
    h = torch.randn(256, 6, generator=gen)
    cosine, relative = gradient_error(module(h).detach(), h @ a.T + b)
    assert cosine > 0.999 and relative < 0.02


def test_cdni_conditions_on_the_labels() -> None:
    """A field that depends on the label alone: cDNI learns it, DNI cannot."""
    gen = torch.Generator().manual_seed(1)
    table = torch.randn(4, 5, generator=gen)  # dL/dh for each of 4 classes
    errors = {}
    for classes in (0, 4):
        module = SyntheticGradient((5,), classes, hidden=16)
        opt = torch.optim.Adam(module.parameters(), lr=1e-2)
        for _ in range(800):
            y = torch.randint(0, 4, (64,), generator=gen)
            h = torch.randn(64, 5, generator=gen)
            regress(module, opt, h, y if classes else None, table[y])
        y = torch.randint(0, 4, (256,), generator=gen)
        h = torch.randn(256, 5, generator=gen)
        errors[classes] = gradient_error(module(h, y if classes else None).detach(), table[y])[1]
    assert errors[4] < 0.05 < 0.5 < errors[0]


@pytest.mark.parametrize("delay", [1, 2])
def test_staleness_is_the_delay_under_the_decoupled_schedule(delay: int) -> None:
    """Each batch: every stage forward, then every stage's exchange; a stage learns from a
    batch's true gradients at the start of the batch ``delay`` later, ``delay`` updates after
    it predicted them. Exact: every true gradient of 4 batches of 4 micro-batches counts
    ``delay``, but the last batches', paid at the end after fewer updates."""
    spec = spec_for("cnn")
    shape = (1, 28, 28)
    cuts = plan_stages(spec, shape, 3)
    init = torch.nn.utils.parameters_to_vector(make_model(spec, shape).parameters()).detach()
    rule = ServerConfig(rule="async", shards=3)
    server = LocalServer(
        init, OptimizerConfig(name="sgd", lr=0.1), rule, 1, sizes=stage_sizes(spec, shape, cuts)
    )
    stages = stages_for(spec, shape, 3, cuts)
    local = LocalStages(stages)
    for s, st in enumerate(stages):
        st.connect(server.part(s))
    torch.manual_seed(0)
    schedule = Decoupled(delay=delay)
    for batch in range(4):
        x, y = torch.randn(16, *shape), torch.randint(0, 10, (16,))
        schedule.step(local, x, y, 4)
        assert [len(owes) for owes in schedule.owed][-1] == 4 * 2  # stages 0 and 1, per mb
        assert len(stages[0].staleness) == 4 * max(0, batch + 1 - delay)
        for st in stages:
            st.exchange(0, 16, 1.0)
    schedule.finish(local)  # after the last exchange: batch b's is 4 - b updates old
    exact = [min(delay, 4 - b) for b in range(4) for _ in range(4)]
    assert stages[0].staleness == stages[1].staleness == exact
    counters = stages[1].counters()
    assert counters["staleness"] == sum(exact) / 16 and -1 <= counters["cosine"] <= 1
    assert server.stats().version == 4  # each stage's shard stepped once per batch


def test_a_synthetic_stage_needs_a_later_stage() -> None:
    spec = dataclasses.replace(spec_for("cnn"))
    with pytest.raises(ValueError, match="the last stage"):
        SyntheticStage(spec, (1, 28, 28), plan_stages(spec, (1, 28, 28), 2), 1)


def test_a_replica_of_cdni_stages_learns_in_process() -> None:
    """A PipelineWorker with the decoupled schedule over 2 stages (cDNI before the last):
    every batch steps both shards, the loss falls, and every true gradient was learned from."""
    from rltrain.supervised.replica import PipelineWorker
    from rltrain.supervised.synthetic import Decoupled
    from tests.conftest import tiny_dataset

    data = tiny_dataset(256, seed=1)
    shape = tuple(data.images.shape[1:])
    spec = spec_for("cnn", classes=int(data.labels.max()) + 1, max_epochs=4, steps_per_epoch=0)
    spec = dataclasses.replace(spec, server=ServerConfig(rule="async"))
    seq = layers(make_model(spec, shape))
    sizes = [sum(p.numel() for p in m.parameters()) for m in seq]
    cuts = split_points([1.0] * len(seq), sizes, 2)  # not timed: the same cut on every run
    torch.manual_seed(0)
    server = stage_server(spec, shape, cuts)
    first = SyntheticStage(spec, shape, cuts, 0, conditioned=True, hidden=32)
    stages = LocalStages([first, PipelineStage(spec, shape, cuts, 1)])
    worker = PipelineWorker(spec, data, stages, 4, Decoupled())
    report = worker.run([server.part(0), server.part(1)])
    losses = [loss for _, _, loss in report.log]
    assert report.steps == 4 * 256 // 16 and server.part(0).stats().version == report.steps
    assert sum(losses[-8:]) < sum(losses[:8])
    assert len(first.staleness) == report.steps * 4  # every micro-batch's, the last paid too


def test_synthetic_options_are_checked() -> None:
    from rltrain.supervised.config import BenchConfig, SupervisedModelConfig
    from rltrain.supervised.pipeline_mode import schedule, stage_args

    with pytest.raises(ValueError, match=r"model.synthetic=dni: needs model.stages >= 2"):
        BenchConfig(modes=("sync",), model=SupervisedModelConfig(synthetic="dni"))
    cfg = BenchConfig(modes=("async",), model=SupervisedModelConfig(stages=3, synthetic="cdni"))
    spec = spec_for("cnn")
    cuts = plan_stages(spec, (1, 28, 28), 3)
    kinds = [stage_args(cfg, spec, (1, 28, 28), cuts, s)[0] for s in range(3)]
    assert kinds == [SyntheticStage, SyntheticStage, PipelineStage]
    # link, cDNI, a linear M, M's Adam rate (model.synthetic_lr: explore114 found it fixed)
    assert stage_args(cfg, spec, (1, 28, 28), cuts, 0)[5:] == (0.0, True, 0, 0.001)
    fast = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, synthetic_lr=0.01))
    assert stage_args(fast, spec, (1, 28, 28), cuts, 0)[-1] == 0.01
    assert schedule(cfg).ahead == 2 and schedule(cfg).delay == 2  # the default delay
    with pytest.raises(ValueError, match=r"model.synthetic_delay=3: needs model.synthetic"):
        BenchConfig(modes=("async",), model=SupervisedModelConfig(stages=2, synthetic_delay=3))
    with pytest.raises(ValueError, match="synthetic_delay"):
        BenchConfig(modes=("async",), model=SupervisedModelConfig(stages=2, synthetic_delay=0))


def test_a_slow_link_delays_what_a_stage_sends_to_another() -> None:
    """model.link_ms: the sending stage waits; nothing waits for what stays in a stage."""
    import time

    from rltrain.supervised.config import BenchConfig, SupervisedModelConfig

    spec = spec_for("cnn")
    shape = (1, 28, 28)
    cuts = plan_stages(spec, shape, 2)
    first = PipelineStage(spec, shape, cuts, 0, link_s=0.05)
    last = PipelineStage(spec, shape, cuts, 1, link_s=0.05)
    x, y = torch.randn(4, *shape), torch.randint(0, 10, (4,))
    t = time.perf_counter()
    h = first.forward(0, x)  # to stage 1: delayed
    sent = time.perf_counter() - t
    last.forward(0, h)  # the last stage's output stays: not delayed
    t = time.perf_counter()
    g = last.loss(0, y, 1.0)  # back to stage 0: delayed
    back = time.perf_counter() - t
    assert first.backward(0, g) is None  # stage 0 sends nothing back
    assert sent >= 0.05 and back >= 0.05
    with pytest.raises(ValueError, match=r"model.link_ms=5: needs model.stages >= 2"):
        BenchConfig(modes=("sync",), model=SupervisedModelConfig(link_ms=5))


def test_a_factored_linear_model_has_the_toy_problems_optimum() -> None:
    """deep_linear: W3 W2 W1, the first two at the identity, so its map starts as the linear
    model's; its forward is that map, and the pipeline cuts it into its three layers."""
    from rltrain.supervised.models import DeepLinear, Linear, linear_map

    torch.manual_seed(0)
    model = DeepLinear(6, 1)
    x = torch.randn(5, 6)
    torch.testing.assert_close(model(x), x @ linear_map(model).view(1, 6).T)
    torch.testing.assert_close(linear_map(model), model.layers[2].weight.flatten())
    assert len([m for m in layers(model) if any(True for _ in m.parameters())]) == 3
    assert linear_map(Linear(6, 1)) is not None and linear_map(torch.nn.ReLU()) is None


@pytest.mark.slow
def test_cdni_stages_approach_the_toy_problems_optimum(run_bench) -> None:  # type: ignore[no-untyped-def]
    """The toy problem cut into 2 cDNI stages (the predictor conditioned on the real-valued
    target): the end-to-end map's distance to w* falls from 1 toward the unsplit model's."""
    _, summary = run_bench(
        """
modes: [baseline, async]
workers: 1
batch_size: 32
model: {name: deep_linear, stages: 2, synthetic: cdni}
data: {dataset: toy_quadratic, toy: {dim: 20, samples: 4000}}
budget: {max_seconds: 0, epochs: 3}
eval: {every_seconds: 0.5, distance_targets: [0.5]}
optimizer: {name: sgd, lr: 0.05}
"""
    )
    rows = {r["mode"]: r for r in summary["results"]}
    assert rows["baseline"]["final_distance"] < 0.2, rows["baseline"]
    assert rows["async"]["final_distance"] < 0.3, rows["async"]
    assert rows["async"]["synthetic"]["true_gradients"] > 0


def test_the_figures_of_three_stages_are_given_for_each_predictor_too() -> None:
    """explore114: with 3 stages the CSV and summary.json had one cosine for two predictors
    (0.206 and 0.061 apart, in TensorBoard only)."""
    from rltrain.supervised.synthetic import synthetic_means

    rows = [(0, 2, 0.2, 1.0), (0, 2, 0.4, 0.8), (1, 2, 0.0, 1.2)]
    means = synthetic_means(rows)
    assert means["cosine"] == 0.2 and means["true_gradients"] == 3
    assert means["cosine_stage0"] == 0.3 and means["cosine_stage1"] == 0.0
    assert means["relative_l2_stage0"] == 0.9 and means["staleness_stage1"] == 2
    assert "cosine_stage0" not in synthetic_means(rows[:2])  # one predictor: its figures
