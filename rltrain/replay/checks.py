"""One-line :class:`ReplayError` s for arguments a replay memory cannot work with."""

from __future__ import annotations

import numpy as np

from rltrain.replay.block import ReplayError, TransitionBlock


def check_config(
    capacity: int,
    obs_shape: tuple[int, ...],
    frame_stack: int,
    alpha: float,
    beta: float,
    priority_eps: float,
) -> None:
    """The constructor arguments of a :class:`~rltrain.replay.memory.ReplayMemory`."""
    if capacity < 1:
        raise ReplayError(f"capacity={capacity}: need at least 1")
    if not obs_shape or min(obs_shape) < 1:
        raise ReplayError(f"obs_shape={obs_shape}: need at least one positive dimension")
    if frame_stack < 1 or (frame_stack > 1 and (len(obs_shape) < 2 or obs_shape[0] != frame_stack)):
        raise ReplayError(f"obs_shape={obs_shape} is no stack of frame_stack={frame_stack}")
    if alpha < 0 or beta < 0 or priority_eps < 0:
        raise ReplayError(f"alpha={alpha}, beta={beta}, priority_eps={priority_eps} must be >= 0")


def check_block(
    block: TransitionBlock,
    obs_shape: tuple[int, ...],
    frame_shape: tuple[int, ...],
    dtype: np.dtype,
    capacity: int,
) -> None:
    """A block's shapes and dtypes match the memory's (no silent casts) and it fits in it."""
    if not isinstance(block, TransitionBlock):
        raise ReplayError(f"add() takes a TransitionBlock, got {type(block).__name__}")
    if block.obs0.shape[1:] != obs_shape or block.frames.shape[2:] != frame_shape:
        raise ReplayError(
            f"block obs0 {block.obs0.shape} / frames {block.frames.shape} do not match "
            f"obs_shape {obs_shape} with frames of {frame_shape}"
        )
    if block.obs0.dtype != dtype or block.frames.dtype != dtype:
        raise ReplayError(
            f"block dtypes {block.obs0.dtype}/{block.frames.dtype} differ from the memory's {dtype}"
        )
    if block.num_steps * block.num_envs > capacity:
        raise ReplayError(
            f"a block of {block.num_envs} envs x {block.num_steps} steps does not fit in a "
            f"memory of capacity {capacity}"
        )
