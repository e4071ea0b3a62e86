"""eval.every_steps: evaluations during training, their records and checkpoints/best.pt."""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import json
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import rltrain
from rltrain.checkpoint import CheckpointError, latest_checkpoint, load_checkpoint, write_state
from rltrain.cli import main
from rltrain.config import load_config
from rltrain.faults import RunFailed
from rltrain.rl.config import TrainConfig
from rltrain.rl.evaluate import checkpoint_params, load_policy, play_episodes
from rltrain.rl.run import periodic
from rltrain.rl.run.periodic import (
    EVALS_FILE,
    EvalFailed,
    Evaluator,
    Flight,
    PeriodicEval,
)
from rltrain.rl.run.scores import best_record, best_score, scored_protocol
from rltrain.rundir import same_protocol
from rltrain.runtime import local

ROOT = Path(__file__).resolve().parents[1]
CARTPOLE = ROOT / "configs" / "cartpole_a3c.yaml"


def evals(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / EVALS_FILE).read_text().splitlines()]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A short local-backend CartPole run evaluated every 2,000 steps (about 3 s)."""
    run_dir = tmp_path_factory.mktemp("periodic") / "run"
    argv = ["train", str(CARTPOLE), "--run-dir", str(run_dir), "--set", "runtime.backend=local"]
    argv += ["--set", "stop.mean_return=null", "--set", "stop.max_env_steps=8000"]
    argv += ["--set", "eval.every_steps=2000", "--set", "eval.episodes=3"]
    assert main(argv) == 0
    return run_dir


def test_evaluations_are_recorded_every_interval(run: Path) -> None:
    records = evals(run)
    steps = [r["env_steps"] for r in records]
    # (due is checked on the driver's ticks, which a fast run may space by 2,000 steps or more)
    assert len(records) >= 2 and steps == sorted(steps)
    # one per interval crossed, never two in one: one in flight at a time
    assert len({s // 2000 for s in steps}) == len(steps)
    assert all(r["episodes"] == 3 and r["checkpoint"].startswith("ckpt-") for r in records)
    s = json.loads((run / "summary.json").read_text())
    assert s["eval"]["evaluations"] == len(records)
    assert s["eval"]["best_mean_return"] == max(r["mean_return"] for r in records)
    tb = EventAccumulator(str(run / "tb"))
    tb.Reload()
    points = tb.Scalars("eval/mean_return")
    assert [p.step for p in points] == steps
    assert [p.value for p in points] == pytest.approx([r["mean_return"] for r in records])
    # the run's end (max_env_steps) scored its final parameters too: the last checkpoint's
    final = load_checkpoint(sorted((run / "checkpoints").glob("ckpt-*.pt"))[-1])
    assert steps[-1] == s["env_steps"] == final["counters"]["env_steps"] >= 8000
    assert records[-1]["version"] == final["shards"][0]["version"]
    # the stop's own evaluation is said, and `rltrain plot --evals` gives it its own row
    assert records[-1]["at_stop"] and not any(r["at_stop"] for r in records[:-1])
    from rltrain.plot import plot_runs

    _, table = plot_runs([run], evals=True)
    assert table.splitlines()[-1].split("|")[1].strip().endswith("(stop)"), table


def test_best_checkpoint_holds_the_best_scoring_parameters(run: Path) -> None:
    records = evals(run)
    best = max(records, key=lambda r: r["mean_return"])
    state = load_checkpoint(run / "checkpoints" / "best.pt")
    assert state["eval"]["version"] == best["version"]
    assert state["eval"]["mean_return"] == best["mean_return"]
    assert best_score(best_record(run)[0]) == best["mean_return"]
    _, version, values, _ = checkpoint_params(run, "best")
    assert version == best["version"] and values.numel() > 0
    assert main(["eval", str(run), "--checkpoint", "best", "--episodes", "2"]) == 0
    policy = rltrain.load_policy(run, checkpoint="best")  # the Python API takes it too
    assert policy([0.0, 0.0, 0.0, 0.0]) in (0, 1)
    assert len(rltrain.evaluate(run, episodes=2, checkpoint="best").returns) == 2


def test_eval_json_gives_each_episode_and_the_line_s_figures(
    run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert main(["eval", str(run), "--checkpoint", "best", "--episodes", "3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)  # one object, nothing else on stdout
    again = rltrain.evaluate(run, episodes=3, checkpoint="best")
    assert out["returns"] == pytest.approx(list(again.returns)) and len(out["lengths"]) == 3
    assert out["mean"] == pytest.approx(again.mean) and out["min"] == min(out["returns"])
    assert out["checkpoint"] == "best.pt" and out["version"] == again.version
    assert (out["episodes"], out["seed"], out["video"]) == (3, again.seed, None)


def test_eval_of_the_best_checkpoint_replays_the_evaluation_that_chose_it(run: Path) -> None:
    """`rltrain eval` takes the run's eval.seed and eval.deterministic unless told otherwise."""
    best = load_checkpoint(run / "checkpoints" / "best.pt")["eval"]
    again = rltrain.evaluate(run, checkpoint="best")  # eval.episodes: 3
    assert again.seed == best["seed"] and not again.deterministic
    assert again.mean == pytest.approx(best["mean_return"], abs=1e-3)
    other = rltrain.evaluate(run, episodes=2, seed=7, deterministic=True, checkpoint="best")
    assert other.seed == 7 and other.deterministic


def test_eval_checkpoint_choice_errors_are_one_line(tmp_path: Path, run: Path) -> None:
    with pytest.raises(CheckpointError, match=r"nope.pt: no such file \(here, in .*; use latest"):
        checkpoint_params(run, "nope.pt")
    # a path as the run's folder names them (the error's own hint was refused from elsewhere)
    latest = latest_checkpoint(run)
    assert latest is not None
    for relative in (f"checkpoints/{latest.name}", latest.name):
        assert checkpoint_params(run, relative)[0] == latest
    (tmp_path / "checkpoints").mkdir()
    with pytest.raises(CheckpointError, match="a folder, not a file; use latest, best or"):
        checkpoint_params(run, str(tmp_path / "checkpoints"))
    with pytest.raises(CheckpointError, match=r"a folder, not a file \(here, in"):  # explore97
        checkpoint_params(run, "checkpoints")  # the run's own, named from elsewhere
    with pytest.raises(CheckpointError, match="written by runs with eval.every_steps > 0"):
        checkpoint_params(tmp_path, "best")
    assert main(["eval", str(run), "--checkpoint", str(tmp_path / "missing.pt")]) != 0


def test_a_finished_run_whose_checkpoints_are_gone_says_so(tmp_path: Path, run: Path) -> None:
    """explore107: a run with its checkpoints deleted had "none to evaluate yet", and a best.pt
    "written by runs with eval.every_steps > 0", where the run had both."""
    import shutil

    gone = tmp_path / "gone"
    shutil.copytree(run, gone)
    assert (gone / "summary.json").is_file() and (gone / "evals.jsonl").is_file()
    for f in (gone / "checkpoints").iterdir():
        f.unlink()
    with pytest.raises(CheckpointError, match=r"says it trained [\d,]+ steps: they were deleted"):
        checkpoint_params(gone)
    with pytest.raises(CheckpointError, match=r"holds \d+ evaluation\(s\): it was deleted or"):
        checkpoint_params(gone, "best")


def test_another_runs_checkpoint_trained_otherwise_is_refused(
    tmp_path: Path, run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`rltrain eval OTHER --checkpoint RUN/checkpoints/ckpt-*.pt` would play it with OTHER's
    config: refused where that config sees or builds the network otherwise (the env's
    kwargs, normalisation), played where it is the same."""
    import shutil

    ckpt = str(sorted((run / "checkpoints").glob("ckpt-*.pt"))[-1])
    for i, (old, new, key) in enumerate(
        [
            ("  kwargs: {}", "  kwargs: {sutton_barto_reward: true}", "env.kwargs"),
            ("  obs: always", "  obs: never", "normalize.obs"),
        ]
    ):
        other = tmp_path / f"other{i}"
        shutil.copytree(run, other)
        text = (run / "config.yaml").read_text()
        assert old in text
        (other / "config.yaml").write_text(text.replace(old, new))
        assert main(["eval", str(other), "--checkpoint", ckpt, "--episodes", "1"]) == 2
        err = capsys.readouterr().err
        assert key in err and f"rltrain eval {run} --checkpoint {ckpt}" in err, err
        with pytest.raises(CheckpointError, match="plays with its own run's config"):
            rltrain.load_policy(other, ckpt)
    same = tmp_path / "same"
    shutil.copytree(run, same)
    capsys.readouterr()
    assert main(["eval", str(same), "--checkpoint", ckpt, "--episodes", "1"]) == 0
    assert f", checkpoint {ckpt} (version" in capsys.readouterr().out  # (not its name alone)
    # a checkpoint without its config (an older rltrain's): its statistics still tell
    cfg = load_config(TrainConfig, run / "config.yaml", ["normalize.obs=never"])
    path, _, values, norm = checkpoint_params(run, ckpt)
    assert norm is not None and norm.obs is not None
    with pytest.raises(CheckpointError, match="trained on normalised observations"):
        load_policy(cfg, run, (path, values, norm), (4,), 2)
    # statistics of the returns alone (normalize.reward) are no observation normalisation
    load_policy(cfg, run, (path, values, dataclasses.replace(norm, obs=None)), (4,), 2)


def test_evaluator_plays_the_parameters_it_is_sent(run: Path) -> None:
    cfg = load_config(TrainConfig, run / "config.yaml")
    _, version, values, norm = checkpoint_params(run)
    ev = Evaluator(cfg)
    try:
        a = ev.score(version, values, norm)
        b = ev.score(version, values, norm)
    finally:
        ev.close()
    assert a.version == version and len(a.returns) == cfg.eval.episodes
    assert a.returns == b.returns  # the same seeds every time: scores that compare


class Log:
    """What PeriodicEval reads of the trainer's TensorBoard logger."""

    writer = None
    frames_per_step = 1


def fail(pe: PeriodicEval, checkpoint: str) -> None:
    """An evaluation in flight whose evaluator raised; polled."""
    future: cf.Future = cf.Future()
    future.set_exception(RuntimeError("the env\nbroke"))
    pe.flight = Flight(future, {}, checkpoint, 10, 1.0)
    pe.poll()


def test_a_failed_evaluation_costs_one_score_not_the_run(run: Path, tmp_path: Path) -> None:
    cfg = load_config(TrainConfig, run / "config.yaml")
    said: list[str] = []
    pe = PeriodicEval(cfg, tmp_path, local, 0, Log(), said.append)  # type: ignore[arg-type]
    fail(pe, "ckpt-1.pt")
    assert pe.flight is None and pe.remote is None
    assert said == [
        "evaluation of ckpt-1.pt failed (the env broke); the next one restarts the evaluator"
    ]
    assert not (tmp_path / EVALS_FILE).exists()
    assert pe.due(5000)  # the next one is still due
    fail(pe, "ckpt-2.pt")
    fail(pe, "ckpt-3.pt")  # the third in a row: given up
    assert said[-1].endswith("3 times in a row: no more evaluations in this run")
    assert not pe.due(10**9)
    # a run that was to stop on its evaluations cannot go on without them
    stops = load_config(TrainConfig, run / "config.yaml", ["stop.eval_mean_return=400"])
    pe = PeriodicEval(stops, tmp_path, local, 0, Log(), said.append)  # type: ignore[arg-type]
    fail(pe, "ckpt-1.pt")
    fail(pe, "ckpt-2.pt")
    with pytest.raises(RunFailed, match="3 times in a row: stop.eval_mean_return"):
        fail(pe, "ckpt-3.pt")


def test_an_evaluation_whose_episodes_never_end_fails_in_one_line(
    run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = load_config(TrainConfig, run / "config.yaml")
    _, version, values, norm = checkpoint_params(run)
    monkeypatch.setattr(periodic, "MAX_STEPS", 3)
    ev = Evaluator(cfg)
    try:
        with pytest.raises(EvalFailed, match="0 of 3 episodes ended in 3 steps of 3 envs"):
            ev.score(version, values, norm)
    finally:
        ev.close()


def test_killing_the_local_evaluator_ends_the_evaluation_it_plays(run: Path) -> None:
    """A thread cannot be killed: kill interrupts the play at its next step (one that would
    otherwise play 100,000 episodes)."""
    cfg = load_config(TrainConfig, run / "config.yaml", ["eval.episodes=100000"])
    _, version, values, norm = checkpoint_params(run)
    remote = local.Remote(Evaluator, cfg, role="worker")
    future = remote.call("score", version, values, norm)
    while not future.running():  # (it has started playing)
        time.sleep(0.01)
    time.sleep(0.2)
    remote.kill()
    with pytest.raises(EvalFailed, match=f"the evaluation of v{version} was stopped"):
        future.result(timeout=30)


def test_each_env_plays_its_share_of_the_episodes() -> None:
    """Not the first episodes to end: those favour short ones (SB3's evaluate_policy)."""

    class Env:  # env i ends an episode every i + 1 steps, scoring i
        num_envs = 4

        def __init__(self) -> None:
            self.t = 0

        def reset(self, seed: int) -> np.ndarray:
            return np.zeros((4, 1))

        def step(self, actions: np.ndarray) -> SimpleNamespace:
            self.t += 1
            ended = [i for i in range(4) if self.t % (i + 1) == 0]
            lengths = [i + 1 for i in ended]
            return SimpleNamespace(
                obs=np.zeros((4, 1)),
                episode_returns=[float(i) for i in ended],
                episode_lengths=lengths,
                episode_envs=ended,
            )

    class Policy:
        def act(self, obs: np.ndarray, gen: object, deterministic: bool = False) -> np.ndarray:
            return np.zeros(4, dtype=np.int64)

    returns, lengths = play_episodes(Env(), Policy(), 10, 0, 1000)  # type: ignore[arg-type]
    assert sorted(returns) == [0, 0, 0, 1, 1, 1, 2, 2, 3, 3]  # shares 3, 3, 2, 2
    assert lengths == [int(r) + 1 for r in returns]
    short, _ = play_episodes(Env(), Policy(), 10, 0, 4)  # type: ignore[arg-type]
    assert len(short) < 10  # the step budget ran out first


def test_the_end_of_a_run_scores_the_final_parameters_once(run: Path, tmp_path: Path) -> None:
    """finish with .final set: a run that stopped scores its final checkpoint unless the last
    evaluation (this session's, or a resumed run's last in evals.jsonl) scored it; an
    interrupted or failed run (wait=False) does not wait for one."""
    from torch.utils.tensorboard import SummaryWriter

    cfg = load_config(TrainConfig, run / "config.yaml")
    path = sorted((run / "checkpoints").glob("ckpt-*.pt"))[-1]
    final = (path, load_checkpoint(path))
    log = SimpleNamespace(writer=SummaryWriter(str(tmp_path / "tb")), frames_per_step=1)
    said: list[str] = []
    pe = PeriodicEval(cfg, tmp_path, local, 0, log, said.append)  # type: ignore[arg-type]
    pe.final = final
    pe.finish(wait=False)  # interrupted: no evaluation
    assert not (tmp_path / EVALS_FILE).exists() and pe.remote is None
    pe.final = final
    pe.finish(wait=True)
    (record,) = evals(tmp_path)
    assert record["checkpoint"] == path.name
    assert record["env_steps"] == final[1]["counters"]["env_steps"]
    assert said[0].startswith(f"final evaluation of {path.name}")
    assert (tmp_path / "checkpoints" / "best.pt").is_file() and pe.remote is None
    again = PeriodicEval(cfg, tmp_path, local, 0, log, said.append)  # type: ignore[arg-type]
    again.final = final
    again.finish(wait=True)  # (a resumed run that stopped at once) scored: once
    assert len(evals(tmp_path)) == 1
    log.writer.close()
    import copy

    untrained = copy.deepcopy(final[1])
    for shard in untrained["shards"]:
        shard["version"] = 0  # (a run stopped before its first update)
    fresh = PeriodicEval(cfg, tmp_path / "fresh", local, 0, log, said.append)  # type: ignore[arg-type]
    fresh.final = (path, untrained)
    fresh.finish(wait=True)
    assert said[-1] == f"no final evaluation: {path.name} holds the initial parameters"
    assert not (tmp_path / "fresh" / EVALS_FILE).exists()
    off = PeriodicEval(cfg, tmp_path / "off", local, 0, Log(), print)  # type: ignore[arg-type]
    off.every = 0  # (eval.every_steps: 0)
    off.final = final
    off.finish(wait=True)
    assert not (tmp_path / "off").exists()


def test_a_ctrl_c_in_the_final_wait_leaves_the_evaluation_out_and_says_why(
    run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ "Ctrl-C: do not wait": the run ends without that score, and summary.json's eval names
    the checkpoint left out (it said "it did not end", and summary.json nothing)."""
    cfg = load_config(TrainConfig, run / "config.yaml")
    path = sorted((run / "checkpoints").glob("ckpt-*.pt"))[-1]
    said: list[str] = []
    pe = PeriodicEval(cfg, tmp_path, local, 0, Log(), said.append)  # type: ignore[arg-type]
    pe.final = (path, load_checkpoint(path))

    from rltrain import signals

    lines: list[str] = []

    def ctrl_c(*_: object, **__: object) -> None:
        lines.append(signals._stopping)  # what a signal's line says meanwhile
        raise KeyboardInterrupt

    monkeypatch.setattr(pe, "poll", ctrl_c)
    pe.finish(wait=True)
    assert said[-1] == f"the evaluation of {path.name} is left out: Ctrl-C"
    assert pe.summary()["eval"]["left_out"] == path.name and pe.remote is None
    assert lines == [signals.FINAL_EVALUATION] and signals._stopping == signals.FINAL_CHECKPOINT
    again = PeriodicEval(cfg, tmp_path / "b", local, 0, Log(), said.append)  # type: ignore[arg-type]
    again.final = (path, load_checkpoint(path))
    monkeypatch.setattr(again, "submit", ctrl_c)  # Ctrl-C as the evaluator starts
    again.finish(wait=True)
    assert said[-1] == f"the evaluation of {path.name} is left out: Ctrl-C"
    assert again.summary()["eval"]["left_out"] == path.name and again.remote is None


def test_resume_keeps_the_best_score(run: Path, tmp_path: Path) -> None:
    cfg = load_config(TrainConfig, run / "config.yaml")
    pe = PeriodicEval(cfg, run, local, 8000, Log(), print)  # type: ignore[arg-type]
    assert pe.best == best_score(best_record(run)[0]) and pe.next_at == 10000
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "best.pt").write_bytes(b"torn")
    record, why = best_record(tmp_path)  # unreadable: the next evaluation replaces it
    assert record is None and why.endswith("(4 bytes that are not a complete torch.save archive)")
    # scored with other settings (--set eval.episodes on --resume): not comparable, replaced
    assert best_score(best_record(run)[0], pe.settings) == pe.best
    assert best_score(best_record(run)[0], {**pe.settings, "episodes": 7}) is None
    # or under another env protocol (a resume's --set env.sticky_actions=0, ...)
    other = load_config(TrainConfig, run / "config.yaml", ["env.kwargs={sutton_barto_reward: 1}"])
    protocol = scored_protocol(other)
    assert best_score(best_record(run)[0], {**pe.settings, "protocol": protocol}) is None
    record = evals(run)[-1]
    assert record["protocol"] == pe.settings["protocol"] == scored_protocol(cfg)
    # a Gymnasium env's: not the Atari protocol's keys, which it never reads
    assert sorted(record["protocol"]) == ["frame_stack", "kwargs", "wrappers"]
    # a best.pt of an rltrain that kept them (at their defaults) is still comparable
    atari = dict(record["protocol"], frame_skip=4, noop_max=30, sticky_actions=None)
    assert same_protocol(atari, record["protocol"])
    assert not same_protocol(dict(atari, kwargs={"x": 1}), record["protocol"])
    # a best.pt of an rltrain that kept no protocol: taken as played under this one
    state = load_checkpoint(run / "checkpoints" / "best.pt")
    del state["eval"]["protocol"]
    (tmp_path / "checkpoints" / "best.pt").unlink()
    torch.save(state, tmp_path / "checkpoints" / "best.pt")
    assert best_score(best_record(tmp_path)[0], pe.settings) == pe.best
    assert not PeriodicEval(cfg, tmp_path, local, 0, Log(), print).due(0)  # type: ignore[arg-type]
    # a resume under other settings says best.pt goes (a worse checkpoint may replace it)
    said: list[str] = []
    seven = load_config(TrainConfig, run / "config.yaml", ["eval.episodes=7"])
    assert PeriodicEval(seven, run, local, 8000, Log(), said.append).best is None  # type: ignore[arg-type]
    assert said == [
        f"checkpoints/best.pt ({pe.best:.1f}) was scored under other evaluation settings "
        "(eval.episodes, deterministic, seed or the env's protocol): the next evaluation "
        "replaces it"
    ]


def test_a_resume_from_an_older_checkpoint_leaves_out_the_lost_evaluations(
    tmp_path: Path,
) -> None:
    """explore104: the newest checkpoint deleted (damaged), the run resumed from an older
    one; evals.jsonl kept the lost one's evaluation, and `rltrain plot --evals` showed the new
    score under its "(stop)" label. Each evaluation scores a checkpoint written for it."""
    from rltrain.rl.run.scores import drop_evals_after

    records = [{"env_steps": 8000}, {"env_steps": 16000, "at_stop": True}, {"env_steps": 24000}]
    (tmp_path / "evals.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert drop_evals_after(tmp_path, 24000) == 0  # a plain resume: none
    assert drop_evals_after(tmp_path, 8000) == 2
    assert [r["env_steps"] for r in evals(tmp_path)] == [8000]
    assert drop_evals_after(tmp_path / "none", 0) == 0  # no file: nothing to do


def test_a_greedy_policys_best_survives_a_change_of_eval_deterministic(
    run: Path, tmp_path: Path
) -> None:
    """dqn's evaluations at dqn.eval_epsilon 0 are greedy whatever eval.deterministic says: a
    resume that changed it threw the best score away, and a worse checkpoint became best.pt.
    At an epsilon the record keeps it, and a score played at another one is not compared."""
    import shutil

    dqn = tmp_path / "dqn"
    (dqn / "checkpoints").mkdir(parents=True)
    shutil.copy(run / "checkpoints" / "best.pt", dqn / "checkpoints" / "best.pt")
    as_dqn = ["algo.name=dqn", "normalize.obs=never", "dqn.eval_epsilon=0"]
    sampled = load_config(TrainConfig, run / "config.yaml", as_dqn)
    flipped = load_config(TrainConfig, run / "config.yaml", [*as_dqn, "eval.deterministic=true"])
    for c in (sampled, flipped):
        pe = PeriodicEval(c, dqn, local, 8000, Log(), print)  # type: ignore[arg-type]
        assert pe.best == best_score(best_record(run)[0]) and pe.settings["deterministic"] is True
    eps = load_config(TrainConfig, run / "config.yaml", as_dqn[:2])  # the default, 0.05
    pe = PeriodicEval(eps, dqn, local, 8000, Log(), print)  # type: ignore[arg-type]
    assert pe.settings["deterministic"] is False and pe.settings["epsilon"] == 0.05
    assert pe.best is None  # best.pt was scored otherwise: the next evaluation replaces it
    # a record from before the key played greedily; and a best scored at 0.05 is no greedy
    # run's best either (review 76: it was kept)
    assert best_score(best_record(dqn)[0], {"epsilon": 0.0}) == best_score(best_record(run)[0])
    state = load_checkpoint(dqn / "checkpoints" / "best.pt")
    write_state(
        dqn / "checkpoints" / "best.pt", {**state, "eval": {**state["eval"], "epsilon": 0.05}}
    )
    assert best_score(best_record(dqn)[0], {"epsilon": 0.05}) == best_score(best_record(run)[0])
    for c in (sampled, flipped):
        greedy = PeriodicEval(c, dqn, local, 8000, Log(), print)  # type: ignore[arg-type]
        assert greedy.settings["epsilon"] == 0.0 and greedy.best is None


def test_a_run_can_stop_on_its_evaluations(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    argv = ["train", str(CARTPOLE), "--run-dir", str(run_dir), "--set", "runtime.backend=local"]
    argv += ["--set", "stop.mean_return=null", "--set", "stop.max_env_steps=1000000"]
    argv += ["--set", "eval.every_steps=1000", "--set", "eval.episodes=2"]
    assert main([*argv, "--set", "stop.eval_mean_return=5"]) == 0  # CartPole scores >= 8
    s = json.loads((run_dir / "summary.json").read_text())
    assert s["stopped_by"] == "eval_mean_return" and s["env_steps"] < 100_000
    assert s["eval"]["best_mean_return"] >= 5
    assert (run_dir / "checkpoints" / "best.pt").is_file()


def test_off_by_default_and_validated() -> None:
    cfg = load_config(TrainConfig, None, ["stop.max_env_steps=10"])
    assert cfg.eval.every_steps == 0
    off = PeriodicEval(cfg, Path("."), local, 0, Log(), print)  # type: ignore[arg-type]
    assert not off.due(10**9) and off.summary() == {}
    with pytest.raises(ValueError, match="eval.episodes"):
        load_config(TrainConfig, None, ["eval.episodes=0", "stop.max_env_steps=10"])
    with pytest.raises(ValueError, match="stop.eval_mean_return: needs .* set eval.every_steps"):
        load_config(TrainConfig, None, ["stop.eval_mean_return=100"])
    only_eval = ["stop.eval_mean_return=100", "eval.every_steps=1000"]
    assert load_config(TrainConfig, None, only_eval).stop.mean_return is None  # a stop on its own
