"""``make_env``: an :class:`EnvConfig` to the :class:`VectorEnv` an actor steps.

Atari ids (ALE/<Game>-v5, <Game>NoFrameskip-v4) run in ale-py's threaded C++ vector env with
the standard Atari protocol (:mod:`rltrain.envs.atari`); every other registered Gymnasium id
runs in ``gymnasium.vector``'s SyncVectorEnv (:mod:`rltrain.envs.gym_vector`). Both give SAME-STEP
auto-reset and raw episode scores.
"""

from __future__ import annotations

import difflib

import gymnasium
import numpy as np

from rltrain.envs.atari import AtariEnv, check_atari_id, is_atari, ram_route, skips_itself
from rltrain.envs.base import EnvError, StepBatch, VectorEnv
from rltrain.envs.config import EnvConfig
from rltrain.envs.gym_vector import GymVectorEnv
from rltrain.envs.user import load_env_code, load_wrapper
from rltrain.faults import EnvFailed

__all__ = [
    "EnvError",
    "StepBatch",
    "VectorEnv",
    "check_first_reset",
    "env_groups",
    "make_env",
    "make_env_groups",
    "registered",
    "unknown_id_message",
]


def registered(env_id: str) -> bool:
    """Whether gymnasium knows ``env_id`` now (ALE ids included: ale_py is imported)."""
    return env_id in gymnasium.registry


def unknown_id_message(env_id: str, imports: tuple[str, ...] = ()) -> str:
    """One line naming the closest registered ids (ALE ids included, ale_py is imported)."""
    if not env_id.strip():
        return "env.id is empty: name a Gymnasium id (CartPole-v1) or an Atari one (ALE/Pong-v5)"
    if ram := ram_route(env_id):
        return f"unknown env id {env_id!r}: ale-py registers no -ram ids; {ram}"
    close = close_ids(env_id)
    hint = f"; did you mean {', '.join(close)}?" if close else "; see gymnasium.pprint_registry()"
    after = (
        f" (after importing imports {list(imports)})"
        if imports
        else " (your own env? name the module that registers it in imports)"
    )
    return f"unknown env id {env_id!r}{after}{hint}"


def close_ids(env_id: str) -> list[str]:
    """Up to 3 registered ids like ``env_id``, in any case, leaving out the legacy Atari ids
    that rltrain refuses (Pong-v4); a game's bare name (pong) gives its ALE/<Game>-v5."""
    ids = {i.lower(): i for i in gymnasium.registry if not skips_itself(i)}
    wanted = env_id.strip().lower()
    game = f"ale/{wanted.removeprefix('ale/')}-v5"
    close = difflib.get_close_matches(wanted, list(ids), n=3)
    return list(dict.fromkeys(ids[c] for c in ([game] if game in ids else []) + close))[:3]


def make_env(
    cfg: EnvConfig, seed: int, num_envs: int | None = None, evaluation: bool = False
) -> VectorEnv:
    """Make the vector of environments an actor (or an evaluator) steps.

    Gymnasium ids go through gymnasium.vector (SyncVectorEnv, SAME_STEP autoreset); Atari ids
    (:func:`rltrain.envs.atari.is_atari`) through AtariVectorEnv with the standard protocol
    (Mnih et al. 2015 frames, Machado et al. 2018 sticky actions). ``num_envs`` overrides
    ``cfg.num_envs``; ``seed`` is the default seed of :meth:`VectorEnv.reset` (env i gets
    seed + i). ``evaluation=True``: no reward clipping and no episodic life, so rewards are the
    raw score.

    Raises EnvError (one line) for an unknown id, an action space of no supported kind, or an
    Atari id that skips frames itself (:func:`rltrain.envs.atari.check_atari_id`).
    """
    n = cfg.num_envs if num_envs is None else num_envs
    if n < 1:
        raise EnvError(f"num_envs={n}: need at least one environment")
    load_env_code(cfg)  # before the id is looked up
    if cfg.id not in gymnasium.registry:
        raise EnvError(unknown_id_message(cfg.id, cfg.imports))
    check_atari_id(cfg.id, cfg.wrappers)
    if is_atari(cfg.id, cfg.wrappers):
        if cfg.wrappers:
            raise EnvError(
                f"env.wrappers apply to Gymnasium ids; {cfg.id} runs in ale-py's vector env "
                "(its protocol is set by the env.* Atari fields; to preprocess a game with "
                "your own wrappers, use its NoFrameskip-v4 id)"
            )
        return AtariEnv(cfg, seed, n, evaluation)
    wrappers = [load_wrapper(w) for w in cfg.wrappers]
    return GymVectorEnv(cfg.id, n, seed, cfg.kwargs, wrappers, cfg.frame_stack, cfg.action_map)


def check_first_reset(env: VectorEnv) -> None:
    """Reset a Gymnasium vector once (the run's probe: before the run folder is made), so that
    an env whose reset raises, or returns an observation of the wrong shape or a NaN, is one
    line of bad input (:class:`EnvError`), not a fault met mid-run. Atari vectors are left
    alone: their protocol is rltrain's (ale-py's), not the user's code."""
    if not isinstance(env, GymVectorEnv):
        return
    try:
        env.reset()
    except EnvFailed as e:
        raise EnvError(str(e)) from e


def env_groups(cfg: EnvConfig, cores_per_actor: float = 2.0) -> int:
    """How many groups an actor steps its envs in: ``cfg.groups``, or for 0 (auto) two for
    Atari (whose emulators run in C++ threads, so one group steps while the policy acts on the
    other) when each actor has two cores or more (``cores_per_actor``), else one: actors that
    already hold every core gain nothing by overlapping and step slower in two groups than in
    one; and one for Gymnasium vectors (which step in the caller's thread)."""
    overlap = is_atari(cfg.id, cfg.wrappers) and cores_per_actor >= 2.0
    groups = cfg.groups or (2 if overlap else 1)
    if cfg.groups > cfg.num_envs:
        raise EnvError(
            f"env.groups={cfg.groups} is more than env.num_envs={cfg.num_envs}; "
            "allowed: 0 (auto) or 1 to num_envs"
        )
    return min(groups, cfg.num_envs)


def make_env_groups(cfg: EnvConfig, seed: int) -> list[VectorEnv]:
    """An actor's ``cfg.num_envs`` envs as :func:`env_groups` vectors of sizes as equal as can
    be, seeded consecutively (env i of all of them gets ``seed + i``, as in one vector)."""
    groups = env_groups(cfg)
    sizes = [len(part) for part in np.array_split(np.arange(cfg.num_envs), groups)]
    starts = np.cumsum([0, *sizes[:-1]])
    return [make_env(cfg, seed + int(s), num_envs=n) for s, n in zip(starts, sizes, strict=True)]
