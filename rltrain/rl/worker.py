"""Workers that act and learn on their own rollouts: a3c, a2c, ppo (Mnih et al. 2016).

One process holds an :class:`~rltrain.rl.actor.Actor` and a :class:`~rltrain.rl.learner.Learner`
sharing one network: it acts for a rollout, computes its gradients and exchanges each with
the server (behind the server's barrier for a2c and ppo).
"""

from __future__ import annotations

import time

from rltrain.perf import PhaseTimer
from rltrain.ps.server import Server
from rltrain.rl.actor import Actor
from rltrain.rl.config import TrainConfig, waits_at_barrier
from rltrain.rl.exchange import push_gradients, round_end
from rltrain.rl.learner import Learner
from rltrain.rl.rollout import WorkStats


class Worker:
    """A worker that acts and learns on its own rollouts: a3c, a2c, ppo (Mnih et al. 2016).

    Under a barrier rule (``sync``, or ``soft_sync``; always for a2c and ppo) every worker waits
    for the others' gradients of the same version before its next step (ppo: after every
    minibatch, as DD-PPO averages every minibatch's gradients).
    """

    def __init__(self, cfg: TrainConfig, worker_id: int) -> None:
        self.cfg = cfg
        self.worker_id = worker_id
        self.actor = Actor(cfg, worker_id)
        env, threads = self.actor.env, cfg.runtime.threads_per_worker  # a worker, not a learner
        self.learner = Learner(cfg, env.obs_shape, env.action_space, threads=threads)
        self.timer = self.actor.timer = self.learner.timer = PhaseTimer("worker")
        self.learner.model = self.actor.model  # one network: acting and learning share it
        self.barrier = waits_at_barrier(cfg)
        self.steps_per_rollout = cfg.algo_spec.pushes(cfg)
        self.restore_epoch = 0  # of the parameters held (GradUpdate.restore_epoch)

    def work(self, server: Server, iterations: int, progress: float = 0.0) -> WorkStats:
        """``iterations`` x (rollout, its gradients, push + pull each); returns what happened.

        Under a barrier every call ends at the next version that is a multiple of the call's
        server steps, so that all workers finish a call together even when one joined in the
        middle (restarted after a crash): no worker is left waiting at a barrier for one that
        has already returned.
        """
        t = time.perf_counter()
        self.timer.begin()
        stats = WorkStats()
        if self.actor.version < 0:
            with self.timer.phase("pull"):
                pulled = server.pull()
                self.actor.load(pulled)
                self.restore_epoch = pulled.restore_epoch
        self.learner.set_progress(progress)
        per_call = iterations * self.steps_per_rollout
        target = round_end(self.actor.version, per_call)
        done = 0
        while (self.actor.version < target) if self.barrier else (done < iterations):
            if self.barrier and done >= iterations and stats.rejected == stats.updates:
                # every push of this call was refused (non-finite gradients): the version will
                # not reach the target, and the driver must see the refusals to stop a run
                # that diverged (the trainer's "diverged" stop), not wait here for good
                break
            rollout = self.actor.rollout()
            until = target if self.barrier else None
            params = push_gradients(
                self.learner,
                server,
                rollout,
                self.actor.version,
                self.worker_id,
                stats,
                self.barrier,
                until,
                self.restore_epoch,
            )
            self.restore_epoch = params.restore_epoch
            if params.version < self.actor.version:  # the shards were restored: the workers
                # whose calls failed were given new ones, aiming at the next multiple after
                # the restored version; this call ends there too, or it would wait for them
                target = round_end(params.version, per_call)
            self.actor.version = params.version
            self.actor.stats = params.norm if params.norm is not None else self.actor.stats
            stats.add_rollout(rollout)
            self.learner.note_clipped(stats, rollout)
            done += 1
        stats.phases = self.timer.take()
        stats.seconds = time.perf_counter() - t
        return stats
