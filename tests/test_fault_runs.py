"""Real runs that lose real processes: killed by process id (SIGKILL) mid-run, on Ray and on
the process runtime.

RL (impala on CartPole): an actor, a learner and the server shard are killed; the run finishes,
the counters show each fault, and the shard restore loses no more than the updates since the
last checkpoint. Supervised (tiny data, the process runtime): a worker is killed under sync
(waiting for the restart, or continuing without it) and soft_sync (never waiting). On the
process runtime the learner and the shards are part of the trainer's process: a shard's kill
kills the learner (RL), or is skipped and said so (bench).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import interrupt_when

from rltrain.checkpoint import latest_checkpoint
from rltrain.cli import main

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
RESTORED = re.compile(
    r"restored from checkpoint ckpt-\d+\.pt \(version ([\d,]+), \d+ s old\); ([\d,]+) updates "
    r"lost \(last version seen ([\d,]+)\)"
)


def events(*items: str) -> str:
    return "faults.events=[" + ", ".join(items) + "]"


@pytest.mark.parametrize("backend", ["ray", "process"])
def test_impala_survives_losing_an_actor_a_learner_and_the_server_shard(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], backend: str
) -> None:
    run_dir = tmp_path / "run"
    # the process runtime's learner dies with its shard each time: two restores
    restores = 1 if backend == "ray" else 2
    argv = [
        "train",
        str(ROOT / "configs" / "cartpole_impala.yaml"),
        "--run-dir",
        str(run_dir),
        "--set",
        "stop.mean_return=null",
        "--set",
        "stop.max_seconds=120",  # a cap: the run is stopped once every fault is behind it
        "--set",
        "checkpoint.every_seconds=1",
        "--set",
        events(
            "{action: kill, target: actor, index: 0, at: 2}",
            "{action: kill, target: learner, index: 0, at: 4}",
            # on the process runtime the learner's process holds the shard: its kill
            # restarts the learner too, and both come back from the shard's restore point
            "{action: kill, target: shard, index: 0, at: 6}",
        ),
    ]
    restored_at: list[int] = []  # the shard's version in the first checkpoint after them all

    def trained_on_after_every_fault(ckpt: dict[str, Any]) -> bool:
        f, version = ckpt["faults"], ckpt["shards"][0]["version"]
        if (
            f["injected"] < 3
            or f["shard_restores"] < restores
            or not (f["actor_restarts"] and f["learner_restarts"])
        ):
            return False
        restored_at[:1] = restored_at[:1] or [version]
        return version >= restored_at[0] + 20  # and 20 updates more since

    with interrupt_when(run_dir, trained_on_after_every_fault):
        code = main([*argv, "--set", f"runtime.backend={backend}"])
    err = capsys.readouterr().err
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stopped_by"] == "interrupt", (summary["stopped_by"], err[-3000:])
    assert code == 130  # the interrupt's exit code, after a final checkpoint
    f = summary["faults"]
    assert f["injected"] == 3, err
    assert f["actor_restarts"] >= 1 and f["learner_restarts"] >= 1
    assert f["shard_restores"] == restores, err
    assert "actor 0 lost" in err and "learner 0 is back" in err
    if backend == "process":
        assert "shard 0, in the learner's process: kill learner 0" in err

    restored = RESTORED.search(err)
    assert restored, err
    ckpt_version, lost, seen = (int(g.replace(",", "")) for g in restored.groups())
    # the lost updates are exactly those since the checkpoint restored from, never more
    assert lost == seen - ckpt_version
    assert f["lost_updates"] == (lost if backend == "ray" else f["lost_updates"]) >= lost
    final = torch.load(latest_checkpoint(run_dir), weights_only=True)
    assert final["shards"][0]["version"] > ckpt_version  # training went on after the restore
    assert final["faults"]["shard_restores"] == f["shard_restores"]  # checkpointed too
    assert summary["episodes"] > 0 and summary["updates"] > 0


@pytest.mark.parametrize(
    ("on_loss", "modes"),
    # On the process runtime only: Ray's side of a loss (a process of Ray's restarted, a shard
    # actor rebuilt and restored) is the same code under the RL run above, and under
    # test_ray_runtime's restored shard (a sync barrier's count after the restore); a rule
    # without a barrier (async) has no answer to a loss (test_rules)
    [("wait", "[sync, soft_sync]"), ("continue", "[sync]")],
)
def test_bench_survives_losing_a_worker_and_the_server_shard(
    tiny_root: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    on_loss: str,
    modes: str,
) -> None:
    run_dir = tmp_path / "run"
    argv = [
        "bench",
        str(ROOT / "configs" / "bench_fashion_mnist.yaml"),
        "--run-dir",
        str(run_dir),
        "--set",
        f"data.root={tiny_root}",
        "--set",
        "data.download=false",
        "--set",
        f"modes={modes}",
        "--set",
        "workers=3",
        "--set",
        "batch_size=16",
        "--set",
        "budget.max_seconds=5",
        "--set",
        "eval.every_seconds=0.5",
        "--set",
        f"faults.on_worker_loss={on_loss}",
        "--set",
        events(
            "{action: kill, target: worker, index: 1, at: 1}",
            "{action: kill, target: shard, index: 0, at: 2}",  # skipped: see below
        ),
    ]
    assert main([*argv, "--set", "runtime.backend=process"]) == 0
    err = capsys.readouterr().err
    results = {r["mode"]: r for r in json.loads((run_dir / "summary.json").read_text())["results"]}
    for mode, r in results.items():
        f = r["faults"]
        assert f["injected"] == 1, mode  # the shard is part of the trainer: not lost
        assert f["worker_restarts"] == 1, mode
        assert f["shard_restores"] == 0, mode
        assert r["updates_applied"] > 0, mode
    assert "skipped kill shard 0: the shards are objects of the trainer's process" in err, err
    assert "worker 1 is back" in err, err
    if on_loss == "wait":
        assert "; sync waits for it" in err
        assert results["sync"]["faults"]["left_barrier"] == 0
    else:  # the barrier went on with the two live workers while worker 1 restarted
        assert "; sync continues without it" in err
        assert results["sync"]["faults"]["left_barrier"] == 1
    if "soft_sync" in results:  # never waits for a dead worker, even under wait
        assert "; soft_sync continues without it" in err
        assert results["soft_sync"]["faults"]["left_barrier"] == 1


def test_planned_faults_the_run_ended_before_are_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A fault test that stopped before its fault would otherwise pass on none injected."""
    argv = ["train", str(ROOT / "configs" / "cartpole_appo.yaml"), "--run-dir", str(tmp_path)]
    argv += ["--set", "stop.mean_return=null", "--set", "stop.max_env_steps=2000"]
    argv += ["--set", events("{action: kill, target: learner, index: 0, at: 600}")]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert (
        "not injected, the run ended first: kill learner 0 at 600s" in captured.err + captured.out
    )
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["faults"]["injected"] == 0


def test_a_restarted_bench_worker_does_not_train_its_share_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An epoch budget holds through a worker's loss: the restarted worker goes on where its
    predecessor's pushes ended (async: the server's count of its samples; sync: the version),
    and the samples of the killed call, whose report died with it, are counted (the server's
    count): async took 6,450 steps of a 6,250-step epoch, sync reported 194,720 of 200,000.
    Events a mode does not inject (baseline's; one past its end) are said, as train says."""
    run_dir = tmp_path / "run"
    argv = ["bench", str(ROOT / "configs" / "bench_toy.yaml"), "--run-dir", str(run_dir)]
    for item in (
        "modes=[baseline, sync, async]",
        "budget.epochs=1",
        "data.toy.samples=80000",
        "eval.every_seconds=5",
        "runtime.backend=process",
        events(
            "{action: kill, target: worker, index: 1, at: 0.2}",
            "{action: pause, target: worker, index: 0, at: 600, seconds: 1}",
        ),
    ):
        argv += ["--set", item]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "[1/3 baseline] not injected in baseline: kill worker 1 at 0.2s; pause 1s" in err
    assert err.count("not injected, the mode ended first: pause 1s worker 0 at 600s") == 2
    results = json.loads((run_dir / "summary.json").read_text())["results"][1:]
    for r in results:
        assert r["faults"]["worker_restarts"] == 1, r["mode"]  # killed mid-mode
        assert r["samples"] == 80000, r["mode"]  # one epoch, counted whole
        assert r["updates_applied"] == 80000 // 32, r["mode"]  # a gradient per batch


def test_the_baseline_is_never_slowed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A straggler (slow worker 0) is a fault of the distributed modes; it slowed the baseline's
    loop, the reference they are compared to, as well. Now it is said not injected there."""
    from rltrain.supervised import local_modes

    made: list[Any] = []
    worker = local_modes.SupervisedWorker

    def recorded(spec: Any, *args: Any, **kwargs: Any) -> Any:
        made.append(spec)
        return worker(spec, *args, **kwargs)

    monkeypatch.setattr(local_modes, "SupervisedWorker", recorded)
    argv = ["bench", str(ROOT / "configs" / "bench_toy.yaml"), "--run-dir", str(tmp_path / "r")]
    for item in ("modes=[baseline]", events("{action: slow, target: worker, index: 0, factor: 3}")):
        argv += ["--set", item]
    assert main(argv) == 0
    assert "not injected in baseline: 3x worker 0 at 0s" in capsys.readouterr().err
    assert [spec.faults for spec in made] == [()]


def test_soft_sync_steps_on_without_a_paused_worker(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """explore111: a3c under soft_sync (K = 3 of 4) stalled as long as sync while one worker
    was paused: the driver handed out work round by round, waiting for every worker's call.
    Now the other three reach the budget while it is paused (the stop then waits for the
    calls in flight, its own among them), and the stop ends every barrier: no worker is left
    waiting for K pushes."""
    run_dir = tmp_path / "run"
    argv = ["train", str(ROOT / "configs" / "cartpole_a3c.yaml"), "--run-dir", str(run_dir)]
    for kv in (
        "actors=4",
        "server.rule=soft_sync",
        "stop.mean_return=null",
        "stop.max_env_steps=20000",
        events("{action: pause, target: worker, index: 3, at: 0, seconds: 15}"),
    ):
        argv += ["--set", kv]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "stopping: waiting for the calls in flight of worker 3" in err, err
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stopped_by"] == "max_env_steps" and summary["faults"]["hung"] == 0
