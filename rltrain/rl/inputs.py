"""What the network sees: the Nature CNN or an MLP, and whether observations are normalised."""

from __future__ import annotations

import dataclasses

from rltrain.rl.algos.model_kinds import uses_cnn
from rltrain.rl.config import TrainConfig


def normalizes_obs(cfg: TrainConfig, obs_shape: tuple[int, ...], one_hot: bool = False) -> bool:
    """Whether observations are normalised: normalize.obs, with auto = the MLP's inputs of the
    actor-critic algorithms, unless they are ``one_hot`` (images are already in [0, 255] and
    scaled by the CNN; a one-hot cell is 0 or 1 already, and its running mean/std would blow a
    rarely visited cell's indicator up to the clip, shifting as visits change;
    docs/benchmarks.md, Taxi-v4)."""
    n = cfg.normalize.obs
    if n == "auto":
        cnn = uses_cnn(cfg.model.kind, obs_shape)
        return cfg.algo_spec.normalizes and not cnn and not one_hot
    return n == "always"


def resolve_obs_norm(cfg: TrainConfig, obs_shape: tuple[int, ...], one_hot: bool) -> TrainConfig:
    """``cfg`` with ``normalize.obs: auto`` replaced by what it chose for these observations,
    for a new run's config.yaml: every process of the run, a resumed session and later
    evaluations build the same network from it (the processes see only shapes, not whether
    the env's own observations were one-hot)."""
    if cfg.normalize.obs != "auto":
        return cfg
    chosen = "always" if normalizes_obs(cfg, obs_shape, one_hot) else "never"
    return dataclasses.replace(cfg, normalize=dataclasses.replace(cfg.normalize, obs=chosen))
