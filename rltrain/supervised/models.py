"""Models of the supervised benchmark: a small CNN (MNIST-like), a small ResNet (CIFAR-10),
a linear map (the toy problems, or softmax regression on images), and the same linear map
factored into layers (a toy problem's model that can be cut into pipeline stages)."""

from __future__ import annotations

import math
from typing import cast

import torch
from torch import nn

MODELS = ("auto", "cnn", "resnet", "linear", "deep_linear")
PARAM_LAYERS = {"cnn": 4, "resnet": 5, "linear": 1, "deep_linear": 3}
"""Layers holding parameters, the most stages a model can be cut into (``model.stages``)."""


class SmallCNN(nn.Module):
    """Two 3x3 conv blocks and a 64-unit head, ~106k parameters for 28x28 inputs.

    Small on purpose: the benchmark compares update rules, and a small model keeps the
    parameter traffic per step realistic for a CPU laptop while reaching ~90% on Fashion-MNIST.
    """

    def __init__(self, in_channels: int, num_classes: int, image_size: int) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 16, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        side = image_size // 4
        self.head = nn.Sequential(
            nn.Flatten(), nn.Linear(32 * side * side, 64), nn.ReLU(), nn.Linear(64, num_classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, C, H, W] -> [B, classes]
        return self.head(self.features(x))


class ResidualBlock(nn.Module):
    """Pre-activation residual block (He et al. 2016) with an optional stride-2 projection.

    GroupNorm instead of BatchNorm: batch statistics are buffers, not parameters, so they would
    not travel through the parameter server and every replica would hold different ones.
    """

    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.norm1 = nn.GroupNorm(8, c_in)
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)
        self.norm2 = nn.GroupNorm(8, c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1, bias=False)
        self.project = stride != 1 or c_in != c_out
        self.proj = nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False) if self.project else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, c_in, H, W] -> [B, c_out, H/s, W/s]
        h = torch.relu(self.norm1(x))
        shortcut = self.proj(h) if self.proj is not None else x
        out = self.conv2(torch.relu(self.norm2(self.conv1(h))))
        return out + shortcut


class SmallResNet(nn.Module):
    """A 3-stage residual CNN (32-64-128 channels), ~0.3M parameters, for CIFAR-10."""

    def __init__(self, in_channels: int, num_classes: int) -> None:
        super().__init__()
        self.stem = nn.Conv2d(in_channels, 32, 3, padding=1, bias=False)
        self.blocks = nn.Sequential(
            ResidualBlock(32, 32, 1), ResidualBlock(32, 64, 2), ResidualBlock(64, 128, 2)
        )
        self.head = ResNetHead(128, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, C, H, W] -> [B, classes]
        return self.head(self.blocks(self.stem(x)))


class ResNetHead(nn.Module):
    """SmallResNet's tail, one layer of its pipeline stages: norm, ReLU, global average
    pool, classifier."""

    def __init__(self, channels: int, num_classes: int) -> None:
        super().__init__()
        self.norm = nn.GroupNorm(8, channels)
        self.fc = nn.Linear(channels, num_classes)

    def forward(self, h: torch.Tensor) -> torch.Tensor:  # [B, C, h, w] -> [B, classes]
        return self.fc(torch.relu(self.norm(h)).mean(dim=(2, 3)))


class Linear(nn.Module):
    """y = W flatten(x), no bias: on the toy problems the parameter vector is w itself."""

    def __init__(self, in_features: int, outputs: int) -> None:
        super().__init__()
        self.fc = nn.Linear(in_features, outputs, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, ...] -> [B, outputs]
        return self.fc(x.flatten(1))


class DeepLinear(nn.Module):
    """y = W3 W2 W1 flatten(x), no biases: a linear map factored into three layers, the first
    two D x D (D the input's size). Its end-to-end map :func:`linear_map` has the toy
    problem's known optimum, and its layers can be cut into stages (synthetic gradients on a
    problem with a known answer). W1 and W2 start at the identity and W3 as :class:`Linear`'s
    weight, so the end-to-end map starts as the linear model's does; a deep linear network's
    learning from there is well understood (Saxe et al. 2014, "Exact solutions to the
    nonlinear dynamics of learning in deep linear neural networks")."""

    def __init__(self, in_features: int, outputs: int) -> None:
        super().__init__()
        hidden = [nn.Linear(in_features, in_features, bias=False) for _ in range(2)]
        self.layers = nn.Sequential(*hidden, nn.Linear(in_features, outputs, bias=False))
        with torch.no_grad():
            for layer in hidden:
                layer.weight.copy_(torch.eye(in_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, ...] -> [B, outputs]
        return self.layers(x.flatten(1))


def linear_map(model: nn.Module) -> torch.Tensor | None:
    """The end-to-end weights of a linear model, flat [outputs * inputs] (the toy problems'
    w); None for a model that is not linear."""
    if isinstance(model, Linear):
        return model.fc.weight.detach().flatten()
    if isinstance(model, DeepLinear):
        w1, w2, w3 = (cast(nn.Linear, m).weight.detach() for m in model.layers)
        return (w3 @ w2 @ w1).flatten()
    return None


def build_model(name: str, in_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """``in_shape``: one example's shape, [C, H, W] images or [D] vectors. ``auto`` picks the
    CNN for 1-channel (MNIST-like) images, the ResNet for colour images, linear for vectors."""
    if name == "auto":
        name = "linear" if len(in_shape) == 1 else "cnn" if in_shape[0] == 1 else "resnet"
    if name == "linear":
        return Linear(math.prod(in_shape), num_classes)
    if name == "deep_linear":
        return DeepLinear(math.prod(in_shape), num_classes)
    if len(in_shape) != 3:
        raise ValueError(f"model {name!r} needs images [C, H, W], got inputs {list(in_shape)}")
    if name == "cnn":
        return SmallCNN(in_shape[0], num_classes, in_shape[-1])
    if name == "resnet":
        return SmallResNet(in_shape[0], num_classes)
    raise ValueError(f"unknown model {name!r}; allowed: {', '.join(MODELS)}")
