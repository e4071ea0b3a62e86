"""The two-stage Ctrl-C handler (rltrain.signals), in-process: what the first signal raises,
and where it waits."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from rltrain import signals


def test_the_first_signal_raises_keyboard_interrupt_at_once() -> None:
    reached = []
    with signals.graceful(), pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)  # handled before the next bytecode or so
        for _ in range(1000):
            pass
        reached.append(True)
    assert reached == []


def test_inside_deferred_the_first_signal_waits_for_the_block_to_end() -> None:
    """A message half written to a pipe would leave its reader out of step: the block (a
    send) finishes, then the interrupt is raised."""
    finished = []
    with signals.graceful(), pytest.raises(KeyboardInterrupt), signals.deferred():
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1000):
            pass
        with signals.deferred():  # nested: only the outermost block raises
            pass
        finished.append(True)
    assert finished == [True]
    with signals.graceful(), signals.deferred():  # a new command: nothing held over
        pass


def test_an_interrupt_while_imports_are_held_comes_after_them() -> None:
    """explore119: Ctrl-C inside the first API call's import of torch left it half-built, and
    the kernel's next call failed (a SystemError, a segfault): rltrain.__getattr__ holds it."""
    finished = []
    with pytest.raises(KeyboardInterrupt), signals.interrupts_held():
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):
            pass
        finished.append(True)
    assert finished == [True]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored
    with signals.interrupts_held():  # none: nothing raised
        pass


@pytest.mark.parametrize(
    ("signum", "again"),
    [(signal.SIGINT, "press Ctrl-C again to"), (signal.SIGTERM, "a second SIGTERM or Ctrl-C:")],
)
def test_ctrl_c_in_eval_says_it_stops_not_that_it_writes_a_checkpoint(
    signum: int, again: str, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """`rltrain eval` interrupted said "stopping after a final checkpoint": eval writes none.
    A scheduler's SIGTERM is not told to press Ctrl-C (explore94)."""
    from rltrain import cli

    def interrupted(_args: object) -> int:
        os.kill(os.getpid(), signum)
        for _ in range(1000):
            pass
        return 0

    monkeypatch.setattr(cli, "cmd_eval", interrupted)
    assert cli.main(["eval", "somewhere"]) == signals.EXIT_INTERRUPTED
    err = capfd.readouterr().err
    name = signal.Signals(signum).name
    assert f"rltrain: {name}: stopping ({again} quit at once)" in err
    assert "checkpoint" not in err and err.rstrip().endswith("rltrain: interrupted")


def test_sighup_stops_as_ctrl_c_does_unless_nohup_ignores_it() -> None:
    """A closed terminal's SIGHUP raises the graceful stop's KeyboardInterrupt; under
    ``nohup`` (SIGHUP ignored) it stays ignored; the handlers are put back afterwards."""
    with signals.graceful(), pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGHUP)
        for _ in range(1000):
            pass
    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as nohup starts a command
    try:
        with signals.graceful():
            signals.install()  # (again, as after ray.init)
            assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGHUP)
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, before)


def test_a_quit_at_once_names_resume_only_where_the_run_has_a_checkpoint(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """The second Ctrl-C said "--resume takes its newest checkpoint" where none existed (a
    run stopped before its first: a Ray cluster lost in the first minute)."""
    quits: list[int] = []
    monkeypatch.setattr(signals.os, "_exit", quits.append)
    monkeypatch.setattr(signals, "_on_quit", [])  # (the forkserver's socket stays: others use it)
    for written in (False, True):
        with signals.graceful():
            if written:
                signals.checkpointed()
            with pytest.raises(KeyboardInterrupt):
                os.kill(os.getpid(), signal.SIGINT)
                for _ in range(1000):
                    pass
            os.kill(os.getpid(), signal.SIGINT)  # the second: at once (os._exit, patched)
            for _ in range(1000):
                pass
        err = capfd.readouterr().err
        assert "stopped at once, before the graceful stop finished" in err
        assert ("--resume takes its newest checkpoint" in err) is written
    assert quits == [signals.EXIT_INTERRUPTED] * 2


def test_ctrl_c_in_the_final_evaluation_says_so_and_exits_130(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """A run that met its stop, interrupted in its final evaluation: the signal's line says
    the final checkpoint is written (it promised one), the evaluation is left out, and the
    command exits 130 (it exited 0: a `&&` chain went on after the Ctrl-C)."""
    from rltrain import cli

    summary = {"stopped_by": "max_env_steps", "wall_seconds": 3.0, "env_steps": 64}
    summary |= {"episodes": 2, "mean_return": 9.0, "updates": 1, "faults": {}}

    def run_train(*_args: object) -> tuple[object, dict[str, object]]:
        signals.stopping_now(signals.FINAL_EVALUATION)  # as PeriodicEval.finish does
        with pytest.raises(KeyboardInterrupt):  # (PeriodicEval's wait catches it)
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):
                pass
        return tmp_path, summary

    monkeypatch.setattr(cli, "run_train", run_train)
    config = str(Path(__file__).resolve().parents[1] / "configs" / "cartpole_a3c.yaml")
    assert cli.main(["train", config]) == signals.EXIT_INTERRUPTED
    err = capfd.readouterr().err
    assert "SIGINT: the final checkpoint is written: stopping without the final evaluation" in err
    assert f"interrupted in the final evaluation; score the run: rltrain eval {tmp_path}" in err
    monkeypatch.setattr(cli, "run_train", lambda *_: (tmp_path, summary))
    assert cli.main(["train", config]) == 0  # no signal: 0 (graceful counts each command's)
