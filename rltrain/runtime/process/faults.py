"""Injected faults (``faults.events``) on the process runtime: a signal to the process that an
event names, or a note saying why there is none to signal (a thread of the trainer's)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rltrain.faults import FaultAction


def own_process(r: Any) -> bool:
    """A child process (:class:`rltrain.runtime.process.Remote`), not a thread of this one."""
    return hasattr(r, "signal")


def inject(
    action: FaultAction, procs: dict[str, list[Any]], counters: Any, say: Callable[[str], None]
) -> None:
    """Carry out one injected fault on the process it names (if the run has it)."""
    e = action.event
    target = next((r for r in procs.get(e.target, []) if r.index == e.index), None)
    learners = [r for r in procs.get("learner", []) if own_process(r)]
    host = ""
    if target is None and e.target == "shard" and learners:
        target = learners[0]  # the shards live in the learner's process: it dies with them
        host = f"shard {e.index}, in the learner's process: "
    if target is None:
        why = {
            "shard": "the shards are objects of the trainer's process (runtime.backend=process)",
            "policy": "the actors act with their own copies in this run (runtime.inference)",
        }.get(e.target)
        if why:
            say(f"injected fault: skipped {action.signal} {e.target} {e.index}: {why}")
        return
    if not own_process(target):
        say(
            f"injected fault: skipped {action.signal} {e.target} {e.index}: it is a thread of "
            "the trainer's process (runtime.backend=process)"
        )
        return
    try:
        done = target.signal(action)
    except ProcessLookupError as err:
        done = f"could not {action.signal} {e.target} {e.index}: {err}"
    counters.injected += int(not done.startswith(("skipped", "could not")))
    say(f"injected fault: {host}{done}")
