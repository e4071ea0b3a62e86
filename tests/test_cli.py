"""The command line's working paths; bad input is in tests/test_bad_input.py."""

from __future__ import annotations

import pytest

from rltrain.cli import main


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

    def broken(kind: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(cli, "cmd_options", broken)
    with pytest.raises(BrokenPipeError):
        main(["options", "train"])
