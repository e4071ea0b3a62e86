"""Replay memory of Gorila DQN (Nair et al. 2015): actors send :class:`TransitionBlock` s to
:class:`ReplayMemory` shards, learners draw :class:`SampledBatch` es, uniformly or prioritized
(Schaul et al. 2016), with Atari frame stacks (Mnih et al. 2015) stored one frame per step."""

from rltrain.replay.block import ReplayError, SampledBatch, TransitionBlock
from rltrain.replay.memory import ReplayMemory, frame_capacity
from rltrain.replay.sumtree import SumTree

__all__ = [
    "ReplayError",
    "ReplayMemory",
    "SampledBatch",
    "SumTree",
    "TransitionBlock",
    "frame_capacity",
]
