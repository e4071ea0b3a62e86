"""Model parallelism (GPipe): the model's layers over K stages, micro-batches through them.

The gradients of the split model equal the unsplit model's; with a server whose shards are
cut at the stage boundaries, a pipelined replica steps exactly as an unsplit worker; and the
bench runs it through real Ray stage processes.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from rltrain.config import ConfigError
from rltrain.ps.config import OptimizerConfig, ServerConfig
from rltrain.ps.server import LocalServer
from rltrain.supervised.config import BenchConfig, DataConfig, SupervisedModelConfig
from rltrain.supervised.pipeline import (
    LocalStages,
    PipelineStage,
    PipelineWorker,
    gpipe,
    plan_stages,
    split_points,
    stage_sizes,
)
from rltrain.supervised.worker import SupervisedWorker, WorkerSpec, flat_grad, make_model, objective
from tests.conftest import tiny_dataset


def spec_for(model: str, classes: int = 10, **kw: object) -> WorkerSpec:
    base = WorkerSpec(
        worker_id=0,
        rule=ServerConfig(rule="sync"),
        optimizer=OptimizerConfig(name="sgd", lr=0.1),
        model=model,
        num_classes=classes,
        mean=(0.5,),
        std=(0.25,),
        batch_size=16,
        max_epochs=1,
        max_seconds=0,
        seed=3,
        steps_per_epoch=4,
    )
    return dataclasses.replace(base, **kw)


@pytest.mark.parametrize(
    ("model", "shape", "k"),
    [("cnn", (1, 28, 28), 2), ("cnn", (1, 28, 28), 4), ("resnet", (3, 16, 16), 3)],
)
def test_split_gradients_equal_the_unsplit_models(
    model: str, shape: tuple[int, ...], k: int
) -> None:
    spec = spec_for(model, mean=(0.5,) * shape[0], std=(0.25,) * shape[0])
    torch.manual_seed(0)
    x, y = torch.randn(16, *shape), torch.randint(0, 10, (16,))
    whole = make_model(spec, shape)
    objective(spec, whole, x, y).backward()
    cuts = plan_stages(spec, shape, k)
    stages = [PipelineStage(spec, shape, cuts, s) for s in range(k)]
    gpipe(LocalStages(stages), x, y, micro=4)  # 4 micro-batches of 4
    grads = [st.grad() for st in stages]
    torch.testing.assert_close(
        torch.cat([g for g, _ in grads]), flat_grad(whole), atol=1e-6, rtol=0
    )
    with torch.no_grad():
        full = float(objective(spec, whole, x, y))
    assert grads[-1][1] == pytest.approx(full, abs=1e-5)  # the loss, summed over micro-batches
    assert sum(s.values().numel() for s in stages) == flat_grad(whole).numel()


def test_stages_are_cut_to_balance_the_time_and_each_holds_parameters() -> None:
    # the slowest stage as fast as can be; a parameter-free layer stays with the one before
    assert split_points([1, 0.1, 1, 0.1, 1], [10, 0, 10, 0, 10], 3) == [0, 2, 4, 5]
    assert split_points([5, 1, 1, 1], [100, 1, 1, 1], 2) == [0, 1, 4]
    # the costly first layer alone cannot balance, but a stage needs parameters to hold
    assert split_points([0.1, 9, 1], [0, 0, 5], 1) == [0, 3]
    cuts = plan_stages(spec_for("cnn"), (1, 28, 28), 2)
    assert len(cuts) == 3 and sum(stage_sizes(spec_for("cnn"), (1, 28, 28), cuts)) > 100_000
    with pytest.raises(ConfigError, match=r"model.stages=5: the model has 4 layer\(s\)"):
        plan_stages(spec_for("cnn"), (1, 28, 28), 5)


def test_a_pipelined_replica_steps_as_an_unsplit_worker() -> None:
    """One replica, 2 stages on a 2-shard server cut at the stage boundary, against one
    SupervisedWorker on a 1-shard server: equal parameters after every step of an epoch."""
    data = tiny_dataset(128, seed=1)
    shape = tuple(data.images.shape[1:])
    spec = spec_for("cnn", classes=int(data.labels.max()) + 1)
    init = torch.nn.utils.parameters_to_vector(make_model(spec, shape).parameters()).detach()
    opt, rule = OptimizerConfig(name="sgd", lr=0.1), ServerConfig(rule="sync")
    ref = LocalServer(init.clone(), opt, rule, 1)
    SupervisedWorker(spec, data).run(ref)
    cuts = plan_stages(spec, shape, 2)
    sizes = stage_sizes(spec, shape, cuts)
    split = LocalServer(init.clone(), opt, dataclasses.replace(rule, shards=2), 1, sizes=sizes)
    stages = LocalStages([PipelineStage(spec, shape, cuts, s) for s in range(2)])
    report = PipelineWorker(spec, data, stages, micro=4).run([split.part(0), split.part(1)])
    assert report.steps == 4 and ref.stats().version == 4
    torch.testing.assert_close(split.pull().values, ref.pull().values, atol=1e-6, rtol=0)


def test_param_layers_count_the_layers_that_can_be_cut() -> None:
    from rltrain.supervised.models import PARAM_LAYERS, build_model
    from rltrain.supervised.pipeline import layers

    for name, shape in (("cnn", (1, 28, 28)), ("resnet", (3, 32, 32)), ("linear", (10,))):
        seq = layers(build_model(name, shape, 10))
        assert sum(any(True for _ in m.parameters()) for m in seq) == PARAM_LAYERS[name]


def test_pipeline_options_are_checked() -> None:
    with pytest.raises(ValueError, match=r"model.stages=2: runs the modes sync, async .* not"):
        BenchConfig(modes=("sync", "hogwild"), model=SupervisedModelConfig(stages=2))
    with pytest.raises(ValueError, match=r"model.stages=2: not with server.shards"):
        BenchConfig(
            modes=("sync",), model=SupervisedModelConfig(stages=2), server=ServerConfig(shards=2)
        )
    with pytest.raises(ValueError, match=r"model.stages=6: model resnet has 5 layer"):
        BenchConfig(
            modes=("sync",),
            model=SupervisedModelConfig(stages=6),
            data=DataConfig(dataset="cifar10"),
        )
    with pytest.raises(ValueError, match=r"micro_batches=99 exceeds batch_size=64"):
        BenchConfig(modes=("sync",), model=SupervisedModelConfig(stages=2, micro_batches=99))


@pytest.mark.slow
def test_bench_runs_stages_as_ray_processes(run_bench, tiny_root: Path) -> None:  # type: ignore[no-untyped-def]
    _, summary = run_bench(
        f"""
modes: [baseline, async]
workers: 2
batch_size: 32
model: {{name: cnn, stages: 2, micro_batches: 4}}
data: {{dataset: fashion_mnist, root: {tiny_root}}}
budget: {{epochs: 3}}
eval: {{every_seconds: 0.5, targets: [0.6]}}
optimizer: {{name: sgd, lr: 0.05}}
"""
    )
    rows = {r["mode"]: r for r in summary["results"]}
    # 2 replicas x 2 stages: the samples of 3 epochs, learned (one server mode: each starts
    # its stage processes anew, 10 s on 2 cores; sync's barriers are tested in-process above)
    assert rows["async"]["samples"] == rows["baseline"]["samples"] // 32 * 32
    assert rows["async"]["final_accuracy"] > 0.6, rows["async"]
