"""server.compression: the codecs, error feedback, bytes counted, and learning through them."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from rltrain.config import ConfigError, load_config
from rltrain.ps.compression import ErrorFeedback, compress, decompress
from rltrain.ps.config import OptimizerConfig, ServerConfig
from rltrain.ps.server import LocalServer
from rltrain.ps.shard import ParameterShard
from rltrain.records import GradUpdate
from rltrain.supervised.config import BenchConfig, BudgetConfig, DataConfig, ToyConfig
from rltrain.supervised.modes import initial_params, worker_specs
from rltrain.supervised.sharding import load_data
from rltrain.supervised.toys import relative_distance
from rltrain.supervised.worker import SupervisedWorker

V = torch.randn(1000, generator=torch.Generator().manual_seed(0))


def test_each_codec_round_trips_within_its_precision_and_counts_its_bytes() -> None:
    fp16 = compress("fp16", V)
    assert fp16.nbytes == 2000
    torch.testing.assert_close(decompress(fp16), V, rtol=1e-3, atol=1e-3)
    int8 = compress("int8", V)
    assert int8.nbytes == 1000
    assert float((decompress(int8) - V).abs().max()) <= int8.scale / 2 + 1e-6
    topk = compress("topk", V, topk_fraction=0.05)
    assert topk.nbytes == 50 * 8  # int32 index + float32 value
    out = decompress(topk)
    kept = out != 0
    assert int(kept.sum()) == 50
    assert float(V[kept].abs().min()) >= float(V[~kept].abs().max())  # the largest ones
    sign = compress("sign", V)
    assert sign.nbytes == math.ceil(1000 / 8)
    d = decompress(sign)
    assert torch.equal(torch.sign(d), torch.where(V >= 0, 1.0, -1.0))
    assert float(d.abs().mean()) == pytest.approx(float(V.abs().mean()), rel=1e-5)


@pytest.mark.parametrize("kind", ["int8", "topk", "sign"])
def test_error_feedback_loses_nothing_for_good(kind: str) -> None:
    """sum of what was sent + what is still held = sum of what was given, at every push."""
    ef = ErrorFeedback(kind, topk_fraction=0.02)
    g = torch.Generator().manual_seed(1)
    given = torch.zeros(500)
    sent = torch.zeros(500)
    for _ in range(30):
        v = torch.randn(500, generator=g)
        given += v
        sent += decompress(ef(worker=3, shard=0, v=v))
        torch.testing.assert_close(sent + ef.residual[(3, 0)], given, rtol=1e-4, atol=1e-4)


def test_a_compressed_push_is_applied_decompressed_and_counted() -> None:
    rule = ServerConfig(rule="async", compression="topk", topk_fraction=0.1, shards=2)
    server = LocalServer(torch.zeros(100), OptimizerConfig(name="sgd", lr=1.0), rule, 1)
    grad = torch.arange(100, dtype=torch.float32)
    server.push(GradUpdate(0, 0, grad, 1, {}))
    params = server.pull().values
    # SGD, lr 1: minus the top 10% of each shard's slice; the rest waits in the residual
    assert int((params != 0).sum()) == 10
    assert float(params[99]) == -99.0 and float(params[0]) == 0.0
    stats = server.stats()
    assert stats.bytes_pushed == 10 * 8 and stats.bytes_pulled == 100 * 4


TOY = ToyConfig(dim=20, samples=800, condition=10.0, noise=0.0, seed=2)


@pytest.mark.parametrize("kind", ["none", "fp16", "int8", "topk", "sign"])
def test_async_sgd_learns_through_every_compression(kind: str) -> None:
    cfg = BenchConfig(
        modes=("async",),
        workers=1,
        batch_size=16,
        data=DataConfig(dataset="toy_quadratic", toy=TOY),
        optimizer=OptimizerConfig(name="sgd", lr=0.2),
        server=ServerConfig(compression=kind, topk_fraction=0.25, pipeline=False),
        budget=BudgetConfig(max_seconds=0, epochs=40),
    )
    data = load_data(cfg.data)
    spec = worker_specs(cfg, "async", data, 1)[0]
    start = initial_params(cfg, data)
    server = LocalServer(start, cfg.optimizer, spec.server, 1)
    SupervisedWorker(spec, data.train).run(server)
    dist = relative_distance(server.pull().values, data.optimum, start)
    assert dist < 0.02, (kind, dist)
    pushes = server.stats().applied
    per_push = server.stats().bytes_pushed / pushes
    assert per_push == {"none": 80, "fp16": 40, "int8": 20, "topk": 40, "sign": 3}[kind]


def test_compression_is_refused_with_the_average_mode(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("modes: [async, average]\nserver: {compression: sign}\n")
    with pytest.raises(ConfigError, match="server.compression=sign: not with mode average"):
        load_config(BenchConfig, path)
    path.write_text("server: {compression: zip}\n")
    with pytest.raises(ConfigError, match="server.compression"):
        load_config(BenchConfig, path)


def test_a_non_finite_push_is_sent_as_is_and_spoils_no_later_push() -> None:
    ef = ErrorFeedback("int8", 0.01)
    ef(0, 0, torch.ones(4))
    held = ef.residual[(0, 0)].clone()
    bad = ef(0, 0, torch.tensor([1.0, float("nan"), 2.0, 3.0]))
    assert isinstance(bad, torch.Tensor) and bool(bad.isnan().any())  # the shard refuses it
    assert torch.equal(ef.residual[(0, 0)], held)
    assert bool(torch.isfinite(decompress(ef(0, 0, torch.ones(4)))).all())


def test_server_options_no_mode_uses_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    for text, message in {
        "modes: [allreduce]\nserver: {compression: int8}\n": "no mode in modes pushes gradients",
        "modes: [sync]\noptimizer: {name: momentum}\nserver: {momentum_correction: true}\n": (
            "applies to async modes"
        ),
        "modes: [async]\nserver: {record: true, compression: fp16}\n": "reapplying does not follow",
        "modes: [sync]\nwarm_start: {seconds: 10}\nbudget: {max_seconds: 10}\n": (
            "the other workers would never join"
        ),
        # soft_sync's K, average's period, async's n_push, async_drop's bound: silently unused
        "modes: [sync, async]\nserver: {k: 2}\n": (
            r"^server.k=2: read by soft_sync only, and modes has none of them \(sync, async\); "
            r"add one to modes, or leave server.k at its default \(0\)$"
        ),
        "modes: [sync]\nserver: {average_every: 5}\n": "server.average_every=5: read by average",
        "modes: [sync]\nserver: {n_push: 4}\n": "server.n_push=4: read by async, async_scale",
        "modes: [hogwild]\nserver: {n_push: 4, n_fetch: 2}\n": None,  # (Downpour's loop)
        "modes: [hogwild]\nserver: {pipeline: false}\n": "server.pipeline=false: read by async",
        "modes: [async]\nserver: {pipeline: false}\n": None,  # (async reads it)
        "modes: [sync]\nserver: {pipeline: false}\n": "server.pipeline=false: read by async",
        "modes: [async_scale]\nserver: {max_staleness: 2}\n": "server.max_staleness=2: read by",
        "modes: [async]\nserver: {staleness: drop, max_staleness: 2}\n": None,
        "modes: [baseline]\nmodel: {stages: 2}\n": "model.stages=2: splits the model of the",
        # nothing recorded (it pointed at a record/ folder that did not exist)
        "modes: [average, hogwild]\nserver: {record: true}\n": (
            "server.record=true: read by the server modes that push gradients"
        ),
        "modes: [sync, average]\nserver: {record: true}\n": None,
        # keys of parts nothing in the run reads: refused, not ignored
        "modes: [async]\nsandblaster: {portions: 4}\n": (
            r"^sandblaster.portions=4: read only with mode sandblaster in modes, which this run "
            r"has not; leave sandblaster.portions at its default \(16\), or run with mode "
            r"sandblaster in modes$"
        ),
        "modes: [async]\nbaseline_threads: 2\n": "baseline_threads=2: read only with mode baseline",
        "modes: [async]\nmodel: {micro_batches: 8}\n": "read only with model.stages >= 2",
        "modes: [async]\nmodel: {stages: 2, micro_batches: 8}\n": None,
        "modes: [async]\nmodel: {synthetic_hidden: 8}\n": "read only with model.synthetic dni",
        "modes: [async]\nmodel: {synthetic_lr: 0.01}\n": "synthetic_lr=0.01: read only with",
        "modes: [baseline]\nbaseline_threads: 2\n": None,
    }.items():
        path.write_text(text)
        if message is None:
            load_config(BenchConfig, path)
            continue
        with pytest.raises(ConfigError, match=message):
            load_config(BenchConfig, path)


def test_a_compressed_push_is_looked_at_again_though_marked_finite() -> None:
    """fp16 overflows above 65,504: the values the shard steps with are the decompressed ones,
    so a sender's GradUpdate.finite (about the values before compression) does not carry over."""
    shard = ParameterShard(torch.zeros(3), OptimizerConfig(name="sgd", lr=1.0), ServerConfig(), 1)
    big = compress("fp16", torch.tensor([1e6, 0.0, 0.0]))
    r = shard.push(GradUpdate(0, 0, big, 1, finite=True))  # type: ignore[arg-type]
    assert r.status == "rejected" and "non-finite" in r.reason
    assert torch.equal(shard.pull().values, torch.zeros(3))
