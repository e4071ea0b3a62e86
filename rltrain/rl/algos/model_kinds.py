"""Which network a config asks for: the model kinds, value torsos and precisions, and where
a CNN applies. Torch-free: the config checks its keys against them before torch is
imported; :mod:`rltrain.rl.algos.models` builds the networks."""

from __future__ import annotations

CNN_KINDS = ("nature_cnn", "impala_cnn")
MODELS = ("auto", "mlp", *CNN_KINDS)
VALUE_NETS = ("auto", "shared", "separate")
PRECISIONS = ("auto", "fp32", "bf16")

CNN_MIN_SIDE = 36
"""The smallest image side the Nature CNN takes (8x8 stride 4, 4x4 stride 2, then 3x3)."""


def uses_cnn(kind: str, obs_shape: tuple[int, ...]) -> bool:
    """Whether ``model.kind`` on these observations is a CNN: nature_cnn or impala_cnn, or
    auto on images [C, H, W] the Nature CNN fits (smaller ones, MiniGrid's 7x7 views, go to
    the MLP)."""
    if kind != "auto":
        return kind in CNN_KINDS
    return len(obs_shape) == 3 and min(obs_shape[1:]) >= CNN_MIN_SIDE
