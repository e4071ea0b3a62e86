"""The one driver loop of every run: each process keeps one call in flight.

As Sample Factory's runner: the loop is written once, here; an algorithm (or the supervised
benchmark) contributes a :class:`Plan`, a few hooks that say what to submit, what a result
means and what a lost process means. The loop itself never blocks on one process: it waits
for whichever call finishes first (or for the next thing due: a log line, a checkpoint, an
injected fault), hands the result or the failure to the plan, lets the plan refill idle
processes, and ticks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from rltrain import signals
from rltrain.faults import ProcessLost


@dataclass
class Done:
    """A finished call, a lost process or a revived one (``Pool.wait`` of either backend:
    ``rltrain.runtime.ray.pool`` over Ray processes, ``rltrain.runtime.local`` over threads)."""

    remote: Any
    tag: Any = None  # what the driver attached when it submitted the call
    value: Any = None  # the call's result (or its future, for calls submitted with fetch=False)
    error: BaseException | None = None  # ProcessLost or PeerLost
    revived: bool = False  # the process is back after a restart: give it work again


def note_answers(answered: set[int], dones: Sequence[Done]) -> None:
    """Keep ``answered`` (the ``id`` of each remote whose process has returned a call) up to
    date with ``dones``: a process that died, or came back, has answered nothing yet. The hang
    watch reads it to tell a start-up from a call (it may not see a short first call)."""
    for d in dones:
        if d.revived or isinstance(d.error, ProcessLost):
            answered.discard(id(d.remote))
        elif d.error is None:
            answered.add(id(d.remote))


class Calls(Protocol):
    """The calls in flight (``rltrain.runtime.Pool``)."""

    def wait(self, timeout: float) -> Sequence[Done]: ...


class Plan(Protocol):
    """What a kind of run contributes to :func:`drive`."""

    def start(self) -> None:
        """Submit the first calls."""

    def on_result(self, done: Any) -> None:
        """A call returned its value (``done.value``)."""

    def on_fault(self, done: Any) -> None:
        """A call failed (its process died, or one it used did) or a process came back."""

    def refill(self) -> None:
        """Give idle processes their next call, as far as the run's state allows."""

    def keep_going(self) -> bool:
        """Whether to wait on: calls in flight, or work still to hand out."""

    def wait_s(self) -> float:
        """How long the next wait may take (until the next thing due)."""

    def tick(self) -> None:
        """Everything due between waits: logs, checkpoints, injected faults, the shard guard."""


def drive(calls: Calls, plan: Plan) -> None:
    """Run ``plan`` until it says stop."""
    plan.start()
    while plan.keep_going():
        step(calls, plan, plan.wait_s())
        plan.tick()


def step(calls: Calls, plan: Plan, timeout: float) -> None:
    """One wait: hand what finished to the plan, then let it refill idle processes. A Ctrl-C
    waits for the plan to take in a result whole (counters half added would be wrong)."""
    for done in calls.wait(timeout):
        with signals.deferred():
            if done.error is None and not done.revived:
                plan.on_result(done)
            else:
                plan.on_fault(done)
    plan.refill()
