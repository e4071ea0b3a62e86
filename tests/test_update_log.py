"""Reproducible asynchronous runs: a recording shard logs every push (server.record), and
`rltrain reapply` recomputes the gradients serially in the logged order and reproduces the
final parameters bit for bit; in one process (workers in threads) and in the process runtime's
processes (through Ray: test_extension_rule's Ray run records and reapplies)."""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from rltrain.cli import main
from rltrain.config import ConfigError, load_config
from rltrain.ps.config import OptimizerConfig, ServerConfig
from rltrain.ps.server import LocalServer
from rltrain.records import GradUpdate, Params, PushRecord, PushResult
from rltrain.rundir import write_config
from rltrain.supervised.config import BenchConfig, BudgetConfig, DataConfig, ToyConfig
from rltrain.supervised.modes import ModeRecord, ModeTrace, initial_params, shards, worker_specs
from rltrain.supervised.sharding import load_data
from rltrain.supervised.update_log import (
    CannotReapply,
    load_record,
    reapply_log,
    record_path,
    save_record,
)
from rltrain.supervised.worker import SupervisedWorker

TOY = DataConfig(dataset="toy_quadratic", toy=ToyConfig(dim=8, samples=600))


def toy_config(server: ServerConfig, optimizer: str = "adam", epochs: int = 2) -> BenchConfig:
    return BenchConfig(
        workers=3,
        batch_size=16,
        data=TOY,
        budget=BudgetConfig(max_seconds=0, epochs=epochs),
        optimizer=OptimizerConfig(name=optimizer, lr=0.05),
        server=dataclasses.replace(server, record=True),
    )


class Turns:
    """Lets three workers' server calls through one at a time, in turn (0, 1, 2, 0, ...;
    finished workers skipped): a fixed interleaving in which updates arrive stale."""

    def __init__(self, server: LocalServer, n: int) -> None:
        self.server, self.live, self.turn = server, list(range(n)), 0
        self.cond = threading.Condition()

    def view(self, i: int) -> Any:
        turns = self

        class View:  # the Server protocol, for worker i
            def pull(self, have: Params | None = None) -> Params:
                return turns.call(i, lambda: turns.server.pull(have))

            def push(self, update: GradUpdate) -> PushResult:
                return turns.call(i, lambda: turns.server.push(update))

            def exchange(self, update: GradUpdate, *args: Any) -> tuple[PushResult, Params]:
                return turns.call(i, lambda: turns.server.exchange(update, *args))

            def exchange_begin(self, update: GradUpdate, *args: Any) -> Callable[[], Any]:
                out = self.exchange(update, *args)
                return lambda: out

        return View()

    def call(self, i: int, fn: Callable[[], Any]) -> Any:
        with self.cond:
            self.cond.wait_for(lambda: self.live[self.turn % len(self.live)] == i)
            try:
                return fn()
            finally:
                self.turn = (self.live.index(i) + 1) % len(self.live)
                self.cond.notify_all()

    def done(self, i: int) -> None:
        with self.cond:
            at = self.live.index(i)
            current = self.live[self.turn % len(self.live)]
            self.live.remove(i)
            if self.live:
                self.turn = at if current == i else self.live.index(current)
            self.cond.notify_all()


def run_in_threads(
    cfg: BenchConfig, mode: str, in_turn: bool, short: bool = False
) -> tuple[list[PushRecord], Any]:
    """The mode's three workers in threads on one recording LocalServer: (log, final).
    ``short``: worker 2 does one epoch of the others' two, then leaves the barriers, as the
    bench tells the server of a worker whose share is done."""
    data = load_data(cfg.data)
    specs = worker_specs(cfg, mode, data, cfg.workers)
    if short:
        specs[2] = dataclasses.replace(specs[2], max_epochs=1)
    server = LocalServer(initial_params(cfg, data), cfg.optimizer, specs[0].server, 3, record=True)
    workers = [SupervisedWorker(s, d) for s, d in zip(specs, shards(cfg, 3), strict=True)]
    turns, errors = Turns(server, 3), []

    def work(i: int) -> None:
        try:
            workers[i].run(turns.view(i) if in_turn else server)
            if short:
                server.leave(i)
        except Exception as e:  # noqa: BLE001 - reported by the test below
            errors.append(e)
        finally:
            turns.done(i)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads) and not errors, errors
    return server.push_log(), server.pull().values


@pytest.mark.parametrize(
    ("staleness", "n_push", "pipeline"),
    [("none", 1, True), ("scale", 2, True), ("scale", 3, False), ("drop", 1, False)],
)
def test_an_interleaved_stale_async_run_reapplies_bit_for_bit(
    staleness: str, n_push: int, pipeline: bool
) -> None:
    bound = 1 if staleness == "drop" else ServerConfig.max_staleness  # (read by drop only)
    rule = ServerConfig(staleness=staleness, n_push=n_push, pipeline=pipeline, max_staleness=bound)
    cfg = toy_config(rule)
    log, final = run_in_threads(cfg, "async", in_turn=True)
    assert max(p.staleness for p in log) >= 2  # interleaved: three workers, updates stale
    assert all(len(p.batches) <= n_push for p in log)
    if n_push > 1:  # pulled between pushes: one update's batches came from several versions
        assert any(len({b.version for b in p.batches}) > 1 for p in log)
    # an update is as stale as its oldest gradient (it carried the newest: staleness said
    # 0.17 where its batches' was 0.83)
    assert all(p.version == min(b.version for b in p.batches) for p in log)
    if staleness == "drop":
        assert any(p.status == "dropped" for p in log)
    data = load_data(cfg.data)
    reapplied, mismatches = reapply_log(cfg, data, "async", log)
    assert torch.equal(reapplied, final) and mismatches == 0
    assert not torch.equal(reapplied, initial_params(cfg, data))  # it trained
    # the order is the point: the same updates in another order give other parameters
    swapped = [log[1], log[0], *log[2:]]
    assert not torch.equal(reapply_log(cfg, data, "async", swapped)[0], final)


@pytest.mark.parametrize("mode", ["sync", "soft_sync"])
def test_barrier_runs_in_free_threads_reapply_bit_for_bit(mode: str) -> None:
    # soft_sync's last update waits for a step that never comes: a short barrier timeout
    cfg = toy_config(ServerConfig(barrier_timeout_s=1.0), optimizer="momentum")
    log, final = run_in_threads(cfg, mode, in_turn=False)
    assert {p.status for p in log} >= {"accumulated", "applied"}
    reapplied, mismatches = reapply_log(cfg, load_data(cfg.data), mode, log)
    assert torch.equal(reapplied, final) and mismatches == 0


def test_a_barrier_run_that_a_worker_left_early_reapplies_bit_for_bit(tmp_path: Path) -> None:
    """chaos --seed 82 (runs 7, 36): a sync round that a worker whose share was done had
    left averaged the others', which the log did not say: reapplied, the rounds waited for
    3 and the parameters differed (max |diff| 0.003-0.006). The leave is logged now."""
    cfg = toy_config(ServerConfig(barrier_timeout_s=5.0), optimizer="momentum")
    log, final = run_in_threads(cfg, "sync", in_turn=False, short=True)
    left = [p for p in log if p.status == "left"]
    assert [p.worker_id for p in left][:1] == [2] and not left[0].batches
    assert log.index(left[0]) < len(log) - 3  # rounds of two followed
    reapplied, mismatches = reapply_log(cfg, load_data(cfg.data), "sync", log)
    assert torch.equal(reapplied, final) and mismatches == 0
    without = [p for p in log if p.status != "left"]  # as the log was: rounds wait for 3
    with pytest.raises(CannotReapply, match="which reapplying never reached"):
        reapply_log(cfg, load_data(cfg.data), "sync", without)
    # written as format 2 (an older rltrain says so rather than failing on "left"), read back
    run = tmp_path / "run"
    run.mkdir()
    write_config(run, cfg)
    save_record(run, ModeTrace("sync", 3, 0.0, 1.0, (), (), record=ModeRecord(tuple(log), final)))
    assert torch.load(record_path(run, "sync"), weights_only=True)["format"] == 2
    assert load_record(record_path(run, "sync")).log == tuple(log)


def recorded_run(tmp_path: Path) -> tuple[Path, BenchConfig]:
    """A run folder as `rltrain bench` leaves it, from an in-process async run."""
    cfg = dataclasses.replace(toy_config(ServerConfig(n_push=2)), modes=("async", "hogwild"))
    log, final = run_in_threads(cfg, "async", in_turn=True)
    run = tmp_path / "run"
    run.mkdir()
    write_config(run, cfg)
    trace = ModeTrace("async", 3, 0.0, 1.0, (), (), record=ModeRecord(tuple(log), final))
    save_record(run, trace)
    return run, cfg


def test_record_file_round_trip_and_the_reapply_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run, _ = recorded_run(tmp_path)
    path = record_path(run, "async")
    saved = load_record(path)
    state = torch.load(path, weights_only=True)
    assert saved.mode == "async" and saved.log and saved.final.equal(state["final"])
    assert main(["reapply", str(run)]) == 0
    out = capsys.readouterr().out
    assert "reapply hogwild: not reapplied: its workers update shared memory lock-free" in out
    assert f"reapply async: {len(saved.log)} pushes; final parameters equal (torch.equal)" in out
    assert main(["replay", str(run)]) == 0  # the old name, an alias
    assert "reapply async: " in capsys.readouterr().out
    # a final vector the log does not lead to: reported, exit code 1
    state["final"][0] += 1e-3
    torch.save(state, path)
    assert main(["reapply", str(run), "--mode", "async"]) == 1
    assert "final parameters DIFFERENT (max |diff|" in capsys.readouterr().out


def test_a_log_the_reapply_did_not_follow_fails_though_the_parameters_agree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two rows' versions swapped in a log gave "2 pushes decided otherwise than logged" and
    exit code 0, as the final parameters came out equal: a log not followed is no check."""
    from rltrain.supervised import update_log

    run, _ = recorded_run(tmp_path)
    real = update_log.reapply_mode

    def swapped(*args: Any) -> update_log.ReapplyResult:
        return dataclasses.replace(real(*args), mismatches=2)

    monkeypatch.setattr(update_log, "reapply_mode", swapped)
    assert main(["reapply", str(run), "--mode", "async"]) == 1
    out = capsys.readouterr().out
    assert "final parameters equal (torch.equal); but 2 pushes decided otherwise than" in out
    assert out.rstrip().endswith("NOT FOLLOWED")


def one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("rltrain: error: "), err
    return err


def test_reapply_refuses_with_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = str(tmp_path / "nope")
    err = one_line_error(capsys, ["reapply", missing])
    assert (
        "not a run directory (it does not exist); give a folder written by `rltrain bench`" in err
    )
    train = tmp_path / "train"
    train.mkdir()
    (train / "config.yaml").write_text("algo: {name: a3c}\nenv: {id: CartPole-v1}\n")
    err = one_line_error(capsys, ["reapply", str(train)])
    assert "train is an `rltrain train` run; reapply takes an `rltrain bench` run" in err
    unknown = tmp_path / "unknown_rule"  # a bench whose rule its script registered
    unknown.mkdir()
    (unknown / "config.yaml").write_text("modes: [async_elsewhere]\n")
    err = one_line_error(capsys, ["reapply", str(unknown)])
    assert "modes[0]='async_elsewhere'" in err and "needs that module in imports" in err
    plain = tmp_path / "plain"
    plain.mkdir()
    write_config(plain, dataclasses.replace(toy_config(ServerConfig()), server=ServerConfig()))
    err = one_line_error(capsys, ["reapply", str(plain)])
    assert "not recorded (server.record was false)" in err
    split = tmp_path / "split"  # (told to record, it would then be refused: explore114)
    split.mkdir()
    cfg = toy_config(ServerConfig())
    deep = dataclasses.replace(cfg.model, name="deep_linear", stages=2)
    split_cfg = dataclasses.replace(cfg, server=ServerConfig(), model=deep, modes=("async",))
    write_config(split, split_cfg)
    err = one_line_error(capsys, ["reapply", str(split)])
    assert err.rstrip().endswith("--set server.record=true --set model.stages=1")  # (else refused)
    run, cfg = recorded_run(tmp_path)
    err = one_line_error(capsys, ["reapply", str(run), "--mode", "hogwild"])
    assert "hogwild cannot be reapplied: its workers update shared memory lock-free" in err
    err = one_line_error(capsys, ["reapply", str(run), "--mode", "sync"])
    assert "mode sync was not run" in err
    for data, why in [(b"not a torch file", "not a complete torch.save"), (b"", "is empty")]:
        record_path(run, "async").write_bytes(data)
        err = one_line_error(capsys, ["reapply", str(run)])
        assert "not a readable record" in err and why in err and "weights_only" not in err
    record_path(run, "async").unlink()
    err = one_line_error(capsys, ["reapply", str(run)])
    assert "nothing to reapply" in err and "record/async.pt (the mode did not finish)" in err
    # summary.json has its results: the mode finished and its record was deleted since
    (run / "summary.json").write_text(json.dumps({"results": [{"mode": "async"}]}))
    err = one_line_error(capsys, ["reapply", str(run)])
    assert "async: no " in err and "though the mode finished (summary.json)" in err


def test_recording_needs_one_shard(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("server: {record: true, shards: 2}\n")
    with pytest.raises(ConfigError, match="server.record=true needs server.shards=1, got 2"):
        load_config(BenchConfig, path)


def test_rl_training_refuses_recording(tmp_path: Path) -> None:
    from rltrain.rl.config import TrainConfig

    path = tmp_path / "t.yaml"
    path.write_text("env: {id: CartPole-v1}\nstop: {max_seconds: 5}\nserver: {record: true}\n")
    with pytest.raises(ConfigError, match="server.record=true: only rltrain bench records"):
        load_config(TrainConfig, path)


@pytest.mark.slow
def test_a_recorded_bench_run_reapplies_bit_for_bit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], run_bench: Any
) -> None:
    # soft_sync reapplies in-process above; a shard recording on Ray, reapplied bit for
    # bit, is test_extension_rule's Ray run (the same shard code)
    modes = ("async", "sync")
    out, summary = run_bench(
        "runtime: {backend: process}\n"
        f"modes: [{', '.join(modes)}]\nworkers: 3\nbatch_size: 16\n"
        "data: {dataset: toy_quadratic, toy: {dim: 8, samples: 600}}\n"
        "budget: {max_seconds: 0, epochs: 3}\neval: {every_seconds: 0.5}\n"
        "optimizer: {name: sgd, lr: 0.1}\nserver: {record: true, barrier_timeout_s: 5}\n"
    )
    assert {r["mode"] for r in summary["results"]} == set(modes)
    log = load_record(record_path(out, "async")).log
    assert len({p.worker_id for p in log}) == 3 and max(p.staleness for p in log) >= 1
    capsys.readouterr()
    assert main(["reapply", str(out)]) == 0
    text = capsys.readouterr().out
    for mode in modes:
        assert f"reapply {mode}: " in text
    assert text.count("final parameters equal (torch.equal)") == len(modes), text


def test_reapply_reads_the_data_the_run_read_or_says_it_differs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A relative data.root is the bench's working folder's: reapply reads the root recorded
    (absolute), from any folder; data that changed since is named, not reported as parameters
    that came out DIFFERENT."""
    from conftest import write_mnist_like

    from rltrain.supervised.update_log import CannotReapply, data_print, load_recorded_data

    write_mnist_like(tmp_path / "data" / "mnist", 40, 10, seed=0)
    monkeypatch.chdir(tmp_path)
    cfg = dataclasses.replace(toy_config(ServerConfig()), data=DataConfig("mnist", root="data"))
    recorded = data_print(load_data(cfg.data), cfg.data.root)
    assert recorded["root"] == str(tmp_path / "data") and recorded["train"] == 40
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # data/ is not here
    assert len(load_recorded_data(cfg, recorded).train) == 40
    write_mnist_like(tmp_path / "data" / "mnist", 40, 10, seed=1)  # the same sizes, new images
    with pytest.raises(CannotReapply, match="is not the data the run trained on"):
        load_recorded_data(cfg, recorded)


def test_reapply_from_another_folder_replays_the_workers_on_the_recorded_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """explore100: the driver's check read the recorded root, but the replayed workers read
    the run's relative data.root from the current folder: from another folder holding other
    data of the same sizes, "final parameters DIFFERENT" (exit 1). An older record, which
    names no root, still reapplies from the run's working folder."""
    from conftest import write_mnist_like

    from rltrain.supervised.update_log import data_print

    write_mnist_like(tmp_path / "data" / "mnist", 24, 8, seed=0)
    monkeypatch.chdir(tmp_path)
    cfg = dataclasses.replace(
        toy_config(ServerConfig(n_push=2), epochs=1),
        modes=("async",),
        batch_size=4,
        data=DataConfig("mnist", root="data", download=False),
    )
    log, final = run_in_threads(cfg, "async", in_turn=True)
    run = tmp_path / "run"
    run.mkdir()
    write_config(run, cfg)  # root: data, as an rltrain before explore100 wrote it
    trace = ModeTrace("async", 3, 0.0, 1.0, (), (), record=ModeRecord(tuple(log), final))
    save_record(run, trace, data_print(load_data(cfg.data), cfg.data.root))
    other = tmp_path / "other"
    write_mnist_like(other / "data" / "mnist", 24, 8, seed=7)  # the same sizes, other images
    monkeypatch.chdir(other)
    assert main(["reapply", str(run)]) == 0
    assert f"reapply async: {len(log)} pushes; final parameters equal" in capsys.readouterr().out
    save_record(run, trace)  # no data print: read at data.root, from the working folder
    monkeypatch.chdir(tmp_path)
    assert main(["reapply", str(run)]) == 0
    assert "final parameters equal" in capsys.readouterr().out
