"""`rltrain plot`: learning curves read back from a run's TensorBoard events."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from torch.utils.tensorboard import SummaryWriter

from rltrain.cli import main
from rltrain.config import load_config
from rltrain.curves import EVAL_TAG, RETURN_TAG, after_rewinds, read_curve
from rltrain.plot import moving_mean
from rltrain.rl.config import TrainConfig
from rltrain.rundir import size_note, write_config

ROOT = Path(__file__).resolve().parents[1]
PNG = b"\x89PNG\r\n\x1a\n"


def make_run(
    run: Path,
    config: str,
    points: list[tuple[int, float, float]],
    tag: str = RETURN_TAG,
    overrides: tuple[str, ...] = (),
) -> Path:
    """A run directory as `rltrain train` leaves it: config.yaml and tb/ with one scalar
    ``tag`` per (env steps, return, seconds after the writer started)."""
    run.mkdir(parents=True)
    write_config(run, load_config(TrainConfig, ROOT / "configs" / config, list(overrides)))
    start = time.time()
    writer = SummaryWriter(str(run / "tb"))  # as rltrain.rl.run.tblog.TrainLogger
    for steps, ret, seconds in points:
        writer.add_scalar(tag, ret, steps, walltime=start + seconds)
    writer.close()
    return run


def check_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG and len(data) > 1000


def test_one_run_plots_into_its_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = make_run(tmp_path / "pong", "pong_a3c.yaml", [(100, -21, 10), (250, -20, 20)])
    assert main(["plot", str(run)]) == 0
    assert capsys.readouterr().out.strip() == str(run / "returns.png")
    check_png(run / "returns.png")


def test_the_api_draws_what_the_command_draws(tmp_path: Path) -> None:
    """explore107 #7: rltrain.plot_runs, the command's flags as arguments, checked in one line."""
    import rltrain
    from rltrain.config import ConfigError

    a = make_run(tmp_path / "a", "pong_a3c.yaml", [(100, -21, 10), (250, -5, 20)])
    b = make_run(tmp_path / "b", "pong_a3c.yaml", [(100, -20, 10), (300, -15, 30)])
    res = rltrain.plot_runs(a, smooth=1)
    assert res.image == a / "returns.png" and res.table == ""
    check_png(a / "returns.png")
    res = rltrain.plot_runs([a, str(b)], out=tmp_path / "both.svg", smooth=1, marks=[-10])
    assert res.image == tmp_path / "both.svg" and b"<svg" in res.image.read_bytes()[:1000]
    rows = [line for line in res.table.splitlines() if line.startswith("| ") and "run" not in line]
    assert [r.split("|")[1].strip() for r in rows] == ["a", "b"]
    for bad, said in (
        ({"marks": "10"}, "marks='10': expected a list of finite numbers"),
        ({"smooth": 0}, "smooth=0: expected a whole number >= 1"),
        ({"group": "seed"}, "group='seed': expected a list of config keys"),
        ({"evals": "yes"}, "evals='yes': allowed are True or False"),
    ):
        with pytest.raises(ConfigError, match=said):
            rltrain.plot_runs(a, **bad)
    with pytest.raises(ConfigError, match="runs=\\[\\]: expected a run folder"):
        rltrain.plot_runs([])
    # a folder that does not exist is refused as the command refuses it (review88: nodir.png)
    from rltrain.curves import PlotError

    with pytest.raises(PlotError, match="no such folder"):
        rltrain.plot_runs(a, out=str(tmp_path / "nodir") + "/")
    marks = (m for m in [-10.0])  # a generator: checked and still drawn (it was used up)
    both = tmp_path / "both.png"
    assert "-10" in rltrain.plot_runs([a, b], out=both, smooth=1, marks=marks).table


def test_out_writes_the_format_its_suffix_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An .svg file held PNG bytes; a suffix matplotlib would not write is one line, first;
    none writes NAME.png (a PNG named without .png did not open by its name)."""
    run = make_run(tmp_path / "pong", "pong_a3c.yaml", [(100, -21, 10), (250, -20, 20)])
    assert main(["plot", str(run), "--out", str(tmp_path / "r.svg")]) == 0
    assert b"<svg" in (tmp_path / "r.svg").read_bytes()[:1000]
    assert main(["plot", str(run), "--out", str(tmp_path / "r.pdf")]) == 0
    assert (tmp_path / "r.pdf").read_bytes().startswith(b"%PDF")
    capsys.readouterr()
    assert main(["plot", str(run), "--out", str(tmp_path / "r.jpeg")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("r.jpeg: the suffix names the image format; use .png, .svg, .pdf")
    assert not (tmp_path / "r.jpeg").exists()
    assert main(["plot", str(run), "--out", str(tmp_path / "returns")]) == 0  # no suffix: .png
    assert str(tmp_path / "returns.png") in capsys.readouterr().out
    check_png(tmp_path / "returns.png")
    assert not (tmp_path / "returns").exists()
    # a folder: returns.png in it (it wrote FOLDER.png beside it); one that is not there
    (tmp_path / "plots").mkdir()
    assert main(["plot", str(run), "--out", f"{tmp_path / 'plots'}/"]) == 0
    check_png(tmp_path / "plots" / "returns.png")
    assert not (tmp_path / "plots.png").exists()
    capsys.readouterr()
    assert main(["plot", str(run), "--out", f"{tmp_path / 'nowhere'}/"]) == 2
    assert "nowhere/: no such folder" in capsys.readouterr().err


def test_several_runs_default_to_the_working_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    a = make_run(tmp_path / "a", "cartpole_appo.yaml", [(i * 50, i, i) for i in range(1, 40)])
    b = make_run(tmp_path / "b", "cartpole_ppo.yaml", [(i * 70, 2 * i, i) for i in range(1, 30)])
    monkeypatch.chdir(tmp_path)
    assert main(["plot", str(a), str(b), "--title", "appo vs ppo", "--smooth", "5"]) == 0
    assert capsys.readouterr().out.strip() == "returns.png"
    check_png(tmp_path / "returns.png")
    out = tmp_path / "elsewhere.png"
    assert main(["plot", str(a), str(b), "--out", str(out)]) == 0
    check_png(out)


def test_curve_counts_frames_and_seconds(tmp_path: Path) -> None:
    """Atari: frames = env steps x frame_skip (4); other ids: env steps. Seconds count from
    the run's first event, through a resume (a second event file in the same tb/) that went
    back to a checkpoint at 150 steps: the episode logged at 200 was never counted."""
    points = [(100, -21, 30), (200, -20, 60)]
    pong = make_run(tmp_path / "pong", "pong_a3c.yaml", points)
    first = set((pong / "tb").iterdir())
    resumed = SummaryWriter(str(pong / "tb"))
    for steps, ret, seconds in [(160, -19, 90), (160, -18, 90), (300, -15, 120)]:
        resumed.add_scalar(RETURN_TAG, ret, steps, walltime=time.time() + seconds)
    resumed.close()
    # a resumed session's file is named a later second: TensorBoard reads them in name order,
    # and two writers in one second are ordered by a counter (".9" after ".10": a flake)
    (new,) = set((pong / "tb").iterdir()) - first
    parts = new.name.split(".")
    parts[3] = str(int(parts[3]) + 1)  # events.out.tfevents.<seconds>.<host>.<pid>.<n>
    new.rename(new.with_name(".".join(parts)))
    curve = read_curve(pong)
    assert curve.label == "pong"
    assert curve.frames.tolist() == [400, 640, 640, 1200]
    assert curve.returns.tolist() == [-21, -19, -18, -15]
    assert curve.seconds == pytest.approx([30, 90, 90, 120], abs=5)
    cartpole = make_run(tmp_path / "cp", "cartpole_appo.yaml", [(64, 12, 1), (128, 30, 2)])
    assert read_curve(cartpole).frames.tolist() == [64, 128]


def test_a_run_is_labelled_by_the_name_it_was_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A link named for a run's setting labels it by that name; `.` by its folder's."""
    run = make_run(tmp_path / "appo-20261204-101500", "cartpole_appo.yaml", [(64, 12, 1)])
    (tmp_path / "lr3e-4").symlink_to(run)
    assert read_curve(tmp_path / "lr3e-4").label == "lr3e-4"
    monkeypatch.chdir(run)
    assert read_curve(Path(".")).label == "appo-20261204-101500"


def test_a_run_given_twice_is_read_once_and_runs_of_one_name_are_told_apart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`rltrain plot r1 r1/` counted r1 as two seeds in --evals' mean and spread; runs named
    alike in different folders had one label."""
    from rltrain.plot import plot_runs

    r1 = make_run(tmp_path / "r1", "cartpole_appo.yaml", [(64, 12, 1)], tag=EVAL_TAG)
    make_run(tmp_path / "a" / "run", "cartpole_appo.yaml", [(64, 10, 1)], tag=EVAL_TAG)
    make_run(tmp_path / "b" / "run", "cartpole_appo.yaml", [(64, 20, 1)], tag=EVAL_TAG)
    (tmp_path / "link").symlink_to(r1)
    _, table = plot_runs([r1, r1, tmp_path / "link"], evals=True)
    assert "mean +- sd" not in table and table.count("| 12.0 |") == 1
    err = capsys.readouterr().err
    assert f"{r1} given twice: read once" in err and f"link is {r1} again: read once" in err
    _, table = plot_runs([tmp_path / "a" / "run", tmp_path / "b" / "run"], evals=True)
    assert table.splitlines()[0] == "| frames | a/run | b/run | mean +- sd of 2 |"
    # only evaluations: --marks and --out have nothing to draw, and say so
    plot_runs([r1], tmp_path / "x.png", marks=(10.0,), evals=True)
    assert "--marks and --out: no episode has ended in these runs" in capsys.readouterr().err


def test_evaluations_during_training_are_read_as_dots(tmp_path: Path) -> None:
    """eval/mean_return (eval.every_steps) comes back beside the episodes, in frames."""
    pong = make_run(tmp_path / "pong", "pong_a3c.yaml", [(100, -21, 30), (200, -20, 60)])
    writer = SummaryWriter(str(pong / "tb"))
    start = time.time()
    for steps, mean, seconds in [(150, -19.5, 45), (250, -17.0, 75)]:
        writer.add_scalar(EVAL_TAG, mean, steps, walltime=start + seconds)
    writer.close()
    frames, seconds, means = read_curve(pong).evals
    assert frames.tolist() == [600, 1000] and means.tolist() == [-19.5, -17.0]
    assert seconds[1] - seconds[0] == pytest.approx(30, abs=1)
    assert main(["plot", str(pong)]) == 0
    check_png(pong / "returns.png")
    none = make_run(tmp_path / "cp", "cartpole_appo.yaml", [(64, 12, 1)])
    assert all(len(a) == 0 for a in read_curve(none).evals)


def test_after_rewinds_drops_what_a_resume_went_back_over() -> None:
    steps = np.array([1, 2, 2, 5, 6, 3, 3, 4, 7, 2, 8])
    assert steps[after_rewinds(steps)].tolist() == [1, 2, 2, 2, 8]
    assert after_rewinds(np.array([], dtype=np.int64)).tolist() == []


def test_a_nan_score_spoils_only_the_windows_it_is_in() -> None:
    """A running sum kept a NaN for good: the rest of the curve was NaN."""
    means = moving_mean(np.array([1.0, np.nan, 3.0, 5.0, 7.0]), 2)
    assert means[0] == 1.0 and np.isnan(means[1:3]).all() and list(means[3:]) == [4.0, 6.0]


def test_moving_mean_is_the_mean_of_the_last_window() -> None:
    values = np.random.default_rng(0).normal(size=57)
    for window in (1, 5, 20, 100):
        slow = [values[max(0, i + 1 - window) : i + 1].mean() for i in range(len(values))]
        assert moving_mean(values, window) == pytest.approx(slow)


@pytest.mark.parametrize(
    ("name", "words"),
    [
        pytest.param("missing", ["missing: not a run directory (it does not exist)"], id="none"),
        pytest.param("afile", ["afile: not a run directory (it is a file)"], id="file"),
        pytest.param("notrun", ["notrun: not a run directory (no config.yaml in it)"], id="cfg"),
        pytest.param(  # (explore107: the folder of runs)
            "runs",
            ["runs: not a run directory (no config.yaml in it; it holds runs: ", "runs/a, "],
            id="runs",
        ),
        pytest.param("fresh", ["fresh: no TensorBoard events in", "tb"], id="no-events"),
        pytest.param(  # (they said "no episode has ended" of a run of 114 episodes)
            "damaged",
            ["damaged: the event files in", "hold no readable event (empty or damaged)"],
            id="damaged-events",
        ),
        pytest.param(
            "bench",
            ["bench: a `rltrain bench` run", "results.md", "tensorboard --logdir"],
            id="bench",
        ),
    ],
)
def test_errors_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, words: list[str]
) -> None:
    (tmp_path / "afile").write_text("not a run\n")
    (tmp_path / "notrun").mkdir()
    (tmp_path / "fresh").mkdir()
    for run in ("a", "b"):
        make_run(tmp_path / "runs" / run, "cartpole_appo.yaml", [(64, 12, 1)])
    write_config(tmp_path / "fresh", load_config(TrainConfig, ROOT / "configs/cartpole_appo.yaml"))
    make_run(tmp_path / "early", "cartpole_appo.yaml", [(64, 100.0, 1)], tag="perf/env_fps")
    bench = tmp_path / "bench"  # as `rltrain bench` leaves it: a TensorBoard run per mode
    (bench / "tb" / "sync").mkdir(parents=True)
    (bench / "tb" / "sync" / "events.out.tfevents.0.host").write_bytes(b"")
    (bench / "config.yaml").write_text((ROOT / "configs/bench_toy.yaml").read_text())
    (bench / "results.md").write_text("| mode |\n")
    good = make_run(tmp_path / "good", "cartpole_appo.yaml", [(64, 12, 1)])
    damaged = make_run(tmp_path / "damaged", "cartpole_appo.yaml", [(64, 12, 1)])
    for events in (damaged / "tb").iterdir():
        events.write_bytes(bytes(range(256)) * 8)
    # a bad run among good ones fails the whole command, before anything is drawn
    assert main(["plot", str(good), str(tmp_path / name), "--out", str(tmp_path / "x.png")]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rltrain: error: "), captured.err
    for word in words:
        assert word in lines[0]
    assert not (tmp_path / "x.png").exists()


def test_a_run_without_episodes_yet_is_left_out_beside_others_and_alone_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    early = make_run(tmp_path / "early", "cartpole_appo.yaml", [(64, 100.0, 1)], tag="perf/env_fps")
    good = make_run(tmp_path / "good", "cartpole_appo.yaml", [(64, 12, 1)])
    assert main(["plot", str(good), str(early), "--out", str(tmp_path / "x.png")]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"rltrain: plot: left out {early}: no episode/return in {early / 'tb'} yet "
        "(no episode has ended)"
    ]
    assert (tmp_path / "x.png").is_file()
    assert main(["plot", str(early), "--out", str(tmp_path / "y.png")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "(no episode has ended)" in err[0]
    assert not (tmp_path / "y.png").exists()


def test_wall_time_leaves_out_the_downtime_before_a_resume() -> None:
    import numpy as np

    from rltrain.curves import running_seconds

    start = 1000.0
    beats = np.array([1002.0, 1004.0, 1006.0, 5006.0, 5008.0])  # stopped at 1006, resumed 5006
    times = np.array([1003.0, 1005.0, 5007.0])
    assert running_seconds(times, beats, start).tolist() == [3.0, 5.0, 7.0]


def test_marked_sessions_leave_out_every_gap_before_a_resume() -> None:
    """With session/start marks, the time from one session's last event to the next mark is
    downtime however short (here 40 s, under DOWNTIME_S); silences inside a session count.
    Before the first mark (sessions of an older rltrain) long silences are still downtime."""
    from rltrain.curves import DOWNTIME_S, running_seconds

    start = 1000.0
    beats = np.array([1002.0, 1008.0, 1048.5, 1050.0, 1250.0])  # a 200 s silence in session 2
    times = np.array([1004.0, 1049.0, 1251.0])
    sessions = np.array([1000.0, 1048.0])
    assert DOWNTIME_S > 40
    assert running_seconds(times, beats, start, sessions).tolist() == [4.0, 9.0, 211.0]
    old = np.array([1010.0, 1500.0, 1505.0, 1600.0])  # an old run, then a marked resume
    got = running_seconds(np.array([1505.0, 1601.0]), old, start, np.array([1590.0]))
    assert got.tolist() == [15.0, 26.0]  # 1010 -> 1500 and 1505 -> 1590 are left out


def test_a_resumed_run_plots_its_running_time_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """QA's case: 8 s of training, 40 s stopped, a --resume for 8 s more: 16 s of wall time
    (the trainer's own logger, on a fake clock)."""
    from rltrain.rl.rollout import WorkStats
    from rltrain.rl.run.tblog import TrainLogger

    clock = [2_000_000.0]
    monkeypatch.setattr(time, "time", lambda: clock[0])
    run = tmp_path / "gap"
    run.mkdir()
    cfg = load_config(TrainConfig, ROOT / "configs" / "cartpole_appo.yaml")
    write_config(run, cfg)
    steps = 0
    for _session in range(2):
        log = TrainLogger(run / "tb", cfg, {}, 1, start_steps=steps)
        for _ in range(8):
            clock[0] += 1.0
            steps += 100
            log.absorb(WorkStats(env_steps=100, episode_returns=[10.0], episode_lengths=[9]), steps)
            log.flush(steps, 1)
        log.close()
        clock[0] += 40.0  # stopped; `rltrain train --resume` 40 s later
    curve = read_curve(run)
    assert curve.seconds.tolist() == pytest.approx([float(s) for s in range(1, 17)])
    assert main(["plot", str(run), "--smooth", "4", "--marks", "100"]) == 0
    assert capsys.readouterr().out.splitlines()[3].endswith("| 10.0 at 16 s, 1.6k |")


def test_the_last_mean_says_how_many_episodes_it_is_of(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    four = make_run(tmp_path / "four", "cartpole_appo.yaml", [(64 * i, 10.0, i) for i in range(4)])
    assert main(["plot", str(four), "--smooth", "100", "--marks", "0"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[1] == "| run | frames/s | +0 | last (mean of 4) |"
    assert err == (  # (explore107: drawn, labelled "of last 100", marks "not reached": unsaid)
        "rltrain: plot: --smooth 100: four has 4 episodes: drawn as the mean of all so far, "
        "not judged by --marks\n"
    )
    many = make_run(tmp_path / "many", "cartpole_appo.yaml", [(64 * i, 5.0, i) for i in range(30)])
    assert (
        main(["plot", str(four), str(many), "--marks", "0", "--out", str(tmp_path / "x.png")]) == 0
    )
    out = capsys.readouterr().out.splitlines()
    assert out[1] == "| run | frames/s | +0 | last (mean of up to 20) |"
    assert "| 10.0 (of 4) at " in out[3] and "| 5.0 at " in out[4]
    assert main(["plot", str(many), "--marks", "0", "--out", str(tmp_path / "y.png")]) == 0
    assert capsys.readouterr().out.splitlines()[1].endswith("| last (mean of 20) |")


def test_time_to_marks_counts_a_full_window_as_stop_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--marks: the first episode at which the mean of the last N reaches each score, only
    once N episodes have ended; frames are Atari frames (4 per step); a mark never reached
    says so."""
    from rltrain.plot import time_to_marks

    points = [(100, 10.0, 10)] + [(100 * i, float(i), 60 * i) for i in range(2, 11)]
    run = make_run(tmp_path / "pong", "pong_a3c.yaml", points)
    reached = time_to_marks(dataclasses.replace(read_curve(run), window=3), [5, 7, 100])
    # means of 3 from the third episode: (10+2+3)/3=5 at episode 3; 7 = (6+7+8)/3 at episode 8
    got = [(r.seconds, r.frames) for r in reached]
    assert got == [
        (pytest.approx(180, abs=1), 1200),
        (pytest.approx(480, abs=1), 3200),
        (None, None),
    ]
    assert main(["plot", str(run), "--smooth", "3", "--marks", "5", "7", "100"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == str(run / "returns.png")
    assert out[1] == "| run | frames/s | +5 | +7 | +100 | last (mean of 3) |"
    assert out[3] == (
        "| pong | 6.67 | 3.0 min, 1.2k | 8.0 min, 3.2k | not reached | 9.0 at 10.0 min, 4k |"
    )


def test_without_matplotlib_the_table_is_still_printed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bare box (PyTorch, no matplotlib): --marks still prints its table, with one line
    that says why there is no chart; without --marks nothing could be made, one-line error."""
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now fails
    run = make_run(tmp_path / "pong", "pong_a3c.yaml", [(100, -21, 10), (250, -20, 20)])
    assert main(["plot", str(run), "--smooth", "1", "--marks", "-20"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "matplotlib is not installed" in out[0] and out[1].startswith("| run |")
    assert not (run / "returns.png").exists()
    assert main(["plot", str(run)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "matplotlib is not installed (pip install matplotlib)" in err[0]


def test_the_runs_stop_evaluations_get_one_row_and_their_mean(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """explore111: each run's stop evaluation sat in a row of its own frames (the budgets
    overshoot apart), so the seeds' final mean was "-"; one more row gives it."""
    runs = []
    for name, stop, score in (("s0", 40_704, 180.0), ("s1", 42_240, 200.0)):
        run = make_run(tmp_path / name, "cartpole_appo.yaml", [(1_000, 20.0, 1)])
        writer = SummaryWriter(str(run / "tb"))
        for steps, mean in ((20_000, 50.0), (stop, score)):
            writer.add_scalar(EVAL_TAG, mean, steps)
        writer.close()
        lines = [{"env_steps": 20_000}, {"env_steps": stop, "at_stop": True}]
        (run / "evals.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
        runs.append(str(run))
    assert main(["plot", *runs, "--evals", "--out", str(tmp_path / "x.png")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-3:-1] == ["| 40.7k (stop) | 180.0 | - | - |", "| 42.24k (stop) | - | 200.0 | - |"]
    assert out[-1] == "| each run's stop | 180.0 | 200.0 | 190.0 +- 14.1 |"


def test_evals_table_rows_are_the_runs_evaluations_with_the_seeds_mean(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--evals: one row per evaluation, its frames rounded down to eval.every_steps (each run
    evaluates at the first batch past each multiple: 100,352 steps is the 100k point); one
    column per run; the mean and sample standard deviation only where every run has a value."""
    runs = []
    for name, evals in (
        # a stop's evaluation at 250,000 (after the 200k one), the 300k one again on resume
        ("seed0", [(100_352, -20), (200_704, -10), (250_000, 7), (300_032, 5), (300_032, 6)]),
        ("seed1", [(101_000, -21.0), (201_536, -14.0)]),
    ):
        run = make_run(tmp_path / name, "pong_appo.yaml", [(50_000, -21.0, 1)])
        writer = SummaryWriter(str(run / "tb"))
        for steps, mean in evals:
            writer.add_scalar(EVAL_TAG, mean, steps)
        writer.close()
        runs.append(str(run))
    # pong_appo.yaml evaluates every 500,000 steps; these runs every 100,000
    for run in runs:
        text = (Path(run) / "config.yaml").read_text()
        (Path(run) / "config.yaml").write_text(
            text.replace("every_steps: 500000", "every_steps: 100000")
        )
    assert main(["plot", *runs, "--evals", "--out", str(tmp_path / "x.png")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1:] == [
        "| frames | seed0 | seed1 | mean +- sd of 2 |",
        "|---|---|---|---|",
        "| 400k | -20.0 | -21.0 | -20.5 +- 0.7 |",  # 4 frames per step
        "| 800k | -10.0 | -14.0 | -12.0 +- 2.8 |",
        "| 1M (stop) | 7.0 | - | - |",  # its own row: the 800k row is the 200k evaluation's
        "| 1.2M | 6.0 | - | - |",  # a resume's re-evaluation: the last
    ]
    assert main(["plot", runs[0], "--evals", "--marks", "0"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith("| run | frames/s | +0 |") and out[4] == ""
    assert out[5:7] == ["| frames | seed0 |", "|---|---|"] and out[-1] == "| 1.2M | 6.0 |"
    # a stop's evaluation before the first multiple of eval.every_steps: its frames, not 0
    short = make_run(tmp_path / "short", "pong_appo.yaml", [(20_000, -21.0, 1)])
    writer = SummaryWriter(str(short / "tb"))
    writer.add_scalar(EVAL_TAG, -19.0, 22_500)
    writer.close()
    assert main(["plot", str(short), "--evals", "--out", str(tmp_path / "y.png")]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "| 90k | -19.0 |"


def test_evals_of_a_run_whose_episodes_have_not_ended_are_in_the_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An Atari run can be evaluated before its first training game ends (16 envs in their
    first Pong game): --evals left it out as "no episode yet"."""
    run = make_run(tmp_path / "young", "pong_appo.yaml", [(100_352, -21.0, 5)], tag=EVAL_TAG)
    assert main(["plot", str(run), "--evals"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == ["| frames | young |", "|---|---|", "| 401k | -21.0 |"]
    assert "left out" in err and "no episode has ended" in err
    assert not (run / "returns.png").exists()  # no curve to draw
    assert main(["plot", str(run)]) == 2  # without --evals: nothing to show, as before


def test_evals_table_leaves_out_a_run_never_evaluated_beside_others(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its empty column kept every row's mean and spread out of the table."""
    done = make_run(tmp_path / "done", "cartpole_appo.yaml", [(64, 12, 1)])
    writer = SummaryWriter(str(done / "tb"))
    writer.add_scalar(EVAL_TAG, 50.0, 64)
    writer.close()
    never = make_run(tmp_path / "never", "cartpole_appo.yaml", [(64, 12, 1)])
    out_png = tmp_path / "both.png"
    assert main(["plot", str(done), str(never), "--evals", "--out", str(out_png)]) == 0
    out, err = capsys.readouterr()
    assert "| frames | done |" in out and "never" not in out
    assert "--evals: no evaluations during training in never" in err
    check_png(out_png)


def test_evals_table_without_evaluations_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = make_run(tmp_path / "cp", "cartpole_appo.yaml", [(64, 12, 1)])
    assert main(["plot", str(run), "--evals"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--evals: no evaluations during training in cp" in err[0]
    assert "eval.every_steps" in err[0] and not (run / "returns.png").exists()


def test_each_run_is_smoothed_over_its_own_window_as_its_stop_counts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """By default a run's mean is over its stop.window, at least as many episodes as envs: the
    last 20 of 240 envs that started together are the shortest games of a round (the
    biggest wins in Pong), which once stopped a run "at 18.6" that played at 15. actors:
    auto is sized by the session: summary.json says how. --smooth N sets every run's."""
    returns = [(i, 14.0, i) for i in range(1, 224)] + [(300 + i, 21.0, 300) for i in range(17)]
    wide = make_run(tmp_path / "wide", "pong_appo.yaml", returns, overrides=("actors=15",))
    auto = make_run(tmp_path / "auto", "pong_appo.yaml", returns, overrides=("actors=auto",))
    (auto / "summary.json").write_text(json.dumps({"actors": 15}))
    one = make_run(tmp_path / "one", "pong_appo.yaml", returns, overrides=("actors=1",))
    assert [read_curve(r).window for r in (wide, auto, one)] == [240, 240, 20]
    # a live first session of actors: auto has no summary.json yet: the sizes' note says
    live = make_run(tmp_path / "live", "pong_appo.yaml", returns, overrides=("actors=auto",))
    with (live / "config.yaml").open("a") as f:  # what rltrain.rl.run.placement writes
        f.write(size_note("16 CPUs", 3, 1, "batch: ...") + size_note("16 CPUs", 15, 1, "..."))
    assert read_curve(live).window == 240
    (live / "summary.json").write_text(json.dumps({"actors": 15, "mean_window": 100}))
    assert read_curve(live).window == 100  # what the run's stop used, as it says
    out = str(tmp_path / "x.png")
    assert main(["plot", str(wide), str(one), "--marks", "18", "--out", out]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[1] == "| run | frames/s | +18 | last (mean of up to 240) |"
    assert table[3].startswith("| wide |") and "| not reached | 14.5 at" in table[3]
    assert table[4].startswith("| one |") and "| 19.9 (of 20) at" in table[4]
    assert "| not reached |" not in table[4]  # the last 20 alone reach 18
    assert main(["plot", str(wide), "--smooth", "20", "--marks", "18", "--out", out]) == 0
    assert capsys.readouterr().out.splitlines()[1].endswith("| last (mean of 20) |")


def pong_run_of(tmp_path: Path, events: list[tuple[str, int, float, int]]) -> Path:
    """A Pong run whose TensorBoard holds these (tag, env steps, value, seconds in) scalars."""
    run = tmp_path / "pong"
    run.mkdir()
    write_config(run, load_config(TrainConfig, ROOT / "configs" / "pong_a3c.yaml", []))
    start = time.time()
    writer = SummaryWriter(str(run / "tb"))
    for tag, steps, value, seconds in events:
        writer.add_scalar(tag, value, steps, walltime=start + seconds)
    writer.close()
    return run


def test_marks_wait_until_each_sessions_every_env_has_ended_a_game(tmp_path: Path) -> None:
    """A session's first games to end are its shortest (every env starts one at once): the
    marks, as the score stop, judge a session's mean from its ``session/settled`` event on.
    Runs written before the event judge every episode."""
    from rltrain.curves import SESSION_TAG, SETTLED_TAG
    from rltrain.plot import time_to_marks

    events = [(SESSION_TAG, 0, 1.0, 0), (RETURN_TAG, 100, 20.0, 10), (RETURN_TAG, 200, 1.0, 20)]
    events += [(SETTLED_TAG, 200, 1.0, 20), (RETURN_TAG, 300, 2.0, 30)]
    events += [(SESSION_TAG, 300, 1.0, 100), (RETURN_TAG, 400, 20.0, 110)]
    events += [(RETURN_TAG, 500, 20.0, 120), (SETTLED_TAG, 600, 1.0, 130)]
    events += [(RETURN_TAG, 600, 3.0, 130), (RETURN_TAG, 700, 20.0, 140)]
    run = pong_run_of(tmp_path, events)
    curve = dataclasses.replace(read_curve(run), window=1)
    assert curve.judged is not None
    assert curve.judged.tolist() == [False, True, True, False, False, True, True]
    got = [r.frames for r in time_to_marks(curve, [2, 20])]
    assert got == [1200, 2800]  # (steps x 4): not the 20 at 100 steps, nor those at 400, 500
    assert time_to_marks(dataclasses.replace(curve, judged=None), [20])[0].frames == 400


def test_marks_wait_again_after_an_actors_restart(tmp_path: Path) -> None:
    """A restarted actor's envs start their games at once, so the score stop waits for them
    again: ``session/settled`` 0 (the restarted actor's first result) to 1 (its every env has
    ended a game); the marks judge none of the episodes between, as the stop."""
    from rltrain.curves import SESSION_TAG, SETTLED_TAG

    events = [(SESSION_TAG, 0, 1.0, 0), (SETTLED_TAG, 100, 1.0, 10), (RETURN_TAG, 200, 1.0, 20)]
    events += [(RETURN_TAG, 300, 20.0, 30), (SETTLED_TAG, 300, 0.0, 30)]  # same result
    events += [(RETURN_TAG, 400, 20.0, 40), (SETTLED_TAG, 500, 1.0, 50)]
    events += [(RETURN_TAG, 500, 3.0, 50), (SETTLED_TAG, 600, 0.0, 60)]
    events += [(RETURN_TAG, 700, 4.0, 70)]
    events += [(SESSION_TAG, 700, 1.0, 100), (RETURN_TAG, 800, 5.0, 110)]  # never settled
    run = pong_run_of(tmp_path, events)
    curve = read_curve(run)
    assert curve.judged is not None
    assert curve.judged.tolist() == [True, False, False, True, False, False]


def test_sessions_an_older_rltrain_wrote_are_judged_at_every_episode(tmp_path: Path) -> None:
    """A run resumed by an rltrain that writes ``session/settled`` after sessions that did
    not: the older sessions' stop judged every episode (and so do the marks); a newer session
    without a 1 never settled."""
    from rltrain.curves import SESSION_TAG, SETTLED_TAG

    events = [(RETURN_TAG, 50, 7.0, 0)]  # before sessions were marked at all
    events += [(SESSION_TAG, 100, 1.0, 10), (RETURN_TAG, 200, 1.0, 20)]  # marked, not settled
    events += [(SESSION_TAG, 300, 1.0, 100), (SETTLED_TAG, 300, 0.0, 105)]
    events += [(RETURN_TAG, 400, 2.0, 110), (SETTLED_TAG, 500, 1.0, 120)]
    events += [(RETURN_TAG, 600, 3.0, 130)]
    events += [(SESSION_TAG, 700, 1.0, 200), (SETTLED_TAG, 700, 0.0, 205)]
    events += [(RETURN_TAG, 800, 4.0, 210)]
    curve = read_curve(pong_run_of(tmp_path, events))
    assert curve.judged is not None
    assert curve.judged.tolist() == [True, True, False, True, False]


def test_a_mark_stamped_before_its_session_counts_for_the_first_session() -> None:
    """Clocks may disagree a little: a ``session/settled`` stamped just before the first
    ``session/start`` is the first session's, and episodes before that mark are judged."""
    from rltrain.curves import settled_episodes

    judged = settled_episodes(
        steps=np.array([50, 150, 250]),
        walls=np.array([1.0, 12.0, 13.0]),
        sessions=np.array([10.0]),
        marks=np.array([0, 200]),
        marked_at=np.array([9.9, 12.5]),
        states=np.array([0.0, 1.0]),
    )
    assert judged is not None and judged.tolist() == [True, False, True]


def test_evals_scored_otherwise_after_a_resume_are_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A resume's --set eval.episodes (or seed, deterministic, the env's protocol) puts scores
    of two scales in one column: the plot says where they changed (the run itself does not
    compare them for best.pt)."""
    import json

    run = make_run(tmp_path / "imp", "pong_appo.yaml", [(50_000, -21.0, 1)])
    writer = SummaryWriter(str(run / "tb"))
    rows = [(500_000, 4, -20.0), (1_000_000, 4, -10.0), (1_500_000, 6, -5.0)]
    for steps, _, mean in rows:
        writer.add_scalar(EVAL_TAG, mean, steps)
    writer.close()
    records = [
        {"env_steps": s, "episodes": n, "deterministic": False, "seed": 1} for s, n, _ in rows
    ]
    (run / "evals.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert main(["plot", str(run), "--evals", "--out", str(tmp_path / "x.png")]) == 0
    assert capsys.readouterr().err.strip() == (
        "rltrain: plot: --evals: imp's evaluations were scored otherwise at 1,500,000 steps: "
        "episodes 4 -> 6: scores before and after do not compare"
    )
    # a damaged line (cut short) is said, and the others still checked (explore107)
    text = (run / "evals.jsonl").read_text()
    (run / "evals.jsonl").write_text(text[:30] + "\n" + text)
    assert main(["plot", str(run), "--evals", "--out", str(tmp_path / "x.png")]) == 0
    assert capsys.readouterr().err.strip().splitlines() == [
        "rltrain: plot: --evals: imp: evals.jsonl's line 1 unreadable, left out of these checks",
        "rltrain: plot: --evals: imp's evaluations were scored otherwise at 1,500,000 steps: "
        "episodes 4 -> 6: scores before and after do not compare",
    ]


def test_evals_pooled_across_unlike_runs_are_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """explore107: --evals' mean +- sd pooled PPO's and DQN's CartPole, and Pong's sticky 0
    and 0.25, as seeds of one setting, without a word."""
    import json

    runs = []
    for name, algo, greedy in (("a", "a3c", False), ("b", "a2c", True), ("c", "a3c", False)):
        over = (f"algo.name={algo}",)
        run = make_run(tmp_path / name, "cartpole_a3c.yaml", [(5_000, 10.0, 1)], overrides=over)
        writer = SummaryWriter(str(run / "tb"))
        writer.add_scalar(EVAL_TAG, 20.0, 10_000)
        writer.close()
        record = {"env_steps": 10_000, "episodes": 10, "deterministic": greedy, "seed": 1}
        (run / "evals.jsonl").write_text(json.dumps(record) + "\n")
        runs.append(str(run))
    assert main(["plot", *runs, "--evals", "--out", str(tmp_path / "x.png")]) == 0
    assert capsys.readouterr().err.strip() == (
        "rltrain: plot: --evals' mean +- sd: these runs differ (algo.name a3c, a2c; "
        "eval.deterministic False, True); --group algo.name takes them apart"
    )
    for argv in ([runs[0], runs[2]], [*runs, "--group", "algo.name"]):
        assert main(["plot", *argv, "--evals", "--out", str(tmp_path / "x.png")]) == 0
        assert "these runs differ" not in capsys.readouterr().err


def test_a_key_one_record_lacks_is_no_change_of_scoring(tmp_path: Path) -> None:
    """review87: a protocol key an older record kept (Atari's frame_skip for a Gym env) and a
    newer one dropped, or dqn's epsilon a record before it lacks, read as "scored otherwise"
    and as runs that "differ"."""
    import json

    from rltrain.plot_evals import scoring_notes

    run = make_run(tmp_path / "r", "cartpole_a3c.yaml", [(5_000, 10.0, 1)])
    base = {"episodes": 10, "deterministic": False, "seed": 1}
    records = [
        {"env_steps": 1_000, **base, "protocol": {"frame_skip": 4, "kwargs": {}}},
        {"env_steps": 2_000, **base, "epsilon": 0.0, "protocol": {"kwargs": {}}},
    ]
    (run / "evals.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert scoring_notes(run, "r") == []
    records[1]["protocol"] = {"kwargs": {"g": 9.8}}
    (run / "evals.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert scoring_notes(run, "r") == [
        "r's evaluations were scored otherwise at 2,000 steps: the env's protocol: scores "
        "before and after do not compare"
    ]


def test_runs_grouped_by_a_config_key_get_each_groups_mean(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--evals' spread pooled every run given (async and sync seeds in one mean); --group
    server.rule gives each rule its own mean +- sd, a row per group in --marks and a mean
    curve per group in the plot; a2c, which config.yaml says is async, ran sync (explore85).
    A key no run has is one line."""
    runs = []
    for name, algo, up, evals in (
        ("a0", "a3c", 0, [(100_000, 10.0), (200_000, 30.0)]),
        ("a1", "a3c", 10, [(100_000, 20.0), (200_000, 50.0)]),
        ("s0", "a2c", 0, [(100_000, 5.0), (200_000, 9.0)]),
    ):
        points = [(i * 5_000, float(i + up), float(i)) for i in range(1, 41)]  # up+1..up+40
        over = ("eval.every_steps=100000", "server.rule=async", f"algo.name={algo}")
        run = make_run(tmp_path / name, "cartpole_a3c.yaml", points, overrides=over)
        writer = SummaryWriter(str(run / "tb"))
        for steps, mean in evals:
            writer.add_scalar(EVAL_TAG, mean, steps)
        writer.close()
        runs.append(str(run))
    out_png, table = tmp_path / "g.png", tmp_path / "curves.csv"
    argv = ["plot", *runs, "--evals", "--marks", "30", "--group", "server.rule"]
    assert main([*argv, "--out", str(out_png), "--csv", str(table)]) == 0
    out = capsys.readouterr().out.splitlines()
    check_png(out_png)
    import csv

    with table.open() as f:
        rows = list(csv.DictReader(f))
    a1 = [r for r in rows if r["run"] == "a1" and r["kind"] == "episode"]
    assert len(a1) == 40 and a1[0]["group"] == "server.rule=async" and a1[0]["return"] == "11"
    assert a1[18]["mean_return"] == "" and a1[19]["mean_return"] == "20.5"  # a full window
    assert [r["mean_return"] for r in rows if r["run"] == "s0" and r["kind"] == "eval"] == [
        "5", "9"
    ]  # fmt: skip
    assert out[1] == "| run | frames/s | +30 | last (mean of 20) |"
    # a0 reaches a mean of 30 at 200k steps, a1 at 150k
    assert out[6] == "| **server.rule=async** (2 runs) | 5k | 35 s, 175k +- 35.4k | 35.5 +- 7.1 |"
    assert out[7] == "| **server.rule=sync** (1 run) | 5k | 40 s, 200k | 30.5 |"
    evals = out[out.index("") + 1 :]
    assert evals[0] == (
        "| frames | a0 | a1 | s0 | server.rule=async (mean +- sd of 2) | server.rule=sync (1 run) |"
    )
    assert evals[2:] == [
        "| 100k | 10.0 | 20.0 | 5.0 | 15.0 +- 7.1 | 5.0 |",
        "| 200k | 30.0 | 50.0 | 9.0 | 40.0 +- 14.1 | 9.0 |",
    ]
    assert main([*argv[:2], "--group", "server.rules"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("rltrain: error: --group server.rules:") and "\n" not in err
    assert "has no 'rules' in server (server holds: " in err and ", rule, " in err
    assert main([*argv[:2], "--group", "model"]) == 2  # a section: its keys named
    assert "a section of" in capsys.readouterr().err


def test_a_group_of_runs_of_other_settings_is_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """explore111: --group server.rule pooled async, async with staleness scale and async
    with drop as one rule, without a word; seeds (and stops) may differ unsaid."""
    points = [(i * 5_000, float(i), float(i)) for i in range(1, 30)]
    runs = []
    for name, sets in (
        ("s0", ("server.rule=async", "seed=0", "stop.max_env_steps=1000")),
        ("s1", ("server.rule=async", "seed=1")),
        ("scale", ("server.rule=async", "server.staleness=scale")),
    ):
        runs.append(str(make_run(tmp_path / name, "cartpole_a3c.yaml", points, overrides=sets)))
    out = ["--out", str(tmp_path / "g.png")]
    assert main(["plot", *runs[:2], "--group", "server.rule", *out]) == 0
    assert "pools runs" not in capsys.readouterr().err  # seeds and stops are no setting
    assert main(["plot", *runs, "--group", "server.rule", *out]) == 0
    assert capsys.readouterr().err.strip() == (
        "rltrain: plot: --group: server.rule=async pools runs that differ in server.staleness "
        "none, scale; --group server.staleness too takes them apart"
    )
    # ppo runs sync whatever server.rule says: grouped as they ran, and not said (review88b)
    ppo = [
        str(
            make_run(
                tmp_path / f"p{r}", "cartpole_ppo.yaml", points, overrides=(f"server.rule={r}",)
            )
        )
        for r in ("async", "sync")
    ]
    assert main(["plot", *ppo, "--group", "server.rule", *out]) == 0
    assert "pools runs" not in capsys.readouterr().err


def test_a_run_resumed_under_another_rule_is_grouped_as_both(tmp_path: Path) -> None:
    """explore98: a3c resumed with server.rule=sync was grouped (and summarised) as sync,
    which was credited with what async learned: its sessions' rules name its group."""
    from rltrain.plot_groups import changed_values, group_value

    said = ["server.rule: async -> sync", "stop.max_seconds: 20.0 -> 30.0"]
    history = [{"env_steps": 784_640, "changes": said}]
    history += [{"env_steps": 900_000, "changes": ["server.rule: sync -> soft_sync"]}]
    (tmp_path / "summary.json").write_text(json.dumps({"resumed_changes": history}))
    assert changed_values(tmp_path, "server.rule") == ["async", "sync", "soft_sync"]
    assert changed_values(tmp_path, "seed") == []
    cfg = {"server": {"rule": "soft_sync"}, "seed": 3}
    assert group_value(tmp_path, cfg, "server.rule") == "async then sync then soft_sync"
    assert group_value(tmp_path, cfg, "seed") == 3
    (tmp_path / "summary.json").write_text("[]")  # not a mapping: its config.yaml's value
    assert changed_values(tmp_path, "server.rule") == []
    # a2c steps behind a barrier whatever the rule said: sync throughout (review 84)
    import yaml

    from rltrain.config import load_config, to_dict
    from rltrain.rl.config import TrainConfig

    a2c = load_config(TrainConfig, ROOT / "configs" / "cartpole_a3c.yaml", ["algo.name=a2c"])
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(to_dict(a2c)))
    a2c_history = [{"env_steps": 1, "changes": ["server.rule: async -> sync"]}]
    (tmp_path / "summary.json").write_text(json.dumps({"resumed_changes": a2c_history}))
    assert group_value(tmp_path, to_dict(a2c), "server.rule") == "sync"


def test_a_mark_is_judged_after_each_batch_not_between_its_episodes() -> None:
    """Episodes logged at one step end in one batch; the stop judges the mean after all of
    them. Between them the rolling mean crossed 9.9 at 14.1k frames where the stop's (and
    TensorBoard's episode/mean_return) got there at 14.8k (explore83)."""
    from rltrain.curves import Curve
    from rltrain.plot import time_to_marks

    frames = np.array([100.0, 200.0, 200.0, 300.0])
    # window 2: frame 200's first episode makes the mean (9 + 11) / 2 = 10, its last 5.5
    curve = Curve("r", frames, frames / 100, np.array([9.0, 11.0, 0.0, 20.0]), window=2)
    (hit,) = time_to_marks(curve, [9.9])
    assert hit.frames == 300.0  # not 200: that batch's last mean was 5.5


def test_a_groups_band_is_the_95_percent_interval_of_its_mean() -> None:
    """plot --group drew each setting's mean alone: two settings whose seeds overlap looked
    apart. The band is Student's t interval of the mean over the group's runs."""
    import numpy as np

    from rltrain.plot_groups import ci95, mean_curve

    x = np.arange(5.0)
    grid, mean, half = mean_curve([x, x], [np.zeros(5), np.full(5, 2.0)])
    assert len(grid) == 200 and np.allclose(mean, 1.0)
    assert np.allclose(half, 12.706 * np.sqrt(2.0) / np.sqrt(2.0))  # t(1) x sd / sqrt(n)
    assert np.allclose(ci95(np.ones((1, 3))), 0.0)  # one run: no band
    many = np.random.default_rng(0).normal(size=(40, 1))
    t = ci95(many)[0] / (many.std(ddof=1) / np.sqrt(40))
    assert abs(t - 2.0227) < 1e-3  # t(39, 0.975), beyond the table


@pytest.fixture
def figures(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The figures `rltrain plot` saves, laid out, to read their legends and lines back."""
    from matplotlib.figure import Figure

    saved: list[Any] = []
    save = Figure.savefig

    def keep(self: Figure, *args: Any, **kwargs: Any) -> None:
        save(self, *args, **kwargs)
        self.renderer = self.canvas.get_renderer()  # (the Agg canvas, gone once it is closed)
        saved.append(self)

    monkeypatch.setattr(Figure, "savefig", keep)
    return saved


def legend_of(fig: Any) -> list[str]:
    """The texts of a figure's one legend; none is left inside a panel."""
    assert len(fig.legends) == 1 and all(ax.get_legend() is None for ax in fig.axes)
    return [t.get_text() for t in fig.legends[0].get_texts()]


def test_runs_whose_folders_end_alike_get_labels_that_differ(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """explore101: a/x/run and b/x/run were both x/run (one parent added): the legend and the
    tables showed one name twice, and the CSV merged the two runs' rows."""
    from rltrain.curves import Curve, PlotError
    from rltrain.plot_csv import write_curves_csv
    from rltrain.plot_style import distinct_labels

    runs = [
        make_run(tmp_path / a / b / "run", "cartpole_appo.yaml", [(64 * k, k, k) for k in (1, 2)])
        for a, b in (("a", "x"), ("b", "x"), ("c", "y"))
    ]
    table = tmp_path / "c.csv"
    argv = [*map(str, runs), "--marks", "1", "--csv", str(table), "--out", str(tmp_path / "r.png")]
    assert main(["plot", *argv]) == 0
    rows = capsys.readouterr().out.splitlines()[3:6]
    assert [r.split(" | ")[0] for r in rows] == ["| a/x/run", "| b/x/run", "| y/run"]
    csv_runs = [line.split(",")[0] for line in table.read_text().splitlines()[1:]]
    assert csv_runs == ["a/x/run"] * 2 + ["b/x/run"] * 2 + ["y/run"] * 2
    # the shortest suffix of each path that no other run shares; no folder: numbered
    folders = [Path("/s/a/seed0/run"), Path("/s/b/seed0/run"), Path("/s/c/seed1/run")]
    assert distinct_labels(["run"] * 3, folders) == ["a/seed0/run", "b/seed0/run", "seed1/run"]
    assert distinct_labels(["r", "r", "q"], [None, None, None]) == ["r", "r (2)", "q"]
    # the writer's own check: two runs of one label are refused, nothing written
    one = Curve("r", np.array([1.0]), np.array([1.0]), np.array([1.0]))
    with pytest.raises(PlotError, match="runs share the label r: not written"):
        write_curves_csv(tmp_path / "d.csv", [one, one], [np.ones(1)] * 2, [])
    assert not (tmp_path / "d.csv").exists()


def test_many_runs_each_get_a_line_of_their_own_and_a_legend_below(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], figures: list[Any]
) -> None:
    """explore101: run i and run i + 10 had one colour and line style; the legend, inside the
    left panel, covered the curves, ran off the figure, and had an "eval" entry per run; a
    186-character name squeezed the panels. Long names are cut in the legend alone."""
    from rltrain.plot_style import line_style

    long = "appo_cartpole_" + "very_long_descriptive_name_" * 4 + "seed0"
    names = [f"run{k:02d}" for k in range(11)] + [long]
    runs = []
    for k, name in enumerate(names):
        run = make_run(tmp_path / name, "cartpole_appo.yaml", [(64 * j, j + k, j) for j in (1, 2)])
        writer = SummaryWriter(str(run / "tb"))
        writer.add_scalar(EVAL_TAG, 10.0 + k, 128)
        writer.close()
        runs.append(str(run))
    out = tmp_path / "many.png"
    assert main(["plot", *runs, "--marks", "1", "--out", str(out)]) == 0
    check_png(out)
    assert f"| {long} |" in capsys.readouterr().out  # the table keeps the whole name
    (fig,) = figures
    texts = legend_of(fig)
    short = long[:30] + "…" + long[-29:]
    assert texts == [*names[:11], short, "evaluations during training"]
    handles = fig.legends[0].legend_handles[:12]
    assert len({(h.get_color(), h.get_linestyle()) for h in handles}) == 12
    assert len({line_style(k) for k in range(100)}) == 100  # past 40 runs too
    # the legend lies in the figure, below both panels with their tick labels
    renderer = fig.renderer
    box = fig.legends[0].get_window_extent(renderer)
    assert box.x0 >= 0 and box.y0 >= 0 and box.x1 <= fig.bbox.x1
    assert all(ax.get_tightbbox(renderer).y0 >= box.y1 for ax in fig.axes)
    for suffix in ("svg", "pdf"):  # the other formats are still written
        assert main(["plot", *runs[:3], "--out", str(tmp_path / f"m.{suffix}")]) == 0
    assert (tmp_path / "m.pdf").read_bytes().startswith(b"%PDF")
    assert b"<svg" in (tmp_path / "m.svg").read_bytes()[:1000]


def test_csv_holds_the_evaluations_of_a_run_without_episodes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """explore101: a run evaluated before its first episode ended was in the --evals table but
    not in the CSV; alone, no CSV was written and the notice named --out only."""
    young = make_run(tmp_path / "young", "cartpole_appo.yaml", [(4000, 50.0, 1)], tag=EVAL_TAG)
    good = make_run(tmp_path / "good", "cartpole_appo.yaml", [(64, 12, 1), (128, 14, 2)])
    table, png = tmp_path / "c.csv", str(tmp_path / "r.png")
    assert main(["plot", str(good), str(young), "--csv", str(table), "--out", png]) == 0
    rows = table.read_text().splitlines()
    assert [r.split(",")[:3] for r in rows[1:]] == [["good", "", "episode"]] * 2 + [
        ["young", "", "eval"]
    ]
    assert rows[-1].split(",")[3] == "4000" and rows[-1].split(",")[6] == "50"
    assert f"left out {young}:" in capsys.readouterr().err  # (of the plot, not the CSV)
    table.unlink()
    assert main(["plot", str(young), "--evals", "--csv", str(table), "--out", png]) == 0
    assert [r.split(",")[2] for r in table.read_text().splitlines()[1:]] == ["eval"]
    assert "--out: no episode has ended in these runs" in capsys.readouterr().err
    table.unlink()  # nothing but a CSV asked: its evaluations, whatever runs are beside it
    assert main(["plot", str(young), "--csv", str(table)]) == 0  # (review 85: refused alone)
    assert [r.split(",")[2] for r in table.read_text().splitlines()[1:]] == ["eval"]
    out, err = capsys.readouterr()
    assert out.strip() == str(table) and err.strip().endswith(
        "(no episode has ended): its evaluations are kept (tables, --csv)"
    )


def test_a_groups_legend_names_its_evaluations_and_only_the_means_drawn(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], figures: list[Any]
) -> None:
    """explore101: (a) a group's "eval" entry went with its first run, so a first run without
    evaluations left the others' dots out of the legend; (b) runs that share no stretch of
    wall time got no mean curve there, and the legend still said "mean of 2"."""
    from rltrain.plot_groups import mean_curve

    early = make_run(tmp_path / "early", "cartpole_appo.yaml", [(64 * j, j, j) for j in (1, 2, 3)])
    late = make_run(tmp_path / "late", "cartpole_appo.yaml", [(64 * j, j, 50 + j) for j in (1, 2)])
    writer = SummaryWriter(str(late / "tb"))  # only the group's second run is evaluated
    writer.add_scalar(EVAL_TAG, 3.0, 128, walltime=time.time() + 52)
    writer.close()
    argv = ["plot", str(early), str(late), "--group", "algo.name", "--out", str(tmp_path / "g.png")]
    assert main(argv) == 0
    assert capsys.readouterr().err.strip() == (
        "rltrain: plot: --group algo.name=appo: its runs share no stretch of wall time; "
        "no mean curve drawn against it"
    )
    (fig,) = figures
    assert legend_of(fig) == [
        "algo.name=appo (mean of 2, 95% CI shaded; against frames only)",
        "evaluations during training",
    ]
    apart = make_run(
        tmp_path / "apart", "cartpole_appo.yaml", [(9000 + j, j, 60 + j) for j in (1, 2)]
    )
    assert main([*argv[:2], str(apart), *argv[3:]]) == 0  # nothing shared: no mean anywhere
    assert len(capsys.readouterr().err.strip().splitlines()) == 2  # (frames, wall time)
    assert legend_of(figures[1])[0] == "algo.name=appo (2 runs, no mean)"
    x = np.arange(3.0)
    assert mean_curve([x, x + 10], [x, x]) is None
    assert mean_curve([x, x + 2], [x, x]) is None  # one instant in common: no stretch
    got = mean_curve([x, x + 0.5], [x, np.array([np.nan, 1.0, 2.0])])  # (before a full window)
    assert got is not None and (got[0][0], got[0][-1]) == (1.5, 2.0)  # where both are drawn
