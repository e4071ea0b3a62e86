"""The two-stage Ctrl-C handler (rltrain.signals), in-process: what the first signal raises,
and where it waits."""

from __future__ import annotations

import os
import signal

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


def test_ctrl_c_in_eval_says_it_stops_not_that_it_writes_a_checkpoint(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """`rltrain eval` interrupted said "stopping after a final checkpoint": eval writes none."""
    from rltrain import cli

    def interrupted(_args: object) -> int:
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):
            pass
        return 0

    monkeypatch.setattr(cli, "cmd_eval", interrupted)
    assert cli.main(["eval", "somewhere"]) == signals.EXIT_INTERRUPTED
    err = capfd.readouterr().err
    assert "rltrain: SIGINT: stopping (press Ctrl-C again to quit at once)" in err
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
