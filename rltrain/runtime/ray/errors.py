"""What a lost process looks like to the driver: Ray's errors as rltrain's, in one line."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ray
from ray.exceptions import (
    ActorDiedError,
    GetTimeoutError,
    ObjectLostError,
    RayActorError,
    RayTaskError,
)

import rltrain.runtime.ray.head as head
from rltrain.errors import RLTrainError
from rltrain.faults import PeerLost, ProcessLost, RunFailed, ShardFenced


class RayStartError(RLTrainError, RuntimeError):
    """Ray could not be started or reached; the message is one line."""


def result(ref: Any, ready: bool = False) -> Any:
    """The value of a finished call; a lost process becomes :class:`ProcessLost` (this
    call's process died) or :class:`PeerLost` (a process the call used died); other errors
    propagate as they are. A loss where the cluster's head no longer answers is the
    cluster's: :class:`~rltrain.faults.ClusterLost`."""
    try:
        return ray.get(ref) if ready else get_watched(ref)  # (ready: ray.wait said so)
    except RayTaskError as e:
        lost = peer_lost(e)
        if lost is None:
            raise
        head.confirm()
        raise lost from None
    except RayActorError as e:
        if getattr(e, "actor_init_failed", False):  # its constructor raised: bad input (an
            # env that fails, a module that will not import) or a bug, which a restart would
            # only repeat; not a lost process (as the process runtime's "failed")
            raise RunFailed(creation_error(str(e))) from None
        head.confirm()
        raise ProcessLost(e.actor_id or "", isinstance(e, ActorDiedError), first_line(e)) from None
    except ObjectLostError as e:  # an object whose owner died: a shard's fanned-out parameters
        head.confirm()
        raise PeerLost("", first_line(e)) from None


@head.guarded
def get_watched(ref: Any) -> Any:
    """``ray.get``; in the driver, a second at a time, asking the cluster's head between: a call
    to a process that has not started waits in Ray for as long as it takes, and where the
    head is gone, until Ray's core worker ends the driver a minute later."""
    if head.watched():
        while not ray.wait([ref], timeout=1.0)[0]:
            head.check()
    return ray.get(ref)


def peer_lost(e: BaseException) -> PeerLost | None:
    """Walk a task error's causes for a dead process or a fenced (restarted) shard."""
    seen: BaseException | None = e
    for _ in range(10):
        if seen is None:
            return None
        if isinstance(seen, ShardFenced):
            return PeerLost("", str(seen).splitlines()[0] if str(seen) else "shard fenced")
        if isinstance(seen, RayActorError):
            return PeerLost(seen.actor_id or "", first_line(seen))
        if isinstance(seen, ObjectLostError):  # e.g. a dead shard's parameter object
            return PeerLost("", first_line(seen))
        if isinstance(seen, ProcessLost | PeerLost):  # raised by a RayServer inside the call
            return PeerLost(seen.actor_id, str(seen))
        seen = getattr(seen, "cause", None) or seen.__cause__
    return None


def creation_error(text: str) -> str:
    """The error a Ray process's constructor raised, from Ray's message (which ends with the
    exception's own last line, ``module.Class: message``): rltrain's own errors (an env's
    EnvFailed, a ConfigError) as their message, others with their class's name."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    last = lines[-1] if lines else "a process's constructor failed"
    name, sep, message = last.partition(": ")
    if not sep or " " in name:
        return last
    short = name.rsplit(".", 1)[-1]
    return message if name.startswith("rltrain.") else f"{short}: {message}"


def first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:200] if text else type(e).__name__


def failed(refs: Sequence[Any]) -> list[str]:
    """Per finished future: "" (a value), "died" (the process that ran it died) or "error"
    (it raised, e.g. because a server shard it used died). Reads the values: use it on the
    rare failure path only."""
    out = []
    for ref in refs:
        try:
            ray.get(ref, timeout=0)
            out.append("")
        except RayTaskError:  # before RayActorError: a task error may wrap an actor error
            out.append("error")
        except (RayActorError, GetTimeoutError):
            out.append("died")
    return out
