"""What a run starts from: the environment's shapes and protocol (one env opened here), the
initial parameters, and whether a checkpoint fits them."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import gymnasium
import numpy as np
import torch

from rltrain.checkpoint import CheckpointError
from rltrain.envs import ActionSpace, EnvError, check_first_reset, make_env
from rltrain.envs.adapt import channels_last_shape
from rltrain.envs.adapt import one_hot as one_hot_space
from rltrain.envs.atari import is_atari, wrapped_notes
from rltrain.ps.server import ShardLayout
from rltrain.rl.actor import model_builder
from rltrain.rl.algos import algo_names, algo_spec
from rltrain.rl.algos.model_kinds import CNN_MIN_SIDE
from rltrain.rl.algos.models import flat_params
from rltrain.rl.algos.torsos import check_image_layout, check_torso
from rltrain.rl.config import DQNConfig, TrainConfig
from rltrain.rl.config.notes import (
    in_flight_notes,
    learning_start_notes,
    rule_notes,
    support_notes,
    unread_notes,
)


@dataclass(frozen=True)
class EnvSpec:
    obs_shape: tuple[int, ...]
    obs_dtype: str
    actions: ActionSpace
    frames_per_step: int
    protocol: dict[str, Any]
    flattened_from: Any = None
    """The env's own observation space, when its observations are flattened (VectorEnv)."""
    transposed: bool = False
    """Whether the env's own [H, W, C] images are moved to [C, H, W] (VectorEnv)."""
    stacked: int = 1
    """Images stacked into each observation of a Gymnasium image env (VectorEnv)."""

    @property
    def one_hot(self) -> bool:
        """Whether the observations are one-hot cells (a flattened Discrete, MultiDiscrete, ...)."""
        return one_hot_space(self.flattened_from)

    @property
    def num_actions(self) -> int:
        """Discrete: how many actions; a Box: its dimension."""
        return self.actions.n


def probe_env(cfg: TrainConfig, training: bool = True) -> EnvSpec:
    """Open one environment here to learn shapes and the protocol (and fail early on a bad id,
    an action space the algorithm cannot handle, or a first reset that raises or returns a
    wrong shape or a NaN; ``training``: or images a CNN would read wrong)."""
    env = make_env(cfg.env, seed=cfg.seed, num_envs=1)
    try:
        check_first_reset(env)
        if cfg.algo_spec.q_network and env.action_space.vector:
            others = ", ".join(n for n in algo_names() if not algo_spec(n).q_network)
            raise EnvError(
                f"algo.name={cfg.algo.name} needs Discrete actions; {cfg.env.id} has "
                f"{env.action_space.describe()} actions: use one of {others}"
            )
        check_torso(cfg.model.kind, tuple(env.obs_shape))
        if training:
            check_image_layout(cfg.model.kind, tuple(env.obs_shape))
        protocol = {**env.protocol, "num_envs": cfg.env.num_envs}  # per actor
        return EnvSpec(
            tuple(env.obs_shape),
            str(np.dtype(env.obs_dtype)),
            env.action_space,
            int(cast(int, protocol.get("frame_skip", 1))),
            protocol,
            env.flattened_from,
            env.transposed,
            env.stacked,
        )
    finally:
        env.close()


def start_notes(cfg: TrainConfig, spec: EnvSpec, done: Any = None) -> list[str]:
    """Start notes on what the run takes in a way a user may not expect: the env's images and
    actions, a rule that changes nothing, keys of a section the algorithm does not read."""
    notes = [*wrapped_notes(cfg.env), *image_notes(cfg, spec), *dict_image_notes(cfg, spec)]
    notes += action_notes(cfg, spec)
    steps = done.env_steps if done is not None else 0  # (``done``: a resumed run's counters)
    notes += [*rule_notes(cfg), *in_flight_notes(cfg), *learning_start_notes(cfg, steps)]
    notes += support_notes(cfg)
    return [*notes, *unread_notes(cfg)]


def image_notes(cfg: TrainConfig, spec: EnvSpec) -> list[str]:
    """Notes on images the run takes otherwise than a user may expect: a stack of the user's
    own stacked again, or images that model.kind=auto gives the MLP (explore118)."""
    stacks = [w for w in cfg.env.wrappers if "FrameStack" in w.split("(")[0]]
    notes = []
    if stacks and spec.stacked > 1:  # (explore118: 3 gray frames read as RGB, stacked x4)
        notes.append(
            f"env.wrappers stacks frames ({stacks[0]}) and rltrain stacked its images again "
            f"(env.frame_stack={spec.stacked}): set env.frame_stack=1 for the wrapper's alone"
        )
    shape = spec.obs_shape
    if len(shape) == 3 and spec.obs_dtype == "uint8" and max(shape[1:]) > LARGE_SIDE:
        notes.append(  # (explore118: a rendered CartPole, 400x600: 4 frames/s, 409 MB saves)
            f"env {cfg.env.id}: images {shape}, {shape[1]}x{shape[2]} pixels: a CNN's dense "
            "layer grows with their area and every step copies them (Atari's are 84x84): "
            "resize them in env.wrappers (gymnasium.wrappers:ResizeObservation(shape=(84, 84)))"
        )
    return notes + mlp_image_notes(cfg, spec) if cfg.model.kind == "auto" else notes


LARGE_SIDE = 256
"""Image sides beyond which a start note suggests resizing."""


def dict_image_notes(cfg: TrainConfig, spec: EnvSpec) -> list[str]:
    """A note where a Dict observation holding an image is flattened for the MLP (explore118:
    {image 64x64x3, vector} went to a 12,290-input MLP unsaid)."""
    space = spec.flattened_from
    if not isinstance(space, gymnasium.spaces.Dict):
        return []
    images = [k for k, v in space.spaces.items() if len(v.shape or ()) >= 2]
    if not images:
        return []
    return [
        f"env {cfg.env.id}: its Dict observations, with images under {', '.join(images)}, are "
        f"flattened into {math.prod(spec.obs_shape):,} values for the MLP; the CNN takes image "
        "observations alone: a wrapper of your own in env.wrappers that returns the image "
        f"(obs[{images[0]!r}])"
    ]


def mlp_image_notes(cfg: TrainConfig, spec: EnvSpec) -> list[str]:
    """A note where model.kind=auto gives images the MLP: [H, W, C] ones that are not uint8,
    whose channels rltrain does not move first (explore84), [C, H, W] ones too small for
    the Nature CNN (explore115: atari_appo.yaml's image_size 32, on raw pixels), and images
    of more than 3 axes (a user's FrameStackObservation over RGB: explore118)."""
    shape = spec.obs_shape
    if len(shape) == 3 and spec.obs_dtype == "uint8" and min(shape[1:]) < CNN_MIN_SIDE:
        raw = cfg.normalize.obs == "never"  # (atari_appo.yaml's, for the CNN: explore115)
        atari = is_atari(cfg.env.id, cfg.env.wrappers)  # (env.image_size is Atari's only)
        bigger = (
            f"env.image_size={CNN_MIN_SIDE} or more"
            if atari
            else (
                f"a resize in env.wrappers (gymnasium.wrappers:ResizeObservation(shape=("
                f"{CNN_MIN_SIDE}, {CNN_MIN_SIDE}))) or model.kind=impala_cnn"
            )
        )
        return [
            f"env {cfg.env.id}: images {shape} under {CNN_MIN_SIDE} pixels a side, too small "
            "for the Nature CNN: model.kind=auto takes the MLP"
            + (", on raw 0-255 pixels (normalize.obs=never), which saturate it" if raw else "")
            + f"; {bigger} for the CNN"
            + (", or normalize.obs=always" if raw else "")
        ]
    if len(shape) > 3 and spec.obs_dtype == "uint8":
        return [
            f"env {cfg.env.id}: observations {shape} of {len(shape)} axes: the MLP takes them "
            f"flattened ({int(np.prod(shape)):,} inputs); the CNN takes [C, H, W] images, and "
            "rltrain stacks them itself (env.frame_stack): leave stacking to it"
        ]
    if not channels_last_shape(shape):
        return []
    return [
        f"env {cfg.env.id}: observations {spec.obs_shape} of {spec.obs_dtype} look like images "
        "with their channels last, which rltrain moves first for uint8 images only: the MLP "
        f"takes them flattened ({int(np.prod(spec.obs_shape)):,} inputs); for the CNN, make "
        "them uint8 in [0, 255] or [C, H, W]"
    ]


def action_notes(cfg: TrainConfig, spec: EnvSpec) -> list[str]:
    """A start note for Box action dimensions without two finite bounds: nothing maps the
    policy's samples onto them (``env.action_map`` needs both), so the env gets a Gaussian
    around 0 of std exp(model.log_std_init), and an action scale far from 1 learns slowly
    (a target of 50 was not approached in 225k steps) without a word."""
    a = spec.actions
    if not a.continuous:
        return box_key_notes(cfg, a)
    if a.bounded().all():
        return huge_bounds_notes(cfg, spec)
    dims = [str(i) for i, b in enumerate(a.bounded()) if not b]
    std = float(np.exp(cfg.model.log_std_init))
    return [
        f"env {cfg.env.id}: action dimension{'s' * (len(dims) > 1)} {', '.join(dims)} of its "
        f"{a.describe()} {'have' if len(dims) > 1 else 'has'} no finite bounds on both sides: "
        f"the env gets the policy's samples as they are (clipped to a bound on one side), "
        f"around 0 with std {std:.3g} at first "
        "(model.log_std_init), and actions of another scale learn slowly; give the Box bounds "
        "(env.action_map maps onto them), or scale the actions in a wrapper (env.wrappers)"
    ]


def box_key_notes(cfg: TrainConfig, a: ActionSpace) -> list[str]:
    """A start note for the Box actions' keys set on an env of other actions (explore113: set
    on CartPole, they were saved in config.yaml and changed nothing, unsaid)."""
    env, model = cfg.env, cfg.model
    # (clip: what a run folder older than the key reads as, on every resume: review89)
    unset = (type(env)().action_map, "clip")
    told = [f"env.action_map={env.action_map}"] * (env.action_map not in unset)
    unlike = model.log_std_init != type(model)().log_std_init
    told += [f"model.log_std_init={model.log_std_init:g}"] * unlike
    if not told:
        return []
    they = "they change" if len(told) > 1 else "it changes"
    keys = ", ".join(told)
    return [f"{keys}: Box actions' keys; {env.id}'s actions are {a.describe()}: {they} nothing"]


HUGE_BOUND = 1e6
"""A Box bound beyond which the mapped actions are of a scale no policy's start suits."""


def huge_bounds_notes(cfg: TrainConfig, spec: EnvSpec) -> list[str]:
    """A start note for finite Box bounds so wide that ``env.action_map`` maps the policy's
    first samples onto actions of about their size: +-float32's max (a common "unbounded")
    gave actions of 1e38 and a failure that blamed the rewards (explore105)."""
    a = spec.actions
    widest = max(max(abs(x) for x in a.low), max(abs(x) for x in a.high))
    if widest < HUGE_BOUND or cfg.env.action_map == "clip":  # (clip maps nothing)
        return []
    return [
        f"env {cfg.env.id}: its {a.describe()} has bounds up to {widest:.3g}, onto which "
        f"env.action_map={cfg.env.action_map} maps the policy's samples: the first actions are "
        "of that size; give the actions' real range, or scale them in a wrapper (env.wrappers)"
    ]


def initial_params(cfg: TrainConfig, spec: EnvSpec) -> torch.Tensor:
    """The network's first parameters, drawn at ``cfg.seed``; the caller's own torch RNG as it
    was (explore102: rltrain.train() left a notebook's RNG at the run's seed)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        return flat_params(build_model(cfg, spec))


def build_model(cfg: TrainConfig, spec: EnvSpec) -> torch.nn.Module:
    """The run's network (on ``torch.device("meta")``: its shapes alone, no memory)."""
    build = model_builder(cfg)
    return build(cfg.model.kind, spec.obs_shape, spec.actions, cfg.model.hidden)


def check_fits(
    path: Path,
    state: dict[str, Any],
    params: torch.Tensor,
    cfg: TrainConfig,
    changes: Sequence[str] = (),
) -> None:
    """A checkpoint must match the server layout and model of the config it resumes under
    (``changes``: the resume's ``key: old -> new``, of which those that could be why are said)."""
    sizes = [int(s["param"].numel()) for s in state["shards"]]
    expected = ShardLayout(params.numel(), cfg.server.shards).sizes
    if sizes != expected:
        shapes = ("env.frame_stack:", "env.image_size:", "env.wrappers:", "env.kwargs")
        heads = ("dqn.dueling:", "dqn.atoms:")  # (explore95: dueling's head went unnamed)
        why = [c for c in changes if c.startswith(("model.", *heads, "server.shards:", *shapes))]
        saved = (state.get("config") or {}).get("dqn") or {}
        for key in ("dueling", "atoms"):  # (the resume's changes hold no dqn key: told apart)
            # (a run from before the key had its default: review90)
            now, was = getattr(cfg.dqn, key), saved.get(key, getattr(DQNConfig(), key))
            if was != now and not any(c.startswith(f"dqn.{key}:") for c in why):
                why.append(f"dqn.{key}: {str(was).lower()} -> {str(now).lower()}")
        said = f"this resume changes {'; '.join(why)}; " if why else ""
        raise CheckpointError(
            f"{path} holds {len(sizes)} shard(s) of {sum(sizes)} parameters; this config needs "
            f"{len(expected)} of {sum(expected)} ({said}keep server.shards, the model and the "
            "observations' shape as they were)"
        )


def check_actions(path: Path, state: dict[str, Any], now: ActionSpace, env_id: str) -> None:
    """A resumed run's env must take the actions its policy learned: the same kind, size and
    bounds (explore105: Box bounds changed through env.kwargs rescaled an affine policy's
    every action unsaid; a Discrete env under a Box run failed on the parameters' count).
    Checkpoints before this rltrain kept no actions: not checked."""
    kept = state.get("actions")
    if not isinstance(kept, dict):
        return
    fields: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in kept.items()}
    try:
        was = ActionSpace(**fields)
    except TypeError:
        return
    old, new = actions_record(was), actions_record(now)
    if old != new:
        said, same = actions_said(now), actions_said(was) == actions_said(now)
        changed = "; ".join(f"{k} {old[k]} -> {new[k]}" for k in old if old[k] != new[k])
        said += f" ({changed})" if same else ""
        raise CheckpointError(
            f"{env_id} takes {said} actions; the run at {path.parent.parent} learned "
            f"{actions_said(was)}, which a resumed run keeps (its policy's outputs are those "
            "actions); start a new run for these"
        )


def actions_record(a: ActionSpace) -> dict[str, Any]:
    """What a checkpoint keeps of the actions: what the policy's outputs mean (not
    ``env.action_map``, a key told apart, nor a dtype, float64 bounds for float32's: review87)."""
    record = dataclasses.asdict(a)
    for key in ("mapping", "dtype"):
        record.pop(key)
    return {k: list(v) if isinstance(v, tuple) else v for k, v in record.items()}


def actions_said(a: ActionSpace) -> str:
    """``Discrete(6)``, or a Box with its bounds: ``Box(1,) in [-2.0, 2.0]``."""
    if not a.continuous:
        return a.describe()
    low, high = list(a.low), list(a.high)
    if len(set(low)) == 1 and len(set(high)) == 1:
        return f"{a.describe()} in [{low[0]}, {high[0]}]"
    return f"{a.describe()} in [{low}, {high}]"
