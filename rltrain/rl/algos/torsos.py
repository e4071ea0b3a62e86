"""The networks' torsos, one per observation kind, and the arithmetic and memory layout they
run in.

* MLP torso for vector observations (two tanh layers).
* Nature CNN for Atari frame stacks (Mnih et al. 2015), as in DQN, A3C and Gorila: 3
  convolutions and a 512-unit layer, ~9M multiply-adds per 84x84 stack.
* IMPALA's "deep" CNN (Espeholt et al. 2018, Fig. 3): 3 stages of a 3x3 convolution, a 3x3
  max-pool of stride 2 and two residual blocks, 16/32/32 channels, then 256 units; ~54M
  multiply-adds per stack (6x the Nature CNN), the network of IMPALA's and CleanRL's
  `cleanba` Atari runs and of Procgen's baselines, which learned far more per frame than the
  Nature CNN in IMPALA's Atari-57 runs. A GPU runs it at little cost; a CPU learner
  ~9x slower per sample (``benchmarks/cnn_precision.py --model impala_cnn``).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from rltrain.config import ConfigError
from rltrain.envs.adapt import channels_last_shape
from rltrain.rl.algos.model_kinds import CNN_MIN_SIDE, MODELS, PRECISIONS, uses_cnn


def bf16_native(device: torch.device | str = "cpu") -> bool:
    """Whether bfloat16 convolutions run natively and pay: a CPU with the AVX-512 BF16 / AMX
    instructions oneDNN uses. Not CUDA: the Nature CNN is too small for bf16's tensor cores
    to win back autocast's casts, and fp32 there runs its matmuls in TF32
    (:func:`rltrain.rl.device.pick_device`; ``benchmarks/cnn_precision.py`` compares the two)."""
    if torch.device(device).type != "cpu":
        return False
    return bool(
        torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()
    )


def cnn_precision(precision: str, device: torch.device | str = "cpu") -> str:
    """A CNN's precision on ``device``: ``auto`` is bf16 where it runs faster
    (:func:`bf16_native`: AVX-512 BF16 CPUs, whose bf16 autocast speeds up both a learner's
    forward + backward and an actor's inference), fp32 otherwise (CUDA, other CPUs)."""
    if precision != "auto":
        return precision
    return "bf16" if bf16_native(device) else "fp32"


def resolve_precision(
    precision: str, kind: str, obs_shape: tuple[int, ...], device: torch.device | str = "cpu"
) -> str:
    """``model.precision`` for this model: :func:`cnn_precision` for a CNN, fp32 for an MLP
    under ``auto`` (too small to gain). The memory layout follows the precision
    (:meth:`CNNTorso.use_layout`)."""
    if precision == "auto" and not uses_cnn(kind, obs_shape):
        return "fp32"
    return cnn_precision(precision, device)


class MLPTorso(nn.Module):
    """Two tanh hidden layers over the flattened observation."""

    orthogonal: tuple[type[nn.Module], ...] = (nn.Linear,)

    def __init__(self, obs_dim: int, hidden: int) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(obs_dim, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh()
        )
        self.out_dim = hidden

    def forward(self, obs: torch.Tensor) -> torch.Tensor:  # [N, *obs] -> [N, hidden]
        return self.net(obs.flatten(1).float())


def on_cpu(module: nn.Module) -> bool:
    """Whether every parameter of ``module`` is on the CPU."""
    return all(p.device.type == "cpu" for p in module.parameters())


class CNNTorso(nn.Module):
    """What every image torso shares: uint8 frames [N, C, H, W] scaled to [0, 1] here (so that
    rollouts and replay stay uint8, 4x smaller; other dtypes are taken as they are), and
    ``bf16``: the layers in ``self.net`` run under bfloat16 autocast (parameters and their
    gradients stay float32, the output is float32), so the heads, losses and the server see
    float32 only. Subclasses build ``self.net`` and say which layers take the torso's
    orthogonal initialisation and when they run channels-last (:meth:`use_layout`)."""

    orthogonal: tuple[type[nn.Module], ...] = (nn.Linear, nn.Conv2d)

    def __init__(self, bf16: bool) -> None:
        super().__init__()
        self.bf16 = bf16
        self.channels_last = False
        self.net: nn.Module = nn.Identity()
        self.out_dim = 0

    def use_layout(self, training: bool) -> None:
        """Channels-last (NHWC) weights and inputs where :meth:`wants_channels_last`,
        contiguous NCHW otherwise."""
        last = self.wants_channels_last(training)
        self.to(memory_format=torch.channels_last if last else torch.contiguous_format)  # type: ignore[call-overload]  # (stubs lack it)
        self.channels_last = last

    def wants_channels_last(self, training: bool) -> bool:
        """A learner's forward + backward in bf16 (oneDNN's bf16 kernels are NHWC; 1.34x on an
        AVX-512 BF16 EPYC) and on a CPU in fp32 too (1.2-1.6x on an AVX2 EPYC, where
        ``precision: auto`` is fp32; docs/design-notes.md); not acting, where the Nature CNN's
        few frames ran as fast or slower channels-last. fp32 on a GPU stays NCHW: not
        measured there."""
        return training and (self.bf16 or on_cpu(self))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:  # [N, C, H, W] -> [N, out_dim]
        if self.channels_last:  # reorder the uint8 frames, the cheapest copy
            obs = obs.contiguous(memory_format=torch.channels_last)
        # bf16: scale straight into bf16 (a float32 copy of a uint8 batch is 4x its size)
        x = obs.to(torch.bfloat16 if self.bf16 else torch.float32)
        if obs.dtype == torch.uint8:
            x = x * (1.0 / 255.0)
        with torch.autocast(obs.device.type, torch.bfloat16, enabled=self.bf16):
            return self.net(x).float()

    def _finish(self, convs: nn.Sequential, size: tuple[int, int], in_ch: int, out: int) -> None:
        """``self.net``: ``convs``, flattened, then ``out`` ReLU units."""
        with torch.no_grad():
            n = convs(torch.zeros(1, in_ch, *size)).shape[1]
        self.net = nn.Sequential(convs, nn.Linear(n, out), nn.ReLU())
        self.out_dim = out
        self.use_layout(training=False)


class NatureCNNTorso(CNNTorso):
    """The DQN Nature network's convolutions and 512-unit layer (Mnih et al. 2015)."""

    def __init__(self, in_channels: int, size: tuple[int, int] = (84, 84), bf16: bool = False):
        super().__init__(bf16)
        convs = nn.Sequential(
            nn.Conv2d(in_channels, 32, 8, stride=4),
            nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2),
            nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1),
            nn.ReLU(),
            nn.Flatten(),
        )
        self._finish(convs, size, in_channels, 512)


class ResidualBlock(nn.Module):
    """x + conv(relu(conv(relu(x)))), 3x3 convolutions that keep the channels and the size."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv0 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [N, C, H, W] -> [N, C, H, W]
        return x + self.conv1(torch.relu(self.conv0(torch.relu(x))))


class ImpalaCNNTorso(CNNTorso):
    """IMPALA's deep residual CNN (Espeholt et al. 2018, Fig. 3, without its LSTM): per stage
    a 3x3 convolution, a 3x3 max-pool of stride 2 (84 -> 42 -> 21 -> 11) and two residual
    blocks; then ReLU and 256 units. Its convolutions keep torch's default initialisation
    (as CleanRL's and Procgen's versions; an orthogonal gain of sqrt 2 on both convolutions of
    six residual blocks would double the activations' variance at each), its last layer the
    torso's orthogonal one."""

    orthogonal = (nn.Linear,)

    def __init__(
        self,
        in_channels: int,
        size: tuple[int, int] = (84, 84),
        bf16: bool = False,
        channels: tuple[int, ...] = (16, 32, 32),
    ):
        super().__init__(bf16)
        layers: list[nn.Module] = []
        c = in_channels
        for out in channels:
            layers += [
                nn.Conv2d(c, out, 3, padding=1),
                nn.MaxPool2d(3, stride=2, padding=1),
                ResidualBlock(out),
                ResidualBlock(out),
            ]
            c = out
        convs = nn.Sequential(*layers, nn.ReLU(), nn.Flatten())
        self._finish(convs, size, in_channels, 256)

    def wants_channels_last(self, training: bool) -> bool:
        """Channels-last in bf16, and on a CPU in fp32 too, for acting as for learning: on one
        core of an AVX-512 BF16 EPYC, NHWC acted on 16 frames 3.5x faster in bf16 and 2.6x
        in fp32, and learned on 256 2.0x and 1.55x (``benchmarks/cnn_precision.py --models
        impala_cnn``). fp32 on a GPU stays NCHW: not measured there."""
        return self.bf16 or on_cpu(self)


CNNS: dict[str, type[NatureCNNTorso] | type[ImpalaCNNTorso]] = {
    "nature_cnn": NatureCNNTorso,
    "impala_cnn": ImpalaCNNTorso,
}


def to_device(model: nn.Module, device: torch.device, precision: str) -> nn.Module:
    """``model`` moved to ``device``, with ``precision: auto`` resolved there: a model is built
    on the CPU, whose bf16 support says nothing of the GPU a learner moves it to."""
    model.to(device)
    for m in model.modules():
        if isinstance(m, CNNTorso):
            m.bf16 = cnn_precision(precision, device) == "bf16"
            m.use_layout(training=False)
    return model


def train_layout(model: nn.Module) -> None:
    """The layout for a model that is trained (:meth:`CNNTorso.use_layout`): learners call
    it, actors do not. Parameters stay where :func:`~rltrain.rl.algos.models.load_flat` puts
    them."""
    for m in model.modules():
        if isinstance(m, CNNTorso):
            m.use_layout(training=True)


def check_torso(kind: str, obs_shape: tuple[int, ...]) -> None:
    """A one-line ConfigError where ``model.kind`` cannot take the env's observations (a
    config check that needs the env: call it once the env is probed, before anything starts)."""
    if kind == "nature_cnn" and (len(obs_shape) != 3 or min(obs_shape[1:]) < CNN_MIN_SIDE):
        raise ConfigError(
            f"model.kind=nature_cnn needs image observations [C, H, W] of at least "
            f"{CNN_MIN_SIDE} pixels a side, got {tuple(obs_shape)}; use model.kind=mlp or auto"
        )
    if kind == "impala_cnn" and len(obs_shape) != 3:
        raise ConfigError(
            f"model.kind=impala_cnn needs image observations [C, H, W], got "
            f"{tuple(obs_shape)}; use model.kind=mlp or auto"
        )


def check_image_layout(kind: str, obs_shape: tuple[int, ...]) -> None:
    """A one-line ConfigError where a CNN would take images [H, W, C] for [C, H, W] (H as
    channels: explore84's float images). Checked when a run trains, not when one plays: a
    run trained so before still evaluates."""
    if kind in CNNS and channels_last_shape(obs_shape):
        raise ConfigError(
            f"model.kind={kind} reads observations as [C, H, W], and {tuple(obs_shape)} looks "
            "like images with their channels last; rltrain moves the channels first for uint8 "
            "images only: make the env's images uint8 in [0, 255], or return them as [C, H, W]"
        )


def build_torso(
    kind: str, obs_shape: tuple[int, ...], hidden: int, precision: str = "fp32"
) -> nn.Module:
    """``auto``: the Nature CNN for image stacks [C, H, W], the MLP for vectors."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; allowed: {', '.join(PRECISIONS)}")
    bf16 = resolve_precision(precision, kind, obs_shape) == "bf16"
    if kind == "auto":
        kind = "nature_cnn" if uses_cnn(kind, obs_shape) else "mlp"
    check_torso(kind, obs_shape)
    if kind in CNNS:
        return CNNS[kind](obs_shape[0], (obs_shape[1], obs_shape[2]), bf16)
    if kind == "mlp":
        return MLPTorso(math.prod(obs_shape), hidden)
    raise ValueError(f"unknown model {kind!r}; allowed: {', '.join(MODELS)}")
