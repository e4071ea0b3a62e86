"""Compressed pushes with error feedback (``server.compression``).

A worker's update slice travels as :class:`Compressed` and the shard decompresses it on
arrival. What compression loses is kept by the pusher and added to its next update (error
feedback), so that every gradient is applied in full eventually: 1-bit SGD (Seide et al.
2014), Deep Gradient Compression's top-k with local accumulation (Lin et al. 2018), and
error-feedback signSGD (Karimireddy et al. 2019, scaled by the mean magnitude).

    fp16   half precision                           2 bytes a value
    int8   values / max|v| * 127, rounded           1 byte a value (+ the scale)
    topk   the topk_fraction largest magnitudes     8 bytes per kept value (index + value)
    sign   the signs, packed 8 to a byte, x mean|v| 1/8 byte a value (+ the scale)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from rltrain.ps.config import COMPRESSIONS


@dataclass(frozen=True)
class Compressed:
    """One compressed slice: ``kind``, its length, and the arrays that travel."""

    kind: str
    numel: int
    arrays: tuple[np.ndarray, ...]
    scale: float = 1.0

    @property
    def nbytes(self) -> int:
        """Bytes on the wire (the arrays; the few scalars are not counted)."""
        return sum(int(a.nbytes) for a in self.arrays)


def compress(kind: str, v: torch.Tensor, topk_fraction: float = 0.01) -> Compressed:
    """``v`` [P] float32 as ``kind`` (one of :data:`COMPRESSIONS` but none)."""
    v = v.detach().reshape(-1).float()
    n = v.numel()
    if kind == "fp16":
        return Compressed(kind, n, (v.half().numpy(),))
    if kind == "int8":
        peak = float(v.abs().max()) if n else 0.0
        scale = peak / 127.0 if peak > 0 and math.isfinite(peak) else 1.0
        q = torch.round(v / scale).clamp_(-127, 127).to(torch.int8)
        return Compressed(kind, n, (q.numpy(),), scale)
    if kind == "topk":
        k = min(n, max(1, math.ceil(topk_fraction * n)))
        idx = (
            torch.topk(v.abs(), k, sorted=False).indices if k else torch.zeros(0, dtype=torch.long)
        )
        return Compressed(kind, n, (idx.int().numpy(), v[idx].numpy()))
    if kind == "sign":
        scale = float(v.abs().mean()) if n else 0.0
        bits = np.packbits((v >= 0).numpy())
        return Compressed(kind, n, (bits,), scale)
    raise ValueError(f"unknown compression {kind!r}; allowed: {', '.join(COMPRESSIONS)}")


def decompress(c: Compressed) -> torch.Tensor:
    """The [numel] float32 tensor that ``c`` stands for."""
    if c.kind == "fp16":
        return torch.from_numpy(np.asarray(c.arrays[0])).float()
    if c.kind == "int8":
        return torch.from_numpy(np.asarray(c.arrays[0])).float() * c.scale
    if c.kind == "topk":
        out = torch.zeros(c.numel)
        idx = torch.from_numpy(np.asarray(c.arrays[0])).long()
        out[idx] = torch.from_numpy(np.asarray(c.arrays[1])).float()
        return out
    if c.kind == "sign":
        bits = np.unpackbits(np.asarray(c.arrays[0]), count=c.numel)
        return (torch.from_numpy(bits.astype(np.float32)) * 2 - 1) * c.scale
    raise ValueError(f"unknown compression {c.kind!r}")


def wire_bytes(values: Any) -> int:
    """Bytes a push's values take on the wire: compressed, or float32."""
    if isinstance(values, Compressed):
        return values.nbytes
    return int(getattr(values, "nbytes", 0))


class ErrorFeedback:
    """The pusher's side: compress ``v + e`` and keep ``e = (v + e) - decompress(...)``, per
    (worker, shard), so nothing the compression drops is lost for good."""

    def __init__(self, kind: str, topk_fraction: float) -> None:
        self.kind, self.topk_fraction = kind, topk_fraction
        self.residual: dict[tuple[int, int], torch.Tensor] = {}

    def __call__(self, worker: int, shard: int, v: torch.Tensor) -> Compressed | torch.Tensor:
        key = (worker, shard)
        e = self.residual.get(key)
        full = v.float() if e is None else v.float() + e
        if not bool(torch.isfinite(full).all()):
            # sent as it is, for the shard to refuse (a codec could hide a NaN as a number);
            # the residual keeps what it had, so one bad push does not spoil the next ones
            return full
        c = compress(self.kind, full, self.topk_fraction)
        self.residual[key] = full - decompress(c)
        return c
