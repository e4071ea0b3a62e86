"""Gorila DQN (Nair et al. 2015): epsilon-greedy actors fill a replay memory that learners
sample, each pushing the gradient of the double-DQN loss (van Hasselt et al. 2016) on its
minibatch: the Huber loss on the TD error (Mnih et al. 2015), or with ``dqn.atoms`` the
cross-entropy of C51's distribution of returns (Bellemare et al. 2017), importance-weighted
under prioritised replay (Schaul et al. 2016). Its sections: ``dqn`` and ``replay``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from rltrain.config import spec
from rltrain.rl.algos.base import AlgoSpec, RunSettings, register_algo

if TYPE_CHECKING:
    import torch

    from rltrain.rl.algos.models import QNetwork


@dataclass(frozen=True)
class DQNConfig:
    """Gorila DQN: exploration, target network and learner settings (algo.name=dqn)."""

    epsilon: str = field(default="apex", metadata=spec(choices=("apex", "decay")))
    """apex: a fixed epsilon per env, eps_i = base^(1 + alpha i / (N - 1)) over the N envs of
    every actor (Horgan et al. 2018's per-actor spread, as rlpyt's over vectorised envs);
    decay: every env decays linearly from epsilon_start to epsilon_final."""
    epsilon_base: float = field(default=0.4, metadata=spec(ge=0, le=1))
    """apex: the base epsilon."""
    epsilon_alpha: float = field(default=7.0, metadata=spec(ge=0))
    """apex: the exponent spread across actors."""
    epsilon_start: float = field(default=1.0, metadata=spec(ge=0, le=1))
    """decay: epsilon at the first step."""
    epsilon_final: float = field(default=0.05, metadata=spec(ge=0, le=1))
    """decay: epsilon after epsilon_decay_steps."""
    epsilon_decay_steps: int = field(default=50_000, metadata=spec(ge=1))
    """decay: steps of each env over which epsilon falls (a resumed run goes on from its own)."""
    target_update: int = field(default=500, metadata=spec(ge=1))
    """Learners refresh their target network every this many server versions (a copy, or a
    step of target_tau towards the online network)."""
    target_tau: float = field(default=1.0, metadata=spec(gt=0, le=1))
    """Each refresh moves the target network this share of the way to the online one,
    target <- tau online + (1 - tau) target (Polyak averaging, Lillicrap et al. 2016; SB3's
    DQN tau); 1: a copy (Mnih et al. 2015). A soft target: target_update 1 with tau 0.005 (at
target_update 500, a tau below 1 moves the target over about 500 / tau versions). The target
is no part of a checkpoint: a resumed run's starts as a copy."""
    learning_starts: int = field(default=5_000, metadata=spec(ge=0))
    """Transitions in replay before learners start."""
    batch_size: int = field(default=64, metadata=spec(ge=1))
    """Transitions per learner step."""
    env_steps_per_update: float = field(default=0.0, metadata=spec(ge=0))
    """Once learning has started, actors pause while they are more than this many env steps
    per learner update ahead (a replay ratio: on few cores it keeps CPU for the learners),
    counted from the session's learning start. 0 = never pause (Gorila's fully asynchronous
    actors)."""
    updates_per_call: int = field(default=20, metadata=spec(ge=1))
    """Learner steps per driver call (how often the driver hears from a learner)."""
    eval_epsilon: float = field(default=0.05, metadata=spec(ge=0, le=1))
    """Evaluations (``eval``, ``rltrain eval``, ``load_policy``) act epsilon-greedily with
    this epsilon, as Mnih et al. 2015 evaluated (0.05): a greedy policy can stall a game for
    good (Breakout's FIRE). ``eval.deterministic`` / ``--deterministic``: greedy."""
    n_step: int = field(default=1, metadata=spec(ge=1))
    """n-step returns: each transition's target sums up to n discounted rewards and
    bootstraps gamma^k Q(s_{t+k}) (Hessel et al. 2018; Ape-X uses 3). A window stops at an
    episode's end and at the end of the block an actor sends (algo.rollout_length steps)."""
    dueling: bool = False
    """The dueling head (Wang et al. 2016; Ape-X's): a state value V(s) and advantages A(s, a)
    on the torso, Q = V + A - mean_a A. A run saves it in config.yaml; it plays with its own."""
    atoms: int = field(default=1, metadata=spec(ge=1))
    """1: one Q-value per action; more: a distribution of returns per action over this many
    atoms evenly spaced from v_min to v_max, learned by the cross-entropy to the projected
    double-DQN target (C51, Bellemare et al. 2017; Rainbow's 51, Hessel et al. 2018). Acting
    reads its mean. A run saves it in config.yaml; it plays with its own."""
    v_min: float = -10.0
    """atoms > 1: the lowest return an atom stands for (returns beyond the support count as
    its end). -10..10 suits clipped rewards at gamma 0.99 (Atari, Bellemare et al. 2017);
    bound other envs' discounted returns (CartPole-v1 at gamma 0.99: 0..100)."""
    v_max: float = 10.0
    """atoms > 1: the highest return an atom stands for."""


@dataclass(frozen=True)
class ReplayConfig:
    """The replay memory: one or more Ray processes (shards), each with its own capacity."""

    shards: int = field(default=1, metadata=spec(ge=1))
    """Replay shards; actor i sends its transitions to shard i mod shards, so a run has one
    per actor at most (more are not built: no actor would fill them)."""
    capacity: int = field(default=100_000, metadata=spec(ge=1))
    """Transitions per shard (FIFO). Atari stores each 84x84 frame once (~7 KB/transition)."""
    prioritized: bool = False
    """Proportional prioritised replay (Schaul et al. 2016) instead of uniform sampling."""
    alpha: float = field(default=0.6, metadata=spec(ge=0, le=1))
    """Prioritised replay: priority exponent, from 0 (uniform) to 1 (in proportion to the TD
    error; Schaul et al. 2016 used 0.6 and 0.7; above 1 the priorities overflowed: explore112)."""
    beta: float = field(default=0.4, metadata=spec(ge=0, le=1))
    """Prioritised replay: importance-weight exponent."""


class DQNTerms(NamedTuple):
    """What a DQN loss gives for one minibatch (tensors on the learner's device)."""

    loss: torch.Tensor  # [] the importance-weighted loss
    priority: torch.Tensor  # [N] detached: what prioritised replay ranks each transition by
    q_mean: torch.Tensor  # [] the mean Q(s, a) over the batch's states and actions
    beyond: torch.Tensor | None = None  # [] C51: the target's probability beyond the support


class DoubleDQNLoss:
    """The double-DQN loss of one sampled minibatch: targets y = r + gamma Q_target(s',
    argmax_a Q_online(s', a)) (no bootstrap past a terminal; a time-limit cut bootstraps from
    its final observation, Pardo et al. 2018), then the weighted Huber loss."""

    def __init__(self, cfg: RunSettings) -> None:
        self.gamma = cfg.algo.gamma

    def __call__(
        self,
        online: QNetwork,
        target: QNetwork,
        obs: torch.Tensor,  # [N, *obs] s
        next_obs: torch.Tensor,  # [N, *obs] s' (s_{t+k} of n-step returns)
        actions: torch.Tensor,  # [N] int64
        rewards: torch.Tensor,  # [N]
        done: torch.Tensor,  # [N] bool: terminated
        weights: torch.Tensor,  # [N] importance weights (1 for uniform replay)
        steps: torch.Tensor | None = None,  # [N] int64 k of n-step returns (None: 1)
    ) -> DQNTerms:
        """The loss, each transition's TD error (what prioritised replay ranks by) and the
        mean Q at s (detached)."""
        import torch

        from rltrain.rl.algos.losses import double_dqn_targets, dqn_loss

        with torch.no_grad():
            next_online, next_target = online(next_obs), target(next_obs)  # [N, A] each
        q = online(obs)  # [N, A]
        targets = double_dqn_targets(rewards, done, next_online, next_target, self.gamma, steps)
        loss, td = dqn_loss(q, actions, targets, weights)
        return DQNTerms(loss, td, q.detach().mean())


class CategoricalDQNLoss(DoubleDQNLoss):
    """C51's loss (Bellemare et al. 2017) with Rainbow's double-DQN choice (Hessel et al.
    2018): the online network's mean picks a' at s', the target network's distribution of
    a' is moved by the (n-step) rewards and projected onto the atoms, and the cross-entropy
    of the online distribution at the action taken against it is the loss and the priority.
    Its ``beyond``: the share of the target's probability moved past the support's ends (near
    0 with a support that holds the returns; explore116: a support below CartPole's returns
    learned to 9.2, said nothing)."""

    def __call__(
        self,
        online: QNetwork,
        target: QNetwork,
        obs: torch.Tensor,
        next_obs: torch.Tensor,
        actions: torch.Tensor,
        rewards: torch.Tensor,
        done: torch.Tensor,
        weights: torch.Tensor,
        steps: torch.Tensor | None = None,
    ) -> DQNTerms:
        import torch

        from rltrain.rl.algos.losses import categorical_loss, categorical_targets

        with torch.no_grad():
            best = online(next_obs).argmax(1)  # [N] a' by the online mean
            rows = torch.arange(best.numel(), device=best.device)
            chosen = target.log_probs(next_obs)[rows, best].exp()  # [N, K] the target's, at a'
            targets, beyond = categorical_targets(
                rewards, done, chosen, online.support, self.gamma, steps
            )  # [N, K], [N]
        log_probs = online.log_probs(obs)  # [N, A, K]
        loss, ce = categorical_loss(log_probs, actions, targets, weights)
        q = online.mean_of(log_probs.detach())  # [N, A]
        return DQNTerms(loss, ce, q.mean(), beyond.mean())


def dqn_loss_of(cfg: Any) -> DoubleDQNLoss:
    """The run's loss: C51's where ``dqn.atoms`` > 1, else the double-DQN Huber loss."""
    return CategoricalDQNLoss(cfg) if cfg.dqn.atoms > 1 else DoubleDQNLoss(cfg)


def check_support(cfg: Any) -> None:
    """C51's atoms span a range of returns: ``atoms`` distinct finite float32 values."""
    import numpy as np

    dqn = cfg.section("dqn")
    if dqn.atoms == 1:
        return
    span = f"dqn.v_min={dqn.v_min:g}, dqn.v_max={dqn.v_max:g}"
    if not dqn.v_min < dqn.v_max:
        raise ValueError(
            f"{span}: the atoms' returns run from v_min up to v_max, so v_min must be below v_max"
        )
    with np.errstate(all="ignore"):  # (beyond float32: inf or nan, refused below)
        low, high = np.float32(dqn.v_min), np.float32(dqn.v_max)
        step = (high - low) / np.float32(dqn.atoms - 1)
    # (explore116, review90b: 1e40 overflowed float32, 1e8..1e8+1 made the atoms' spacing 0)
    if not np.isfinite(step) or step <= np.spacing(max(abs(low), abs(high))):
        raise ValueError(
            f"{span}: the atoms are {dqn.atoms} float32 returns, which this range cannot hold "
            "apart (beyond +-3.4e38, or too narrow for its size); widen or move it"
        )


def check_replay(cfg: Any) -> None:
    """A replay shard holds at least the block of transitions an actor sends at once and a
    minibatch, the memory at least the transitions the learners wait for, and a block at
    least one n-step window."""
    replay, dqn = cfg.section("replay"), cfg.section("dqn")
    block = cfg.env.num_envs * cfg.algo.rollout_length
    if replay.capacity < block:
        raise ValueError(
            f"replay.capacity={replay.capacity}: must be at least {block} (env.num_envs "
            f"{cfg.env.num_envs} x algo.rollout_length {cfg.algo.rollout_length}: the "
            "transitions of one block an actor sends to a shard)"
        )
    if dqn.batch_size > replay.capacity:  # a minibatch is drawn from one shard
        raise ValueError(
            f"dqn.batch_size={dqn.batch_size}: more than a replay shard holds (replay.capacity "
            f"{replay.capacity}), so every minibatch would repeat transitions; lower it, or "
            "raise replay.capacity"
        )
    if dqn.n_step > cfg.algo.rollout_length:  # a window stays inside one block
        raise ValueError(
            f"dqn.n_step={dqn.n_step}: more than algo.rollout_length "
            f"{cfg.algo.rollout_length}, the steps of the block a window is taken within; "
            "lower it, or raise algo.rollout_length"
        )
    held = replay.capacity * replay.shards
    if dqn.learning_starts > held:
        raise ValueError(
            f"dqn.learning_starts={dqn.learning_starts}: more than the replay memory holds "
            f"({held}: replay.capacity {replay.capacity} x replay.shards "
            f"{replay.shards}), so learning would never start"
        )


DQN = register_algo(
    AlgoSpec(
        "dqn",
        "replay",
        q_network=True,
        normalizes=False,
        sections=("algo", "dqn", "replay"),
        options={"dqn": DQNConfig, "replay": ReplayConfig},
        checks=(check_replay, check_support),
        summary="Gorila DQN (Nair et al. 2015)",
    ),
    built_in=True,
)
