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
