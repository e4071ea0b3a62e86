"""A replica's pipeline stages as processes of this machine (:mod:`rltrain.supervised.pipeline`
on the process runtime); :mod:`rltrain.runtime.ray.stages` is the same on Ray.

On Ray a call's arguments may be the futures of other calls, and Ray hands each result from
stage to stage. Here the replica's lead is a thread of the bench's process (it only cuts
batches and issues calls), and :class:`FutureStages` sends a call to its stage once the
futures among its arguments have resolved. As Ray does for one caller's calls to one actor,
the calls to a stage run in the order they were issued, whatever order their arguments
resolve in (the last stage's loss of micro-batch i must not run before its forward of i).
"""

from __future__ import annotations

import concurrent.futures as cf
import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

from rltrain.runtime.local import Remote as ThreadRemote

__all__ = ["FutureStages", "stage_lead", "stage_link", "stages_of"]


class FutureStages:
    """:class:`~rltrain.supervised.pipeline.Stages` over process-runtime remotes: ``call``
    returns a future at once; a call waits (in its stage's queue, not in the caller) for the
    futures among its arguments and for the calls issued to its stage before it."""

    def __init__(self, remotes: Sequence[Any], link_s: float = 0.0) -> None:
        """``link_s``: the latency of each hop between stages (``model.link_ms``): a result
        of stage j goes to stage i != j no sooner than ``link_s`` after it came, and neither
        stage waits meanwhile, as over a slow network link."""
        self.remotes, self.count, self.link_s = list(remotes), len(remotes), link_s
        self._queues: list[deque[tuple[str, tuple[Any, ...], cf.Future]]] = [
            deque() for _ in remotes
        ]
        self._locks = [threading.Lock() for _ in remotes]  # one a stage: a send that
        # blocks (a busy stage's pipe) holds up that stage's calls only
        # when each stage's timer (one at a time) pumps it again: a thread per callback that
        # finds the queue's head still on the link would, with batches in flight, take the
        # relay's time
        self._due = [0.0 for _ in remotes]

    def call(self, stage: int, method: str, *args: Any) -> cf.Future:
        out = StageFuture(stage)
        out.set_running_or_notify_cancel()
        with self._locks[stage]:
            self._queues[stage].append((method, args, out))
        for a in args:  # (a callback runs at once on a future that is done already)
            if isinstance(a, cf.Future):
                a.add_done_callback(lambda _: self._pump(stage))
        self._pump(stage)
        return out

    def get(self, handles: Sequence[Any]) -> list[Any]:
        return [h.result() for h in handles]

    def _pump(self, stage: int) -> None:
        """Send the stage's calls from the front of its queue while their arguments are in."""
        while True:
            with self._locks[stage]:
                q = self._queues[stage]
                if not q or not all(done(a) for a in q[0][1]):
                    return
                due = self._crossed(stage, q[0][1])
                wait = due - time.monotonic()
                if wait > 0:  # on the link still: pumped again when it arrives
                    if not self._due[stage] or due < self._due[stage]:
                        self._due[stage] = due
                        timer = threading.Timer(wait, self._timed, (stage, due))
                        timer.daemon = True
                        timer.start()
                    return
                method, args, out = q.popleft()
                failed = next((a for a in args if failed_future(a)), None)
                if failed is None:  # sent under the lock: the stage sees the queue's order
                    values = [a.result() if isinstance(a, cf.Future) else a for a in args]
                    inner = self.remotes[stage].call(method, *values)
            if failed is not None:  # the stage that made it died, or raised: so does this call
                out.set_exception(failed.exception())
                continue
            inner.add_done_callback(lambda f, o=out: relay(f, o))

    def _timed(self, stage: int, due: float) -> None:
        """A stage's timer: the next one may start, and the queue's head may go."""
        with self._locks[stage]:
            if self._due[stage] == due:
                self._due[stage] = 0.0
        self._pump(stage)

    def _crossed(self, stage: int, args: Sequence[Any]) -> float:
        """When (``time.monotonic``) the last of ``args`` made by another stage has crossed
        the link; 0 without a link or such an argument."""
        if not self.link_s:
            return 0.0
        hops = [a for a in args if isinstance(a, StageFuture) and a.stage != stage]
        return max((a.arrived + self.link_s for a in hops), default=0.0)


class StageFuture(cf.Future[Any]):
    """The future of a call to a stage: the stage (where a hop starts: its link) and, once
    done, when its result arrived (``time.monotonic``)."""

    stage: int
    arrived: float

    def __init__(self, stage: int) -> None:
        super().__init__()
        self.stage = stage

    # stamped before the future is done: a thread that sees it done reads the time (a done
    # callback runs only after done() is already true elsewhere)
    def set_result(self, result: Any) -> None:
        self.arrived = time.monotonic()
        super().set_result(result)

    def set_exception(self, exception: BaseException | None) -> None:
        self.arrived = time.monotonic()
        super().set_exception(exception)


def done(a: Any) -> bool:
    return not isinstance(a, cf.Future) or a.done()


def failed_future(a: Any) -> bool:
    return isinstance(a, cf.Future) and a.exception() is not None


def relay(inner: cf.Future, out: cf.Future) -> None:
    error = inner.exception()
    if error is not None:
        out.set_exception(error)
    else:
        out.set_result(inner.result())


def stages_of(remotes: Sequence[Any], link_s: float = 0.0) -> FutureStages:
    """The :class:`~rltrain.supervised.pipeline.Stages` of one replica's stage processes, with
    ``link_s`` of latency on each hop between them."""
    return FutureStages(remotes, link_s)


def stage_lead(target: type, *args: Any, index: int) -> ThreadRemote:
    """A replica's lead (:class:`~rltrain.supervised.replica.PipelineWorker`): a thread of
    this process, which holds the stages' remotes and only cuts batches and issues calls."""
    return ThreadRemote(target, *args, role="worker", index=index)


def stage_link(link_s: float) -> float:
    """The wait each stage adds to what it sends: none, the relay delays each hop instead."""
    return 0.0
