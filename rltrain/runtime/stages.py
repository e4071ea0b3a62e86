"""A replica's pipeline stages as Ray processes (:mod:`rltrain.supervised.pipeline`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rltrain.runtime.errors import result


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
