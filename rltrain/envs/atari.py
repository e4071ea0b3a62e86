"""Atari ids as a :class:`VectorEnv`: ale-py's C++ ``AtariVectorEnv`` + the protocol.

Two families of ids run here: ``ALE/<Game>-v5`` and ale-py's ``<Game>NoFrameskip-v4`` (and
``-v0``), the id of most Atari code (SB3's ``make_atari_env``, CleanRL, Sample Factory), which
leave the frame skip to the protocol. Only the sticky actions differ between them, and
``env.sticky_actions: null`` takes the id's (v5 and v0: 0.25, v4: 0). The ids that skip
frames themselves (``Pong-v4``: 2 to 4 frames at random) are refused, as the protocol's skip
would replace theirs; with ``env.wrappers`` every legacy id is a plain Gymnasium env that the
user's wrappers preprocess.

The C++ vector env does the whole frame pipeline of Mnih et al. (2015) in its own threads
(frame skip with a max over the last two frames, grayscale, resize, frame stack, no-op starts,
FIRE on reset unless ``env.fire_reset`` is false) plus the sticky actions of Machado et al.
(2018), and supports SAME_STEP autoreset natively, so obs[i] of an ended env is already the
next game's first stack.

Two parts of the protocol are done here rather than in C++, on purpose:

* Reward clipping. ale-py's ``info`` holds no raw reward, so with its ``reward_clipping`` on the
  game score would be lost. The C++ env runs unclipped and the training reward is
  ``np.sign(raw)``; episode returns accumulate the raw reward (the real score).
* Episodic life. ale-py's ``episodic_life`` ends the C++ episode on a lost life, and its reset
  then restarts the *game*, so the agent would never play past its first life. Here the game
  runs on; a drop of ``info["lives"]`` without a game over is reported as ``terminated`` to the
  learner only, and the episode return keeps accumulating until game over.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any

import ale_py
import gymnasium
import numpy as np
from ale_py.vector_env import AtariVectorEnv
from gymnasium.envs.registration import EnvSpec
from gymnasium.spaces import Discrete
from gymnasium.vector import AutoresetMode

from rltrain.envs.base import ActionSpace, EnvError, EpisodeTracker, StepBatch, VectorEnv
from rltrain.envs.config import EnvConfig
from rltrain.envs.user import make_failed

gymnasium.register_envs(ale_py)  # ale_py registers the ALE/ ids when imported

ATARI_ENTRY_POINT = "ale_py.vector_env:AtariVectorEnv"
LEGACY_ENTRY_POINT = "ale_py.env:AtariEnv"


def is_atari(env_id: str, wrappers: Sequence[str] = ()) -> bool:
    """True for ids that run in ale-py's vector env under the protocol: the ALE/<Game>-v5 ids,
    and without ``wrappers`` (``env.wrappers``) ale-py's NoFrameskip ids."""
    spec = gymnasium.registry.get(env_id)
    if spec is None:
        return False
    if spec.vector_entry_point == ATARI_ENTRY_POINT:
        return True
    return _legacy(spec) and spec.kwargs.get("frameskip") == 1 and not wrappers


def _legacy(spec: EnvSpec) -> bool:
    """ale-py's v0 and v4 ids (single envs of RGB screens, no vector entry point)."""
    rgb = spec.kwargs.get("obs_type", "rgb") == "rgb"
    return spec.entry_point == LEGACY_ENTRY_POINT and spec.vector_entry_point is None and rgb


def skips_itself(env_id: str) -> bool:
    """Whether ``env_id`` is a legacy id that skips frames itself (refused without wrappers)."""
    spec = gymnasium.registry.get(env_id)
    return spec is not None and _legacy(spec) and spec.kwargs.get("frameskip") != 1


def game_name(env_id: str) -> str:
    """The game an ALE id names, as its ids spell it: ALE/Pong-v5, PongNoFrameskip-v4 and
    PongDeterministic-v4 -> Pong."""
    name = env_id.split("/")[-1].split("-v")[0]
    return name.removesuffix("NoFrameskip").removesuffix("Deterministic")


def check_atari_id(env_id: str, wrappers: Sequence[str] = ()) -> None:
    """EnvError for a legacy id that skips frames itself (Pong-v4: 2 to 4 at random per step),
    unless ``wrappers`` make it the user's env: the protocol's frame skip would replace the
    id's, and its raw 210x160 screens train about 30x slower than the protocol's frames."""
    spec = gymnasium.registry.get(env_id)
    if spec is None or wrappers or not skips_itself(env_id):
        return
    game = game_name(env_id)
    version = env_id.rsplit("-", 1)[-1]
    skip = spec.kwargs.get("frameskip")
    what = (
        f"{skip[0]} to {skip[1] - 1} frames at random"
        if isinstance(skip, tuple)
        else f"{skip} frames"
    )
    raise EnvError(
        f"env.id={env_id} skips {what} per step inside the id, which rltrain's Atari protocol "
        f"(env.frame_skip, max-pooled) would replace: use {game}NoFrameskip-{version} (the same "
        f"game and sticky actions, {_sticky_in(spec):g}) or ALE/{game}-v5 (sticky actions "
        "0.25), or give env.wrappers to preprocess it yourself"
    )


ATARI_ONLY = (
    *("frame_skip", "noop_max", "sticky_actions", "full_action_space", "clip_rewards"),
    *("episodic_life", "image_size", "max_episode_frames", "fire_reset"),
)
"""The env.* keys of the Atari protocol, which a Gymnasium env never reads (num_threads, a
resource, is left to the shipped configs that set it for ale-py's own ids)."""


def check_atari_only(cfg: EnvConfig) -> None:
    """EnvError for an Atari-only key (:data:`ATARI_ONLY`) set otherwise than its default for
    an env that is not run as Atari: it would be written into config.yaml and ignored
    (env.sticky_actions=0.5 on CartPole, or on PongNoFrameskip-v4 under env.wrappers)."""
    if is_atari(cfg.id, cfg.wrappers):
        return
    default = EnvConfig()
    for key in ATARI_ONLY:
        value = getattr(cfg, key)
        if value == getattr(default, key):
            continue
        spec = gymnasium.registry.get(cfg.id)
        ale = spec is not None and _legacy(spec)  # an ale-py id the user wraps
        how = (
            " with env.wrappers runs as your own Gymnasium env: set ale-py's own arguments "
            "in env.kwargs (repeat_action_probability, frameskip, ...)"
            if ale
            else " is a Gymnasium env, which does not read it: leave it out"
        )
        raise EnvError(f"env.{key}={value}: Atari's protocol only; {cfg.id}{how}")


def wrapped_notes(cfg: EnvConfig) -> list[str]:
    """A start note for an ale-py id under ``env.wrappers`` (the route of a game's mode, or
    of RAM observations): it runs as the user's Gymnasium env, so the env.* Atari keys a config
    gives at their defaults (atari_appo.yaml's frame_skip 4) are not applied, where the run
    trained at one frame a step with raw rewards and said nothing (explore103)."""
    spec = gymnasium.registry.get(cfg.id)
    if is_atari(cfg.id, cfg.wrappers) or spec is None or not _legacy(spec):
        return []
    return [
        f"{cfg.id} with env.wrappers runs as your own Gymnasium env: rltrain's Atari protocol "
        f"(env.{', env.'.join(ATARI_ONLY)}) is not applied, so a step is "
        f"{spec.kwargs.get('frameskip', 1)} frame(s) of the game and rewards are raw unless your "
        "wrappers say otherwise (gymnasium.wrappers.AtariPreprocessing: frame skip, no-op "
        "starts, 84x84 grayscale)"
    ]


RAM_ROUTE = (
    "RAM observations run as your own Gymnasium env: {game}NoFrameskip-v4 with "
    "env.kwargs.obs_type=ram and env.wrappers (your frame skip; rltrain's Atari protocol is "
    "not applied)"
)
"""The one route to RAM observations: ale-py 0.12 registers no -ram ids, and its vector env,
which runs the ALE/<Game>-v5 ids, gives screens only."""


def ram_route(env_id: str) -> str:
    """``RAM observations run as ...`` for an id asking for them (``ALE/Pong-ram-v5``,
    ``Pong-ramNoFrameskip-v4``), else ''."""
    m = re.match(r"^(?:ALE/)?(\w+)-ram", env_id.strip(), re.IGNORECASE)
    ids = {i.lower(): i for i in gymnasium.registry if i.endswith("NoFrameskip-v4")}
    legacy = ids.get(f"{m.group(1)}NoFrameskip-v4".lower()) if m else None
    return RAM_ROUTE.format(game=legacy.removesuffix("NoFrameskip-v4")) if legacy else ""


def _sticky_in(spec: EnvSpec) -> float:
    return float(spec.kwargs.get("repeat_action_probability", 0.25))


def sticky_actions(cfg: EnvConfig) -> float:
    """``env.sticky_actions``, or for null the id's own repeat_action_probability (ALE/<Game>-v5
    and the v0 ids 0.25, Machado et al. 2018; the v4 ids 0)."""
    if cfg.sticky_actions is not None:
        return cfg.sticky_actions
    spec = gymnasium.registry.get(cfg.id)
    return 0.25 if spec is None else _sticky_in(spec)


def resolve_sticky(cfg: EnvConfig) -> EnvConfig:
    """``cfg`` with ``sticky_actions: null`` replaced by the id's, for an Atari id (for a new
    run's config.yaml: the protocol it ran under, whatever a later ale-py registers)."""
    if cfg.sticky_actions is not None or not is_atari(cfg.id, cfg.wrappers):
        return cfg
    return dataclasses.replace(cfg, sticky_actions=sticky_actions(cfg))


def rom_name(env_id: str) -> str:
    """The ROM (game) name ale-py registered for an id: ALE/Pong-v5 -> pong."""
    game = gymnasium.spec(env_id).kwargs.get("game")
    if not isinstance(game, str):
        raise EnvError(f"env '{env_id}' names no ALE game in its registration")
    return game


def atari_protocol(
    cfg: EnvConfig, game: str, num_envs: int, seed: int, evaluation: bool
) -> dict[str, object]:
    """The protocol an Atari vector runs with, as plain values (stamped into the run)."""
    return {
        "id": cfg.id,
        "backend": "ale_py.vector_env.AtariVectorEnv",
        "ale_py_version": ale_py.__version__,
        "game": game,
        "num_envs": num_envs,
        "seed": seed,
        "evaluation": evaluation,
        "autoreset": "same_step",
        "frame_skip": cfg.frame_skip,
        "maxpool": True,
        "frame_stack": cfg.frame_stack,
        "image_size": cfg.image_size,
        "grayscale": True,
        "noop_max": cfg.noop_max,
        "fire_reset": cfg.fire_reset,
        "sticky_actions": sticky_actions(cfg),
        "full_action_space": cfg.full_action_space,
        "max_episode_frames": cfg.max_episode_frames,
        "clip_rewards": cfg.clip_rewards and not evaluation,
        "episodic_life": cfg.episodic_life and not evaluation,
    }


ATARI_KWARGS = ("thread_affinity_offset",)
"""The env.kwargs of AtariVectorEnv a user sets (its C++ threads' first core): the others are
the protocol's (env.* fields) or would change the action space or batching actors rely on."""


PROTOCOL_KWARGS = {
    **{"repeat_action_probability": "sticky_actions", "frameskip": "frame_skip"},
    **{"max_num_frames_per_episode": "max_episode_frames", "noop_max": "noop_max"},
    **{"max_episode_steps": "max_episode_frames", "stack_num": "frame_stack"},
    **{"img_height": "image_size", "img_width": "image_size", "episodic_life": "episodic_life"},
    "full_action_space": "full_action_space",
    "use_fire_reset": "fire_reset",
}
"""ale-py's names of what the protocol's env.* keys set."""


def vector_args(cfg: EnvConfig, protocol: Mapping[str, Any]) -> dict[str, Any]:
    """``AtariVectorEnv``'s arguments but the game and the env count: the protocol (as
    :func:`atari_protocol` states it) and ``env.kwargs``; one place, so that the recording
    env's twin (:mod:`rltrain.envs.screen`) plays the very game an actor's env plays."""
    other = sorted(set(cfg.kwargs) - set(ATARI_KWARGS))
    if other:  # the rest is the protocol (env.* fields), or breaks it (continuous, batch_size)
        keys = [f"env.{PROTOCOL_KWARGS[k]} for {k}" for k in other if k in PROTOCOL_KWARGS]
        fields = "the protocol is set by the env.* fields (frame_skip, sticky_actions, ...)"
        use = f"use {', '.join(keys)}" if keys else fields
        if {"mode", "difficulty"} & set(other):  # ale-py's vector env takes neither
            game = game_name(cfg.id)
            use += f"; a game's mode and difficulty: {game}NoFrameskip-v4 with env.wrappers"
        if "obs_type" in other:
            use += f"; {RAM_ROUTE.format(game=game_name(cfg.id))}"
        raise EnvError(
            f"env.kwargs {other} of {cfg.id}: allowed for Atari only "
            f"{', '.join(ATARI_KWARGS)}; {use}"
        )
    offset = cfg.kwargs.get("thread_affinity_offset", -1)
    if isinstance(offset, bool) or not isinstance(offset, int):  # (pybind's error: a page)
        raise EnvError(
            f"env.kwargs.thread_affinity_offset={offset!r}: expected an integer, the first "
            "core of ale-py's threads (-1: no affinity)"
        )
    return dict(
        num_threads=cfg.num_threads,
        max_num_frames_per_episode=cfg.max_episode_frames,
        repeat_action_probability=protocol["sticky_actions"],
        full_action_space=cfg.full_action_space,
        autoreset_mode=AutoresetMode.SAME_STEP,
        img_height=cfg.image_size,
        img_width=cfg.image_size,
        grayscale=True,
        stack_num=cfg.frame_stack,
        frameskip=cfg.frame_skip,
        maxpool=True,
        noop_max=cfg.noop_max,
        episodic_life=False,  # done here, see the module docstring
        life_loss_info=False,
        reward_clipping=False,  # done here: the raw score must survive
        use_fire_reset=cfg.fire_reset,
        **cfg.kwargs,
    )


class AtariEnv(VectorEnv):
    """``num_envs`` Atari games in ale-py's threaded C++ vector env, standard protocol."""

    def __init__(self, cfg: EnvConfig, seed: int, num_envs: int, evaluation: bool) -> None:
        game = rom_name(cfg.id)
        self.protocol = atari_protocol(cfg, game, num_envs, seed, evaluation)
        self._clip = bool(self.protocol["clip_rewards"])
        self._episodic_life = bool(self.protocol["episodic_life"])
        self._seed = seed
        try:
            self._env = AtariVectorEnv(game, num_envs, **vector_args(cfg, self.protocol))
        except (TypeError, ValueError, RuntimeError, AssertionError) as e:  # (no ROM: assert)
            raise make_failed(cfg.id, cfg.kwargs, e) from None
        self.protocol["kwargs"] = dict(cfg.kwargs)
        self.num_envs = num_envs
        obs_space, action_space = self._env.single_observation_space, self._env.single_action_space
        assert obs_space.shape is not None and isinstance(action_space, Discrete)  # ALE's spaces
        self.obs_shape = tuple(obs_space.shape)
        self.obs_dtype = np.dtype(np.uint8)
        self.num_actions = int(action_space.n)
        self.action_space = ActionSpace(self.num_actions)
        self.protocol["num_actions"] = self.num_actions
        self._episodes = EpisodeTracker(num_envs)
        self._lives = np.zeros(num_envs, dtype=np.int32)
        self._last: tuple[np.ndarray, np.ndarray, dict] | None = None  # a step's, ended_obs's
        self._closed = False

    def reset(self, seed: int | None = None) -> np.ndarray:
        """Reset every game; env i is seeded ``seed + i`` (emulator, sticky actions, no-ops)."""
        obs, info = self._env.reset(seed=self._seed if seed is None else seed)
        self._lives = info["lives"]
        self._episodes.reset()
        self._last = None
        return obs

    def step(self, actions: np.ndarray) -> StepBatch:
        """One agent step (frame_skip frames) of every game; ended games are already reset."""
        self.send(actions)
        return self.recv()

    def send(self, actions: np.ndarray) -> None:
        """Start the step in ale-py's C++ threads and return: the caller can run the policy on
        other games meanwhile (an actor's env groups)."""
        self._env.send(np.asarray(actions, np.int64))

    def recv(self) -> StepBatch:
        """Wait for the step :meth:`send` started."""
        obs, raw, terminated, truncated, info = self._env.recv()
        game_ended = terminated | truncated
        self._last = (obs, game_ended, info)
        raw = raw.astype(np.float32)
        if self._episodic_life:
            lives = info["lives"]
            terminated = terminated | ((lives < self._lives) & ~game_ended)
            self._lives = lives
        returns, lengths, ended_in = self._episodes.update(raw, game_ended)
        return StepBatch(
            obs=obs,
            reward=np.sign(raw) if self._clip else raw,
            terminated=terminated,
            truncated=truncated,
            # ale-py's SAME_STEP autoreset keeps every ended game's last stack in info
            final_obs=info["final_obs"][truncated] if truncated.any() else obs[:0],
            episode_returns=returns,
            episode_lengths=lengths,
            episode_envs=ended_in,
        )

    def ended_obs(self, ended: np.ndarray) -> np.ndarray:
        """[K, 4, 84, 84]: the ended episodes' last stacks: a game's from ale-py's info (its
        autoreset began the next), a lost life's (episodic life: no reset) the stack itself."""
        if self._last is None:
            raise RuntimeError("ended_obs: no step since the games were made or reset")
        obs, game_ended, info = self._last
        idx = np.flatnonzero(ended)
        if len(idx) == 0:
            return obs[:0]
        return np.stack([info["final_obs"][i] if game_ended[i] else obs[i] for i in idx])

    def close(self) -> None:
        """Stop the C++ worker threads: ale-py joins them when its vectorizer is freed."""
        if self._closed:
            return
        self._closed = True
        self._env.close()
        del self._env  # the last reference: the vectorizer's destructor joins its threads now
