"""`rltrain train` / `rltrain eval` end to end through real Ray processes."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import rltrain
from rltrain.checkpoint import CheckpointError
from rltrain.cli import main

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
CFG = ROOT / "configs"


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def test_cartpole_a3c_learns_to_475(tmp_path: Path) -> None:
    """The learning test: 2 A3C workers reach a mean return of 475 over 20 episodes."""
    run_dir = tmp_path / "a3c"
    assert main(["train", str(CFG / "cartpole_a3c.yaml"), "--run-dir", str(run_dir)]) == 0
    s = summary(run_dir)
    assert s["stopped_by"] == "mean_return", s
    assert s["mean_return"] >= 475
    assert s["episodes"] >= 20 and s["updates"] > 0


def test_cartpole_appo_learns_to_475_and_eval_uses_its_normaliser(tmp_path: Path) -> None:
    """The APPO learning test. Its policy reads normalised observations, so a checkpoint played
    without the run's normalisation statistics would fail: eval must score like training."""
    run_dir = tmp_path / "appo"
    assert main(["train", str(CFG / "cartpole_appo.yaml"), "--run-dir", str(run_dir)]) == 0
    s = summary(run_dir)
    assert s["stopped_by"] == "mean_return", s
    assert s["mean_return"] >= 475
    last = sorted((run_dir / "checkpoints").glob("ckpt-*.pt"))[-1]
    state = torch.load(last, weights_only=True)
    assert state["shards"][0]["norm"]["obs"]["count"] >= s["env_steps"] * 0.9
    from rltrain.config import load_config
    from rltrain.rl.config import TrainConfig
    from rltrain.rl.evaluate import evaluate

    cfg = load_config(TrainConfig, run_dir / "config.yaml")
    # 5 sampled episodes of the final checkpoint scored 500 mostly, 345-374 once in a few
    # suites and 171 once (the updates in flight at the stop land in it)
    assert evaluate(cfg, run_dir, episodes=5).mean >= 100
    # ... through the checkpoint's statistics: shifted, the same parameters fall apart. (With
    # no statistics at all, mean 0 and variance 1, a CartPole policy still scored 437-480:
    # a score alone does not show that eval reads them.)
    state["shards"][0]["norm"]["obs"]["mean"] += 100.0
    torch.save(state, last)
    assert evaluate(cfg, run_dir, episodes=5).mean < 50


def test_cartpole_gorila_learns(tmp_path: Path) -> None:
    """The Gorila learning test: DQN actors, replay and a learner reach a mean of 120, five
    times a random policy's (CI's budget: 200 took 40 s on 2 cores, 475 78-151 s;
    `benchmarks/time_to_solve.py --algos dqn` times it)."""
    run_dir = tmp_path / "gorila"
    args = ["train", str(CFG / "cartpole_gorila.yaml"), "--run-dir", str(run_dir)]
    assert main([*args, "--set", "stop.mean_return=120"]) == 0
    s = summary(run_dir)
    assert s["stopped_by"] == "mean_return", s
    assert s["mean_return"] >= 120
    assert s["replay_bytes"] > 0
    acc = EventAccumulator(str(run_dir / "tb"), size_guidance={"scalars": 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"replay/size", "replay/sampled_per_s", "dqn/epsilon", "dqn/q_mean", "loss/td"} <= tags
    assert {"episode/return", "perf/env_fps", "ps/version"} <= tags
    assert main(["eval", str(run_dir), "--episodes", "2"]) == 0  # greedy in the Q-values


@pytest.mark.parametrize("algo", ["impala", "a2c", "ppo"])
def test_short_runs_write_tensorboard_checkpoint_summary(
    tmp_path: Path, no_ray: None, algo: str
) -> None:
    """On the process runtime (auto, on one machine), without Ray."""
    run_dir = tmp_path / algo
    config = CFG / {"impala": "cartpole_impala.yaml", "ppo": "cartpole_ppo.yaml"}.get(
        algo, "cartpole_a3c.yaml"
    )
    argv = ["train", str(config), "--run-dir", str(run_dir), "--set", f"algo.name={algo}"]
    argv += ["--set", "stop.max_env_steps=6000", "--set", "stop.mean_return=null"]
    argv += ["--set", "log_every_seconds=0.2"]
    assert main(argv) == 0
    s = summary(run_dir)
    assert s["stopped_by"] == "max_env_steps"
    for key in (
        "wall_seconds",
        "env_steps",
        "env_frames",
        "episodes",
        "episodes_at_stop",
        "mean_return",
        "best_mean_return",
        "updates",
        "mean_staleness",
    ):
        assert key in s
    assert s["env_steps"] >= 6000 and s["env_frames"] == s["env_steps"]
    # the run's average, as the live line gives it (explore98: the docs said so, it was not)
    w, frames = s["wall_seconds"], s["env_frames"]  # (w rounded to 0.01 s: a short run's)
    assert frames / (w + 0.006) <= s["frames_per_second"] <= frames / (w - 0.006)
    assert s["runtime"]["backend"] == "process"
    assert s["updates_applied"] > 0 and s["episodes"] > 0
    assert s["server_rule"] == ("async" if algo == "impala" else "sync")  # a2c/ppo: a barrier
    assert s["server_staleness"] == "none"
    marks = s["startup"]  # seconds from the command (Ray starts beside the env probe)
    assert set(marks) == {"trainer", "runtime", "server", "first_step", "first_result"}
    assert max(marks["trainer"], marks["runtime"]) <= marks["server"] <= marks["first_step"]
    assert marks["first_step"] <= marks["first_result"]
    assert s["startup_seconds"] == marks["first_result"]
    if algo in ("a2c", "ppo"):
        assert s["mean_staleness"] == 0  # the hard barrier: every update is fresh
    assert ("mean_actor_lag" in s) == (algo == "impala")  # the actors' lag, in versions
    assert s.get("mean_actor_lag", 1) > 0  # (a rollout acts a version or more behind)
    assert list((run_dir / "checkpoints").glob("ckpt-*.pt"))
    acc = EventAccumulator(str(run_dir / "tb"), size_guidance={"histograms": 0, "scalars": 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {
        "episode/return",
        "episode/length",
        "perf/env_fps",
        "perf/learner_updates_per_s",
        "ps/version",
        "loss/policy",
        "loss/value",
        "loss/entropy",
        "loss/grad_norm",
        "net/bytes_pushed",
        "net/bytes_pulled",
    } <= tags
    assert s["bytes_pushed"] > 0 and s["bytes_pulled"] > 0  # float32 pushes and pulls counted
    if algo == "ppo":
        assert {"loss/kl", "loss/clip_fraction"} <= tags
    else:  # a2c's KL of its policy against itself, impala's lag_kl again (explore88)
        assert not {"loss/kl", "loss/clip_fraction"} & tags
    assert "ps/staleness" in acc.Tags()["histograms"]
    assert {"config/text_summary", "env/protocol/text_summary"} <= set(acc.Tags()["tensors"])


def test_resume_continues_counters_and_eval_plays_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    cfg = str(CFG / "cartpole_a3c.yaml")
    base = ["--set", "stop.mean_return=null"]
    evals = ["--set", "eval.every_steps=1000", "--set", "eval.episodes=2"]  # a Ray evaluator
    first_argv = ["train", cfg, "--run-dir", str(run_dir), *base, *evals]
    assert main([*first_argv, "--set", "stop.max_env_steps=3000"]) == 0
    first = summary(run_dir)
    ckpt = sorted((run_dir / "checkpoints").glob("ckpt-*.pt"))[-1]
    state = torch.load(ckpt, weights_only=True)  # (read now: the resumed session's evaluations
    version, steps_then = state["shards"][0]["version"], state["counters"]["env_steps"]  # may
    # write checkpoints enough that checkpoint.keep prunes this one)

    capsys.readouterr()
    assert main(["train", "--resume", str(run_dir), *base, "--set", "stop.max_env_steps=6000"]) == 0
    out = capsys.readouterr().out
    assert "resumed with config changes: stop.max_env_steps: 3000 -> 6000\n" in out
    said = f"resuming from {ckpt.name}: {first['env_steps']:,} env steps, "  # (explore97: which)
    assert said in out
    second = summary(run_dir)
    assert second["env_steps"] >= 6000 > first["env_steps"] >= 3000
    assert first["resumed_changes"] == []  # each session's changes, where it resumed
    said = ["stop.max_env_steps: 3000 -> 6000"]
    assert second["resumed_changes"] == [{"env_steps": steps_then, "changes": said}]
    assert second["updates"] > first["updates"]
    assert second["episodes"] >= first["episodes"]
    newest = sorted((run_dir / "checkpoints").glob("ckpt-*.pt"))[-1]
    newest_state = torch.load(newest, weights_only=True)
    assert newest_state["shards"][0]["version"] > version
    assert newest_state["changes"] == second["resumed_changes"]  # (carried to the next)
    assert newest_state["stop"]["stopped_by"] == "max_env_steps"  # (the final one keeps its stop)
    # the evaluations of both sessions, in one file; best.pt is the best of them
    records = [json.loads(x) for x in (run_dir / "evals.jsonl").read_text().splitlines()]
    assert first["eval"]["evaluations"] >= 1 and second["eval"]["evaluations"] >= 1
    assert len(records) == first["eval"]["evaluations"] + second["eval"]["evaluations"]
    best = torch.load(run_dir / "checkpoints" / "best.pt", weights_only=True)["eval"]
    assert best["mean_return"] == max(r["mean_return"] for r in records)

    # resuming under another server layout is refused before anything starts
    more = ["--set", "stop.max_env_steps=9000"]
    assert main(["train", "--resume", str(run_dir), "--set", "server.shards=2", *more]) == 2
    assert "keep server.shards" in capsys.readouterr().err
    # and so is a run that already met its stop criterion (every process would start for none)
    assert main(["train", "--resume", str(run_dir)]) == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith(
            f"already met stop.max_env_steps=6000 (it has {second['env_steps']:,} steps); "
            "raise it (0: no limit) to train on: --set stop.max_env_steps=..."
        )
    )
    # but a run killed in its final evaluation (its final checkpoint written, no summary.json)
    # is finished by a --resume: that evaluation and summary.json, no more training
    (run_dir / "summary.json").unlink()
    lines = (run_dir / "evals.jsonl").read_text().splitlines()
    assert json.loads(lines[-1])["at_stop"]  # the final evaluation: the one killed
    (run_dir / "evals.jsonl").write_text("".join(x + "\n" for x in lines[:-1]))
    assert main(["train", "--resume", str(run_dir)]) == 0
    said = capsys.readouterr()
    assert "the run ended before its summary.json" in said.out + said.err
    finished = summary(run_dir)
    assert (finished["env_steps"], finished["updates"]) == (second["env_steps"], second["updates"])
    assert finished["stopped_by"] == "max_env_steps" and finished["eval"]["last"]["at_stop"]
    assert sorted((run_dir / "checkpoints").glob("ckpt-*.pt"))[-1] == newest
    with pytest.raises(CheckpointError, match=r"to train on: stop__max_env_steps=\.\.\.$"):
        rltrain.train(resume=run_dir)  # the Python API's keyword
    # and so is another optimizer: Adam's moments mean nothing to SGD (or crash it)
    assert main(["train", "--resume", str(run_dir), "--set", "optimizer.name=sgd"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("rltrain: error: optimizer.name=sgd: the run at ") and err.endswith(
        "has optimizer.name=adam, which a resumed run keeps; start a new run to change it"
    )
    # and another action set (its policy head has another size)
    assert main(["train", "--resume", str(run_dir), "--set", "env.full_action_space=true"]) == 2
    assert "which a resumed run keeps" in capsys.readouterr().err
    # and another frame skip (the run's frames are counted at one)
    assert main(["train", "--resume", str(run_dir), "--set", "env.frame_skip=2"]) == 2
    assert "has env.frame_skip=4, which a resumed run keeps" in capsys.readouterr().err

    capsys.readouterr()
    assert main(["eval", str(run_dir), "--episodes", "3", "--video"]) == 0
    out = capsys.readouterr().out
    assert "raw score mean" in out and "3 episodes" in out
    assert list(run_dir.glob("eval-v*.mp4"))  # H.264 through imageio-ffmpeg


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["train", str(CFG / "cartpole_a3c.yaml"), "--set", "env.id=CartPol-v1"], ["CartPole-v1"]),
        (["train", str(CFG / "cartpole_a3c.yaml"), "--set", "algo.name=x"], ["algo.name='x'"]),
        (["train"], ["CONFIG"]),
        (
            [
                "train",
                str(CFG / "cartpole_a3c.yaml"),
                "--set",
                "server.rule=soft_sync",
                "--set",
                "server.k=5",
            ],
            ["server.k=5", "exceeds"],
        ),
        (["eval", "/nonexistent/run"], ["not a run directory"]),
        (["train", "--resume", "/nonexistent/run"], ["not a run directory"]),
    ],
)
def test_bad_input_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], words: list[str]
) -> None:
    run_dir = tmp_path / "never"
    extra = (
        ["--run-dir", str(run_dir)]
        if argv[0] == "train" and len(argv) > 1 and "--resume" not in argv
        else []
    )
    assert main([*argv, *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("rltrain: error:") and "\n" not in err
    for w in words:
        assert w in err
    assert not run_dir.exists()


def stopped_at_475(**counts: int) -> dict[str, Any]:
    """summary.json of a run its mean return over 20 episodes stopped (``counts``: episodes)."""
    return {
        "stopped_by": "mean_return",
        "wall_seconds": 12.0,
        "env_steps": 4096,
        "mean_return": 476.25,
        "mean_window": 20,
        "mean_episodes": 20,
        "updates": 10,
        "faults": {},
        **counts,
    }


def test_the_final_line_separates_the_stops_episodes_from_those_in_flight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The mean is the one the stop saw; episodes that the work in flight then finished are
    counted too, and the line says how many of them there were."""
    from rltrain import cli

    fake = stopped_at_475(episodes=31, episodes_at_stop=28)
    monkeypatch.setattr(cli, "run_train", lambda *a: (tmp_path, fake))
    assert main(["train", str(CFG / "cartpole_a3c.yaml")]) == 0
    out = capsys.readouterr().out
    assert "31 episodes (3 of them ended in the work in flight after the stop), mean" in out
    assert "mean return (last 20 episodes) 476.25;" in out
    fake["final_mean_return"] = 470.5  # with the 3 late ones: what the last status line showed
    assert main(["train", str(CFG / "cartpole_a3c.yaml")]) == 0
    out = capsys.readouterr().out
    assert "476.25 at the stop, 470.50 with the 3 after it (the last status" in out
    fake["episodes_at_stop"] = 31
    assert main(["train", str(CFG / "cartpole_a3c.yaml")]) == 0
    out = capsys.readouterr().out
    assert "4,096 steps, 31 episodes, mean return (last 20 episodes) 476.25;" in out


def test_a_stop_on_a_short_training_mean_says_how_to_score_the_policy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 20-episode training mean is a quick stop, not a score (Taxi-v4 stopped at 7.05 and
    evaluated at -2.9): the run says how to score it, unless its evaluations did, or its
    window was Gymnasium's 100 episodes, or it stopped on something else."""
    from rltrain import cli

    fake = stopped_at_475(episodes=40)
    monkeypatch.setattr(cli, "run_train", lambda *a: (tmp_path, fake))
    advice = f"rltrain eval {tmp_path} --episodes 100 scores the policy"
    assert main(["train", str(CFG / "cartpole_a3c.yaml")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1].startswith("a mean of 20 training episodes is a quick stop, not a score")
    assert advice in out[-1]
    scored = ({"mean_window": 100}, {"stopped_by": "max_seconds"}, {"eval": {"evaluations": 3}})
    for edit in scored:
        monkeypatch.setattr(cli, "run_train", lambda *a, edit=edit: (tmp_path, {**fake, **edit}))
        assert main(["train", str(CFG / "cartpole_a3c.yaml")]) == 0
        assert advice not in capsys.readouterr().out


def test_the_final_line_of_a_failed_run_counts_the_fault_that_stopped_it(tmp_path: Path) -> None:
    """A run an env's error stopped said "faults: none": the counters are the faults it
    survived (restarts), not the one it did not."""
    from rltrain.rl.run.summary import final_line
    from rltrain.rundir import write_summary

    fake = {"stopped_by": "fault", "wall_seconds": 2.0, "env_steps": 0, "episodes": 0}
    fake |= {"mean_return": None, "updates": 0, "faults": {}}
    write_summary(tmp_path, fake)
    assert "; faults: the one that stopped it; summary.json" in final_line(fake, tmp_path)
    fake["faults"] = {"actor_restarts": 2}
    write_summary(tmp_path, fake)
    line = final_line(fake, tmp_path)
    assert "; faults: the one that stopped it, after actor_restarts 2; summary" in line
    fake["stopped_by"] = "max_env_steps"
    assert "; faults: actor_restarts 2; tensorboard" in final_line(fake, tmp_path)  # (unwritten:
    write_summary(tmp_path, fake)  # review 86b, an older session's summary.json is not it)
    assert "; faults: actor_restarts 2; summary.json" in final_line(fake, tmp_path)


def test_the_mean_at_a_stop_before_any_episode_ended_is_none() -> None:
    """Pendulum stopped at 100 steps: no episode at the stop, 16 ended in the work in flight;
    summary.json's mean_return (what the stop judged) said their mean, not null."""
    from rltrain.rl.run.counters import Counters
    from rltrain.rl.run.summary import SessionRecord

    record = SessionRecord()
    assert record.judged_mean(-1183.7) == -1183.7  # (no stop yet: the mean so far)
    record.stop("max_env_steps", Counters(), 20)
    assert record.episodes_at_stop == 0 and record.judged_mean(-1183.7) is None


def test_the_mean_says_how_many_episodes_it_is_over() -> None:
    """A run that ended fewer episodes than the window: summary.json's mean_window (100) read
    as if mean_return were over 100 episodes; mean_episodes says it was over 3."""
    from rltrain.rl.run.counters import Counters
    from rltrain.rl.run.summary import SessionRecord

    counters = Counters()
    counters.recent_returns = [1.0, 2.0, 3.0]
    record = SessionRecord()
    record.stop("max_seconds", counters, 100)
    assert record.mean_count == 3 and record.mean_at_stop == 2.0
    counters.recent_returns = [float(i) for i in range(150)]
    record.stop("max_seconds", counters, 100)
    assert record.mean_count == 100


def test_a_bug_leaves_its_traceback_in_the_run_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An exception no part of the run expects is a bug: it still ends the command with its
    traceback, and now also leaves it in RUN/failure.log (a run piped to `| head` lost it)."""
    from rltrain.rl.run import train as trainer

    def broken(*_: Any) -> None:
        raise RuntimeError("boom in the driver loop")

    monkeypatch.setattr(trainer, "drive", broken)
    run = tmp_path / "run"
    argv = ["train", str(ROOT / "configs" / "cartpole_ppo.yaml"), "--run-dir", str(run)]
    with pytest.raises(RuntimeError, match="boom in the driver loop"):
        main([*argv, "--set", "runtime.backend=local"])
    log = (run / "failure.log").read_text()
    assert log.startswith("Traceback") and "RuntimeError: boom in the driver loop" in log
    assert f"its traceback is in {run / 'failure.log'}" in capsys.readouterr().err


def test_an_exception_through_a_module_of_imports_is_said_to_be_in_your_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """explore86: a NameError in a loss of one's own was called rltrain's bug."""
    import types

    from rltrain.failure import keep_traceback

    mine = tmp_path / "mine.py"
    mine.write_text("def loss():\n    return undefined_name\n")
    module = types.ModuleType("mine")
    module.__file__ = str(mine)
    exec(compile(mine.read_text(), str(mine), "exec"), module.__dict__)
    monkeypatch.setitem(sys.modules, "mine", module)
    said: list[str] = []
    try:
        module.loss()
    except NameError as e:
        keep_traceback(tmp_path, e, said.append, ("mine",))
        keep_traceback(tmp_path, e, said.append, ())
    log = tmp_path / "failure.log"
    assert said == [
        f"an error in your code (at mine.py:2, in loss): its traceback is in {log}",
        f"an internal error (a bug; please report it): its traceback is in {log}",
    ]
