"""Tensors between the processes of one machine through reused shared-memory buffers.

The process runtime (:mod:`rltrain.runtime.process`) sends every call, result and server
request through a pipe; the tensors and arrays in them do not go through the pipe. A
:class:`Outbox` copies each one into a shared-memory slot of the same dtype and shape and
sends the slot's number; the receiving :class:`Inbox` copies the values out and frees the
slot, so the next message reuses it. A slot is sent as a tensor (its file descriptor, by
torch's reductions) only the first time; a run's steady state allocates nothing and
pickles only the small fields (Sample Factory's preallocated trajectory buffers, Petrenko
et al. 2020, without their fixed layout: the slots follow whatever the messages hold).

Each slot's first byte says whether it is in use (1) or free (0): the sender sets it, the
receiver clears it once it has its copy. A sender that finds no free slot of the right shape
makes one more, so the number of slots grows to the most messages in flight at once, and no
further.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from typing import Any

import numpy as np
import torch

MIN_BYTES = 4096
"""Smaller tensors travel in the pickle itself: a slot's bookkeeping costs more than 4 KB."""
HEADER = 64  # bytes before a slot's data: the in-use flag, and the data kept aligned


@dataclasses.dataclass(frozen=True)
class SlotRef:
    """A tensor or array that waits in slot ``slot`` (``storage``: the slot itself, sent once)."""

    slot: int
    dtype: torch.dtype
    shape: tuple[int, ...]
    numpy: bool
    storage: torch.Tensor | None = None


def _view(storage: torch.Tensor, dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
    n = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
    return storage[HEADER : HEADER + n].view(dtype).view(shape)


class Outbox:
    """The sending side: a process's slots, by dtype and shape."""

    def __init__(self, min_bytes: int = MIN_BYTES) -> None:
        self.min_bytes = min_bytes
        self.slots: list[tuple[torch.Tensor, torch.dtype, tuple[int, ...]]] = []
        self.free_of: dict[tuple[torch.dtype, tuple[int, ...]], list[int]] = {}

    def pack(self, obj: Any) -> Any:
        """``obj`` with every large tensor or numpy array replaced by a :class:`SlotRef`
        (dataclasses, tuples, lists and dicts are walked)."""
        if isinstance(obj, torch.Tensor):
            return self._put(obj, numpy=False) if self._large(obj) else obj
        if isinstance(obj, np.ndarray):
            if obj.dtype == object or obj.nbytes < self.min_bytes:
                return obj
            return self._put(torch.from_numpy(np.ascontiguousarray(obj)), numpy=True)
        return _walk(obj, self.pack)

    def _large(self, t: torch.Tensor) -> bool:
        return t.device.type == "cpu" and t.numel() * t.element_size() >= self.min_bytes

    def _put(self, t: torch.Tensor, numpy: bool) -> SlotRef:
        key = (t.dtype, tuple(t.shape))
        for i in self.free_of.setdefault(key, []):
            storage = self.slots[i][0]
            if storage[0] == 0:  # freed by the receiver
                storage[0] = 1
                _view(storage, *key).copy_(t)
                return SlotRef(i, t.dtype, key[1], numpy)
        nbytes = HEADER + t.numel() * t.element_size()
        storage = torch.zeros(nbytes, dtype=torch.uint8).share_memory_()
        storage[0] = 1
        _view(storage, *key).copy_(t)
        self.slots.append((storage, *key))
        self.free_of[key].append(len(self.slots) - 1)
        return SlotRef(len(self.slots) - 1, t.dtype, key[1], numpy, storage)

    def nbytes(self) -> int:
        """Shared memory held by the slots."""
        return sum(s.numel() for s, _, _ in self.slots)


class Inbox:
    """The receiving side: the slots of one sender, as they arrive."""

    def __init__(self) -> None:
        self.slots: dict[int, torch.Tensor] = {}

    def unpack(self, obj: Any) -> Any:
        """``obj`` with every :class:`SlotRef` replaced by a copy of its values (the slot is
        free again once this returns)."""
        if isinstance(obj, SlotRef):
            if obj.storage is not None:
                self.slots[obj.slot] = obj.storage
            storage = self.slots[obj.slot]
            values = _view(storage, obj.dtype, obj.shape).clone()
            storage[0] = 0
            return values.numpy() if obj.numpy else values
        if isinstance(obj, (torch.Tensor, np.ndarray)):
            return obj
        return _walk(obj, self.unpack)


def _walk(obj: Any, fn: Any) -> Any:
    """``obj`` rebuilt with ``fn`` applied to its parts (containers and dataclasses)."""
    if isinstance(obj, (str, bytes, int, float, bool, type(None))):
        return obj
    if isinstance(obj, tuple):
        parts = [fn(x) for x in obj]
        return type(obj)(*parts) if hasattr(obj, "_fields") else tuple(parts)
    if isinstance(obj, list):
        return [fn(x) for x in obj]
    if isinstance(obj, dict):
        return {k: fn(v) for k, v in obj.items()}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        # a copy with its fields set, not a new instance: __post_init__ would check the
        # fields while they are SlotRefs (a TransitionBlock reads its frames' shape)
        out = copy.copy(obj)
        for f in dataclasses.fields(obj):
            object.__setattr__(out, f.name, fn(getattr(obj, f.name)))
        return out
    return obj
