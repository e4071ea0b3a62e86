"""n-step returns of a block's transitions (Sutton 1988; Mnih et al. 2016's n-step Q-learning;
Hessel et al. 2018 found them among Rainbow's most useful parts; Ape-X uses n = 3).

The transition at step t becomes (s_t, a_t, R_t, s_{t+k}) with
R_t = sum_{i<k} gamma^i r_{t+i} and a bootstrap of gamma^k max_a Q(s_{t+k}, a). The window k is
n, or less where it would pass an episode's end (its last step is then the ended one: a
terminal does not bootstrap, a time-limit cut bootstraps from its final observation) or the
block's last step. Windows stay inside one block, so that a shard never holds a transition
waiting for the next block: with ``rollout_length`` T, the last n - 1 steps of each block use
the T - t steps it holds, as an episode's last steps do.
"""

from __future__ import annotations

import numpy as np


def n_step_windows(
    rewards: np.ndarray,  # [T, B] float
    ended: np.ndarray,  # [T, B] bool: step t ended its episode (terminated or truncated)
    n: int,
    gamma: float,
) -> tuple[np.ndarray, np.ndarray]:  # [T, B] float32 R_t, [T, B] int64 last step t + k - 1
    """Each step's discounted n-step reward sum and the last step of its window."""
    steps = rewards.shape[0]
    total = rewards.astype(np.float64)  # i = 0: every window holds its own step
    t = np.arange(steps)[:, None]
    last = np.broadcast_to(t, rewards.shape).copy()
    open_ = ~ended  # [T, B]: the window of step t may take step t + i
    for i in range(1, n):
        go = np.zeros_like(open_)
        go[: steps - i] = open_[: steps - i]  # (t + i past the block's last step: stop)
        total[go] += gamma**i * np.roll(rewards, -i, axis=0)[go]
        last[go] = np.broadcast_to(t + i, last.shape)[go]
        open_ = go & ~np.roll(ended, -i, axis=0)
    return total.astype(np.float32), last
