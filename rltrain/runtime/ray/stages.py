"""A replica's pipeline stages as Ray processes (:mod:`rltrain.supervised.pipeline`);
:mod:`rltrain.runtime.process.stages` is the same on the process runtime."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rltrain.runtime.ray.errors import result
from rltrain.runtime.ray.remote import Remote


class RayStages:
    """:class:`~rltrain.supervised.pipeline.Stages` over stage processes. It holds only actor
    handles, so the replica's own process can hold it; a call's arguments may be the futures
    of other calls, which Ray hands from stage to stage without the caller (activations go
    forward and gradients back directly)."""

    def __init__(self, handles: Sequence[Any]) -> None:
        self.handles, self.count = list(handles), len(handles)

    def call(self, stage: int, method: str, *args: Any) -> Any:
        return getattr(self.handles[stage], method).remote(*args)

    def get(self, handles: Sequence[Any]) -> list[Any]:
        return [result(h) for h in handles]


def stages_of(remotes: Sequence[Remote], link_s: float = 0.0) -> RayStages:
    """The :class:`~rltrain.supervised.pipeline.Stages` of one replica's stage processes (their
    handles: the lead, a Ray process of its own, holds them). Ray hands results from stage to
    stage itself, so a slow link (``link_s``) is the sending stage's wait (``stage_link``)."""
    return RayStages([r.handle for r in remotes])


def stage_link(link_s: float) -> float:
    """The wait each stage adds to what it sends: the whole link's latency on Ray."""
    return link_s


def stage_lead(target: type, *args: Any, index: int) -> Remote:
    """A replica's lead (:class:`~rltrain.supervised.replica.PipelineWorker`): a Ray process
    that only cuts batches and issues calls, so no CPU is reserved for it."""
    return Remote(target, *args, role="worker", index=index, num_cpus=0)
