"""The process runtime's pool of calls in flight, and of children being restarted."""

from __future__ import annotations

import concurrent.futures as cf
import time
from typing import Any

from rltrain.driver import Done
from rltrain.faults import ProcessLost


class Pool:
    """The calls in flight, one per child (:class:`~rltrain.runtime.process.Remote`), and the
    children being restarted.

    As :class:`rltrain.runtime.Pool` (Ray): a call whose process died gives a ``Done`` with
    ``error=ProcessLost``; the pool then waits for the new process and reports it
    ``revived`` (or ``ProcessLost(permanent=True)``). Any other exception is a bug and fails
    the run with its own traceback. ``fetch=False`` calls give their value too (there are no
    references to pass on: a rollout is copied out of shared memory as it arrives).
    """

    def __init__(self) -> None:
        self.calls: dict[cf.Future, tuple[Any, Any, bool]] = {}
        self.probes: dict[cf.Future, Any] = {}

    def submit(
        self, remote: Any, method: str, *args: Any, tag: Any = None, fetch: bool = True
    ) -> cf.Future:
        future = remote.call(method, *args)
        self.calls[future] = (remote, tag, fetch)
        return future

    def __len__(self) -> int:
        return len(self.calls) + len(self.probes)

    def watch(self, remote: Any) -> None:
        if hasattr(remote, "probe") and remote not in self.restarting():  # not a learner thread
            self.probes[remote.probe()] = remote

    def busy(self, remote: Any) -> bool:
        return any(r is remote for r, _, _ in self.calls.values())

    def restarting(self) -> list[Any]:
        return list(self.probes.values())

    def wait(self, timeout: float) -> list[Done]:
        if not self.calls and not self.probes:
            time.sleep(timeout)
            return []
        done, _ = cf.wait([*self.calls, *self.probes], timeout, return_when=cf.FIRST_COMPLETED)
        out = []
        for future in done:
            if future in self.probes:
                remote = self.probes.pop(future)
                error = future.exception()
                out.append(Done(remote, error=error) if error else Done(remote, revived=True))
                if isinstance(error, ProcessLost) and not error.permanent:
                    self.probes[remote.probe()] = remote  # it died again before it was up
                continue
            remote, tag, _ = self.calls.pop(future)
            error = future.exception()
            if isinstance(error, ProcessLost):
                out.append(Done(remote, tag, error=error))
                if not error.permanent:
                    self.probes[remote.probe()] = remote
            elif error is not None:
                raise error
            else:
                out.append(Done(remote, tag, future.result()))
        return out
