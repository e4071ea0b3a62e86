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
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from rltrain.config import ConfigError
from rltrain.ps.config import OptimizerConfig, ServerConfig
from rltrain.ps.server import LocalServer
from rltrain.supervised.config import BenchConfig, DataConfig, SupervisedModelConfig
from rltrain.supervised.pipeline import (
    LocalStages,
    PipelineStage,
    gpipe,
    plan_stages,
    split_points,
    stage_sizes,
)
from rltrain.supervised.replica import PipelineWorker
from rltrain.supervised.worker import SupervisedWorker, WorkerSpec, flat_grad, make_model, objective
from tests.conftest import tiny_dataset


def spec_for(model: str, classes: int = 10, **kw: object) -> WorkerSpec:
    base = WorkerSpec(
        worker_id=0,
        server=ServerConfig(rule="sync"),
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
    with pytest.raises(ValueError, match=r"model.stages=2: needs server.shards=1 "):
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
@pytest.mark.parametrize(
    "backend,synthetic",
    [pytest.param("ray", "none", marks=pytest.mark.shared_ray), ("process", "dni")],
)
def test_bench_runs_stages_as_processes(
    run_bench, tiny_root: Path, backend: str, synthetic: str
) -> None:  # type: ignore[no-untyped-def]
    """Ray passes activations and gradients from stage to stage; the process runtime's lead,
    a thread of the bench, relays them in each stage's order (FutureStages). (One replica
    on Ray: its processes' start-up is most of the test's time; two replicas on processes.)"""
    workers = 1 if backend == "ray" else 2
    run_dir, summary = run_bench(
        f"""
modes: [async]
workers: {workers}
batch_size: 32
model: {{name: cnn, stages: 2, micro_batches: 4, synthetic: {synthetic}}}
runtime: {{backend: {backend}}}
data: {{dataset: fashion_mnist, root: {tiny_root}}}
budget: {{epochs: 2}}
eval: {{every_seconds: 0.5, targets: [0.6]}}
optimizer: {{name: sgd, lr: 0.05}}
"""
    )
    rows = {r["mode"]: r for r in summary["results"]}
    # replicas x 2 stages: every sample of 2 epochs (tiny_root's 640 training images, split
    # among the replicas), learned (one server mode: each starts its stage processes anew,
    # seconds on 2 cores; sync's barriers are tested in-process above)
    assert rows["async"]["samples"] == 2 * 640
    assert rows["async"]["final_accuracy"] > 0.6, rows["async"]
    counted = rows["async"]["synthetic"]
    if synthetic == "none":
        assert counted == {}
        return
    # every micro-batch's true gradient reached stage 0's predictor, once, 2 batches later
    # (model.synthetic_delay), but each replica's last batch's, paid at the end after one
    batches = rows["async"]["samples"] // 32  # 20 a replica
    assert counted["true_gradients"] == batches * 4
    assert counted["staleness"] == pytest.approx(2 - 2 / batches, abs=1e-3)
    assert -1 <= counted["cosine"] <= 1
    acc = EventAccumulator(str(run_dir / "tb" / "async"), size_guidance={"scalars": 0})
    acc.Reload()
    assert {"synthetic/stage0/cosine", "synthetic/stage0/staleness"} <= set(acc.Tags()["scalars"])
    # on the other tags' time base (the bench's start + training seconds), not the moment written
    cosine, accuracy = (
        acc.Scalars("synthetic/stage0/cosine"),
        acc.Scalars("supervised/test_accuracy"),
    )
    assert accuracy[0].wall_time <= cosine[-1].wall_time <= accuracy[-1].wall_time


@pytest.mark.parametrize("synthetic", [False, True])
def test_a_stage_killed_mid_run_is_restarted_from_its_shard(
    synthetic: bool, tmp_path: Path
) -> None:
    """Stage processes on the process runtime, the lead here: stage 1 dies mid-batch; it is
    restarted (its constructor again), every stage forgets the batch in flight and pulls its
    slice from its shard, and the replica trains on: one batch lost, one restart counted."""
    from rltrain.runtime import process
    from rltrain.supervised.synthetic import Decoupled, SyntheticStage

    data = tiny_dataset(128, seed=1)
    shape = tuple(data.images.shape[1:])
    spec = spec_for("cnn", classes=int(data.labels.max()) + 1, max_epochs=2)
    init = torch.nn.utils.parameters_to_vector(make_model(spec, shape).parameters()).detach()
    cuts = plan_stages(spec, shape, 2)
    rule = ServerConfig(rule="async", shards=2)
    server = LocalServer(
        init, OptimizerConfig(name="sgd", lr=0.1), rule, 1, sizes=stage_sizes(spec, shape, cuts)
    )
    first = (
        (SyntheticStage, spec, shape, cuts, 0)
        if synthetic
        else (PipelineStage, spec, shape, cuts, 0)
    )
    stages = [
        process.Remote(*first, role="worker", max_restarts=1),
        process.Remote(
            OnceDyingStage,
            spec,
            shape,
            cuts,
            1,
            str(tmp_path / "died"),
            role="worker",
            max_restarts=1,
        ),
    ]
    try:
        schedule = Decoupled() if synthetic else None
        lead = PipelineWorker(spec, data, process.stages_of(stages), 4, schedule)
        report = lead.run([server.part(0), server.part(1)])
        assert (tmp_path / "died").exists() and report.restarts == 1
        assert stages[1].restarts == 1
        # 2 epochs of 4 batches, those in flight lost: GPipe's one; the decoupled lead's up
        # to model.synthetic_delay + 1 (it runs that far ahead of the exchanges)
        assert report.lost_batches == 1 if not synthetic else 1 <= report.lost_batches <= 3
        assert report.steps == 2 * 4 - report.lost_batches
        # GPipe: a lost batch pushed nothing; a decoupled stage 0 may have pushed its slice
        version = server.stats().version  # (shard 0's)
        assert version == report.steps if not synthetic else report.steps <= version <= 8
    finally:
        for r in stages:
            r.kill()
        process.shutdown()


@pytest.mark.slow
@pytest.mark.shared_ray
def test_a_ray_stage_killed_mid_run_is_restarted_from_its_shard(tmp_path: Path) -> None:
    """On Ray the calls that took a dead stage's results fail as PeerLost (Ray hands results
    from stage to stage itself; GPipe's lead waits on stage 0's backward, fed by the killed
    last stage): the lead recovers from them as from the death itself, and Ray's restarted
    stage pulls its slice from its shard; one restart, one batch lost, the replica trains on."""
    import sys

    import ray

    from rltrain.runtime import ray as runtime
    from rltrain.runtime.config import RuntimeConfig

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # (OnceDyingStage)
    data = tiny_dataset(128, seed=1)
    shape = tuple(data.images.shape[1:])
    spec = spec_for("cnn", classes=int(data.labels.max()) + 1, max_epochs=2)
    init = torch.nn.utils.parameters_to_vector(make_model(spec, shape).parameters()).detach()
    cuts = plan_stages(spec, shape, 2)
    server = runtime.start_server(
        init,
        OptimizerConfig(name="sgd", lr=0.1),
        ServerConfig(rule="async", shards=2),
        1,
        RuntimeConfig(),
        sizes=stage_sizes(spec, shape, cuts),
    )
    marker = str(tmp_path / "died")
    stages = [
        runtime.Remote(PipelineStage, spec, shape, cuts, 0, role="worker", max_restarts=1),
        runtime.Remote(OnceDyingStage, spec, shape, cuts, 1, marker, max_restarts=1),
    ]
    try:
        lead = PipelineWorker(spec, data, runtime.stages_of(stages), 4)  # GPipe's schedule
        report = lead.run([server.part(0), server.part(1)])
        assert (tmp_path / "died").exists() and report.restarts == 1
        assert report.lost_batches == 1 and report.steps == 2 * 4 - 1
    finally:
        for r in stages:
            r.kill()
        server.kill()
        ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def stage_server(spec: WorkerSpec, shape: tuple[int, ...], cuts: list[int]) -> LocalServer:
    """An async server (SGD 0.1) over the model's initial parameters, a shard per stage."""
    init = torch.nn.utils.parameters_to_vector(make_model(spec, shape).parameters()).detach()
    rule = ServerConfig(rule="async", shards=len(cuts) - 1)
    sizes = stage_sizes(spec, shape, cuts)
    return LocalServer(init, OptimizerConfig(name="sgd", lr=0.1), rule, 1, sizes=sizes)


def test_a_stage_refuses_to_push_a_broken_batch() -> None:
    """A micro-batch forward without its backward (a later stage was lost), or a restarted
    stage not connected yet: the exchange is refused and the shard does not step."""
    from rltrain.supervised.pipeline import BatchLost

    spec = spec_for("cnn")
    shape = (1, 28, 28)
    cuts = plan_stages(spec, shape, 2)
    server = stage_server(spec, shape, cuts)
    stage = PipelineStage(spec, shape, cuts, 0)
    with pytest.raises(BatchLost, match="not connected"):
        stage.exchange(0, 4, 1.0)
    stage.connect(server.part(0))
    stage.forward(0, torch.randn(4, *shape))
    with pytest.raises(BatchLost, match="1 micro-batch"):
        stage.exchange(0, 4, 1.0)
    assert server.part(0).stats().version == 0
    stage.reset()  # the lead's recovery: the next batch goes through
    out = stage.forward(1, torch.randn(4, *shape))
    stage.backward(1, torch.ones_like(out))
    assert stage.exchange(0, 4, 1.0)[0] == 1


class OnceDyingStage(PipelineStage):
    """A last stage whose first incarnation's process is killed in its 3rd batch's loss
    (``marker``, a file, tells the restarted one it already died)."""

    def __init__(
        self, spec: WorkerSpec, shape: tuple[int, ...], cuts: list[int], index: int, marker: str
    ) -> None:
        super().__init__(spec, shape, cuts, index)
        self.marker, self.losses = Path(marker), 0

    def loss(self, mb: int, y: torch.Tensor, weight: float) -> object:
        import os
        import signal

        self.losses += 1
        if self.losses == 2 * 4 + 1 and not self.marker.exists():  # batch 3, micro-batch 1
            self.marker.touch()
            os.kill(os.getpid(), signal.SIGKILL)
        return super().loss(mb, y, weight)


def test_future_stages_relay_results_in_each_stages_order_over_a_slow_link() -> None:
    """FutureStages (the process runtime's) on thread remotes: a call waits for the futures
    among its arguments, and the calls to one stage run in the order issued even when a later
    one's arguments are ready first; a link delays hops between stages, not the math."""
    import threading

    from rltrain.runtime.local import Remote as ThreadRemote
    from rltrain.runtime.process.stages import FutureStages

    class Log:
        def __init__(self) -> None:
            self.seen: list[str] = []

        def slow(self, v: int) -> int:
            threading.Event().wait(0.2)
            return v + 1

        def add(self, tag: str, v: int) -> int:
            self.seen.append(tag)
            return v * 10

        def log(self) -> list[str]:
            return self.seen

    for link in (0.0, 0.05):
        a, b = ThreadRemote(Log), ThreadRemote(Log)
        st = FutureStages([a, b], link)
        first = st.call(1, "add", "first", st.call(0, "slow", 1))  # waits on stage 0
        second = st.call(1, "add", "second", 5)  # ready at once, but issued after
        assert st.get([first, second]) == [20, 50]
        assert st.get([st.call(1, "log")]) == [["first", "second"]]
        a.kill()
        b.kill()


def test_a_slow_link_keeps_one_timer_a_stage() -> None:
    """Calls waiting for a result still on the link (model.link_ms on the process runtime)
    are pumped again by one timer a stage, not by a thread per waiting pump, and run in
    order once it has crossed."""
    import concurrent.futures as cf
    import threading
    import time

    from rltrain.runtime.process.stages import FutureStages

    class Echo:
        def call(self, method: str, *args: object) -> cf.Future:
            f: cf.Future = cf.Future()
            f.set_result((method, args))
            return f

    stages = FutureStages([Echo(), Echo()], link_s=0.2)
    start = time.monotonic()
    made = stages.call(0, "forward", 1)
    calls = [stages.call(1, "loss", made, i) for i in range(20)]
    timers = [t for t in threading.enumerate() if isinstance(t, threading.Timer) and t.is_alive()]
    assert len(timers) == 1
    results = stages.get(calls)
    assert time.monotonic() - start >= 0.2
    assert [r[1][1] for r in results] == list(range(20))


def test_the_toys_one_layer_refusal_names_deep_linear_where_it_could_be_cut() -> None:
    """explore114: the refusal gave no way to a model that splits; review89: 4 stages of
    deep_linear's 3 layers are refused too, so no hint there."""
    from rltrain.config import ConfigError, load_config
    from rltrain.supervised.config import BenchConfig

    toy = Path(__file__).resolve().parents[1] / "configs" / "bench_toy.yaml"
    for stages, hint in ((2, True), (3, True), (4, False)):
        with pytest.raises(ConfigError) as e:
            load_config(BenchConfig, toy, ["modes=[sync]", f"model.stages={stages}"])
        assert ("model.name=deep_linear is the same map in 3 layers" in str(e.value)) is hint
