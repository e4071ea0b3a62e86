"""Environments of rltrain: vectors of Gymnasium or Atari envs with SAME-STEP auto-reset.

``make_env(EnvConfig(...), seed)`` gives a :class:`VectorEnv` whose ``step`` returns a
:class:`StepBatch` (next obs, training reward, terminated, truncated, and the raw scores and
lengths of the episodes that just ended). Importing this package registers the toy env
``rltrain/Chain-v0`` with gymnasium and, through ale-py, the ALE/<Game>-v5 ids.
"""

from rltrain.envs.base import ActionSpace, EnvError, StepBatch, VectorEnv
from rltrain.envs.config import EnvConfig
from rltrain.envs.toy import CHAIN_ID, ChainEnv, register_chain
from rltrain.envs.vector import (
    check_first_reset,
    env_groups,
    make_env,
    make_env_groups,
    registered,
)

register_chain()

__all__ = [
    "CHAIN_ID",
    "ActionSpace",
    "ChainEnv",
    "EnvConfig",
    "EnvError",
    "StepBatch",
    "VectorEnv",
    "check_first_reset",
    "env_groups",
    "make_env",
    "make_env_groups",
    "registered",
]
