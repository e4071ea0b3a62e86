"""Learners: turn rollouts into gradients and push them to the parameter server."""

from __future__ import annotations

import time

import torch

from rltrain.ps.server import Server
from rltrain.records import GradUpdate, Params, PushResult
from rltrain.rl.actor import Actor, load_params
from rltrain.rl.config import TrainConfig
from rltrain.rl.losses import a3c_loss, vtrace_loss
from rltrain.rl.models import build_policy
from rltrain.rl.rollout import LossStats, Rollout, WorkStats, stack


def clipped_flat_grad(net: torch.nn.Module, max_norm: float) -> tuple[torch.Tensor, float]:
    """Clip the global gradient norm (0 = no clipping); the flat gradient [P] on the CPU."""
    params = list(net.parameters())
    norm = torch.nn.utils.clip_grad_norm_(params, max_norm or float("inf"))
    return torch.cat([p.grad.reshape(-1) for p in params]).cpu(), float(norm)


def pick_device(want_gpu: bool) -> torch.device:
    return torch.device("cuda") if want_gpu and torch.cuda.is_available() else torch.device("cpu")


class Learner:
    """Computes the configured loss on a batch of rollouts; a flat gradient comes out."""

    def __init__(
        self,
        cfg: TrainConfig,
        obs_shape: tuple[int, ...],
        num_actions: int,
        gpu: bool = False,
        learner_id: int = 0,
    ) -> None:
        torch.set_num_threads(cfg.runtime.threads_per_worker)
        self.cfg = cfg
        self.device = pick_device(gpu)
        self.learner_id = learner_id
        self.params: Params | None = None  # from the last exchange: the next step starts here
        self.model = build_policy(cfg.model.kind, obs_shape, num_actions, cfg.model.hidden)
        self.model.to(self.device)

    def load(self, params: Params) -> None:
        load_params(self.model, params, self.device)

    def gradient(self, rollout: Rollout) -> tuple[torch.Tensor, LossStats]:
        """The flat gradient [P] (on CPU) of the algorithm's loss at the loaded parameters."""
        a, d = self.cfg.algo, self.device
        T, B = rollout.actions.shape
        obs = rollout.obs.to(d)
        logits, values = self.model(obs.flatten(0, 1))  # [(T+1) B, A], [(T+1) B]
        logits = logits.view(T + 1, B, -1)[:T]
        values = values.view(T + 1, B)
        args = (
            rollout.actions.to(d),
            values[:T],
            rollout.rewards.to(d),
            rollout.discounts(a.gamma).to(d),
            values[T].detach(),
        )
        if a.name == "impala":
            loss = vtrace_loss(
                logits,
                rollout.behaviour_logits.to(d),
                *args,
                value_coef=a.value_coef,
                entropy_coef=a.entropy_coef,
                rho_bar=a.rho_bar,
                c_bar=a.c_bar,
            )
        else:
            loss = a3c_loss(logits, *args, value_coef=a.value_coef, entropy_coef=a.entropy_coef)
        self.model.zero_grad(set_to_none=True)
        loss.total.backward()
        grad, norm = clipped_flat_grad(self.model, a.max_grad_norm)
        return grad, LossStats(norm, loss.policy, loss.value, loss.entropy)

    def learn(self, server: Server, *rollouts: Rollout) -> WorkStats:
        """IMPALA learner step: latest parameters, V-trace loss on the batch, push."""
        t = time.perf_counter()
        params = self.params if self.params is not None else server.pull()
        self.load(params)
        batch = stack(list(rollouts))
        grad, loss = self.gradient(batch)
        update = GradUpdate(
            self.learner_id, params.version, grad, batch.env_steps, loss.policy or 0.0
        )
        result, self.params = server.exchange(update)
        stats = WorkStats(losses=[loss])
        stats.add_rollout(batch)
        record_push(stats, result)
        stats.seconds = time.perf_counter() - t
        return stats


def record_push(stats: WorkStats, result: PushResult) -> None:
    stats.updates += 1
    if result.status in ("applied", "accumulated"):
        stats.applied += 1
        stats.staleness.append(result.staleness)
    elif result.status == "dropped":
        stats.dropped += 1
    else:
        stats.rejected += 1


class A3CWorker:
    """An A3C / A2C worker: acts, learns on its own rollouts, pushes (Mnih et al. 2016).

    Under ``a2c`` the server's ``sync`` rule makes every worker wait for the others' gradients
    of the same version before the next rollout.
    """

    def __init__(self, cfg: TrainConfig, worker_id: int) -> None:
        self.cfg = cfg
        self.worker_id = worker_id
        self.actor = Actor(cfg, worker_id)
        self.learner = Learner(cfg, self.actor.env.obs_shape, self.actor.env.num_actions)
        self.learner.model = self.actor.model  # one network: acting and learning share it
        self.barrier = cfg.algo.name == "a2c"

    def work(self, server: Server, iterations: int) -> WorkStats:
        """``iterations`` x (rollout, gradient, push + pull); returns what happened.

        Under a2c's barrier every call ends at the next version that is a multiple of
        ``iterations``, so that all workers finish a call together even when one joined in
        the middle (restarted after a crash): no worker is left waiting at a barrier for one
        that has already returned.
        """
        t = time.perf_counter()
        stats = WorkStats()
        if self.actor.version < 0:
            self.actor.load(server.pull())
        target = (self.actor.version // iterations + 1) * iterations
        steps = range(target - self.actor.version) if self.barrier else range(iterations)
        for _ in steps:
            rollout = self.actor.rollout()
            grad, loss = self.learner.gradient(rollout)
            update = GradUpdate(
                self.worker_id, self.actor.version, grad, rollout.env_steps, loss.policy
            )
            wait = self.actor.version + 1 if self.barrier else 0
            result, params = server.exchange(update, wait, self.cfg.server.barrier_timeout_s)
            self.actor.load(params)
            stats.add_rollout(rollout)
            stats.losses.append(loss)
            record_push(stats, result)
            if self.barrier and self.actor.version >= target:
                break
        stats.seconds = time.perf_counter() - t
        return stats
