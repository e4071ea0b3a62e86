"""Gorila DQN (Nair et al. 2015): epsilon-greedy actors, a replay memory, double-DQN learners.

Actors act with the online network (pulled every ``server.n_fetch`` blocks) and send blocks of
transitions to the replay shards; learners sample, compute the double-DQN Huber loss against a
target network they refresh every ``dqn.target_update`` server versions, and push gradients
to the parameter server (``async`` by default; under ``sync`` several learners step together).
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol, cast

import numpy as np
import torch

from rltrain.envs.user import import_env_modules
from rltrain.perf import PhaseTimer
from rltrain.ps.server import Server
from rltrain.records import GradUpdate, Params, PushResult, tensor_of
from rltrain.replay import SampledBatch, TransitionBlock
from rltrain.rl.actor import acting_setup, frame_stack_of, load_params, model_builder
from rltrain.rl.algos.dqn import dqn_loss_of
from rltrain.rl.algos.models import QNetwork
from rltrain.rl.config import TrainConfig, waits_at_barrier
from rltrain.rl.device import pick_device
from rltrain.rl.exchange import record_push, round_end
from rltrain.rl.learner import clipped_flat_grad
from rltrain.rl.rollout import FirstRound, LossStats, WorkStats, first_round_count

if TYPE_CHECKING:
    from rltrain.rl.env_spec import EnvSpec


class Replay(Protocol):
    """What actors and learners need from the (sharded) replay memory."""

    def add(self, shard: int, block: TransitionBlock) -> None: ...
    def sample(self, shard: int, batch_size: int, batches: int = 1) -> SampledBatch: ...
    def update_priorities(
        self, shard: int, indices: np.ndarray, priorities: np.ndarray
    ) -> None: ...
    def sizes(self) -> list[int]: ...


def pick_shard(sizes: Sequence[int], rng: np.random.Generator) -> int:
    """A replay shard drawn in proportion to what it holds: uniform sampling over the whole
    memory, as Ape-X's one replay (Horgan et al. 2018), and never an empty shard (fewer
    actors than shards leave some empty, as 1 actor and 2 shards do)."""
    held = np.asarray(sizes, dtype=np.float64)
    if held.sum() <= 0:
        return int(rng.integers(0, len(held)))  # (the learners start after learning_starts)
    return int(rng.choice(len(held), p=held / held.sum()))


def memory_args(cfg: TrainConfig, spec: EnvSpec, shard: int) -> tuple:
    """ReplayMemory's arguments for one shard (frame stacks are stored frame by frame)."""
    r = cfg.replay
    return (
        r.capacity,
        spec.obs_shape,
        spec.obs_dtype,
        frame_stack_of(spec.protocol),
        r.prioritized,
        r.alpha,
        r.beta,
        1e-6,
        cfg.seed + shard,
        cfg.dqn.n_step,
        cfg.algo.gamma,
    )


def apex_epsilon(base: float, alpha: float, actor_id: int, actors: int) -> float:
    """Ape-X's exploration of actor i of N: eps_i = base^(1 + alpha i / (N - 1)) (Horgan et
    al. 2018)."""
    if actors == 1:
        return base
    return base ** (1 + alpha * actor_id / (actors - 1))


class DQNActor:
    """Acts epsilon-greedily in ``env.num_envs`` environments; sends transition blocks."""

    def __init__(self, cfg: TrainConfig, actor_id: int, start_steps: int = 0) -> None:
        self.cfg = cfg
        self.actor_id = actor_id
        self.env, self.model, seed = acting_setup(cfg, actor_id, model_builder(cfg))
        self.rng = np.random.default_rng(seed)
        self.obs = np.asarray(self.env.reset(seed=seed))
        self.first_round = FirstRound(self.env.num_envs)
        self.version = -1
        self.steps = start_steps  # per env; a resumed run continues its epsilon schedule
        self.blocks = 0
        self.params: Params | None = None  # the last pulled: a pull sends only what is newer
        self.timer = PhaseTimer("actor")
        self.shard = actor_id % cfg.replay.shards

    def epsilons(self) -> np.ndarray:
        """[B] each env's epsilon now. apex: spread over every env of every actor, as rlpyt
        spreads Ape-X's per-actor epsilons over vectorised envs: one actor of 16 envs (a
        small box's ``actors: auto``) played at the base 0.4 throughout (explore84)."""
        d, envs = self.cfg.dqn, self.env.num_envs
        if d.epsilon == "apex":
            first, total = self.actor_id * envs, self.cfg.actors * envs
            slots = range(first, first + envs)
            return np.array(
                [apex_epsilon(d.epsilon_base, d.epsilon_alpha, i, total) for i in slots]
            )
        frac = min(1.0, self.steps / d.epsilon_decay_steps)
        return np.full(envs, d.epsilon_start + frac * (d.epsilon_final - d.epsilon_start))

    def epsilon(self) -> float:
        """The mean of the envs' epsilons (TensorBoard's ``dqn/epsilon``)."""
        return float(self.epsilons().mean())

    def load(self, params: Params) -> None:
        if params is self.params:  # the server had nothing newer
            return
        load_params(self.model, params)
        self.version = params.version
        self.params = params

    @torch.no_grad()
    def act(self, obs: np.ndarray, epsilon: np.ndarray | float) -> np.ndarray:
        greedy = self.model(torch.from_numpy(obs)).argmax(1).numpy()
        explore = self.rng.random(len(greedy)) < epsilon
        random = self.rng.integers(0, self.env.num_actions, len(greedy))
        return np.where(explore, random, greedy)

    def collect(self, server: Server, replay: Replay, blocks: int) -> WorkStats:
        """``blocks`` x (pull every n_fetch blocks, act rollout_length steps, send the block).

        The block carries the final observation of every episode cut by its time limit, so
        the replay can store that step with s_{t+1} = the final observation, not a terminal.
        """
        t = time.perf_counter()
        timer = self.timer
        timer.begin()
        stats = WorkStats(first_step_at=time.time() if self.blocks == 0 else None)
        T = self.cfg.algo.rollout_length
        for _ in range(blocks):
            if self.version < 0 or self.blocks % self.cfg.server.n_fetch == 0:
                with timer.phase("pull"):
                    self.load(server.pull(self.params))
            eps = self.epsilons()
            obs, actions, rewards, terms, truncs, finals = [self.obs], [], [], [], [], []
            for _ in range(T):
                with timer.phase("inference"):
                    a = self.act(self.obs, eps)
                with timer.phase("env"):
                    step = self.env.step(a)
                self.obs = np.asarray(step.obs)
                obs.append(self.obs)
                actions.append(a)
                rewards.append(step.reward)
                terms.append(step.terminated)
                truncs.append(step.truncated)
                finals.append(np.asarray(step.final_obs, dtype=self.obs.dtype))
                stats.episode_returns.extend(float(x) for x in step.episode_returns)
                stats.episode_lengths.extend(int(x) for x in step.episode_lengths)
                self.first_round.saw(step.episode_envs)
            with timer.phase("collate"):
                block = TransitionBlock.from_steps(
                    self.actor_id,
                    np.stack(obs),
                    np.stack(actions).astype(np.int64),
                    np.stack(rewards).astype(np.float32),
                    np.stack(terms),
                    np.stack(truncs),
                    frame_stack_of(self.env.protocol),
                    final_obs=np.concatenate(finals),  # [K]: argwhere(truncated) order
                )
            with timer.phase("exchange"):
                replay.add(self.shard, block)
            self.steps += T
            self.blocks += 1
            stats.env_steps += T * self.env.num_envs
        stats.epsilon = self.epsilon()
        stats.unsettled[self.actor_id] = first_round_count([self.first_round])
        stats.phases = timer.take()
        stats.seconds = time.perf_counter() - t
        return stats


class DQNLearner:
    """Samples replay, computes the double-DQN gradient, pushes it; refreshes its target net."""

    def __init__(
        self,
        cfg: TrainConfig,
        obs_shape: tuple[int, ...],
        num_actions: int,
        gpu: bool = False,
        learner_id: int = 0,
    ) -> None:
        import_env_modules(cfg.imports)  # a learner process makes no env: they may register
        torch.set_num_threads(cfg.runtime.learner_threads or cfg.runtime.threads_per_worker)
        self.cfg = cfg
        self.learner_id = learner_id
        self.device = pick_device(gpu, f"learner {learner_id}")
        build = model_builder(cfg)
        net = build(cfg.model.kind, obs_shape, num_actions, cfg.model.hidden)
        self.online = cast(QNetwork, net.to(self.device))
        self.target = copy.deepcopy(self.online)
        self.loss = dqn_loss_of(cfg)
        self.target_version = -(10**9)
        self.params: Params | None = None
        self.rng = np.random.default_rng(cfg.seed + 7919 * (learner_id + 1))
        self.timer = PhaseTimer("learner")

    def learn(self, server: Server, replay: Replay, updates: int) -> WorkStats:
        """``updates`` learner steps on one replay draw of ``updates x batch_size`` transitions.

        One round trip to the replay for the whole call, and each push/pull round trip overlaps
        the next gradient (its parameters then lag by one version, like the actors'). Under a
        barrier rule (sync, soft_sync) each push waits for the version it makes instead, as
        a2c's and impala's do (an overlapped gradient would be one version stale, and dropped),
        and the call ends at the next multiple of ``updates`` versions, as a2c's workers' calls
        do: learners out of step (one restarted, or late) meet there, where the longer call's
        pushes left over would each wait out server.barrier_timeout_s.
        """
        t = time.perf_counter()
        timer = self.timer
        timer.begin()
        stats = WorkStats()
        d = self.cfg.dqn
        params = self.params
        barrier, timeout = waits_at_barrier(self.cfg), self.cfg.server.barrier_timeout_s
        if params is None or barrier:  # (a barrier drops a push from behind its round)
            with timer.phase("pull"):
                params = server.pull(params)
        with timer.phase("sample"):
            shard = pick_shard(replay.sizes(), self.rng)
            draw = replay.sample(shard, d.batch_size, updates)  # each minibatch on its own
        target = round_end(params.version, updates)  # (a barrier's call ends there)
        pending: Callable[[], tuple[PushResult, Params]] | None = None
        sums: dict[str, float] = {}  # WorkStats' means over the call (q_mean, support_beyond)
        done = 0

        def finish() -> Params:
            assert pending is not None
            with timer.phase("exchange"):
                result, got = pending()
            record_push(stats, result)
            return got

        for i in range(updates):
            if barrier and params.version >= target:
                break
            batch = draw.slice(i * d.batch_size, (i + 1) * d.batch_size)
            update, loss, td, means = self.update(params, batch)
            if self.cfg.replay.prioritized:
                with timer.phase("exchange"):
                    replay.update_priorities(shard, batch.indices, np.abs(td))
            if pending is not None:
                params = finish()
            with timer.phase("exchange"):
                wait = update.version + 1 if barrier else 0  # (0: no wait)
                pending = server.exchange_begin(update, wait, timeout)
            if barrier:
                params, pending = finish(), None
            stats.losses.append(loss)
            sums = {k: sums.get(k, 0.0) + v for k, v in means.items()}
            done += 1
        if pending is not None:
            params = finish()
        self.params = params
        for k, v in sums.items():
            setattr(stats, k, v / done)
        stats.phases = timer.take()
        stats.seconds = time.perf_counter() - t
        return stats

    def update(
        self, params: Params, batch: SampledBatch
    ) -> tuple[GradUpdate, LossStats, np.ndarray, dict[str, float]]:
        """The push of one minibatch's gradient at ``params`` (the target network refreshed
        first where ``dqn.target_update`` versions have passed), its loss, priorities and the
        means that WorkStats reports (``q_mean``; C51's ``support_beyond``)."""
        with self.timer.phase("collate"):
            load_params(self.online, params, self.device)
            self.refresh_target(params.version)
        with self.timer.phase("learn"):
            grad, loss, td, means = self.gradient(batch)
        update = GradUpdate(
            self.learner_id,
            params.version,
            grad,
            len(batch),
            loss.terms(),
            restore_epoch=params.restore_epoch,
            finite=math.isfinite(loss.grad_norm),
        )
        return update, loss, td, means

    def refresh_target(self, version: int) -> None:
        """Every ``dqn.target_update`` versions, move the target network ``dqn.target_tau`` of
        the way to the online one (just loaded at ``version``); refreshes missed while the
        version moved on by several (other learners' pushes) compound. The first refresh,
        and one after a restore moved the server back, copy."""
        d = self.cfg.dqn
        if self.target_version < 0 or version < self.target_version:
            self._move_target(1.0)
            self.target_version = version
            return
        due = (version - self.target_version) // d.target_update
        if due:  # (Lillicrap et al. 2016's soft update, applied due times)
            self._move_target(1.0 - (1.0 - d.target_tau) ** due)
            self.target_version += due * d.target_update

    def _move_target(self, tau: float) -> None:
        """target <- target + tau (online - target); at 1 a copy, which also clears a target
        that diverged (a step towards the online network would keep its NaNs)."""
        with torch.no_grad():
            for t, o in zip(self.target.parameters(), self.online.parameters(), strict=True):
                if tau == 1.0:
                    t.copy_(o)
                else:
                    t.lerp_(o, tau)

    def gradient(
        self, batch: SampledBatch
    ) -> tuple[torch.Tensor, LossStats, np.ndarray, dict[str, float]]:
        """Flat gradient [P] of the importance-weighted loss (double DQN's Huber TD loss, or
        C51's cross-entropy), with each transition's priority (its TD error or cross-entropy)."""
        dev = self.device
        # done is terminated only: a time-limit cut is no terminal and bootstraps from its
        # final observation, which the replay returns as its next_obs (Pardo et al. 2018)
        terms = self.loss(
            self.online,
            self.target,
            tensor_of(batch.obs).to(dev),
            tensor_of(batch.next_obs).to(dev),
            tensor_of(batch.actions).to(dev),
            tensor_of(batch.rewards).to(dev),
            tensor_of(batch.done).to(dev),
            tensor_of(batch.weights).to(dev),
            tensor_of(batch.steps).to(dev),
        )
        self.online.zero_grad(set_to_none=True)
        terms.loss.backward()
        grad, norm = clipped_flat_grad(self.online, self.cfg.algo.max_grad_norm)
        beyond = [] if terms.beyond is None else [terms.beyond.reshape(1)]
        scalars = [norm.reshape(1), terms.loss.detach().reshape(1), terms.q_mean.reshape(1)]
        # one read from the device for the step's numbers and priorities (on a GPU, a wait
        # for each would be four per minibatch)
        row = torch.cat([*scalars, *beyond, terms.priority.reshape(-1)]).float().cpu().numpy()
        stats = LossStats(grad_norm=float(row[0]), td=float(row[1]))
        means = {"q_mean": float(row[2])}
        if beyond:
            means["support_beyond"] = float(row[3])
        return grad, stats, row[3 + len(beyond) :], means
