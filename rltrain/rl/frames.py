"""Stacks of frames rebuilt from the newest frame of each step (issue 36: a frame crosses the
processes once).

An Atari observation is the k newest screens, oldest first (Mnih et al. 2015: k = 4), so
step t+1's stack shares k-1 frames with step t's. Where the rollouts are built in shared
memory (:class:`rltrain.rl.obs_slots.ObsSlots`) the actor writes the rollout's first stack
whole and then only each step's newest frame: ``frames`` [T+k, B, *frame], from which

    obs[t, b, j] = frames[t + j, b]        (j = 0 .. k-1, t = 0 .. T)

is a view (:func:`restack`): no copy, a quarter of the bytes for k = 4. A game that ends
resets its stack to blank (zero) frames before the new game's first (ale-py's vector env,
as the replay memory checks: ``rltrain.replay.block``), so the first k-1 stacks of a new
game hold frames of the previous one in the view: ``blank`` [T+1, B] counts those older
frames and :func:`blank_older` zeroes them.
"""

from __future__ import annotations

import torch


def restack(frames: torch.Tensor, k: int) -> torch.Tensor:  # [T+k, B, *f] -> [T+1, B, k, *f]
    """The stacks of k frames, oldest first, as a view of ``frames`` (no copy)."""
    steps = frames.shape[0] - k + 1
    if k < 1 or steps < 1:
        raise ValueError(f"{frames.shape[0]} frames hold no stack of {k}")
    s = frames.stride()
    return frames.as_strided(
        (steps, frames.shape[1], k, *frames.shape[2:]),
        (s[0], s[1], s[0], *s[2:]),
        frames.storage_offset(),
    )


def blank_older(
    stacks: torch.Tensor, blank: torch.Tensor, out: torch.Tensor | None = None
) -> torch.Tensor:
    """``stacks`` [*N, k, *f] with the ``blank`` [*N] oldest frames of each zeroed (a new
    game's first stacks), as a new contiguous tensor, or in ``out`` where it fits (a
    learner's buffer, kept: a 29 MB allocation per rollout fragments a CPU's heap). ``blank``
    is read on the host, where the few young stacks are found, so that a device never waits
    for the host to learn them (a mask over every stack cost 5x the copy on a CPU)."""
    k = stacks.shape[blank.ndim]
    young = (torch.arange(k) < blank.unsqueeze(-1)).nonzero(as_tuple=True)  # on the host
    fits = out is not None and (out.shape, out.dtype, out.device) == (
        stacks.shape,
        stacks.dtype,
        stacks.device,
    )
    if out is not None and fits and out.is_contiguous():
        out.copy_(stacks)
    else:
        out = stacks.clone(memory_format=torch.contiguous_format)
    out[tuple(i.to(out.device, non_blocking=True) for i in young)] = 0
    return out
