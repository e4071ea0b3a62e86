"""Networks of the RL half: actor-critic or Q heads on the torsos of
:mod:`rltrain.rl.algos.torsos` (an MLP, the Nature CNN, IMPALA's CNN).

* Orthogonal initialisation (Saxe et al. 2014) with the gains of the PPO implementations
  (sqrt 2 in the torso, 0.01 for the policy head, 1 for the value head; Andrychowicz et al.
  2021, "What matters in on-policy RL", found both to matter).
* Optional observation normalisation inside the actor-critic (its statistics are buffers set
  from the server's merged :class:`~rltrain.rl.normalize.NormStats`, never trained).
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Iterator
from typing import cast

import torch
from torch import nn

from rltrain.envs.base import ActionSpace
from rltrain.normalize import EPS, NormStats
from rltrain.rl.algos.model_kinds import uses_cnn
from rltrain.rl.algos.torsos import build_torso

_INITIALISE = contextvars.ContextVar("initialise", default=True)


@contextlib.contextmanager
def parameters_to_come() -> Iterator[None]:
    """Build policies whose parameters are overwritten before they are used (a pull, or the
    views of a shard's buffer) without their orthogonal initialisation: the QR
    decompositions for the Nature CNN's 3136 x 512 layer would delay every actor's, the
    policy worker's and the learner's way to the run's first step. The values
    such a model starts with are torch's default initialisation, never acted or learned on:
    the run's initial parameters are built once (:func:`rltrain.rl.env_spec.initial_params`)."""
    token = _INITIALISE.set(False)
    try:
        yield
    finally:
        _INITIALISE.reset(token)


def orthogonal_init(
    module: nn.Module, gain: float, kinds: tuple[type[nn.Module], ...] = (nn.Linear, nn.Conv2d)
) -> None:
    """Orthogonal weights with ``gain`` and zero biases for every layer of ``kinds`` in
    ``module`` (none inside :func:`parameters_to_come`)."""
    if not _INITIALISE.get():
        return
    for m in module.modules():
        if isinstance(m, kinds) and isinstance(m.weight, torch.Tensor):
            nn.init.orthogonal_(m.weight, gain)
            if isinstance(m.bias, torch.Tensor):
                nn.init.zeros_(m.bias)


def flat_params(model: nn.Module) -> torch.Tensor:  # [P]
    """The parameters as one flat vector in their logical order (any memory format)."""
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def flat_slices(
    model: nn.Module, values: torch.Tensor
) -> Iterator[tuple[nn.Parameter, torch.Tensor]]:
    """Each parameter with its slice of the flat vector ``values`` [P], shaped like it."""
    i = 0
    for p in model.parameters():
        n = p.numel()
        yield p, values[i : i + n].view_as(p)
        i += n


@torch.no_grad()
def load_flat(model: nn.Module, values: torch.Tensor) -> None:
    """Copy a flat vector [P] into the parameters in place, so that each keeps its device and
    memory format (torch's vector_to_parameters would swap in contiguous views)."""
    for p, piece in flat_slices(model, values):
        p.copy_(piece)


def bind_flat(model: nn.Module, values: torch.Tensor) -> bool:
    """Make every parameter of ``model`` a view of ``values`` [P] (the flat vector in their
    logical order, on their device), so that whatever updates ``values`` in place updates the
    model, with no copy. False, and nothing changed, where a parameter is not laid out in
    that order (a channels-last weight: :func:`train_layout`) or the sizes differ."""
    params = list(model.parameters())
    if sum(p.numel() for p in params) != values.numel() or values.dtype != torch.float32:
        return False
    if any(not p.is_contiguous() or p.dtype != values.dtype for p in params):
        return False
    for p, piece in flat_slices(model, values):
        p.data = piece
    return True


def unbind_flat(model: nn.Module) -> None:
    """Give every parameter storage of its own again (:func:`bind_flat` undone)."""
    for p in model.parameters():
        p.data = p.data.clone()


class ObsNorm(nn.Module):
    """``clip((x - mean) / sqrt(var + eps), -clip, clip)`` with statistics held as buffers.

    Identity until :meth:`set` is given statistics with a count; the buffers are not parameters,
    so the flat parameter vector the server holds never includes them.
    """

    def __init__(self, obs_shape: tuple[int, ...], clip: float) -> None:
        super().__init__()
        self.clip = clip
        self.mean: torch.Tensor
        self.inv_std: torch.Tensor
        self.register_buffer("mean", torch.zeros(obs_shape))
        self.register_buffer("inv_std", torch.ones(obs_shape))

    def set(self, stats: NormStats | None) -> None:
        if stats is None or stats.obs is None or stats.obs.count == 0:
            return
        self.mean.copy_(stats.obs.mean.float())
        self.inv_std.copy_(torch.rsqrt(stats.obs.var.float() + EPS))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:  # [N, *obs] -> [N, *obs] float32
        z = (obs.float() - self.mean) * self.inv_std
        return z.clamp(-self.clip, self.clip)


class ActorCritic(nn.Module):
    """Policy logits and state value (A3C, IMPALA, PPO): on one torso, or with the value on a
    torso of its own (``value_torso``; CleanRL's and SB3's choice for vector tasks, so that the
    value loss's large gradients do not swamp the policy's features)."""

    def __init__(
        self,
        torso: nn.Module,
        actions: ActionSpace | int,
        value_torso: nn.Module | None = None,
        obs_norm: ObsNorm | None = None,
        log_std_init: float = 0.0,
    ) -> None:
        """``actions``: Discrete(n) (an int n means that too): the policy head gives n logits;
        a Box of n reals: n means, and n log standard deviations, one learned parameter each
        (state-independent, starting at ``log_std_init``: 0 is std 1), broadcast over the
        batch."""
        super().__init__()
        space = actions if isinstance(actions, ActionSpace) else ActionSpace(actions)
        self.torso = torso
        self.value_torso = value_torso
        self.obs_norm = obs_norm
        width = cast(int, torso.out_dim)
        self.policy = nn.Linear(width, space.n if space.continuous else space.params)
        self.value = nn.Linear(width, 1)
        start = torch.full((space.n,), float(log_std_init))
        self.log_std = nn.Parameter(start) if space.continuous else None
        for part in (torso, value_torso):
            if part is not None:  # the torso's own choice of layers (ImpalaCNNTorso: not convs)
                kinds = getattr(part, "orthogonal", (nn.Linear, nn.Conv2d))
                orthogonal_init(part, math.sqrt(2), kinds)
        orthogonal_init(self.policy, 0.01)
        orthogonal_init(self.value, 1.0)

    def set_norm(self, stats: NormStats | None) -> None:
        """Use the server's merged observation statistics (no-op without normalisation)."""
        if self.obs_norm is not None:
            self.obs_norm.set(stats)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        obs = self._normed(obs)
        h = self.torso(obs)
        hv = h if self.value_torso is None else self.value_torso(obs)
        return self._head(h), self.value(hv).squeeze(-1)  # [N, P] (rl.distributions), [N]

    def act_params(self, obs: torch.Tensor) -> torch.Tensor:
        """The action distribution's parameters [N, P] alone: what acting needs (the value
        torso and head are not run; on a tiny MLP they are half the forward pass)."""
        return self._head(self.torso(self._normed(obs)))

    def _normed(self, obs: torch.Tensor) -> torch.Tensor:
        return obs if self.obs_norm is None else self.obs_norm(obs)

    def _head(self, h: torch.Tensor) -> torch.Tensor:
        params = self.policy(h)  # [N, A] logits, or [N, n] means
        if self.log_std is not None:
            params = torch.cat([params, self.log_std.expand_as(params)], -1)  # [N, 2n]
        return params


class QNetwork(nn.Module):
    """Action values on the same torso (DQN, Gorila); ``dueling``: from a value and advantages
    (Wang et al. 2016); ``atoms`` > 1: a categorical distribution of returns per action over
    ``atoms`` fixed values from ``v_min`` to ``v_max`` (C51, Bellemare et al. 2017), whose
    means are the action values that acting reads."""

    def __init__(
        self,
        torso: nn.Module,
        num_actions: int,
        dueling: bool = False,
        atoms: int = 1,
        v_min: float = -10.0,
        v_max: float = 10.0,
    ) -> None:
        super().__init__()
        width = cast(int, torso.out_dim)
        self.torso = torso
        self.num_actions, self.atoms = num_actions, atoms
        self.q = nn.Linear(width, num_actions * atoms)  # (dueling: advantages)
        self.value = nn.Linear(width, atoms) if dueling else None
        self.support: torch.Tensor  # [K] the returns the atoms stand for (a buffer: not learned)
        self.register_buffer("support", torch.linspace(v_min, v_max, atoms))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:  # [N, *obs] -> [N, A]
        if self.atoms == 1:
            return self._scores(obs).squeeze(-1)
        return self.mean_of(self.log_probs(obs))

    def mean_of(self, log_probs: torch.Tensor) -> torch.Tensor:  # [N, A, K] -> [N, A]
        """Q(s, a) = sum_k z_k p_k(s, a): the distribution's mean (Bellemare et al. 2017, eq. 1)."""
        return (log_probs.exp() * self.support).sum(-1)

    def log_probs(self, obs: torch.Tensor) -> torch.Tensor:  # [N, *obs] -> [N, A, K]
        """C51: the log-probabilities of the atoms, for each action (float32)."""
        return self._scores(obs).float().log_softmax(-1)

    def _scores(self, obs: torch.Tensor) -> torch.Tensor:  # [N, *obs] -> [N, A, K]
        h = self.torso(obs)  # [N, H]
        a = self.q(h).view(h.shape[0], self.num_actions, self.atoms)  # [N, A, K]
        if self.value is None:
            return a
        # V + (A - mean_a A): Wang et al. 2016, eq. 9 (the mean makes V and A identifiable and
        # steadier to learn than the max of eq. 8); per atom, before the softmax, as Rainbow's
        # distributional dueling head (Hessel et al. 2018)
        return self.value(h).unsqueeze(1) + a - a.mean(1, keepdim=True)


def build_policy(
    kind: str,
    obs_shape: tuple[int, ...],
    actions: ActionSpace | int,
    hidden: int,
    value_net: str = "auto",
    obs_norm_clip: float | None = None,
    precision: str = "fp32",
    log_std_init: float = 0.0,
) -> ActorCritic:
    """The actor-critic. ``value_net`` auto: a separate value torso for vector observations,
    one shared torso for images (the Nature CNN of A3C/IMPALA). ``obs_norm_clip``: normalise
    observations (clipped to that many standard deviations); None: raw observations.
    ``precision``: of the CNN torso (see :func:`resolve_precision`). ``log_std_init``: the
    Gaussian's initial log standard deviation (Box actions)."""
    image = uses_cnn(kind, obs_shape)
    separate = value_net == "separate" or (value_net == "auto" and not image)
    value_torso = build_torso(kind, obs_shape, hidden, precision) if separate else None
    norm = ObsNorm(obs_shape, obs_norm_clip) if obs_norm_clip is not None else None
    torso = build_torso(kind, obs_shape, hidden, precision)
    return ActorCritic(torso, actions, value_torso, norm, log_std_init)


def build_qnet(
    kind: str,
    obs_shape: tuple[int, ...],
    actions: ActionSpace | int,
    hidden: int,
    precision: str = "fp32",
    dueling: bool = False,
    atoms: int = 1,
    v_min: float = -10.0,
    v_max: float = 10.0,
) -> QNetwork:
    """One Q-value (or, with ``atoms`` > 1, a distribution of returns) per discrete action
    (a Box has no finite set of actions to rate)."""
    if isinstance(actions, ActionSpace):
        if actions.vector:  # (MultiDiscrete: a Q per joint action, prod(nvec) heads)
            raise ValueError(f"a Q-network needs Discrete actions, not {actions.describe()}")
        actions = actions.n
    torso = build_torso(kind, obs_shape, hidden, precision)
    return QNetwork(torso, actions, dueling, atoms, v_min, v_max)
