"""Stopping `rltrain train` with a signal, and going on with --resume.

The command runs as a real subprocess and gets a real SIGINT / SIGTERM, as from a terminal or
a cluster scheduler.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from test_leftovers import assert_nothing_left, wait_for_checkpoint
from test_leftovers import train as train_marked

from rltrain.checkpoint import latest_checkpoint
from rltrain.cli import main

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
CONFIG = str(ROOT / "configs" / "cartpole_a3c.yaml")


def start_training(run_dir: Path, *extra: str) -> subprocess.Popen:
    argv = [sys.executable, "-m", "rltrain.cli", "train", CONFIG, "--run-dir", str(run_dir)]
    argv += ["--set", "stop.mean_return=null", "--set", "stop.max_seconds=300", *extra]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


def scalars(event_file: Path, tag: str) -> list[tuple[int, float]]:
    acc = EventAccumulator(str(event_file), size_guidance={"scalars": 0})
    acc.Reload()
    if tag not in acc.Tags()["scalars"]:
        return []
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def test_sigint_then_resume_continues_every_counter(tmp_path: Path) -> None:
    """On the default runtime (the process runtime on one machine): its children ignore the
    terminal's SIGINT, the trainer stops them after its final checkpoint, and nothing is left
    behind (no process, no pymp-* directory: test_leftovers). On Ray: the SIGTERM test below
    (the trainer's handling of the interrupt and --resume are the runtimes' shared code)."""

    run_dir = tmp_path / "run"
    proc, session = train_marked(
        tmp_path,
        "--set",
        "stop.max_seconds=300",
        "--set",
        "checkpoint.every_seconds=1",
        "--set",
        "env.kwargs={max_episode_steps: 50}",  # games end soon after the resume, too
    )
    wait_for_checkpoint(proc, run_dir)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert "final checkpoint" in err
    assert_nothing_left(tmp_path, session)

    first = json.loads((run_dir / "summary.json").read_text())
    assert first["stopped_by"] == "interrupt"
    steps, episodes = first["env_steps"], first["episodes"]
    assert steps > 0 and episodes > 0
    ckpt = latest_checkpoint(run_dir)
    state = torch.load(ckpt, weights_only=True)
    version = int(state["shards"][0]["version"])
    assert state["counters"]["env_steps"] == steps  # the final checkpoint is the summary's state
    assert state["counters"]["episodes"] == episodes
    assert version > 0 and int(ckpt.stem.split("-")[1]) == version
    # the updates in flight at the Ctrl-C were taken in: every one the server applied (one
    # version each, a3c's asynchronous rule) is counted
    assert state["counters"]["applied"] == first["updates_applied"] == version
    old_events = set((run_dir / "tb").glob("events.*"))

    # enough for episodes to end: one of the 2 workers takes 1000 steps or more, over 125 on
    # each of its 8 envs (an episode is 50 at most here)
    more = steps + 2000
    resume = ["train", "--resume", str(run_dir), "--set", f"stop.max_env_steps={more}"]
    assert main(resume) == 0
    second = json.loads((run_dir / "summary.json").read_text())
    assert second["stopped_by"] == "max_env_steps"
    assert second["env_steps"] >= more

    # the resumed session's TensorBoard file: steps go on from the interrupted run's, and its
    # episodes are exactly the new ones (nothing counted twice, nothing reset to zero)
    (new_events,) = set((run_dir / "tb").glob("events.*")) - old_events
    returns = scalars(new_events, "episode/return")
    assert returns and min(s for s, _ in returns) > steps
    assert len(returns) == second["episodes"] - episodes
    versions = scalars(new_events, "ps/version")
    assert versions and min(v for _, v in versions) >= version
    final = torch.load(latest_checkpoint(run_dir), weights_only=True)
    assert final["shards"][0]["version"] > version
    assert final["counters"]["updates"] > state["counters"]["updates"]


def test_sigterm_stops_a_ray_run_gracefully(tmp_path: Path) -> None:
    """On Ray, whose ray.init replaces the SIGTERM handler (rltrain installs its own again once
    Ray is up): SIGTERM, as from a cluster scheduler, ends the run as Ctrl-C does, with a final
    checkpoint that holds summary.json's counters."""
    run_dir = tmp_path / "run"
    proc = start_training(
        run_dir,
        "--set",
        "checkpoint.every_seconds=1",
        "--set",
        "runtime.backend=ray",
        "--set",
        "actors=1",  # one process of Ray's to start, not two (seconds on 2 cores)
    )
    wait_for_checkpoint(proc, run_dir)  # mid-training: a checkpoint past version 0 is written
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "SIGTERM" in err and "Traceback" not in err
    assert "runtime: local ray" in out
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stopped_by"] == "interrupt" and summary["env_steps"] > 0
    placed = summary["runtime"]["placement"]  # the node of every process, the shard's too
    assert placed["shard"] and all(map(all, placed.values())), placed
    ckpt = latest_checkpoint(run_dir)
    state = torch.load(ckpt, weights_only=True)
    assert state["counters"]["env_steps"] == summary["env_steps"]
    assert state["counters"]["episodes"] == summary["episodes"]
    assert int(ckpt.stem.split("-")[1]) == int(state["shards"][0]["version"]) > 0


@pytest.mark.parametrize("after", [0.8, 2.0])
def test_ctrl_c_in_start_up_stops_cleanly_and_says_what_is_left(
    tmp_path: Path, after: float
) -> None:
    """A terminal's Ctrl-C reaches the whole process group, the forkserver and the children
    still being built included: no traceback from any of them, and ``--resume`` is offered
    only where a checkpoint was written (a stop before the server was up writes none)."""
    run_dir = tmp_path / "run"
    proc, session = train_marked(tmp_path, "--set", "stop.max_seconds=300")  # its own group
    try:
        # from its first line, which it prints with its handler in place: a loaded box's
        # Python took 0.8 s to import rltrain itself, and the Ctrl-C landed in an import (a
        # KeyboardInterrupt traceback, as any program's then: session 87's CI)
        assert proc.stdout is not None
        first = proc.stdout.readline()
        time.sleep(after)  # the forkserver imports torch; the trainer probes, starts the server
        os.killpg(session, signal.SIGINT)
        out, err = proc.communicate(timeout=120)
        out = first + out
        assert proc.returncode == 130, err
        assert "Traceback" not in err + out
        if latest_checkpoint(run_dir) is None:  # stopped before the server was up, or before
            assert "continue with" not in err and "checkpoints/" not in out  # the trainer's
            assert "no checkpoint was written" in err or "rltrain: interrupted" in err  # start
            assert "a final checkpoint" not in err  # (explore99: promised, then none written)
        else:
            assert f"continue with: rltrain train --resume {run_dir}" in err
        assert_nothing_left(tmp_path, session)  # no child being built, no pymp-* directory
    finally:  # whatever happened, nothing of it outlives the test
        with contextlib.suppress(ProcessLookupError):
            os.killpg(session, signal.SIGKILL)


def test_a_signal_in_start_up_says_what_stays() -> None:
    """Before the shards hold the run's state nothing is checkpointed: a fresh run has none,
    a resumed one keeps its own (review 85: it was told "nothing trained yet")."""
    from rltrain.rl.run.summary import interrupted_note

    assert interrupted_note(True, True).endswith("a final checkpoint, summary.json")
    assert "(no checkpoint: nothing trained)" in interrupted_note(False, False)
    assert "(its checkpoints stay as they were)" in interrupted_note(False, True)


def test_a_second_signal_stops_at_once(tmp_path: Path) -> None:
    """At once, and still with nothing left behind: the children see the trainer gone."""
    run_dir = tmp_path / "run"
    proc, session = train_marked(
        tmp_path, "--set", "stop.max_seconds=300", "--set", "checkpoint.every_seconds=1"
    )
    wait_for_checkpoint(proc, run_dir)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.3)  # while the final checkpoint and the processes' shutdown are under way
    proc.send_signal(signal.SIGINT)
    t = time.time()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert "stopped at once" in err or (run_dir / "summary.json").is_file()
    assert time.time() - t < 30
    assert_nothing_left(tmp_path, session)


def test_a_resumed_log_hides_what_the_stopped_session_logged_after_its_checkpoint(
    tmp_path: Path,
) -> None:
    """A crash leaves episodes logged after the last checkpoint; the resumed session counts
    on from the checkpoint's steps, and TensorBoard shows its episodes, not the orphans."""
    from rltrain.rl.config import StopConfig, TrainConfig
    from rltrain.rl.rollout import WorkStats
    from rltrain.rl.run.tblog import TrainLogger

    cfg = TrainConfig(stop=StopConfig(max_seconds=1))
    first = TrainLogger(tmp_path, cfg, {}, 1)
    for step in (10, 20, 30):  # the checkpoint was at 20; the crash came after 30
        first.absorb(WorkStats(episode_returns=[float(step)], episode_lengths=[1]), step)
    first.close()
    time.sleep(1.1)  # a new event file: names are by the second
    resumed = TrainLogger(tmp_path, cfg, {}, 1, start_steps=20)
    resumed.absorb(WorkStats(episode_returns=[25.0], episode_lengths=[1]), 25)
    resumed.close()
    assert scalars(tmp_path, "episode/return") == [(10, 10.0), (20, 20.0), (25, 25.0)]


def test_a_resumed_session_draws_new_seeds_and_keeps_the_runs(tmp_path: Path) -> None:
    """Its actors reset their envs with new seeds (not the first session's episodes again);
    config.yaml keeps the run's seed."""

    from rltrain.checkpoint import save_checkpoint
    from rltrain.config import load_config, to_dict
    from rltrain.ps.server import make_shards
    from rltrain.rl.config import TrainConfig, server_settings
    from rltrain.rl.env_spec import initial_params, probe_env
    from rltrain.rl.run.counters import Counters
    from rltrain.rl.run.train import Trainer
    from rltrain.rundir import write_config

    run = tmp_path / "run"
    run.mkdir()
    cfg = load_config(TrainConfig, ROOT / "configs" / "cartpole_a3c.yaml")
    spec = probe_env(cfg)
    _, shards = make_shards(initial_params(cfg, spec), cfg.optimizer, server_settings(cfg), 2)
    counters = Counters(env_steps=5000).state()
    state = {"shards": [s.state_dict() for s in shards], "counters": counters}
    save_checkpoint(run, 7, {**state, "config": to_dict(cfg)}, keep=1)
    write_config(run, cfg)
    seeds = {Trainer(cfg, run, True, spec).cfg.seed for _ in range(2)}
    assert len(seeds) == 1 and cfg.seed not in seeds  # new, and the same for the same step
    assert load_config(TrainConfig, run / "config.yaml").seed == cfg.seed


def test_a_closed_terminal_stops_a_run_as_ctrl_c_does(tmp_path: Path) -> None:
    """SIGHUP, the terminal (or ssh session) closed: it killed the trainer at once (exit 129,
    no final checkpoint, no summary.json) and the children with it. Now the trainer stops as
    on Ctrl-C and its children ignore the hangup, so the final checkpoint reads the shards.
    The run is the session leader of a pseudo-terminal, whose close sends the hangup."""
    import pty
    import select

    run_dir = tmp_path / "run"
    argv = [sys.executable, "-m", "rltrain.cli", "train", CONFIG, "--run-dir", str(run_dir)]
    argv += ["--set", "stop.mean_return=null", "--set", "stop.max_seconds=300"]
    argv += ["--set", "checkpoint.every_seconds=1"]
    pid, fd = pty.fork()
    if pid == 0:  # (the child: a new session whose terminal is the pty)
        os.execve(sys.executable, argv, {**os.environ, "TMPDIR": str(tmp_path)})
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not list((run_dir / "checkpoints").glob("ckpt-*[1-9]*")):
            if select.select([fd], [], [], 0.2)[0]:  # (a pty that is not read blocks its writer)
                with contextlib.suppress(OSError):
                    os.read(fd, 65536)
        os.close(fd)  # the hangup
        ended, status = 0, 0
        while time.time() < deadline and not ended:
            ended, status = os.waitpid(pid, os.WNOHANG)
            time.sleep(0.2)
        assert ended and os.waitstatus_to_exitcode(status) == 130
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["stopped_by"] == "interrupt" and summary["env_steps"] > 0
        state = torch.load(latest_checkpoint(run_dir), weights_only=True)
        assert state["counters"]["env_steps"] == summary["env_steps"]  # the final checkpoint
        assert_nothing_left(tmp_path, pid)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)


def test_the_commands_said_at_the_end_paste_as_they_are(tmp_path: Path) -> None:
    """explore89: on a path with spaces, "continue with: rltrain train --resume ..." resumed
    the path up to its first space when pasted."""
    import shlex

    from rltrain.checkpoint import save_checkpoint
    from rltrain.ps.config import OptimizerConfig, ServerConfig
    from rltrain.ps.server import LocalServer
    from rltrain.rl.run.summary import interrupted_advice

    run = tmp_path / "my runs" / "ü ñ run"
    run.mkdir(parents=True)
    server = LocalServer(torch.zeros(3), OptimizerConfig(name="sgd"), ServerConfig(), 1)
    state = {"shards": server.state_dicts(), "counters": {}, "config": {}}
    save_checkpoint(run, 0, state, keep=1)
    said = interrupted_advice({"stopped_by": "interrupt"}, run, True)
    assert shlex.split(said.partition(": ")[2]) == ["rltrain", "train", "--resume", str(run)]


def test_a_ctrl_c_in_a_long_learn_counts_every_push_the_server_applied(tmp_path: Path) -> None:
    """appo's learner process holds the shards: a Ctrl-C while it learns a long batch ends the
    batch after its minibatch in progress (Learner.interrupt), so the learn returns within the
    settle and its pushes are counted: summary.json's updates equal the final checkpoint's
    version (explore93: they were 0 against 12 when the learn outlasted the settle)."""
    run_dir = tmp_path / "run"
    appo = str(ROOT / "configs" / "cartpole_appo.yaml")
    argv = [sys.executable, "-m", "rltrain.cli", "train", appo, "--run-dir", str(run_dir)]
    argv += ["--set", "stop.mean_return=null", "--set", "stop.max_seconds=300"]
    argv += ["--set", "runtime.backend=process", "--set", "checkpoint.every_seconds=1"]
    argv += ["--set", "ppo.epochs=3000", "--set", "ppo.target_kl=0"]  # one learn: minutes
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for_checkpoint(proc, run_dir)  # (inside the first learn: its pushes are checkpointed)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "Traceback" not in err, err
    summary = json.loads((run_dir / "summary.json").read_text())
    ckpt = latest_checkpoint(run_dir)
    assert ckpt is not None
    version = int(ckpt.stem.split("-")[1])
    assert summary["updates"] == summary["updates_applied"] == version > 0, (summary, ckpt)
