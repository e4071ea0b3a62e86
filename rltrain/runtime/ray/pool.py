"""The calls in flight: one per process, their results, losses and revivals."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import ray
from ray.exceptions import ActorDiedError, RayActorError

import rltrain.runtime.ray.head as head
from rltrain.driver import Done, note_answers
from rltrain.faults import PeerLost, ProcessLost
from rltrain.runtime.ray.errors import creation_error, first_line, result
from rltrain.runtime.ray.remote import Remote

__all__ = ["Done", "Pool", "get", "kill", "wait_all", "wait_any"]


class Pool:
    """The calls in flight on a set of :class:`Remote` processes, failures included.

    ``wait`` turns every finished call into a :class:`Done`. A call whose process died gives a
    ``Done`` with ``error=ProcessLost``; the pool then probes the process until Ray has
    restarted it and reports it ``revived`` (or ``ProcessLost(permanent=True)`` if it will not
    come back). Calls submitted with ``fetch=False`` return their future, unread (rollouts that
    go from actors to learners without passing through the driver).
    """

    RETRY_S = 0.5

    def __init__(self) -> None:
        self.calls: dict[Any, tuple[Remote, Any, bool]] = {}
        self.probes: dict[Any, Remote] = {}
        self.retry: list[tuple[float, Remote]] = []
        self.answered: set[int] = set()  # see rltrain.driver.note_answers

    def submit(self, remote: Remote, method: str, *args: Any, tag: Any = None, fetch: bool = True):
        ref = remote.call(method, *args)
        self.calls[ref] = (remote, tag, fetch)
        return ref

    def __len__(self) -> int:
        return len(self.calls) + len(self.probes) + len(self.retry)

    def watch(self, remote: Remote) -> None:
        """Probe a process the driver found dead some other way, until it is back (or gone)."""
        if remote not in self.restarting():
            self.probes[remote.probe()] = remote

    def busy(self, remote: Remote) -> bool:
        return any(r is remote for r, _, _ in self.calls.values())

    def restarting(self) -> list[Remote]:
        return [*self.probes.values(), *(r for _, r in self.retry)]

    @head.guarded
    def wait(self, timeout: float) -> list[Done]:
        head.check()  # a cluster whose head is gone: every call here would fail or block
        now = time.time()
        for t, remote in [x for x in self.retry if x[0] <= now]:
            self.retry.remove((t, remote))
            self.probes[remote.probe()] = remote
        if self.retry:
            timeout = min(timeout, max(0.0, min(t for t, _ in self.retry) - now))
        out: list[Done] = []
        for ref in wait_any([*self.calls, *self.probes], timeout):
            if ref in self.probes:
                out.extend(self._probed(ref, self.probes.pop(ref)))
                continue
            remote, tag, fetch = self.calls.pop(ref)
            if remote.restarted_unseen():  # as the process runtime does: the call reports it
                why = f"{remote.role} {remote.index}'s process died before its first call"
                out.append(Done(remote, tag, error=ProcessLost(remote.actor_id, False, why)))
                self.probes[remote.probe()] = remote
                continue
            if not fetch:
                out.append(Done(remote, tag, ref))
                continue
            try:
                out.append(Done(remote, tag, result(ref, ready=True)))
            except ProcessLost as e:
                out.append(Done(remote, tag, error=e))
                if not e.permanent:
                    self.probes[remote.probe()] = remote
            except PeerLost as e:
                out.append(Done(remote, tag, error=e))
        if not out and not self.calls and not self.probes and self.retry:
            time.sleep(min(self.RETRY_S, timeout))
        note_answers(self.answered, out)
        return out

    def _probed(self, ref: Any, remote: Remote) -> list[Done]:
        try:
            remote.came_back(ray.get(ref))
        except ActorDiedError as e:  # for good; a constructor that raised says what it raised
            why = creation_error(str(e)) if e.actor_init_failed else first_line(e)
            return [Done(remote, error=ProcessLost(remote.actor_id, True, why))]
        except RayActorError:  # still restarting (unless the head is gone)
            head.check()
            self.retry.append((time.time() + self.RETRY_S, remote))
            return []
        return [Done(remote, revived=True)]


@head.guarded
def wait_any(futures: Sequence[Any], timeout: float) -> list[Any]:
    """The futures that are done, waiting up to ``timeout`` seconds for at least one."""
    if not futures:
        return []
    head.check()
    ready, _ = ray.wait(list(futures), num_returns=1, timeout=timeout)
    if ready:  # take every other one that is done too
        ready, _ = ray.wait(list(futures), num_returns=len(futures), timeout=0)
    return ready


@head.guarded
def wait_all(futures: Sequence[Any], timeout: float) -> bool:
    """True once every future is done; waits at most ``timeout`` seconds."""
    head.check()
    _, pending = ray.wait(list(futures), num_returns=len(futures), timeout=timeout)
    return not pending


@head.guarded
def get(futures: Sequence[Any]) -> list[Any]:
    """Their values, once all are done (asking the cluster's head a second at a time)."""
    futures = list(futures)
    while head.watched() and not wait_all(futures, 1.0):
        pass
    return ray.get(futures)


def kill(handle: Any) -> None:
    if not head.gone():
        ray.kill(handle)
