"""A vectorised sum-tree for proportional prioritized replay (Schaul et al. 2016, Appendix B.2.1).

Leaf i holds the sampling mass p_i^alpha of slot i; every inner node holds the sum of its two
children, so the root is sum_k p_k^alpha, a prefix-sum lookup costs O(log n) and an update
O(log n). All operations take arrays of slots and run level by level in numpy.
"""

from __future__ import annotations

import numpy as np


class SumTree:
    """Masses of ``size`` slots (float64) in a complete binary tree stored as one array."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._leaves = 1 << max(0, (size - 1).bit_length())
        self._tree = np.zeros(2 * self._leaves, dtype=np.float64)

    @property
    def total(self) -> float:
        """Sum of all masses."""
        return float(self._tree[1])

    @property
    def nbytes(self) -> int:
        """Bytes of the tree array."""
        return int(self._tree.nbytes)

    def get(self, slots: np.ndarray) -> np.ndarray:
        """Masses of ``slots``."""
        return self._tree[self._leaves + np.asarray(slots, dtype=np.int64)]

    def set(self, slots: np.ndarray, masses: np.ndarray | float) -> None:
        """Set the masses of ``slots`` (one mass for all, or one each; the last one wins for
        repeated slots) and re-sum.

        Parents are recomputed from their children, never incremented, so rounding errors do
        not accumulate however many updates the tree sees.
        """
        slots = np.asarray(slots, dtype=np.int64)
        if slots.size == 0:
            return
        masses = np.broadcast_to(np.asarray(masses, dtype=np.float64), slots.shape)
        last = slots.size - 1 - np.unique(slots[::-1], return_index=True)[1]
        nodes = self._leaves + slots[last]
        self._tree[nodes] = masses[last]
        nodes = np.unique(nodes >> 1)
        while nodes[0] >= 1:
            self._tree[nodes] = self._tree[2 * nodes] + self._tree[2 * nodes + 1]
            if nodes[0] == 1:
                break
            nodes = np.unique(nodes >> 1)

    def find(self, prefix: np.ndarray) -> np.ndarray:
        """Slots whose mass interval contains each value of ``prefix`` (in [0, total))."""
        value = np.array(prefix, dtype=np.float64)
        node = np.ones(value.shape, dtype=np.int64)
        while node.size and node[0] < self._leaves:
            left = self._tree[2 * node]
            right = value >= left
            value -= np.where(right, left, 0.0)
            node = 2 * node + right
        return node - self._leaves

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` slots, slot i with probability mass_i / total, stratified over n segments.

        Stratified as in Schaul et al. (2016): the range [0, total) is cut into n equal
        segments and one value is drawn from each, so a batch covers the distribution evenly
        while every slot's expected count stays n * mass_i / total. Rounding can land a value
        on an empty (zero-mass) leaf; such draws are redrawn.
        """
        total = self.total
        if total <= 0.0:
            raise ValueError("cannot sample from a sum-tree with zero total mass")
        slots = self.find((np.arange(n) + rng.random(n)) * (total / n))
        for _ in range(64):
            empty = self.get(slots) <= 0.0
            if not empty.any():
                return slots
            slots[empty] = self.find(rng.random(int(empty.sum())) * total)
        masses = self._tree[self._leaves : self._leaves + self.size]
        empty = self.get(slots) <= 0.0
        slots[empty] = rng.choice(self.size, int(empty.sum()), p=masses / masses.sum())
        return slots
