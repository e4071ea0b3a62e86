"""The command line's working paths; bad input is in tests/test_bad_input.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from rltrain.cli import main

CARTPOLE = Path(__file__).resolve().parents[1] / "configs" / "cartpole_a3c.yaml"


def test_options_lists_every_key(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["options", "bench"]) == 0
    out = capsys.readouterr().out
    for key in (
        "server.rule",
        "server.n_fetch",
        "optimizer.name",
        "runtime.address",
        "budget.epochs",
    ):
        assert key in out


def test_options_train_lists_env_and_stop_keys(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["options", "train"]) == 0
    out = capsys.readouterr().out
    for key in ("env.id", "algo.name", "stop.mean_return", "checkpoint.keep", "runtime.address"):
        assert key in out


def test_options_leave_out_the_other_commands_keys(capsys: pytest.CaptureFixture[str]) -> None:
    """Shared sections (server, runtime, faults) hold keys only one command reads."""
    keys = {}
    for kind in ("train", "bench"):
        assert main(["options", kind]) == 0
        keys[kind] = {
            line.split()[0] for line in capsys.readouterr().out.splitlines() if line[:1].strip()
        }
    assert {"runtime.inference", "server.device", "faults.hang_timeout_s"} <= keys["train"]
    assert not {"runtime.inference", "server.device", "faults.hang_timeout_s"} & keys["bench"]
    assert {"server.n_push", "server.record", "server.average_every"} <= keys["bench"]
    assert not {"server.n_push", "server.record", "server.average_every"} & keys["train"]


@pytest.mark.parametrize("kind", ["train", "bench"])
def test_a_reader_that_stops_early_ends_the_command_quietly(kind: str) -> None:
    """`rltrain options train | head -1`: the reader closes the pipe before the listing is
    written; no traceback, exit code 141 (128 + SIGPIPE, as `cat` or `ls` in that pipeline)."""
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-m", "rltrain.cli", "options", kind],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # before the interpreter has started: every write finds no reader
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141
    assert err == ""


def test_a_broken_pipe_that_is_not_stdouts_is_not_hidden(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only a closed stdout ends quietly: another BrokenPipeError (a bug) still raises."""
    from rltrain import cli

    def broken(*args: object) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(cli, "cmd_options", broken)
    with pytest.raises(BrokenPipeError):
        main(["options", "train"])


def test_a_full_disk_under_stdout_is_one_line() -> None:
    """`rltrain options train > /dev/full`: one error line, exit code 1, no traceback."""
    import subprocess
    import sys

    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [sys.executable, "-m", "rltrain.cli", "options", "train"],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    assert proc.returncode == 1
    assert proc.stderr == "rltrain: error: cannot write the output (No space left on device)\n"


def test_a_run_whose_stdout_reader_went_away_trains_to_its_end(tmp_path: Path) -> None:
    """`rltrain train ... | head -2`: the progress lines are a log; losing their reader (or
    their disk) does not end the run before its checkpoint and summary.json."""
    import json
    import subprocess
    import sys

    run_dir = tmp_path / "run"
    argv = ["train", str(CARTPOLE), "--run-dir", str(run_dir), "--set", "runtime.backend=local"]
    argv += ["--set", "stop.mean_return=null", "--set", "stop.max_env_steps=2000"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "rltrain.cli", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # before the first line
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 0, err
    assert "rltrain: stdout failed (Broken pipe); the run goes on without its lines" in err
    assert "Traceback" not in err
    assert json.loads((run_dir / "summary.json").read_text())["stopped_by"] == "max_env_steps"
    assert list((run_dir / "checkpoints").glob("ckpt-*.pt"))


def test_an_unfailing_stream_takes_every_write_after_its_failure(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from rltrain.progress import Unfailing

    class Full:
        def write(self, text: str) -> int:
            raise OSError(28, "No space left on device")

        def flush(self) -> None:
            raise OSError(28, "No space left on device")

    out = Unfailing(Full(), "stdout")  # type: ignore[arg-type]
    assert out.write("one\n") == 4 and out.write("two\n") == 4
    out.flush()
    assert out.lost == "No space left on device"
    assert capsys.readouterr().err.count("rltrain: stdout failed (No space left on device)") == 1


def test_bench_help_gives_bench_examples_not_trains() -> None:
    """explore109: bench --help said --set env.kwargs={} and that the run's name takes the
    env id and the algorithm, both train's."""
    from rltrain.cli_parser import build_parser

    helps = {}
    for command in ("train", "bench"):
        sub = build_parser()._subparsers._group_actions[0].choices[command]  # type: ignore[union-attr]
        helps[command] = sub.format_help()
    assert "env.kwargs" not in helps["bench"] and "env id" not in helps["bench"]
    assert "--set modes=[sync,async]" in " ".join(helps["bench"].split())
    assert "env.kwargs={}" in helps["train"] and "env id" in helps["train"]
