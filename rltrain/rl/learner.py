"""Learners: turn rollouts into gradients and push them to the parameter server.

One :class:`Learner` computes every actor-critic algorithm's gradients: it calls the
algorithm's value estimator and loss (:mod:`rltrain.rl.algos`; ``algo.name``), in one pass
over each batch (a3c, a2c, impala: one push per batch) or, for a minibatched loss (ppo, appo),
``epochs`` passes of ``minibatches`` pushes.

Each gradient is exchanged with the server by :func:`rltrain.rl.exchange.push_gradients`. The
workers that act and learn in one process (a3c, a2c, ppo) are in :mod:`rltrain.rl.worker`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import torch

from rltrain import perf
from rltrain.envs import ActionSpace
from rltrain.envs.user import import_env_modules
from rltrain.perf import PhaseTimer
from rltrain.ps.server import LocalServer, Server
from rltrain.records import Params
from rltrain.rl.actor import load_params, policy_builder
from rltrain.rl.algos import LossBatch
from rltrain.rl.algos.distributions import distribution
from rltrain.rl.algos.estimators import TargetInputs
from rltrain.rl.algos.losses import LossTerms, check_estimate, check_terms, next_state_values
from rltrain.rl.algos.models import bind_flat, parameters_to_come, unbind_flat
from rltrain.rl.algos.torsos import to_device, train_layout
from rltrain.rl.config import TrainConfig, waits_at_barrier
from rltrain.rl.device import compiled, pick_device
from rltrain.rl.exchange import push_gradients
from rltrain.rl.rollout import Gradient, Rollout, WorkStats, stack


def grad_of(p: torch.Tensor) -> torch.Tensor:
    """A parameter's gradient; zeros for one the loss does not reach (a policy-only loss, as
    REINFORCE without a baseline, leaves the critic's None: explore108 found a crash)."""
    return p.grad if p.grad is not None else torch.zeros_like(p)


def clipped_flat_grad(
    net: torch.nn.Module, max_norm: float
) -> tuple[torch.Tensor, torch.Tensor]:  # [P], []
    """Clip the global gradient norm (0 = no clipping); the flat gradient [P] on the model's
    device (a shard on that device steps with it there; a transport copies it as it must) and
    the norm before clipping, a tensor there too (reading it would wait for the backward).

    As ``clip_grad_norm_`` (Pascanu et al. 2013: scaled to ``max_norm`` where the norm is
    above it) but on the one flat vector the push needs anyway: a cat, a norm and a scale,
    where ``clip_grad_norm_`` takes a norm per tensor, scales each in place, then the cat
    copies them (2.4x the time on a CPU for MuJoCo's MLP; fewer launches on a GPU)."""
    flat = torch.cat([grad_of(p).reshape(-1) for p in net.parameters()])  # [P]
    norm = torch.linalg.vector_norm(flat)  # []
    if max_norm > 0:
        flat.mul_((max_norm / (norm + 1e-6)).clamp(max=1.0))  # clip_grad_norm_'s coefficient
    return flat, norm


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
        import_env_modules(cfg.imports)  # a learner process makes no env: they may register
        r = cfg.runtime
        torch.set_num_threads(threads or r.learner_threads or r.threads_per_worker)
        self.cfg = cfg
        self.device = pick_device(gpu, f"learner {learner_id}")
        self.learner_id = learner_id
        self.params: Params | None = None  # from the last exchange: the next step starts here
        self.live: torch.Tensor | None = None  # the shard's buffer the parameters view (bind)
        build = policy_builder(cfg)
        with parameters_to_come():  # bound to a shard's buffer, or pulled, before it learns
            self.model = build(cfg.model.kind, obs_shape, actions, cfg.model.hidden)
        self.dist = distribution(actions)
        self.space = actions if isinstance(actions, ActionSpace) and actions.continuous else None
        to_device(self.model, self.device, cfg.model.precision)
        train_layout(self.model)
        self.loss = cfg.algo_spec.make_loss(cfg)
        # one minibatch's forward pass and loss (model.compile: fused by torch.compile)
        self.minibatch_loss = self._minibatch_loss
        if cfg.model.compile:
            self.minibatch_loss = compiled(self._minibatch_loss, f"learner {learner_id}")
        self.estimator = cfg.algo_spec.make_estimator(cfg)
        self.timer = PhaseTimer("learner")  # a worker replaces it with its own
        # minibatch shuffles: seeded per learner (worker i uses seed + i)
        self.generator = torch.Generator().manual_seed(cfg.seed + 7919 * (learner_id + 1))
        self.epochs_run = 0  # of the last batch (ppo.target_kl may end its epochs early)
        self._stacks: torch.Tensor | None = None  # young stacks' buffer (observations)
        self.stopping = False  # the run is stopping: a batch's minibatches end (interrupt)

    def load(self, params: Params, norm: bool = True) -> None:
        """Take pulled parameters; ``norm``: also their normalisation statistics (held fixed
        during the minibatches of one batch, so the inputs do not shift under PPO's ratio).
        A model bound to its shard's buffer has them already (:meth:`bind`)."""
        if self.live is None:
            load_params(self.model, params, self.device)
        if norm:
            self.model.set_norm(params.norm)

    def bind(self, server: Server) -> None:
        """Beside its shard, on its device, as its only pusher: make the model's parameters
        views of the shard's own buffer (docs/architecture.md, "Runtimes"), so that a push
        is the optimizer's step alone and a pull copies nothing, where otherwise every push
        is followed by a pull's copy and a load into the model.
        Undone where that no longer holds (a second learner joined). Not under
        ``ppo.overlap_push``, whose next gradient is computed at the parameters before the
        push in flight, nor for channels-last weights (the flat vector's order differs)."""
        live = None
        if isinstance(server, LocalServer) and not self.cfg.ppo.overlap_push:
            live = server.live_values(self.device)
        if live is not None and self.live is not None and live.data_ptr() == self.live.data_ptr():
            return
        if self.live is not None:
            unbind_flat(self.model)
            self.live = None
        if live is not None and bind_flat(self.model, live):
            self.live = live

    def interrupt(self) -> None:
        """The run is stopping (its stop met, or Ctrl-C): end the batch being learned after
        its minibatch in progress, rather than after all its epochs, so that the stop comes
        within a minibatch and the learn returns, counting the pushes the server applied.
        From another thread, while :meth:`learn` runs (the thread runtime's kill calls it
        too: :class:`~rltrain.runtime.local.Interruptible`); it holds for the session."""
        self.stopping = True

    def set_progress(self, progress: float) -> None:
        """Where the schedules stand (the entropy coefficient's)."""
        self.loss.set_progress(progress)

    # --- targets ---------------------------------------------------------------------------

    def forward_rollout(
        self, r: Rollout, obs: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # [T, B, A], [T+1, B], [K]
        """Logits of the T acting steps, values of all T+1 observations and of the final
        observations of truncated episodes, in one forward pass (``obs``: ``r``'s
        observations already on the learner's device)."""
        T, B = r.actions.shape[:2]
        x = (self.observations(r) if obs is None else obs).flatten(0, 1)
        K = len(r.final_at)
        if K:
            x = torch.cat([x, r.final_obs.to(self.device)])
        logits, values = self.model(x)  # [(T+1) B + K, A], [(T+1) B + K]
        logits = logits[: (T + 1) * B].view(T + 1, B, -1)[:T]
        return logits, values[: (T + 1) * B].view(T + 1, B), values[(T + 1) * B :]

    def observations(self, r: Rollout) -> torch.Tensor:  # [T+1, B, *obs] on the device
        """``r``'s observations on the learner's device; a new game's stacks restacked into a
        buffer kept from one batch to the next (rltrain.rl.frames.blank_older)."""
        r = r.to(self.device)
        if r.blank is None:
            return r.observations()
        out = r.observations(self._stacks)
        self._stacks = out
        return out

    @torch.no_grad()
    def targets(
        self,
        r: Rollout,
        logits: torch.Tensor,  # [T, B, A] the learner's policy
        values: torch.Tensor,  # [T+1, B]
        final_values: torch.Tensor,  # [K]
    ) -> tuple[torch.Tensor, torch.Tensor]:  # [T, B] value targets, [T, B] advantages
        """The algorithm's value estimator's targets and advantages (V-trace for impala/appo,
        GAE for a3c/a2c/ppo and for impala/appo with ``impala.correction: none``)."""
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
        out = self.estimator(inputs)
        check_estimate(out, tuple(r.rewards.shape), a.name)  # (a user's estimator: one line)
        return out

    # --- gradients -------------------------------------------------------------------------

    def gradients(self, r: Rollout) -> Iterator[Gradient]:
        """The gradients of one batch, one per minibatch, each at the parameters loaded when
        it is asked for: the caller pushes each one and loads what comes back in between."""
        r = r.to(self.device)  # every copy queued at once, none waited for
        if not self.loss.minibatched:
            yield self._one_pass(r)
            return
        yield from self._minibatches(r)

    def _one_pass(self, r: Rollout) -> Gradient:
        """One pass (a3c/a2c/impala): targets from the same forward pass (detached), one
        gradient; the reference policy is the actors'."""
        d = self.device
        logits, values, final_values = self.forward_rollout(r)
        targets, adv = self.targets(r, logits.detach(), values.detach(), final_values.detach())
        lag = self.lag_kl(r, logits.detach())
        loss = self.loss(
            LossBatch(
                logits.flatten(0, 1),
                r.actions.to(d).flatten(0, 1),
                values[:-1].flatten(),
                targets.flatten(),
                adv.flatten(),
                r.behaviour_logits.to(d).flatten(0, 1),
                values[:-1].detach().flatten(),
                self.dist,
            )
        )
        return self._gradient(loss, r.env_steps, lag)

    def _minibatches(self, r: Rollout) -> Iterator[Gradient]:
        """Minibatched (ppo/appo): targets once at the batch's start, then epochs x shuffled
        minibatches.

        The clipped ratio is pi / pi_old, with pi_old the learner's policy at the batch's
        start (PPO's "old" policy, Schulman et al. 2017), not the actors' mu: under appo mu
        lags the learner by a batch or two, and a trust region around mu starts most samples
        outside it (their gradient zero, or unbounded for a negative advantage), and the
        value loss and gradient norm blow up while the entropy collapses.
        The gap between mu and pi_old is V-trace's truncated weight min(1, pi_old / mu) in
        the advantages: the decoupled objective of Hilton et al. 2022 ("Batch size-invariance
        for policy optimization"), as RLlib's APPO does with its target network.
        """
        epochs, minibatches, d = self.loss.epochs, self.loss.minibatches, self.device
        T, B = r.actions.shape[:2]
        on_device = self.observations(r)  # [T+1, B, *obs], on a GPU once for all the passes
        with torch.no_grad():
            logits, values, final_values = self.forward_rollout(r, on_device)
        targets, adv = self.targets(r, logits, values, final_values)
        lag = self.lag_kl(r, logits)
        obs = on_device[:T].flatten(0, 1)  # [N, *obs]
        actions = r.actions.to(d).flatten(0, 1)  # [N] or [N, n]
        old = logits.flatten(0, 1)  # [N, A] pi_old
        old_values, targets, adv = values[:T].flatten(), targets.flatten(), adv.flatten()
        n = T * B
        orders = [torch.randperm(n, generator=self.generator) for _ in range(epochs)]
        stop_kl = 1.5 * self.loss.target_kl * minibatches  # (summed over an epoch's minibatches)
        self.epochs_run = 0
        for order in torch.stack(orders).to(d, non_blocking=True):  # [epochs, N]: one copy
            kl = torch.zeros((), device=d) if stop_kl > 0 else None  # none made when off
            # exactly ppo.minibatches per epoch, sizes within one of each other, every sample
            # in one (15 samples in 6: 3, 3, 3, 2, 2, 2; ceil-sized chunks made 5)
            for idx in order.tensor_split(minibatches):
                loss = self.minibatch_loss(  # (index_select: a row at a time, where [idx]
                    # went element by element: 0.2 ms for Pong's 256 stacks on a CPU, not 2.7)
                    obs.index_select(0, idx),
                    *(x[idx] for x in (actions, targets, adv, old, old_values)),
                )
                if kl is not None:  # KL(pi_old || pi) at this minibatch's parameters
                    kl += loss.parts[3]
                yield self._gradient(loss, len(idx), lag)
                if self.stopping:  # the run stops: the pushes so far are the batch's, counted
                    self.epochs_run += 1  # (this one cut short)
                    return
            self.epochs_run += 1
            if kl is not None and float(kl) > stop_kl:  # ppo.target_kl: the batch moved it enough
                return

    def _minibatch_loss(
        self,
        obs: torch.Tensor,  # [M, *obs]
        actions: torch.Tensor,  # [M] or [M, n]
        targets: torch.Tensor,  # [M]
        adv: torch.Tensor,  # [M]
        old: torch.Tensor,  # [M, P] pi_old
        old_values: torch.Tensor,  # [M]
    ) -> LossTerms:
        logits, values = self.model(obs)
        batch = LossBatch(logits, actions, values, targets, adv, old, old_values, self.dist)
        return self.loss(batch)

    @torch.no_grad()
    def lag_kl(self, r: Rollout, logits: torch.Tensor) -> torch.Tensor:  # []
        """impala/appo: mean KL(mu || pi) of the actors' policy mu against the learner's at the
        batch's start (``logits`` [T, B, P]): how far the actors lag, the gap V-trace corrects
        (0, and not reported, for the workers of a3c/a2c/ppo: they act with the policy they
        learn)."""
        if not self.cfg.algo_spec.lags:
            return torch.zeros((), device=self.device)
        kl = self.dist.kl(r.behaviour_logits.to(self.device), logits).mean().float()
        return kl.clamp_min(0.0)  # (rounding made it -9e-11, explore88)

    def _gradient(self, loss: LossTerms, samples: int, lag: torch.Tensor) -> Gradient:
        check_terms(loss, self.cfg.algo.name)
        self.model.zero_grad(set_to_none=True)
        loss.total.backward()
        grad, norm = clipped_flat_grad(self.model, self.cfg.algo.max_grad_norm)
        log_std = self.model.log_std  # a Box policy's (explore92: a falling std, unseen)
        std = log_std.detach().exp().mean() if log_std is not None else torch.zeros_like(lag)
        stats = torch.cat([norm.float().reshape(1), loss.parts, lag.reshape(1), std.reshape(1)])
        lags = self.cfg.algo_spec.lags
        return Gradient(grad, stats, samples, lags, log_std is not None, loss.absent)

    def note_clipped(self, stats: WorkStats, r: Rollout) -> None:
        """A Box's share of the actions of ``r``, just added to ``stats``, that the action map
        clipped (``policy/actions_clipped``): the mean over the call's rollouts, by env steps.
        Called once ``r``'s pushes are done, whose statistics' read waited for the device: a
        rollout on a GPU is copied without a wait of its own (note89: it was not counted)."""
        if self.space is None or not stats.env_steps:
            return
        share, before = self.space.clipped(r.actions.cpu().numpy()), stats.env_steps - r.env_steps
        stats.clipped = (before * (stats.clipped or 0.0) + r.env_steps * share) / stats.env_steps

    # --- the IMPALA/APPO learner step -------------------------------------------------------

    def learn(self, server: Server, progress: float, *rollouts: Rollout) -> WorkStats:
        """One learner step: the latest parameters, the loss on the batch, its pushes
        (``progress``: where the schedules stand, in [0, 1])."""
        t = time.perf_counter()
        self.timer.begin()
        self.bind(server)
        params = self.params
        if params is None:
            with self.timer.phase("pull"):
                params = server.pull()
        with self.timer.phase("collate"):
            self.load(params)
            self.set_progress(progress)
            batch = stack(list(rollouts))
        stats = WorkStats(actor_lag=[max(0, params.version - batch.version)])
        stats.add_rollout(batch)  # with the actors' phases
        barrier = waits_at_barrier(self.cfg)
        self.params = push_gradients(
            self,
            server,
            batch,
            params.version,
            self.learner_id,
            stats,
            barrier,
            restore_epoch=params.restore_epoch,
        )
        self.note_clipped(stats, batch)  # (after the pushes' wait for the device)
        if self.loss.minibatched:
            stats.epochs = self.epochs_run
        perf.merge(stats.phases, self.timer.take())
        stats.seconds = time.perf_counter() - t
        return stats
