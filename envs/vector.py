"""``make_env``: an :class:`EnvConfig` to the :class:`VectorEnv` an actor steps.

ALE/<Game>-v5 ids run in ale-py's threaded C++ vector env with the standard Atari protocol
(:mod:`envs.atari`); every other registered Gymnasium id runs in ``gymnasium.vector``'s
SyncVectorEnv (:mod:`envs.gym_vector`). Both give SAME-STEP auto-reset and raw episode scores.
"""

from __future__ import annotations

import difflib

import gymnasium

from envs.atari import AtariEnv, is_atari_v5
from envs.base import EnvError, StepBatch, VectorEnv
from envs.config import EnvConfig
from envs.gym_vector import GymVectorEnv

__all__ = ["EnvError", "StepBatch", "VectorEnv", "make_env", "unknown_id_message"]


def unknown_id_message(env_id: str) -> str:
    """One line naming the closest registered ids (ALE ids included, ale_py is imported)."""
    close = difflib.get_close_matches(env_id, list(gymnasium.registry), n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else "; see gymnasium.pprint_registry()"
    return f"unknown env id {env_id!r}{hint}"


def make_env(
    cfg: EnvConfig, seed: int, num_envs: int | None = None, evaluation: bool = False
) -> VectorEnv:
    """Make the vector of environments an actor (or an evaluator) steps.

    Gymnasium ids go through gymnasium.vector (SyncVectorEnv, SAME_STEP autoreset); ALE/<Game>-v5
    ids through AtariVectorEnv with the standard protocol (Mnih et al. 2015 frames, Machado et
    al. 2018 sticky actions). ``num_envs`` overrides ``cfg.num_envs``; ``seed`` is the default
    seed of :meth:`VectorEnv.reset` (env i gets seed + i). ``evaluation=True``: no reward
    clipping and no episodic life, so rewards are the raw score.

    Raises EnvError (one line) for an unknown id or a non-Discrete action space.
    """
    n = cfg.num_envs if num_envs is None else num_envs
    if n < 1:
        raise EnvError(f"num_envs={n}: need at least one environment")
    if cfg.id not in gymnasium.registry:
        raise EnvError(unknown_id_message(cfg.id))
    if is_atari_v5(cfg.id):
        return AtariEnv(cfg, seed, n, evaluation)
    return GymVectorEnv(cfg.id, n, seed)
