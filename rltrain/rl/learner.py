"""Learners: turn rollouts into gradients and push them to the parameter server.

One :class:`Learner` computes every actor-critic algorithm's gradients; what differs is a
choice of targets and of loss (``algo.name``):

* a3c, a2c: lambda-returns / GAE on the worker's own rollout, one push per rollout.
* impala: V-trace targets and advantages on a batch of actors' rollouts, one push per batch.
* ppo, appo: the clipped surrogate, ``epochs`` passes of ``minibatches`` pushes over each batch
  (ppo: GAE on the worker's own rollout; appo: V-trace on the learner's batch).
* impala, appo with ``impala.correction: none``: GAE on the batch, the actors' lag ignored.

A push is an exchange with the server, and every minibatch step of PPO is a server step: behind
a barrier the next minibatch's gradient is computed at the parameters the last exchange
returned; without one, while that exchange is in flight (see :func:`push_gradients`). The
workers that act and learn in one process (a3c, a2c, ppo) are in :mod:`rltrain.rl.worker`.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import threading
import time
from collections.abc import Callable, Iterator

import torch

from rltrain import perf
from rltrain.envs import ActionSpace
from rltrain.envs.user import import_env_modules
from rltrain.perf import PhaseTimer
from rltrain.ps.server import Server
from rltrain.records import GradUpdate, Params, PushResult
from rltrain.rl.actor import load_params, policy_builder
from rltrain.rl.config import TrainConfig, waits_at_barrier
from rltrain.rl.distributions import distribution
from rltrain.rl.losses import LossSpec, LossTerms, actor_critic_loss, next_state_values
from rltrain.rl.models import to_device, train_layout
from rltrain.rl.rollout import LossStats, Rollout, WorkStats, stack
from rltrain.rl.schedules import linear
from rltrain.rl.targets import TargetInputs


def clipped_flat_grad(net: torch.nn.Module, max_norm: float) -> tuple[torch.Tensor, float]:
    """Clip the global gradient norm (0 = no clipping); the flat gradient [P] on the model's
    device (a shard on that device steps with it there; a transport copies it as it must)."""
    params = list(net.parameters())
    norm = torch.nn.utils.clip_grad_norm_(params, max_norm or float("inf"))
    return torch.cat([p.grad.reshape(-1) for p in params]), float(norm)


def pick_device(want_gpu: bool, who: str = "learner") -> torch.device:
    """CUDA when a GPU was reserved for this process and torch sees it; said in one line when
    it does not (a CPU build of torch on the GPU node?), rather than training on the CPU
    unseen (Ray forwards a process's stderr to the driver's)."""
    if want_gpu and torch.cuda.is_available():
        # fp32 matmuls in TF32 on Ampere and later, as cuDNN's convolutions by default
        torch.set_float32_matmul_precision("high")
        return torch.device("cuda")
    if want_gpu:
        print(
            f"rltrain: {who} was given a GPU, but torch {torch.__version__} sees no CUDA device "
            "in its process; it trains on the CPU",
            file=sys.stderr,
        )
    return torch.device("cpu")


def warm_gpu() -> threading.Thread | None:
    """Set up the CUDA context in a thread, now, while the trainer probes the env and starts
    its actors: the first use of CUDA in a process takes seconds (the driver, the context,
    the libraries' handles), and a learner, the shards and the batched policy all wait for
    it otherwise, in line, before the first actor's step (the GPU issue: 64.6 s to the first
    env step on a 16-core box). None where there is no GPU."""
    if not torch.cuda.is_available():
        return None
    thread = threading.Thread(
        target=lambda: torch.zeros(1, device="cuda"), name="rltrain-cuda-init", daemon=True
    )
    thread.start()
    return thread


def loss_spec(cfg: TrainConfig, progress: float = 0.0) -> LossSpec:
    """The loss coefficients of ``cfg.algo`` at ``progress`` of the schedules."""
    a, p = cfg.algo, cfg.ppo
    ppo = cfg.algo_spec.clipped
    return LossSpec(
        value_coef=a.value_coef,
        entropy_coef=linear(a.entropy_coef, cfg.schedule.entropy_end, progress),
        clip=p.clip if ppo else 0.0,
        dual_clip=p.dual_clip if ppo else 0.0,
        value_clip=p.value_clip if ppo else 0.0,
        kl_coef=p.kl_coef if ppo else 0.0,
        normalize_advantages=p.normalize_advantages and ppo,
        reduction=a.loss_reduction,
    )


@dataclasses.dataclass(frozen=True)
class Gradient:
    """One minibatch's flat gradient [P] (the learner's device), its loss terms and the
    samples it covers."""

    values: torch.Tensor
    loss: LossStats
    samples: int


class Learner:
    """Computes the configured loss on a batch of rollouts; flat gradients come out."""

    def __init__(
        self,
        cfg: TrainConfig,
        obs_shape: tuple[int, ...],
        actions: ActionSpace | int,
        gpu: bool = False,
        learner_id: int = 0,
        threads: int = 0,
    ) -> None:
        """``actions``: the env's action space (an int n: Discrete(n)); ``threads``: torch
        threads (0: runtime.learner_threads, else threads_per_worker)."""
        import_env_modules(cfg.env.imports)  # a learner process makes no env: they may register
        r = cfg.runtime
        torch.set_num_threads(threads or r.learner_threads or r.threads_per_worker)
        self.cfg = cfg
        self.device = pick_device(gpu, f"learner {learner_id}")
        self.learner_id = learner_id
        self.params: Params | None = None  # from the last exchange: the next step starts here
        build = policy_builder(cfg)
        self.model = build(cfg.model.kind, obs_shape, actions, cfg.model.hidden)
        self.dist = distribution(actions)
        to_device(self.model, self.device, cfg.model.precision)
        train_layout(self.model)
        self.spec = loss_spec(cfg)
        self.timer = PhaseTimer("learner")  # a worker replaces it with its own
        # minibatch shuffles: seeded per learner (worker i uses seed + i)
        self.generator = torch.Generator().manual_seed(cfg.seed + 7919 * (learner_id + 1))

    def load(self, params: Params, norm: bool = True) -> None:
        """Take pulled parameters; ``norm``: also their normalisation statistics (held fixed
        during the minibatches of one batch, so the inputs do not shift under PPO's ratio)."""
        load_params(self.model, params, self.device)
        if norm:
            self.model.set_norm(params.norm)

    def set_progress(self, progress: float) -> None:
        """Where the schedules stand (the entropy coefficient's)."""
        self.spec = loss_spec(self.cfg, progress)

    # --- targets ---------------------------------------------------------------------------

    def forward_rollout(
        self, r: Rollout, obs: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # [T, B, A], [T+1, B], [K]
        """Logits of the T acting steps, values of all T+1 observations and of the final
        observations of truncated episodes, in one forward pass (``obs``: ``r.obs`` already
        on the learner's device)."""
        T, B = r.actions.shape[:2]
        x = (r.obs.to(self.device) if obs is None else obs).flatten(0, 1)
        K = len(r.final_at)
        if K:
            x = torch.cat([x, r.final_obs.to(self.device)])
        logits, values = self.model(x)  # [(T+1) B + K, A], [(T+1) B + K]
        logits = logits[: (T + 1) * B].view(T + 1, B, -1)[:T]
        return logits, values[: (T + 1) * B].view(T + 1, B), values[(T + 1) * B :]

    @torch.no_grad()
    def targets(
        self,
        r: Rollout,
        logits: torch.Tensor,  # [T, B, A] the learner's policy
        values: torch.Tensor,  # [T+1, B]
        final_values: torch.Tensor,  # [K]
    ) -> tuple[torch.Tensor, torch.Tensor]:  # [T, B] value targets, [T, B] advantages
        """The algorithm's targets (its spec's: V-trace for impala/appo, lambda-returns / GAE
        for a3c/a2c/ppo and for impala/appo with ``impala.correction: none``)."""
        a, d = self.cfg.algo, self.device
        T = r.actions.shape[0]
        actions = r.actions.to(d)
        inputs = TargetInputs(
            log_probs=lambda: (
                self.dist.log_prob(r.behaviour_logits.to(d), actions),
                self.dist.log_prob(logits, actions),
            ),
            rewards=r.rewards.to(d),
            discounts=r.discounts(a.gamma).to(d),
            values=values[:T],
            next_values=next_state_values(values, final_values, r.final_at.to(d)),
            continues=r.continues().to(d),
        )
        return self.cfg.algo_spec.targets(inputs, self.cfg)

    # --- gradients -------------------------------------------------------------------------

    def gradients(self, r: Rollout) -> Iterator[Gradient]:
        """The gradients of one batch, one per minibatch, each at the parameters loaded when
        it is asked for: the caller pushes each one and loads what comes back in between."""
        if not self.cfg.algo_spec.clipped:
            yield self._one_pass(r)
            return
        yield from self._minibatches(r)

    def _one_pass(self, r: Rollout) -> Gradient:
        """a3c/a2c/impala: targets from the same forward pass (detached), one gradient."""
        d = self.device
        logits, values, final_values = self.forward_rollout(r)
        targets, adv = self.targets(r, logits.detach(), values.detach(), final_values.detach())
        lag = self.lag_kl(r, logits.detach())
        loss = actor_critic_loss(
            logits.flatten(0, 1),
            r.actions.to(d).flatten(0, 1),
            values[:-1].flatten(),
            targets.flatten(),
            adv.flatten(),
            self.spec,
            behaviour_logits=r.behaviour_logits.to(d).flatten(0, 1),
            dist=self.dist,
        )
        return self._gradient(loss, r.env_steps, lag)

    def _minibatches(self, r: Rollout) -> Iterator[Gradient]:
        """ppo/appo: targets once at the batch's start, then epochs x shuffled minibatches.

        The clipped ratio is pi / pi_old, with pi_old the learner's policy at the batch's
        start (PPO's "old" policy, Schulman et al. 2017), not the actors' mu: under appo mu
        lags the learner by a batch or two, and a trust region around mu starts most samples
        outside it (their gradient zero, or unbounded for a negative advantage: measured on
        Pong, 4 epochs, the value loss and gradient norm blew up and the entropy fell to 0).
        The gap between mu and pi_old is V-trace's truncated weight min(1, pi_old / mu) in
        the advantages: the decoupled objective of Hilton et al. 2022 ("Batch size-invariance
        for policy optimization"), as RLlib's APPO does with its target network.
        """
        p, d = self.cfg.ppo, self.device
        T, B = r.actions.shape[:2]
        on_device = r.obs.to(d)  # [T+1, B, *obs], copied to a GPU once for all the passes
        with torch.no_grad():
            logits, values, final_values = self.forward_rollout(r, on_device)
        targets, adv = self.targets(r, logits, values, final_values)
        lag = self.lag_kl(r, logits)
        obs = on_device[:T].flatten(0, 1)  # [N, *obs]
        actions = r.actions.to(d).flatten(0, 1)  # [N] or [N, n]
        old = logits.flatten(0, 1)  # [N, A] pi_old
        old_values, targets, adv = values[:T].flatten(), targets.flatten(), adv.flatten()
        n = T * B
        size = -(-n // p.minibatches)  # ceil: every sample is in one minibatch per epoch
        for _ in range(p.epochs):
            for idx in torch.randperm(n, generator=self.generator).to(d).split(size):
                lg, v = self.model(obs[idx])
                loss = actor_critic_loss(
                    lg,
                    actions[idx],
                    v,
                    targets[idx],
                    adv[idx],
                    self.spec,
                    behaviour_logits=old[idx],
                    old_values=old_values[idx],
                    dist=self.dist,
                )
                yield self._gradient(loss, len(idx), lag)

    @torch.no_grad()
    def lag_kl(self, r: Rollout, logits: torch.Tensor) -> float | None:
        """impala/appo: mean KL(mu || pi) of the actors' policy mu against the learner's at the
        batch's start (``logits`` [T, B, P]): how far the actors lag, the gap V-trace corrects
        (None for the workers of a3c/a2c/ppo, which act with the policy they learn)."""
        if not self.cfg.algo_spec.lags:
            return None
        return float(self.dist.kl(r.behaviour_logits.to(self.device), logits).mean())

    def _gradient(self, loss: LossTerms, samples: int, lag: float | None = None) -> Gradient:
        self.model.zero_grad(set_to_none=True)
        loss.total.backward()
        grad, norm = clipped_flat_grad(self.model, self.cfg.algo.max_grad_norm)
        policy, value, entropy, kl, clip_fraction = loss.floats()  # after the sync .cpu() made
        stats = LossStats(
            norm, policy, value, entropy, kl=kl, clip_fraction=clip_fraction, lag_kl=lag
        )
        return Gradient(grad, stats, samples)

    # --- the IMPALA/APPO learner step -------------------------------------------------------

    def learn(self, server: Server, progress: float, *rollouts: Rollout) -> WorkStats:
        """One learner step: the latest parameters, the loss on the batch, its pushes
        (``progress``: where the schedules stand, in [0, 1])."""
        t = time.perf_counter()
        self.timer.begin()
        params = self.params
        if params is None:
            with self.timer.phase("pull"):
                params = server.pull()
        with self.timer.phase("collate"):
            self.load(params)
            self.set_progress(progress)
            batch = stack(list(rollouts))
        stats = WorkStats()
        stats.add_rollout(batch)  # with the actors' phases
        barrier = waits_at_barrier(self.cfg)
        self.params = push_gradients(
            self, server, batch, params.version, self.learner_id, stats, barrier, epoch=params.epoch
        )
        perf.merge(stats.phases, self.timer.take())
        stats.seconds = time.perf_counter() - t
        return stats


def push_gradients(
    learner: Learner,
    server: Server,
    batch: Rollout,
    version: int,
    worker_id: int,
    stats: WorkStats,
    barrier: bool = False,
    until: int | None = None,
    epoch: int = 0,
) -> Params:
    """Push each gradient of ``batch`` (the first computed at parameters of ``version``) and
    load the parameters each exchange returns; returns the last of them.

    ``barrier``: wait at the server for the next version after each push (a2c, ppo). Each
    gradient is computed at the parameters the previous exchange returned, unless
    ``ppo.overlap_push`` (and no barrier): then the next gradient is computed while the
    previous exchange is in flight, at the parameters before it (one step of staleness), so
    the round trip costs no learner time (measured on Pong, 2 cores: a quarter of it), but
    PPO's epochs became unstable (see the option).
    ``until``: stop once the server reaches this version (a barrier round's end); ``epoch``:
    that of the parameters at ``version`` (``GradUpdate.epoch``). The batch's
    normalisation statistics travel with its first push; the model keeps the statistics it
    started with until the batch is done, then takes the newest.
    """
    norm = batch.norm
    timeout = learner.cfg.server.barrier_timeout_s
    overlap = learner.cfg.ppo.overlap_push and not barrier
    timer = learner.timer
    params: Params | None = None
    pending: Callable[[], tuple[PushResult, Params]] | None = None
    gradients = learner.gradients(batch)

    def finish() -> Params:
        assert pending is not None
        with timer.phase("exchange"):
            result, p = pending()
        record_push(stats, result)
        with timer.phase("collate"):
            learner.load(p, norm=False)
        return p

    while True:
        at, at_epoch = version, epoch  # the parameters the next gradient is computed at
        with timer.phase("learn"):
            g = next(gradients, None)
        if pending is not None:  # overlap_push: the exchange that overlapped it
            params, pending = finish(), None
            version, epoch = params.version, params.epoch
        if g is None:
            break
        loss = g.loss.terms()
        finite = math.isfinite(g.loss.grad_norm)  # the shard need not look again
        update = GradUpdate(
            worker_id, at, g.values, g.samples, loss, norm, epoch=at_epoch, finite=finite
        )
        norm = None
        with timer.phase("exchange"):
            pending = server.exchange_begin(update, at + 1 if barrier else 0, timeout)
        stats.losses.append(g.loss)
        if not overlap:
            params, pending = finish(), None
            version, epoch = params.version, params.epoch
            if until is not None and params.version >= until:
                break
    assert params is not None, "a batch has at least one gradient"
    learner.model.set_norm(params.norm)
    return params


def record_push(stats: WorkStats, result: PushResult) -> None:
    stats.updates += 1
    if result.status in ("applied", "accumulated"):
        stats.applied += 1
        stats.staleness.append(result.staleness)
    elif result.status == "dropped":
        stats.dropped += 1
    else:
        stats.rejected += 1
