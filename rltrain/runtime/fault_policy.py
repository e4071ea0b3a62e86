"""The fault policy: what the driver does about a process that failed or came back (the same
for Ray's processes and the process runtime's; imports neither)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rltrain.driver import Done
from rltrain.faults import PeerLost, ProcessLost, PusherRule, on_pusher_loss
from rltrain.records import Verdict


def respond(
    d: Done,
    rule: PusherRule,
    on_worker_loss: str,
    server: Any,
    guard: Any,
    counters: Any,
    say: Callable[[str], None],
) -> Verdict:
    """What a driver does about a failed or revived process: count it, say it, and let the
    server stop waiting for it when the rule allows. ``rule`` is the update rule the process
    pushes under (:data:`rltrain.ps.rules.ASYNC` for processes that do not push).

    Returns "work" (give it work now), "wait" (it is being restarted) or "gone" (it will not
    come back).
    """
    r = d.remote
    name = f"{r.role} {r.index}"
    if d.revived:
        say(f"{name} is back (pid {r.pid()}); it rejoins with fresh parameters")
        if rule.barrier:  # a pusher's index (an actor's 0 is not learner 0: review89)
            guard.back(r.index)
        return "work"
    counters.lost_calls += 1
    if isinstance(d.error, PeerLost):
        guard.check()  # restores the server if a shard was lost; the call is simply redone
        return "work"
    assert isinstance(d.error, ProcessLost)
    leave, how = on_pusher_loss(rule, on_worker_loss, d.error.permanent)
    if leave:
        guard.leave(r.index)
        counters.left_barrier += 1
    if d.error.permanent:
        say(f"{name} died and will not restart (faults.max_restarts spent){how}")
        return "gone"
    if r.mark_lost():
        counters.restart(r.role)
        say(f"{name} lost: its process died; {r.restarted_by} restarts it{how}")
    return "wait"
