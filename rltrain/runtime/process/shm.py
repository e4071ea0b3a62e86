"""Tensors between the processes of one machine through reused shared-memory buffers.

The process runtime (:mod:`rltrain.runtime.process`) sends every call, result and server
request through a pipe; the tensors and arrays in them do not go through the pipe. A
:class:`Outbox` copies each one into a shared-memory slot of the same dtype and shape and
sends the slot's number; the receiving :class:`Inbox` copies the values out and frees the
slot, so the next message reuses it. A slot is an anonymous shared file (``memfd_create``;
an unlinked temporary file where there is none), mapped by both sides: its file descriptor
crosses the pipe once, beside the message that first uses it (``SCM_RIGHTS``, see
:class:`rltrain.runtime.process.child.Channel`), and a process that dies leaves nothing behind. A
run's steady state allocates nothing and pickles only the small fields (Sample Factory's
preallocated trajectory buffers, Petrenko et al. 2020, without their fixed layout: the
slots follow whatever the messages hold).

Each slot's first byte says whether it is in use (1) or free (0): the sender sets it, the
receiver clears it once it has its copy. A sender that finds no free slot of the right shape
makes one more, so the number of slots grows to the most messages in flight at once, and no
further.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import mmap
import os
import tempfile
from typing import Any

import numpy as np
import torch

MIN_BYTES = 4096
"""Smaller tensors travel in the pickle itself: a slot's bookkeeping costs more than 4 KB."""
HEADER = 64  # bytes before a slot's data: the in-use flag, and the data kept aligned
NUMPY_DTYPES = {
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.float32,
    torch.float64,
}
"""The dtypes a small tensor travels as a numpy array in (numpy has no bfloat16)."""


@dataclasses.dataclass(frozen=True)
class SlotRef:
    """A tensor or array that waits in slot ``slot``."""

    slot: int
    dtype: torch.dtype
    shape: tuple[int, ...]
    numpy: bool


@dataclasses.dataclass(frozen=True)
class SmallTensor:
    """A tensor under :data:`MIN_BYTES`, in the pickle as a numpy array: pickling a torch
    tensor costs its storage's bookkeeping, an order of magnitude more than the values of an
    actor's action reply (a few actions and their logits) as an array."""

    values: np.ndarray


@dataclasses.dataclass
class Slot:
    """One shared buffer: ``fd`` is open until the buffer has been sent (then -1)."""

    data: torch.Tensor  # uint8, HEADER + the values' bytes
    fd: int
    dtype: torch.dtype
    shape: tuple[int, ...]


def new_buffer(nbytes: int) -> tuple[int, torch.Tensor]:
    """A zeroed shared buffer of ``nbytes``: its file descriptor and a tensor over its pages."""
    if hasattr(os, "memfd_create"):  # Linux: not in /dev/shm, so not bound by its size
        fd = os.memfd_create("rltrain-slot", os.MFD_CLOEXEC)
    else:
        with tempfile.TemporaryFile(dir="/dev/shm" if os.path.isdir("/dev/shm") else None) as f:
            fd = os.dup(f.fileno())  # unlinked: gone once every side has closed it
    os.ftruncate(fd, nbytes)
    return fd, attach(fd, nbytes)


def attach(fd: int, nbytes: int) -> torch.Tensor:
    """The buffer behind ``fd`` (a slot another process made), mapped here."""
    return torch.frombuffer(mmap.mmap(fd, nbytes), dtype=torch.uint8)


def _view(storage: torch.Tensor, dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
    n = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
    return storage[HEADER : HEADER + n].view(dtype).view(shape)


class Outbox:
    """The sending side: a process's slots, by dtype and shape."""

    def __init__(self, min_bytes: int = MIN_BYTES) -> None:
        self.min_bytes = min_bytes
        self.slots: list[Slot] = []
        self.free_of: dict[tuple[torch.dtype, tuple[int, ...]], list[int]] = {}
        self.fresh: list[int] = []  # slots made since the last take_fresh()

    def pack(self, obj: Any) -> Any:
        """``obj`` with every large tensor or numpy array replaced by a :class:`SlotRef`
        (dataclasses, tuples, lists and dicts are walked)."""
        if isinstance(obj, torch.Tensor):
            if obj.device.type != "cpu":  # a GPU learner's values: the host's copy travels
                obj = obj.detach().cpu()
            if self._large(obj):
                return self._put(obj, numpy=False)
            numpy_able = obj.dtype in NUMPY_DTYPES and obj.layout == torch.strided
            return SmallTensor(obj.detach().numpy()) if numpy_able else obj
        if isinstance(obj, np.ndarray):
            if obj.dtype == object or obj.nbytes < self.min_bytes:
                return obj
            return self._put(torch.from_numpy(np.ascontiguousarray(obj)), numpy=True)
        return _walk(obj, self.pack)

    def _large(self, t: torch.Tensor) -> bool:
        return t.numel() * t.element_size() >= self.min_bytes

    def _put(self, t: torch.Tensor, numpy: bool) -> SlotRef:
        key = (t.dtype, tuple(t.shape))
        for i in self.free_of.setdefault(key, []):
            data = self.slots[i].data
            if data[0] == 0:  # freed by the receiver
                data[0] = 1
                _view(data, *key).copy_(t)
                return SlotRef(i, t.dtype, key[1], numpy)
        fd, data = new_buffer(HEADER + t.numel() * t.element_size())
        data[0] = 1
        _view(data, *key).copy_(t)
        self.slots.append(Slot(data, fd, *key))
        self.free_of[key].append(len(self.slots) - 1)
        self.fresh.append(len(self.slots) - 1)
        return SlotRef(len(self.slots) - 1, t.dtype, key[1], numpy)

    def take_fresh(self) -> tuple[list[tuple[int, int]], list[int]]:
        """The slots made since the last call, as ``(slot, nbytes)`` pairs and their file
        descriptors: the receiver must get them before the message that uses them."""
        fresh, self.fresh = self.fresh, []
        return [(i, self.slots[i].data.numel()) for i in fresh], [self.slots[i].fd for i in fresh]

    def sent(self, slots: list[tuple[int, int]]) -> None:
        """The receiver holds these slots' descriptors now: close ours (the mapping stays)."""
        for i, _ in slots:
            os.close(self.slots[i].fd)
            self.slots[i].fd = -1

    def nbytes(self) -> int:
        """Shared memory held by the slots."""
        return sum(s.data.numel() for s in self.slots)


class Inbox:
    """The receiving side: the slots of one sender, as they arrive."""

    def __init__(self) -> None:
        self.slots: dict[int, torch.Tensor] = {}

    def attach(self, slots: list[tuple[int, int]], fds: list[int]) -> None:
        """Map the sender's new slots (``(slot, nbytes)`` pairs, their descriptors)."""
        for (i, nbytes), fd in zip(slots, fds, strict=True):
            try:
                self.slots[i] = attach(fd, nbytes)
            finally:
                os.close(fd)

    def unpack(self, obj: Any) -> Any:
        """``obj`` with every :class:`SlotRef` replaced by a copy of its values (the slot is
        free again once this returns)."""
        if isinstance(obj, SmallTensor):
            return torch.from_numpy(obj.values)
        if isinstance(obj, SlotRef):
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


SHM_LOW = 1 << 30
"""Below this much free shared memory, say so: a Pong actor's slots take ~40 MB, and a
container's default /dev/shm is 64 MB (Docker)."""


def shm_free(path: str = "/dev/shm") -> int | None:
    """Bytes free where torch keeps shared memory (None: no such place to ask)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def shm_note(path: str = "/dev/shm") -> str:
    """A warning for the runtime line when ``path`` (where shared-memory slots live where
    there is no ``memfd_create``) has little room: a slot written past the end of a full
    /dev/shm kills its process (SIGBUS)."""
    free = shm_free(path)
    if free is None or free >= SHM_LOW:
        return ""
    return (
        f"; note: {path} has {free / 2**20:.0f} MB free, and rollouts and parameters pass "
        "through it (docker: --shm-size=2g; or runtime.backend=local or ray)"
    )
