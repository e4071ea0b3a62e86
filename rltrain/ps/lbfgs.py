"""Sandblaster L-BFGS's parameter server (Dean et al. 2012, section 4.2): the shards hold the
vectors, the coordinator holds only scalars.

Every vector L-BFGS needs (the parameters ``w``, the gradient accumulator ``g``, the direction,
the (s, y) history) lives sliced across :class:`LbfgsShard` objects, which the coordinator drives
by name: ``dot``, ``axpy``, ``scale``, ``copy``. :class:`LbfgsCoordinator` runs the two-loop
recursion (Nocedal & Wright, Numerical Optimization, Algorithm 7.4) with those commands, so what
passes between it and the shards is names and scalars, never a parameter-sized vector; the
bytes it sends per iteration do not grow with the model.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch

from rltrain.records import tensor_of

W, G = "w", "g"  # the parameters and the gradient accumulator


class LbfgsShard:
    """One contiguous slice of every named vector. Plain Python: Ray wraps it as a process."""

    def __init__(self, size: int) -> None:
        self.vectors: dict[str, torch.Tensor] = {W: torch.zeros(size), G: torch.zeros(size)}
        self.round = -1  # the evaluation whose gradient portions ``g`` accumulates
        self._seen: set[int] = set()
        self._lock = threading.Lock()  # in-process, workers are threads

    def set_values(self, values: torch.Tensor) -> None:
        self.vectors[W] = torch.as_tensor(values, dtype=torch.float32).reshape(-1).clone()

    def values(self, name: str = W) -> torch.Tensor:
        return self.vectors[name]

    def begin(self, round_id: int) -> None:
        """Start accumulating the gradient of evaluation ``round_id`` (``g`` = 0)."""
        self.round = round_id
        self._seen = set()
        self.vectors[G] = torch.zeros_like(self.vectors[W])

    def accumulate(self, round_id: int, portion: int, grad: torch.Tensor | np.ndarray) -> bool:
        """Add one portion's gradient slice, once: a backup copy of a portion that already
        arrived, or a late one from a finished round, is ignored (the first result wins)."""
        with self._lock:
            if round_id != self.round or portion in self._seen:
                return False
            self._seen.add(portion)
            flat = tensor_of(grad) if isinstance(grad, np.ndarray) else grad  # (Ray's: read-only)
            self.vectors[G].add_(flat.reshape(-1))
            return True

    def dot(self, a: str, b: str) -> float:
        # float64 accumulation: the two-loop's scalars are sums over shards
        return float(self.vectors[a].double() @ self.vectors[b].double())

    def axpy(self, alpha: float, x: str, y: str) -> None:
        """y += alpha x."""
        self.vectors[y].add_(self.vectors[x], alpha=alpha)

    def scale(self, name: str, alpha: float) -> None:
        self.vectors[name].mul_(alpha)

    def copy(self, src: str, dst: str) -> None:
        self.vectors[dst] = self.vectors[src].clone()


class VectorStore(Protocol):
    """The shards as the coordinator and the workers see them (in-process or Ray)."""

    def each(self, method: str, *args: Any) -> list[Any]:
        """Call ``method`` on every shard (concurrently where they are processes)."""
        ...

    def pull(self) -> torch.Tensor:
        """The whole parameter vector ``w`` (a worker's read, not the coordinator's)."""
        ...

    def accumulate(self, round_id: int, portion: int, grad: torch.Tensor) -> None:
        """A worker adds a portion's flat gradient, each shard its slice."""
        ...


def split_sizes(numel: int, shards: int) -> list[int]:
    """Contiguous slice sizes, differing by at most one."""
    base, extra = divmod(numel, shards)
    return [base + (i < extra) for i in range(shards)]


class LocalStore:
    """The shards as plain objects in this process (tests, and the reference)."""

    def __init__(self, init: torch.Tensor, shards: int = 1) -> None:
        self.sizes = split_sizes(init.numel(), shards)
        self.shards = [LbfgsShard(n) for n in self.sizes]
        for shard, piece in zip(
            self.shards, torch.split(init.reshape(-1), self.sizes), strict=True
        ):
            shard.set_values(piece)

    def each(self, method: str, *args: Any) -> list[Any]:
        return [getattr(s, method)(*args) for s in self.shards]

    def pull(self) -> torch.Tensor:
        return torch.cat([s.values() for s in self.shards])

    def accumulate(self, round_id: int, portion: int, grad: torch.Tensor) -> None:
        for shard, piece in zip(self.shards, torch.split(grad, self.sizes), strict=True):
            shard.accumulate(round_id, portion, piece)


@dataclass(frozen=True)
class Pair:
    """One (s, y) pair of the history: its slot names and rho = 1 / (y.s)."""

    s: str
    y: str
    rho: float


class LbfgsCoordinator:
    """L-BFGS's scalar side: the history's order and rho values, and the commands that
    compute the direction ``d`` from the gradient ``g`` on the shards."""

    def __init__(self, store: VectorStore, memory: int) -> None:
        self.store = store
        self.memory = memory
        self.pairs: list[Pair] = []  # oldest first
        self.gamma = 1.0  # H0 = gamma I, gamma = s.y / y.y of the newest pair (N&W eq. 7.20)
        self._slot = 0

    def dot(self, a: str, b: str) -> float:
        return sum(self.store.each("dot", a, b))

    def direction(self, out: str = "d") -> float:
        """``out`` = -H g by the two-loop recursion; returns g.d (negative: a descent
        direction). Without history, or if H lost positive-definiteness numerically, -g."""
        st = self.store
        st.each("copy", G, out)
        alphas = []
        for p in reversed(self.pairs):  # newest to oldest
            a = p.rho * self.dot(p.s, out)
            st.each("axpy", -a, p.y, out)
            alphas.append(a)
        st.each("scale", out, self.gamma)
        for p, a in zip(self.pairs, reversed(alphas), strict=True):  # oldest to newest
            b = p.rho * self.dot(p.y, out)
            st.each("axpy", a - b, p.s, out)
        st.each("scale", out, -1.0)
        gd = self.dot(G, out)
        if gd >= 0 and self.pairs:
            self.reset()
            return self.direction(out)
        return gd

    def add_pair(self, s_from: str, s_scale: float, g_old: str) -> bool:
        """Store s = s_scale * s_from and y = g - g_old; kept only if y.s > 0 (the curvature
        condition that keeps H positive definite)."""
        s, y = f"s{self._slot}", f"y{self._slot}"
        st = self.store
        st.each("copy", s_from, s)
        st.each("scale", s, s_scale)
        st.each("copy", G, y)
        st.each("axpy", -1.0, g_old, y)
        ys, yy = self.dot(y, s), self.dot(y, y)
        if ys <= 1e-10 * max(yy, 1e-30):
            return False
        self.pairs = [p for p in self.pairs if p.s != s]  # the slot is reused
        self.pairs.append(Pair(s, y, 1.0 / ys))
        if len(self.pairs) > self.memory:
            self.pairs.pop(0)
        self.gamma = ys / yy
        self._slot = (self._slot + 1) % (self.memory + 1)
        return True

    def reset(self) -> None:
        self.pairs, self.gamma = [], 1.0


def dense_direction(
    g: torch.Tensor, history: Sequence[tuple[torch.Tensor, torch.Tensor]]
) -> torch.Tensor:
    """-H g for full vectors in one process (the reference the sharded recursion must equal)."""
    q = g.double().clone()
    alphas = []
    for s, y in reversed(history):
        rho = 1.0 / float(y.double() @ s.double())
        a = rho * float(s.double() @ q)
        q -= a * y.double()
        alphas.append((rho, a))
    if history:
        s, y = history[-1]
        q *= float(s.double() @ y.double()) / float(y.double() @ y.double())
    for (s, y), (rho, a) in zip(history, reversed(alphas), strict=True):
        b = rho * float(y.double() @ q)
        q += (a - b) * s.double()
    return -q
