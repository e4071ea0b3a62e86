"""Bad input on every command-line path (docs/bad_input.md lists each row and its message).

Each case must give exit code 2 and ONE line on stderr starting ``rltrain: error: ``, no
traceback, and write nothing: the whole working folder (configs, run directories, data) is
compared file by file (contents and mtimes) before and after. No case starts Ray.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from conftest import GRPC_SETTINGS, fake_server, write_idx

from rltrain.cli import main
from rltrain.errors import RLTrainError
from rltrain.supervised.datasets import FIRST_LABELS

ROOT = Path(__file__).resolve().parents[1]
CARTPOLE = str(ROOT / "configs" / "cartpole_a3c.yaml")
BENCH = str(ROOT / "configs" / "bench_fashion_mnist.yaml")
CKPT = "checkpoints/ckpt-0000000000.pt"
# bench reads the tiny generated Fashion-MNIST of conftest's tiny_root, never the network
DATA = ["--set", "data.root={data}", "--set", "data.download=false"]


def write_run(run: Path, hidden: int = 64) -> None:
    """A run directory as `rltrain train` leaves it (config.yaml, one checkpoint), untrained."""
    from rltrain.checkpoint import save_checkpoint
    from rltrain.config import load_config, to_dict
    from rltrain.ps.server import make_shards
    from rltrain.rl.config import TrainConfig, server_settings
    from rltrain.rl.env_spec import initial_params, probe_env
    from rltrain.rl.run.counters import Counters
    from rltrain.rundir import write_config

    run.mkdir(parents=True)
    cfg = load_config(TrainConfig, CARTPOLE)
    _, shards = make_shards(
        initial_params(cfg, probe_env(cfg)), cfg.optimizer, server_settings(cfg), cfg.actors
    )
    state = {
        "shards": [s.state_dict() for s in shards],
        "counters": Counters().state(),
        "config": to_dict(cfg),
    }
    save_checkpoint(run, 0, state, keep=3)
    write_config(run, dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, hidden=hidden)))


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Bad configs, folders and run directories (built once, copied into each test)."""
    return build_template(tmp_path_factory.mktemp("template"))


def build_template(root: Path) -> Path:
    """Write the bad configs, folders and run directories of these cases into ``root``."""
    (root / "bad.yaml").write_text("actors: [1, 2\n")
    (root / "list.yaml").write_text("- actors\n- 2\n")
    (root / "scalar.yaml").write_text("just some text\n")
    (root / "unknown.yaml").write_text("bogus: 1\n")
    (root / "empty.yaml").write_text("# nothing yet\n")
    (root / "binary.yaml").write_bytes(b"\x80\x81\xff\x00PK\x03\x04")
    (root / "afile").write_text("precious\n")
    (root / "notrun").mkdir()
    (root / "notrun" / "notes.txt").write_text("not a run\n")
    (root / "full").mkdir()
    (root / "full" / "results.csv").write_text("precious\n")
    (root / "no-ray").mkdir()
    (root / "stale-ray" / "ray").mkdir(parents=True)
    (root / "stale-ray" / "ray" / "ray_current_cluster").write_text("127.0.0.1:1")

    run = root / "run"
    write_run(run)
    (root / "nockpt").mkdir()
    shutil.copy2(run / "config.yaml", root / "nockpt" / "config.yaml")
    good = (run / CKPT).read_bytes()
    damaged = {
        "corrupt": bytes(b ^ 0x5A for b in good),
        "truncated": good[: len(good) // 2],
        "emptyckpt": b"",
        "flipped": good[:3000] + bytes(b ^ 0xFF for b in good[3000:3200]) + good[3200:],
    }
    for name, data in damaged.items():
        shutil.copytree(run, root / name)
        (root / name / CKPT).write_bytes(data)
    shutil.copytree(run, root / "foreign")
    torch.save({"weights": torch.zeros(3)}, root / "foreign" / CKPT)
    shutil.copytree(run, root / "nocfg")
    (root / "nocfg" / "config.yaml").unlink()
    shutil.copytree(run, root / "badcfg")
    (root / "badcfg" / "config.yaml").write_text("env: {id: CartPole-v1\n")
    write_run(root / "misfit", hidden=128)  # config.yaml says 128 units, the checkpoint has 64
    return root


@pytest.fixture
def ws(template: Path, tmp_path: Path, tiny_root: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The working folder of one case: the template's files, the tiny data, cwd set here,
    no Ray cluster to be found, and Ray never started."""
    from rltrain.runtime import ray as runtime

    shutil.copytree(template, tmp_path, dirs_exist_ok=True)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path / "no-ray"))

    def no_ray(*args: object, **kwargs: object) -> None:
        raise AssertionError("bad input must fail before Ray starts")

    monkeypatch.setattr(runtime, "start", no_ray)
    return tmp_path


def snapshot(root: Path) -> dict[str, tuple[int, bytes | None]]:
    """Every path under root with its mtime and, for files, its bytes."""
    return {
        str(p.relative_to(root)): (p.lstat().st_mtime_ns, p.read_bytes() if p.is_file() else None)
        for p in sorted(root.rglob("*"))
    }


def check(capsys: pytest.CaptureFixture[str], ws: Path, argv: list[str], words: list[str]) -> str:
    """Run the CLI in-process; assert exit 2, one error line naming `words`, nothing written."""
    argv = [a.format(data=ws / "data", ws=ws) for a in argv]
    before = snapshot(ws)
    code = main(argv)
    out, err = capsys.readouterr()
    err = err.strip()
    assert code == 2, (code, err)
    assert err.startswith("rltrain: error: "), err
    assert "\n" not in err, err
    assert "Traceback" not in err + out
    assert out == "", out
    for w in words:
        assert w in err, (w, err)
    after = snapshot(ws)
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    assert not changed, f"written or changed: {changed}"
    assert not (ws / "runs").exists()
    return err


# ------------------------------------------------------------------------------------------
# config files and --set, for train and bench


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        pytest.param(["train", "nope.yaml"], ["config file not found: nope.yaml"], id="t-missing"),
        pytest.param(["bench", "nope.yaml"], ["config file not found: nope.yaml"], id="b-missing"),
        pytest.param(["train", "notrun"], ["notrun is a folder", "YAML file"], id="t-folder"),
        pytest.param(  # (explore106: a run's folder for its config)
            ["train", "run"],
            ["run is a folder", "YAML file", "run/config.yaml, the run's?"],
            id="t-run-folder",
        ),
        pytest.param(
            ["train", "bad.yaml"], ["bad.yaml: not valid YAML at line 2", "expected"], id="t-yaml"
        ),
        pytest.param(["bench", "bad.yaml"], ["bad.yaml: not valid YAML at line 2"], id="b-yaml"),
        pytest.param(["train", "binary.yaml"], ["binary.yaml", "not UTF-8"], id="t-binary"),
        pytest.param(["train", "list.yaml"], ["list.yaml", "mapping", "got a list"], id="t-list"),
        pytest.param(["bench", "list.yaml"], ["list.yaml", "mapping", "got a list"], id="b-list"),
        pytest.param(["train", "scalar.yaml"], ["mapping", "got a str"], id="t-scalar"),
        pytest.param(
            ["train", "empty.yaml"], ["set mean_return", "empty.yaml is empty)"], id="t-empty"
        ),
        pytest.param(
            ["train", "unknown.yaml"], ["unknown config key 'bogus'", "allowed here"], id="t-key"
        ),
        pytest.param(
            ["bench", "unknown.yaml"], ["unknown config key 'bogus'", "workers"], id="b-key"
        ),
        pytest.param(
            ["train", CARTPOLE, "--set", "actor=3"], ["'actor'", "did you mean actors"], id="t-set"
        ),
        pytest.param(
            ["bench", BENCH, "--set", "optimizer.lrr=1"],
            ["'optimizer.lrr'", "did you mean lr"],
            id="b-set",
        ),
        pytest.param(
            ["train", CARTPOLE, "--set", "workers=abc"],
            ["unknown config key 'workers'", "actors"],
            id="t-workers",
        ),
        pytest.param(
            ["bench", BENCH, "--set", "workers=abc"],
            ["workers='abc'", "expected an integer"],
            id="b-type-int",
        ),
        pytest.param(
            ["train", CARTPOLE, "--set", "seed=-1"],
            ["seed=-1", "must be >= 0"],
            id="t-seed-range",
        ),
        pytest.param(
            ["bench", BENCH, "--set", "faults.events=[{{action: kill, target: actor}}]"],
            ["faults.events[0]: no actor in this run", "worker, shard"],
            id="b-fault-target",
        ),
        pytest.param(
            ["train", CARTPOLE, "--set", "faults.events=[{{action: kill, target: learner}}]"],
            ["faults.events[0]: no learner in this run"],
            id="t-fault-target",
        ),
        pytest.param(  # YAML's null, as YAML writes it (it said None)
            ["train", CARTPOLE, "--set", "stop.max_env_steps=null"],
            ["stop.max_env_steps=null: expected an integer"],
            id="t-null-int",
        ),
        pytest.param(
            ["train", CARTPOLE, "--set", "actors=abc"],
            ["actors='abc'", "expected an integer"],
            id="t-type-int",
        ),
        pytest.param(
            ["train", CARTPOLE, "--set", "optimizer.lr=fast"],
            ["optimizer.lr='fast'", "expected a number"],
            id="t-type-float",
        ),
        pytest.param(
            ["bench", BENCH, "--set", "optimizer.lr=fast"],
            ["optimizer.lr='fast'", "expected a number"],
            id="b-type-float",
        ),
        pytest.param(
            ["bench", BENCH, "--set", "data.download=maybe"],
            ["data.download='maybe'", "true or false"],
            id="b-type-bool",
        ),
        pytest.param(
            ["bench", BENCH, "--set", "modes=sync"], ["modes='sync'", "a list"], id="b-type-list"
        ),
        pytest.param(
            ["train", CARTPOLE, "--set", "stop=fast"],
            ["stop: expected a mapping of keys, got 'fast'"],
            id="t-type-section",
        ),
        pytest.param(
            ["train", CARTPOLE, "--set", "actors=-1"], ["actors=-1: must be >= 0"], id="t-ge"
        ),
        pytest.param(
            ["bench", BENCH, "--set", "workers=-1"], ["workers=-1: must be >= 1"], id="b-ge"
        ),
        pytest.param(
            ["train", CARTPOLE, "--set", "algo.gamma=1.5"],
            ["algo.gamma=1.5: must be <= 1"],
            id="t-le",
        ),
        pytest.param(
            ["bench", BENCH, "--set", "optimizer.lr=0"],
            ["optimizer.lr=0.0: must be > 0"],
            id="b-gt",
        ),
        pytest.param(
            ["train", CARTPOLE, "--set", "faults.hang_timeout_s=0"],
            ["faults.hang_timeout_s=0.0: must be > 0 (or null)"],
            id="t-gt-nullable",
        ),
        pytest.param(
            ["train", CARTPOLE, "--set", "faults.hang_timeout_s=soon"],
            ["faults.hang_timeout_s='soon': expected a number or null"],
            id="t-type-nullable",
        ),
        pytest.param(
            ["train", CARTPOLE, "--set", "stop.mean_return=null", "--set", "stop.max_seconds=0"],
            ["stop: set mean_return, eval_mean_return, max_seconds or max_env_steps"],
            id="t-no-stop",
        ),
        pytest.param(
            ["train", CARTPOLE, "--set", "server.rule=sync", "--set", "server.staleness=drop"],
            ["server.staleness=drop: a policy for updates applied on arrival", "under sync"],
            id="t-staleness-under-sync",
        ),
        pytest.param(
            ["train", CARTPOLE, "--set", "algo.name=ppo", "--set", "server.staleness=scale"],
            ["ppo runs behind a barrier (sync)", "another algorithm (a3c, impala, appo)"],
            id="t-staleness-under-ppo",
        ),
        pytest.param(
            ["train", CARTPOLE, "--set", "server.max_staleness=2"],
            ["server.max_staleness=2: read by server.staleness=drop"],
            id="t-max-staleness-unread",
        ),
        pytest.param(
            ["train", CARTPOLE, "--set", "server.k=1"],
            ["server.k=1: soft_sync's K, read by server.rule=soft_sync only (this run: async)"],
            id="t-k-unread",
        ),
        pytest.param(
            ["train", CARTPOLE, "--set", "algo.name=ppo", "--set", "server.k=1"],
            ["server.k=1", "(this run: ppo runs sync); set server.rule=soft_sync"],
            id="t-k-under-ppo",
        ),
        pytest.param(
            ["train", CARTPOLE, "--set", "server.rule=soft_sync", "--set", "server.k=5"],
            ["server.k=5", "exceeds the 2 that push gradients (a3c: actors=2)", "to 2"],
            id="t-cross",
        ),
        pytest.param(  # (explore98: said "0 (all but one) to 1", and all but one is none)
            ["train", CARTPOLE, "--set", "server.rule=soft_sync", "--set", "actors=1"]
            + ["--set", "server.k=2"],
            ["server.k=2", "(a3c: actors=1); allowed 0 or 1 (the one pusher)"],
            id="t-k-one-pusher",
        ),
        pytest.param(
            ["bench", BENCH, "--set", "modes=[sync,"],
            ["--set 'modes=[sync,'", "not a valid YAML list", "modes=[a, b]"],
            id="b-bad-list",
        ),
        pytest.param(
            ["train", CARTPOLE, "--set", "ALGO.name=a2c"],
            ["unknown config key 'ALGO'; did you mean algo?"],
            id="t-key-case",
        ),
        pytest.param(
            ["train", str(ROOT / "configs" / "pong_appo.yaml"), "--set", "env.sticky_actions=1"],
            ["env.sticky_actions=1.0: must be < 1"],
            id="t-sticky-1",
        ),
        pytest.param(  # a key of another section: named where it lives
            ["train", CARTPOLE, "--set", "algo.lr=3e-4"],
            ["unknown config key 'algo.lr' (allowed here: ", "; did you mean optimizer.lr?"],
            id="t-key-elsewhere",
        ),
        pytest.param(  # misspelt and elsewhere (explore101: no hint)
            ["train", CARTPOLE, "--set", "windows=3"],
            ["unknown config key 'windows' (allowed here: ", "; did you mean stop.window?"],
            id="t-key-misspelt-elsewhere",
        ),
        pytest.param(  # explore102: a3c trained, the section's defaults
            ["train", CARTPOLE, "--set", "algo=null"],
            ["algo=null: a section; set its keys (algo.name=...) or omit it"],
            id="t-section-null",
        ),
        pytest.param(  # the other command's key (review 85: hinted, then refused)
            ["train", CARTPOLE, "--set", "n_push=2"],
            [
                "unknown config key 'n_push' (allowed",
                "; server.n_push is a key of rltrain bench only",
            ],
            id="t-key-of-bench",
        ),
        pytest.param(  # a word short (explore101: no hint)
            ["train", CARTPOLE, "--set", "stop.max_steps=100"],
            ["unknown config key 'stop.max_steps'; did you mean max_env_steps?"],
            id="t-key-word-short",
        ),
        pytest.param(
            ["bench", BENCH, "--set", "optimizer.workers=3"],
            ["did you mean workers (a top-level key)?"],
            id="b-key-top-level",
        ),
        pytest.param(
            ["train", CARTPOLE, "--set", "actors=-3"],
            ["actors=-3: must be >= 0 (or auto)"],
            id="t-auto",
        ),
        pytest.param(["train", CARTPOLE, "--set", "env.id="], ["env.id is empty"], id="t-empty-id"),
        pytest.param(
            ["train", CARTPOLE, "--set", "oops"], ["--set 'oops'", "KEY=VALUE"], id="t-noeq"
        ),
        pytest.param(["bench", BENCH, "--set", "=3"], ["--set '=3'", "KEY=VALUE"], id="b-noeq"),
        pytest.param(
            ["train", CARTPOLE, "--set", "seed=1", "--set", "seed.x=2"],
            ["'seed' is set both as a value and a section"],
            id="t-set-clash",
        ),
        pytest.param(
            ["train", CARTPOLE, "--set", "optimizer.name=adamw"],
            ["optimizer.name='adamw'", "allowed values are sgd", "did you mean adam"],
            id="t-optimizer",
        ),
        pytest.param(
            ["bench", BENCH, "--set", "optimizer.name=adamw"],
            ["optimizer.name='adamw'", "allowed values are sgd"],
            id="b-optimizer",
        ),
        pytest.param(
            ["train", CARTPOLE, "--set", "server.rule=average"],
            ["server.rule=average", "push gradients", "sync, soft_sync or async"],
            id="t-average-rule",
        ),
        pytest.param(
            ["train", CARTPOLE, "--set", "runtime.backend=threads"],
            ["runtime.backend", "'threads'", "ray, local"],
            id="t-backend-unknown",
        ),
        pytest.param(
            ["train", CARTPOLE, "--set", "runtime.backend=local", "--address", "auto"],
            ["runtime.backend=local", "joins no Ray cluster", "'auto'"],
            id="t-local-address",
        ),
        pytest.param(
            [
                "train",
                CARTPOLE,
                "--set",
                "runtime.backend=local",
                "--set",
                "faults.events=[{{action: kill, target: worker, at: 1}}]",
            ],
            ["runtime.backend=local", "faults.events", "use backend process or ray"],
            id="t-local-faults",
        ),
        pytest.param(
            ["bench", BENCH, "--set", "runtime.backend=local"],
            ["runtime.backend=local", "rltrain bench", "backend auto, process or ray"],
            id="b-local",
        ),
        pytest.param(
            ["train", CARTPOLE, "--set", "algo.name=dqn", "--set", "normalize.obs=always"],
            ["normalize.obs=always", "dqn"],
            id="t-dqn-normalize",
        ),
        pytest.param(
            ["train", str(ROOT / "configs" / "cartpole_gorila.yaml"), "--set", "dqn.n_step=9"],
            ["dqn.n_step=9", "algo.rollout_length 8", "raise algo.rollout_length"],
            id="t-dqn-n-step",
        ),
        pytest.param(
            ["train", CARTPOLE, "--set", "learners=2"],  # (a3c: read by impala/appo/dqn only)
            ["learners=2", "a3c has no learners", "set actors"],
            id="t-learners-unsplit",
        ),
        pytest.param(
            [
                "train",
                CARTPOLE,
                "--set",
                "learner_gpus=2",
            ],  # (not: "a learner computes on one GPU")
            ["learner_gpus=2", "a3c has no learners", "leave it out"],
            id="t-learner-gpus-unsplit",
        ),
        pytest.param(
            ["train", CARTPOLE, "--set", "schedule.lr_end=0"],
            ["schedule", "schedule.steps or stop.max_env_steps"],
            id="t-schedule-horizon",
        ),
        pytest.param(
            ["train", CARTPOLE, "--set", "normalize.obs=on"],
            ["normalize.obs=true", "auto, always, never"],
            id="t-yaml-bool-choice",
        ),
        pytest.param(
            ["train", CARTPOLE, "--set", "algo.name=trpo"],
            ["algo.name='trpo'", "a3c, a2c, dqn, impala, ppo, appo"],
            id="t-algo",
        ),
        pytest.param(["bench", BENCH, "--set", "modes=[fast]"], ["modes[0]='fast'"], id="b-mode"),
        pytest.param(
            ["bench", BENCH, "--set", "server.topk_fraction=1.5"],
            ["server.topk_fraction=1.5: must be <= 1"],
            id="b-topk-fraction",
        ),
        pytest.param(
            ["bench", BENCH, "--set", "server.compression=zip"],
            ["server.compression='zip'", "none, fp16, int8, topk, sign"],
            id="b-compression",
        ),
        pytest.param(
            ["bench", BENCH, "--set", "server.rule=sync"],
            ["server.rule=sync: each bench mode sets its own rule; choose them with modes"],
            id="b-server-rule",
        ),
        pytest.param(
            ["bench", BENCH, "--set", "server.momentum_correction=true"],
            ["server.momentum_correction=true needs optimizer.name momentum or nesterov"],
            id="b-momentum-correction",
        ),
        pytest.param(
            ["bench", BENCH, "--set", "server.record=true", "--set", "server.compression=int8"],
            ["server.record=true: not with server.compression", "reapplying does not follow"],
            id="b-record-compression",
        ),
        pytest.param(
            ["bench", BENCH, "--set", "server.record=true", "--set", "seeds=3"],
            ["server.record=true needs seeds=1, got 3", "replays one run of each mode"],
            id="b-record-seeds",
        ),
        pytest.param(
            ["bench", BENCH, "--set", "seeds=0"],
            ["seeds=0: must be >= 1"],
            id="b-seeds-zero",
        ),
        pytest.param(
            ["bench", BENCH, "--set", "warm_start.seconds=500"],
            ["warm_start.seconds=500 is not below budget.max_seconds"],
            id="b-warm-start",
        ),
        pytest.param(
            ["bench", BENCH, "--set", "model.stages=2"],
            ["model.stages=2: runs the modes sync, async", "not soft_sync"],
            id="b-pipeline-modes",
        ),
        pytest.param(
            ["bench", BENCH, "--set", "modes=[sync]", "--set", "model.stages=2"]
            + ["--set", "server.shards=2"],
            ["model.stages=2: needs server.shards=1", "one shard per stage"],
            id="b-pipeline-shards",
        ),
        pytest.param(
            ["bench", str(ROOT / "configs" / "bench_toy.yaml"), "--set", "modes=[sync]"]
            + ["--set", "model.stages=2"],
            ["model.stages=2: model linear has 1 layer(s) with parameters to cut; allowed: 1 to 1"]
            + ["; model.name=deep_linear is the same map in 3 layers"],
            id="b-pipeline-layers",
        ),
        pytest.param(
            ["bench", BENCH, "--set", "sandblaster.portions=0"],
            ["sandblaster.portions=0: must be >= 1"],
            id="b-portions",
        ),
        pytest.param(
            ["bench", BENCH, "--set", "data.dataset=toy_quadratic", "--set", "model=cnn"],
            ["model=cnn needs images", "toy_quadratic takes model auto, linear, deep_linear"],
            id="b-toy-model",
        ),
        pytest.param(
            ["bench", BENCH, "--set", "data.dataset=toy_logistic", "--set", "model=deep_linear"],
            ["model=deep_linear: toy_logistic's known optimum is under an L2 term"],
            id="b-toy-deep-logistic",
        ),
        pytest.param(
            ["train", CARTPOLE, "--set", "faults.events=[{{action: add, target: actor}}]"],
            ["action add applies to target worker (rltrain bench), not actor"],
            id="t-elastic-actor",
        ),
        pytest.param(
            ["bench", BENCH, "--set", "data.dataset=imagenet"],
            ["data.dataset='imagenet'", "mnist, fashion_mnist, cifar10"],
            id="b-dataset",
        ),
        pytest.param(
            ["bench", BENCH, "--set", "modes=[async, sync, async]"],
            ["modes: async listed twice; list each mode once"],
            id="b-mode-twice",
        ),
        pytest.param(
            ["train", BENCH],
            [
                "bench_fashion_mnist.yaml is a `rltrain bench` config (it has modes",
                "run: rltrain bench",
            ],
            id="t-a-bench-config",
        ),
        pytest.param(
            ["bench", CARTPOLE],
            ["cartpole_a3c.yaml is a `rltrain train` config (it has", "run: rltrain train"],
            id="b-a-train-config",
        ),
        pytest.param(  # a bench key in a train config is a typo there, not a bench config
            ["train", CARTPOLE, "--set", "workers=2"],
            ["unknown config key 'workers'"],
            id="t-a-bench-key",
        ),
        pytest.param(
            ["train", CARTPOLE, "--set", "algo.rollout_length=10000000000"],
            ["algo.rollout_length=10000000000 x env.num_envs=", "GiB of memory; lower one"],
            id="t-rollout-beyond-memory",
        ),
        pytest.param(  # (explore118: 47 GiB of a pixel env's stacks, an internal error)
            [
                "train",
                str(ROOT / "configs" / "cartpole_gorila.yaml"),
                "--set",
                "replay.capacity=10000000000",
            ],
            ["replay.capacity=10,000,000,000 x 1 replay shard: the replay memory's observations"],
            id="t-replay-beyond-memory",
        ),
        pytest.param(  # counted on the meta device: no memory taken
            ["train", CARTPOLE, "--set", "model.hidden=1000000"],
            ["parameters (", "copies at the least", "GiB of memory; lower model.hidden or"],
            id="t-network-beyond-memory",
        ),
        pytest.param(
            ["train", CARTPOLE, "--set", "server.n_push=4"],
            ["server.n_push=4: rltrain bench only"],
            id="t-bench-only-server-key",
        ),
        pytest.param(  # accepted and ignored before
            ["bench", BENCH, "--set", "runtime.inference=server"],
            ["runtime.inference=server: read by `rltrain train` only; leave it out of a"],
            id="b-train-only-key",
        ),
        pytest.param(
            ["train", CARTPOLE, "--set", "server.n_fetch=2"],
            ["server.n_fetch=2: impala/appo/dqn actors only; a3c workers get the parameters"],
            id="t-n-fetch-a3c",
        ),
        pytest.param(
            ["train", CARTPOLE, "--set", "env.id=NoSuchEnv-v0"],
            ["unknown env id 'NoSuchEnv-v0'"],
            id="t-env",
        ),
        pytest.param(  # (explore96: "No module named 'myenvs.py'; 'myenvs' is not a package")
            ["train", CARTPOLE, "--set", "imports=[envs/myenvs.py]"],
            ["imports: 'envs/myenvs.py' is a file's path; name its module instead ('myenvs', "],
            id="t-imports-file",
        ),
        pytest.param(
            ["train", CARTPOLE, "--set", "env.id=CartPol-v1"],
            ["unknown env id 'CartPol-v1'", "did you mean CartPole-v1"],
            id="t-env-typo",
        ),
        pytest.param(
            ["train", CARTPOLE, "--set", "env.id=ALE/NoSuchGame-v5"],
            ["unknown env id 'ALE/NoSuchGame-v5'", "did you mean ALE/"],
            id="t-env-ale",
        ),
        pytest.param(  # never the ids refused next (Pong-v4, Pong-v0: they skip frames)
            ["train", CARTPOLE, "--set", "env.id=pong"],
            ["unknown env id 'pong'", "did you mean ALE/Pong-v5?"],
            id="t-env-game-name",
        ),
        pytest.param(  # written into config.yaml and never read: refused
            ["train", CARTPOLE, "--set", "env.sticky_actions=0.5"],
            ["env.sticky_actions=0.5: Atari's protocol only; CartPole-v1 is a Gymnasium env"],
            id="t-env-atari-only-key",
        ),
        pytest.param(
            ["train", CARTPOLE, "--set", "env.fire_reset=false"],
            ["env.fire_reset=False: Atari's protocol only; CartPole-v1 is a Gymnasium env"],
            id="t-env-fire-reset-gym",
        ),
        pytest.param(
            ["train", CARTPOLE, "--set", "env.id=Pong-v4"],
            ["env.id=Pong-v4 skips 2 to 4 frames at random", "use PongNoFrameskip-v4"],
            id="t-env-ale-skip",
        ),
        pytest.param(
            ["train", CARTPOLE, "--set", "env.kwargs.render_mode=human"],
            ["env.kwargs.render_mode='human': every env of every actor would open a window"],
            id="t-env-render-human",
        ),
    ],
)
def test_config_errors(
    capsys: pytest.CaptureFixture[str], ws: Path, argv: list[str], words: list[str]
) -> None:
    if argv[0] == "bench":  # the case's own --set comes last and wins
        argv = [*argv[:2], *DATA, *argv[2:]]
    check(capsys, ws, argv, words)


def test_more_test_samples_than_the_test_set_is_refused_before_the_run(
    capsys: pytest.CaptureFixture[str], ws: Path
) -> None:
    argv = ["bench", BENCH, *DATA, "--set", "eval.test_samples=100000"]
    argv += ["--run-dir", str(ws / "bench-run")]
    assert main([a.format(data=ws / "data") for a in argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "rltrain: error: eval.test_samples=100000: fashion_mnist has 200 test samples; "
        "use at most 200, or 0 for all of them"
    )
    assert not (ws / "bench-run").exists()


def test_more_shards_than_parameters_is_refused_before_any_mode_trains(
    capsys: pytest.CaptureFixture[str], ws: Path
) -> None:
    """The first mode (baseline) has no server: the count was checked as the second started,
    after the first had trained and left a partial run folder."""
    argv = ["bench", BENCH, *DATA, "--set", "server.shards=10000000"]
    argv += ["--set", "modes=[baseline, async]", "--run-dir", str(ws / "bench-run")]
    assert main([a.format(data=ws / "data") for a in argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "rltrain: error: server.shards=10000000: must be between 1 and the parameter count 105866"
    )
    assert not (ws / "bench-run").exists()


def test_an_env_refused_by_the_probe_shuts_ray_down_again(
    capsys: pytest.CaptureFixture[str], ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A registered id starts Ray beside the env probe; what only the probe can see (dqn on a
    Box action space) is still one line, with Ray shut down again and nothing written."""
    from rltrain.runtime import ray as runtime

    calls: list[str] = []
    monkeypatch.setattr(runtime, "start", lambda *a, **k: calls.append("init") or "stub")
    monkeypatch.setattr(runtime, "shutdown", lambda: calls.append("shutdown"))
    gorila = str(ROOT / "configs" / "cartpole_gorila.yaml")
    argv = ["train", gorila, "--set", "env.id=Pendulum-v1", "--set", "runtime.backend=ray"]
    check(capsys, ws, argv, ["algo.name=dqn needs Discrete actions", "Pendulum-v1", "Box(1,)"])
    assert calls == ["init", "shutdown"]


def test_missing_dataset_says_which_files_to_put_where(
    capsys: pytest.CaptureFixture[str], ws: Path
) -> None:
    argv = ["bench", BENCH, "--set", "data.dataset=mnist", "--set", "data.root={ws}/nodata"]
    err = check(capsys, ws, [*argv, "--set", "data.download=false"], ["mnist not found"])
    assert "train-images-idx3-ubyte.gz" in err and str(ws / "nodata" / "mnist") in err
    assert "download disabled" in err


def test_another_datasets_files_are_refused(capsys: pytest.CaptureFixture[str], ws: Path) -> None:
    """explore94: Fashion-MNIST's files under mnist/ ran as MNIST; their labels tell them."""
    folder = ws / "wrong" / "mnist"
    folder.mkdir(parents=True)
    images = np.zeros((12, 28, 28), dtype=np.uint8)
    for split, first in zip(("train", "t10k"), FIRST_LABELS["fashion_mnist"], strict=True):
        write_idx(folder / f"{split}-images-idx3-ubyte.gz", images)
        write_idx(folder / f"{split}-labels-idx1-ubyte.gz", np.array([*first, 0, 1]))
    argv = ["bench", BENCH, "--set", "data.dataset=mnist", "--set", "data.root={ws}/wrong"]
    expected = ["holds fashion_mnist's files, not mnist's", "set data.dataset=fashion_mnist"]
    check(capsys, ws, [*argv, "--set", "data.download=false"], expected)


@pytest.mark.parametrize(
    ("batches", "root", "words"),
    [
        pytest.param(
            "cifar/cifar10/cifar-10-batches-py",
            "cifar/cifar10/cifar-10-batches-py",
            ["is CIFAR-10's cifar-10-batches-py/ folder itself; give the folder above it: cifar"],
            id="the-batch-folder",
        ),
        pytest.param(
            "flat/cifar10",
            "flat",
            ["flat/cifar10 holds CIFAR-10's batch files (data_batch_1, data_batch_2, ",
             "move them into flat/cifar10/cifar-10-batches-py"],
            id="flat-batches",
        ),
    ],
)  # fmt: skip
def test_cifars_batches_one_level_off_are_named_before_any_download(
    capsys: pytest.CaptureFixture[str],
    ws: Path,
    monkeypatch: pytest.MonkeyPatch,
    batches: str,
    root: str,
    words: list[str],
) -> None:
    """explore100: the error named a folder nested in the user's copy, after a 163 MB
    download into it (data.download is on in bench_cifar10.yaml)."""
    import pickle

    from rltrain.supervised import datasets

    def no_download(*args: object) -> None:
        raise AssertionError("a download began")

    monkeypatch.setattr(datasets, "_fetch", no_download)
    folder = ws / batches
    folder.mkdir(parents=True)
    batch = {b"data": np.zeros((2, 3072), np.uint8), b"labels": [0, 1]}
    for name in (*(f"data_batch_{i}" for i in range(1, 6)), "test_batch"):
        (folder / name).write_bytes(pickle.dumps(batch, protocol=2))
    config = str(ROOT / "configs" / "bench_cifar10.yaml")
    check(capsys, ws, ["bench", config, "--set", f"data.root={root}"], words)


# ------------------------------------------------------------------------------------------
# --run-dir


@pytest.mark.parametrize("command", ["train", "bench"])
@pytest.mark.parametrize(
    ("run_dir", "words"),
    [
        pytest.param("full", ["--run-dir full: already exists and is not empty"], id="not-empty"),
        pytest.param("afile", ["--run-dir afile: is a file"], id="file"),
        pytest.param("afile/sub", ["afile is a file, not a folder"], id="under-file"),
    ],
)
def test_run_dir_errors(
    capsys: pytest.CaptureFixture[str], ws: Path, command: str, run_dir: str, words: list[str]
) -> None:
    config = [CARTPOLE] if command == "train" else [BENCH, *DATA]
    check(capsys, ws, [command, *config, "--run-dir", run_dir], words)


# ------------------------------------------------------------------------------------------
# train --resume RUN_DIR and eval RUN_DIR

NOT_RUN = "not a run directory"
DAMAGED = "is corrupt or truncated"


@pytest.mark.parametrize("command", ["resume", "eval"])
@pytest.mark.parametrize(
    ("run_dir", "words"),
    [
        pytest.param("nonexistent", [NOT_RUN, "(it does not exist)"], id="nonexistent"),
        pytest.param("afile", [NOT_RUN, "(it is a file)"], id="file"),
        pytest.param("notrun", [NOT_RUN, "(no config.yaml in it)"], id="no-config"),
        pytest.param("nocfg", ["nocfg: its config.yaml is missing", "put it back"], id="cfg-gone"),
        pytest.param("nockpt", ["nockpt", "no checkpoints/ckpt-*.pt to"], id="no-checkpoint"),
        pytest.param("corrupt", [DAMAGED, "not a complete torch.save archive"], id="corrupt"),
        pytest.param("truncated", [DAMAGED, "not a complete torch.save archive"], id="truncated"),
        pytest.param("emptyckpt", [DAMAGED, "the file is empty"], id="empty-checkpoint"),
        pytest.param("flipped", [DAMAGED, "bytes; torch: "], id="damaged-inside"),
        pytest.param("foreign", ["is not an rltrain checkpoint"], id="foreign-checkpoint"),
        pytest.param("badcfg", ["badcfg/config.yaml: not valid YAML"], id="bad-config"),
    ],
)
def test_run_dir_arguments(
    capsys: pytest.CaptureFixture[str], ws: Path, command: str, run_dir: str, words: list[str]
) -> None:
    argv = ["train", "--resume", run_dir] if command == "resume" else ["eval", run_dir]
    check(capsys, ws, argv, words)


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        pytest.param(
            ["train", "--resume", "run", "--run-dir", "elsewhere"],
            ["--run-dir does not go with --resume"],
            id="resume-and-run-dir",
        ),
        pytest.param(
            ["train", "--resume", "run", "--set", "server.shards=2"],
            ["holds 1 shard(s)", "(this resume changes server.shards: 1 -> 2; keep server.shards"],
            id="resume-other-layout",
        ),
        pytest.param(
            ["train", "--resume", "run", "--set", "model.hidden=128"],
            ["this config needs 1 of", "this resume changes model.hidden: 64 -> 128; keep"],
            id="resume-other-model",
        ),
        pytest.param(
            ["train", "--resume", "run", "--set", "actors=abc"], ["actors='abc'"], id="resume-set"
        ),
        pytest.param(
            ["eval", "misfit"],
            ["trained with model.hidden=64, not the 128 of misfit/config.yaml, changed since it"],
            id="eval-misfit",
        ),
        pytest.param(
            ["eval", "misfit", "--checkpoint", f"run/{CKPT}"],
            [
                "not the 128 of misfit: a checkpoint plays with its own run's config (rltrain",
            ],
            id="eval-other-runs",
        ),
        pytest.param(
            ["eval", "run", "--episodes", "0"],
            ["argument --episodes: expected a whole number >= 1, got 0", "rltrain eval --help"],
            id="eval-episodes-0",
        ),
        pytest.param(
            ["eval", "run", "--episodes", "ten"],
            ["--episodes", "got 'ten'"],
            id="eval-episodes-word",
        ),
        pytest.param(["eval", "run", "--seed", "-1"], ["--seed", "got '-1'"], id="eval-seed"),
    ],
)
def test_resume_and_eval_errors(
    capsys: pytest.CaptureFixture[str], ws: Path, argv: list[str], words: list[str]
) -> None:
    check(capsys, ws, argv, words)


def test_a_run_another_trainer_holds_is_refused(
    capsys: pytest.CaptureFixture[str], ws: Path
) -> None:
    from rltrain.rundir import lock_run_dir, unlock

    lock = lock_run_dir(ws / "run")  # as a trainer of the run holds it
    try:
        words = ["run: another rltrain process is training this run; wait for it to end"]
        check(capsys, ws, ["train", "--resume", "run"], words)
        for ckpt in (ws / "run" / "checkpoints").glob("*.pt"):  # before its first checkpoint
            ckpt.unlink()
        check(capsys, ws, ["train", "--resume", "run"], words)
    finally:
        unlock(lock)


@pytest.mark.parametrize("where", ["run", "checkpoints", "tb"])
def test_a_run_folder_that_cannot_be_written_is_refused_before_the_resume(
    capsys: pytest.CaptureFixture[str],
    ws: Path,
    monkeypatch: pytest.MonkeyPatch,
    where: str,
) -> None:
    """(Permission bits do not stop root: a read-only or immutable folder does, faked here.)"""
    import errno
    import tempfile

    real = tempfile.TemporaryFile

    def refused(*args: object, dir: str, **kwargs: object) -> object:  # noqa: A002
        if Path(dir).name == where:
            raise OSError(errno.EROFS, "Read-only file system")
        return real(*args, dir=dir, **kwargs)  # type: ignore[call-overload]

    (ws / "run" / "tb").mkdir(exist_ok=True)
    monkeypatch.setattr(tempfile, "TemporaryFile", refused)
    folder = "run" if where == "run" else f"run/{where}"
    words = [f"--resume run: cannot write in {folder} (Read-only file system); a resumed run"]
    check(capsys, ws, ["train", "--resume", "run"], words)


def test_a_file_where_the_run_keeps_tb_is_refused(
    capsys: pytest.CaptureFixture[str], ws: Path
) -> None:
    shutil.rmtree(ws / "run" / "tb", ignore_errors=True)
    (ws / "run" / "tb").write_text("")
    check(capsys, ws, ["train", "--resume", "run"], ["run/tb is a file; a run keeps a folder"])


# ------------------------------------------------------------------------------------------
# --address: checked before any folder or file is written, in well under a second

UNREACHABLE = "nothing answers at 127.0.0.1:1 (Connection refused)"
FORM = "expected 'auto', HOST:PORT or ray://HOST:PORT"


@pytest.mark.parametrize("command", ["train", "bench", "resume"])
@pytest.mark.parametrize(
    ("address", "ray_tmp", "words"),
    [
        pytest.param("127.0.0.1:1", "no-ray", [UNREACHABLE], id="host-port"),
        pytest.param("ray://127.0.0.1:1", "no-ray", [UNREACHABLE, "ray://127.0.0.1:1"], id="ray"),
        pytest.param("[::1]:1", "no-ray", ["nothing answers at [::1]:1 ("], id="ipv6"),
        pytest.param("nohost", "no-ray", ["--address nohost: " + FORM], id="malformed"),
        pytest.param("127.0.0.1:99999", "no-ray", [FORM, "port 1-65535"], id="bad-port"),
        pytest.param("", "no-ray", [FORM], id="empty"),
        pytest.param(
            "http://127.0.0.1:8265", "no-ray", ["http:// is not a Ray address", "6379"], id="http"
        ),
        pytest.param(
            "auto", "no-ray", ["--address auto: no Ray cluster", "ray_current_cluster"], id="auto"
        ),
        pytest.param(
            "auto", "stale-ray", ["ray_current_cluster names 127.0.0.1:1", UNREACHABLE], id="stale"
        ),
    ],
)
def test_address_errors(
    capsys: pytest.CaptureFixture[str],
    ws: Path,
    monkeypatch: pytest.MonkeyPatch,
    command: str,
    address: str,
    ray_tmp: str,
    words: list[str],
) -> None:
    monkeypatch.setenv("RAY_TMPDIR", str(ws / ray_tmp))
    argv = {
        "train": ["train", CARTPOLE],
        "bench": ["bench", BENCH, *DATA],
        "resume": ["train", "--resume", "run"],  # must not touch run/ (config.yaml, tb/)
    }[command]
    check(capsys, ws, [*argv, "--address", address], words)


def test_address_in_the_config_file_is_checked_too(
    capsys: pytest.CaptureFixture[str], ws: Path
) -> None:
    check(capsys, ws, ["train", CARTPOLE, "--set", "runtime.address=127.0.0.1:1"], [UNREACHABLE])


def test_a_cluster_run_resumed_where_its_cluster_is_gone_says_how_to_run_here(
    capsys: pytest.CaptureFixture[str], ws: Path
) -> None:
    """The address came from the run's own config, not from --address: the message says so
    and how to continue on this machine."""
    ckpt = next((ws / "run" / "checkpoints").glob("ckpt-*.pt"))
    state = torch.load(ckpt, weights_only=True)
    state["config"]["runtime"]["address"] = "127.0.0.1:1"
    torch.save(state, ckpt)
    config = yaml.safe_load((ws / "run" / "config.yaml").read_text())
    config["runtime"]["address"] = "127.0.0.1:1"
    (ws / "run" / "config.yaml").write_text(yaml.safe_dump(config))
    own = "run it on this machine with --set runtime.address=null (the run's own address)"
    err = check(capsys, ws, ["train", "--resume", "run"], [UNREACHABLE, own])
    assert "leave --address out" not in err  # none was given: leaving it out changes nothing
    err = check(capsys, ws, ["train", "--resume", "run", "--address", "127.0.0.1:2"], ["2 ("])
    assert "run's own" not in err  # the address given now is not the run's


def test_ray_address_variable_is_what_auto_means(
    capsys: pytest.CaptureFixture[str], ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")
    check(capsys, ws, ["train", CARTPOLE, "--address", "auto"], ["RAY_ADDRESS names 127.0.0.1:1"])


# ------------------------------------------------------------------------------------------
# argparse: one line too, naming the command's --help


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        pytest.param([], ["required: command", "(see rltrain --help)"], id="no-command"),
        pytest.param(
            ["frobnicate"], ["invalid choice: 'frobnicate'", "(see rltrain --help)"], id="command"
        ),
        pytest.param(
            ["train", CARTPOLE, "--frob"],
            ["unrecognized arguments: --frob", "(see rltrain train --help)"],
            id="train-flag",
        ),
        pytest.param(
            ["bench", BENCH, "--frob", "1"],
            ["unrecognized arguments: --frob 1", "(see rltrain bench --help)"],
            id="bench-flag",
        ),
        pytest.param(
            ["eval", "run", "extra"],
            ["unrecognized arguments: extra", "eval --help"],
            id="eval-arg",
        ),
        pytest.param(["eval"], ["required: run_dir", "(see rltrain eval --help)"], id="eval-none"),
        pytest.param(
            ["bench"], ["required: config", "(see rltrain bench --help)"], id="bench-none"
        ),
        pytest.param(["train"], ["give a CONFIG file", "--resume RUN_DIR"], id="train-none"),
        pytest.param(
            ["train", "--resume"], ["--resume: expected one argument", "train --help"], id="resume"
        ),
        pytest.param(["options"], ["required: kind", "options --help"], id="options-none"),
        pytest.param(
            ["options", "eval"], ["invalid choice: 'eval'", "'train', 'bench'"], id="options-kind"
        ),
    ],
)
def test_usage_errors_are_one_line(
    capsys: pytest.CaptureFixture[str], ws: Path, argv: list[str], words: list[str]
) -> None:
    check(capsys, ws, argv, words)


@pytest.mark.parametrize("argv", [["--help"], ["train", "--help"], ["eval", "-h"]])
def test_help_still_works(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    assert main(argv) == 0
    assert capsys.readouterr().out.startswith("usage: rltrain")


# ------------------------------------------------------------------------------------------
# the real executable: nothing else (warnings, Ray logs) reaches stderr


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["train", CARTPOLE, "--address", "127.0.0.1:1"], [UNREACHABLE]),
        (["eval", "truncated"], [DAMAGED]),
        (["options", "nope"], ["invalid choice"]),
    ],
)
def test_one_line_from_the_real_process(ws: Path, argv: list[str], words: list[str]) -> None:
    before = snapshot(ws)
    env = {**os.environ, "RAY_TMPDIR": str(ws / "no-ray")}
    proc = subprocess.run(
        [sys.executable, "-m", "rltrain.cli", *argv],
        cwd=ws,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("rltrain: error: "), proc.stderr
    for w in words:
        assert w in lines[0]
    assert snapshot(ws) == before


def test_template_run_is_a_real_run(template: Path) -> None:
    """The crafted run directory is what `rltrain train` writes: its checkpoint loads and fits."""
    from rltrain.checkpoint import load_checkpoint

    state = load_checkpoint(template / "run" / CKPT)
    cfg = yaml.safe_load((template / "run" / "config.yaml").read_text())
    assert cfg["env"]["id"] == "CartPole-v1" and state["shards"][0]["version"] == 0


# ------------------------------------------------------------------------------------------
# what the checks must still let through


def test_a_listening_address_passes_the_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import rltrain.runtime.ray.reach as reach
    import rltrain.runtime.ray.startup as startup
    from rltrain.launch import check_address

    # A head that accepts and never answers is left for ray.init after HEAD_ANSWER_S (Ray's
    # own client would wait ~40 s)
    monkeypatch.setattr(reach, "HEAD_ANSWER_S", 1.0)
    with fake_server(GRPC_SETTINGS) as address:
        check_address(address)
        check_address(f"ray://{address}")
        asked: list[str] = []  # auto: the address `ray start` wrote is the one asked
        monkeypatch.setattr(startup, "check_head", asked.append)
        (tmp_path / "ray").mkdir()
        (tmp_path / "ray" / "ray_current_cluster").write_text(address + "\n")
        monkeypatch.delenv("RAY_ADDRESS", raising=False)
        monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
        check_address("auto")  # what `ray start` wrote, and something listens there
        assert asked == [address]
    check_address(None)


def test_an_ipv6_address_is_reached_without_its_brackets(monkeypatch: pytest.MonkeyPatch) -> None:
    """explore99: [::1]:6391 was looked up as a name ("Name or service not known")."""
    import socket

    import rltrain.runtime.ray.reach as reach

    asked: list[tuple[str, int]] = []

    def connect(where: tuple[str, int], timeout: float) -> None:
        asked.append(where)
        raise ConnectionRefusedError(111, "Connection refused")

    monkeypatch.setattr(socket, "create_connection", connect)
    with pytest.raises(RLTrainError, match=r"nothing answers at \[::1\]:6391 \(Connection"):
        reach.check_reachable("ray://[::1]:6391")
    assert asked == [("::1", 6391)]


def test_a_heads_own_port_given_as_a_ray_client_address_is_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """explore99: ray://HOST:6391 (a head's own port, not 6379) waited 31 s, then blamed the
    token; a head's calls answered there (or its token refused) say it in a second."""
    import rltrain.runtime.ray.reach as reach
    from rltrain.launch import check_address

    class AuthenticationError(Exception):  # (Ray's, by name: a head refused the token)
        pass

    with fake_server(GRPC_SETTINGS) as address:
        host, _, port = address.rpartition(":")
        for answer in (None, AuthenticationError("bad token")):
            monkeypatch.setattr(reach, "_ask", lambda _a, answer=answer: answer)
            with pytest.raises(RLTrainError) as e:
                check_address(f"ray://{address}")
            assert str(e.value) == (
                f"--address ray://{address}: {port} is the Ray head's own port: give "
                f"{address} without ray://, or ray://{host}:10001 (the Ray Client's port by "
                "default)"
            )
        monkeypatch.setattr(reach, "_ask", lambda _a: RuntimeError("Method not found"))
        check_address(f"ray://{address}")  # the Ray Client's server: not a head's calls


def test_a_server_that_is_not_ray_is_refused_at_once(
    capsys: pytest.CaptureFixture[str], ws: Path
) -> None:
    """Ray would retry a non-Ray service (here a web server, as the dashboard's port) without
    end; the check reads its first answer."""
    with fake_server(b"HTTP/1.0 400 Bad request\r\n\r\n") as address:
        words = [f"{address} is not a Ray head (it answered b'HTTP/1.0 ')", "6379 by default"]
        check(capsys, ws, ["train", CARTPOLE, "--address", address], words)


def test_exponent_numbers_are_numbers() -> None:
    """YAML 1.1 reads 1e-3 as a string; a float key still takes it (it used to be refused)."""
    from rltrain.config import load_config
    from rltrain.rl.config import TrainConfig

    cfg = load_config(TrainConfig, CARTPOLE, ["optimizer.lr=1e-3", "optimizer.eps=1E-8"])
    assert cfg.optimizer.lr == 0.001 and cfg.optimizer.eps == 1e-8


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        ("emptied", ["run/config.yaml: empty; a run's config.yaml holds its whole config"]),
        ("lr", ["run/config.yaml: optimizer.lr='banana': expected a number"]),
    ],
)
def test_a_run_config_edited_badly_is_named(
    capsys: pytest.CaptureFixture[str], ws: Path, edit: str, words: list[str]
) -> None:
    """The run's own file is named: the user did not give it on this command line."""
    config = ws / "run" / "config.yaml"
    data = yaml.safe_load(config.read_text())
    data["optimizer"]["lr"] = "banana"
    config.write_text("" if edit == "emptied" else yaml.safe_dump(data))
    check(capsys, ws, ["train", "--resume", "run"], words)
    check(capsys, ws, ["eval", "run"], words)


def test_plot_marks_given_before_the_runs_say_where_they_go(
    capsys: pytest.CaptureFixture[str], ws: Path
) -> None:
    """argparse's --marks takes every number after it, and then the runs (explore101: the
    error said only "expected a number, got 'runs/ppo_s0'")."""
    run = ws / "sweep" / "ppo_s0"
    run.mkdir(parents=True)
    words = [f"got '{run}' (a run folder: give --marks after the runs)"]
    check(capsys, ws, ["plot", "--marks", "100", str(run)], words)
