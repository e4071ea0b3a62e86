"""Networks of the RL half: one torso per observation kind, with actor-critic or Q heads.

* MLP torso for vector observations (two tanh layers).
* Nature CNN torso for Atari frame stacks (Mnih et al. 2015), as in A3C and Gorila.
"""

from __future__ import annotations

import torch
from torch import nn

MODELS = ("auto", "mlp", "nature_cnn")


class MLPTorso(nn.Module):
    """Two tanh hidden layers over the flattened observation."""

    def __init__(self, obs_dim: int, hidden: int) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(obs_dim, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh()
        )
        self.out_dim = hidden

    def forward(self, obs: torch.Tensor) -> torch.Tensor:  # [N, *obs] -> [N, hidden]
        return self.net(obs.flatten(1).float())


class NatureCNNTorso(nn.Module):
    """The DQN Nature network's convolutions and 512-unit layer.

    Input: uint8 frames [N, C, H, W]; scaled to [0, 1] here so that rollouts and replay stay
    uint8 (4x smaller).
    """

    def __init__(self, in_channels: int, image_size: int = 84) -> None:
        super().__init__()
        convs = nn.Sequential(
            nn.Conv2d(in_channels, 32, 8, stride=4),
            nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2),
            nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1),
            nn.ReLU(),
            nn.Flatten(),
        )
        with torch.no_grad():
            n = convs(torch.zeros(1, in_channels, image_size, image_size)).shape[1]
        self.net = nn.Sequential(convs, nn.Linear(n, 512), nn.ReLU())
        self.out_dim = 512

    def forward(self, obs: torch.Tensor) -> torch.Tensor:  # [N, C, H, W] -> [N, 512]
        return self.net(obs.float() / 255.0)


def build_torso(kind: str, obs_shape: tuple[int, ...], hidden: int) -> nn.Module:
    """``auto``: the Nature CNN for image stacks [C, H, W], the MLP for vectors."""
    if kind == "auto":
        kind = "nature_cnn" if len(obs_shape) == 3 else "mlp"
    if kind == "nature_cnn":
        if len(obs_shape) != 3:
            raise ValueError(f"model.kind=nature_cnn needs image observations, got {obs_shape}")
        return NatureCNNTorso(obs_shape[0], obs_shape[-1])
    if kind == "mlp":
        return MLPTorso(int(torch.tensor(obs_shape).prod()), hidden)
    raise ValueError(f"unknown model {kind!r}; allowed: {', '.join(MODELS)}")


class ActorCritic(nn.Module):
    """Policy logits and state value on one torso (A3C, IMPALA)."""

    def __init__(self, torso: nn.Module, num_actions: int) -> None:
        super().__init__()
        self.torso = torso
        self.policy = nn.Linear(torso.out_dim, num_actions)
        self.value = nn.Linear(torso.out_dim, 1)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.torso(obs)
        return self.policy(h), self.value(h).squeeze(-1)  # [N, A], [N]


class QNetwork(nn.Module):
    """Action values on the same torso (DQN, Gorila)."""

    def __init__(self, torso: nn.Module, num_actions: int) -> None:
        super().__init__()
        self.torso = torso
        self.q = nn.Linear(torso.out_dim, num_actions)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:  # [N, *obs] -> [N, A]
        return self.q(self.torso(obs))


def build_policy(
    kind: str, obs_shape: tuple[int, ...], num_actions: int, hidden: int
) -> ActorCritic:
    return ActorCritic(build_torso(kind, obs_shape, hidden), num_actions)


def build_qnet(kind: str, obs_shape: tuple[int, ...], num_actions: int, hidden: int) -> QNetwork:
    return QNetwork(build_torso(kind, obs_shape, hidden), num_actions)
