"""Actor-critic networks: an MLP for vector observations, the Nature CNN for Atari frames."""

from __future__ import annotations

import torch
from torch import nn

MODELS = ("auto", "mlp", "nature_cnn")


class MLPActorCritic(nn.Module):
    """Two tanh hidden layers shared by a policy head and a value head."""

    def __init__(self, obs_dim: int, num_actions: int, hidden: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Linear(obs_dim, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh()
        )
        self.policy = nn.Linear(hidden, num_actions)
        self.value = nn.Linear(hidden, 1)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.body(obs.flatten(1).float())  # [N, hidden]
        return self.policy(h), self.value(h).squeeze(-1)  # [N, A], [N]


class NatureCNNActorCritic(nn.Module):
    """The DQN Nature network (Mnih et al. 2015) with policy and value heads (as in A3C).

    Input: uint8 frames [N, 4, 84, 84]; scaled to [0, 1] here so that rollouts stay uint8.
    """

    def __init__(self, in_channels: int, num_actions: int, image_size: int = 84) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(in_channels, 32, 8, stride=4),
            nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2),
            nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1),
            nn.ReLU(),
            nn.Flatten(),
        )
        with torch.no_grad():
            n = self.body(torch.zeros(1, in_channels, image_size, image_size)).shape[1]
        self.fc = nn.Sequential(nn.Linear(n, 512), nn.ReLU())
        self.policy = nn.Linear(512, num_actions)
        self.value = nn.Linear(512, 1)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.fc(self.body(obs.float() / 255.0))  # [N, 512]
        return self.policy(h), self.value(h).squeeze(-1)  # [N, A], [N]


def build_policy(kind: str, obs_shape: tuple[int, ...], num_actions: int, hidden: int) -> nn.Module:
    """``auto``: the Nature CNN for image stacks [C, H, W], the MLP for vectors."""
    if kind == "auto":
        kind = "nature_cnn" if len(obs_shape) == 3 else "mlp"
    if kind == "nature_cnn":
        if len(obs_shape) != 3:
            raise ValueError(
                f"model.kind=nature_cnn needs image observations, got shape {obs_shape}"
            )
        return NatureCNNActorCritic(obs_shape[0], num_actions, obs_shape[-1])
    if kind == "mlp":
        dim = 1
        for s in obs_shape:
            dim *= s
        return MLPActorCritic(dim, num_actions, hidden)
    raise ValueError(f"unknown model {kind!r}; allowed: {', '.join(MODELS)}")
