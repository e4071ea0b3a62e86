"""One policy that acts for every actor: their observations batched into one forward pass.

With ``runtime.inference: server`` (``auto`` on a GPU learner's machine), the actors of
impala and appo step their environments only; each group of observations goes to this
object in the trainer's process, which runs the policy on the learners' device for whatever
observations are waiting, from every actor at once (IMPALA's dynamic batching, Espeholt et
al. 2018; Sample Factory's policy workers, Petrenko et al. 2020). The policy takes the
server's parameters by version: once a learner's batch of updates has been applied since
those it holds (``ppo.epochs`` x ``ppo.minibatches`` versions for ppo/appo, one for
impala), which is as far as an actor's own copy lags with ``server.n_fetch: 1``. Pulling
at every version copied the 6.8 MB Nature CNN 61 times a second on an H100 (issue 36: 243 GB
in 300 s). Its rollouts then carry the oldest version that acted in them; V-trace and PPO's
ratio to the learner's batch-start policy correct for the lag as for an actor's own copy.

There is no batching thread: the first caller that finds no batch running takes every
request waiting, runs it, and hands each caller its rows; callers that arrive meanwhile form
the next batch. On the process runtime the callers are the trainer's serving threads, one
per actor process; on the thread runtime, the actors themselves.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import torch

from rltrain.envs import ActionSpace
from rltrain.normalize import NormStats
from rltrain.records import Params
from rltrain.rl.actor import load_params, policy_builder
from rltrain.rl.config import TrainConfig
from rltrain.rl.distributions import distribution
from rltrain.rl.models import to_device

Acted = tuple[torch.Tensor, torch.Tensor, int]
"""Actions [B] (or [B, n]), the behaviour logits [B, A] (CPU) and the version that acted."""


@dataclass
class _Request:
    obs: torch.Tensor  # [B, *obs]
    result: Acted | BaseException | None = None


class PolicyServer:
    """The policy of every actor, on ``device``, batched across the callers of :meth:`act`."""

    service_name = "policy"  # what an actor process's proxy calls it (the process runtime)

    def __init__(
        self,
        cfg: TrainConfig,
        obs_shape: tuple[int, ...],
        actions: ActionSpace | int,
        server: object,
        device: str | torch.device = "cpu",
    ) -> None:
        """``server``: the parameter server to pull from (``pull(have)``)."""
        self.device = torch.device(device)
        self.model = policy_builder(cfg)(cfg.model.kind, obs_shape, actions, cfg.model.hidden)
        to_device(self.model, self.device, cfg.model.precision)
        self.model.eval()
        self.dist = distribution(actions)
        self.server = server
        self.stride = cfg.ppo.epochs * cfg.ppo.minibatches if cfg.algo_spec.clipped else 1
        self.params: Params | None = None
        self.generator = torch.Generator().manual_seed(cfg.seed + 104729)
        self._cond = threading.Condition()
        self._pending: list[_Request] = []
        self._busy = False
        self.batches = 0  # forward passes run
        self.rows = 0  # observations acted on (rows / batches: how well the actors coincide)

    def act(self, obs: torch.Tensor) -> Acted:
        """Sampled actions and their logits for ``obs`` [B, *obs], and the version that acted.
        Waits for the batch it joins (the one after any batch running now)."""
        req = _Request(obs)
        with self._cond:
            self._pending.append(req)
            while req.result is None:
                if self._busy:
                    self._cond.wait()
                    continue
                self._busy = True
                batch, self._pending = self._pending, []
                self._cond.release()
                try:
                    self._run(batch)
                finally:
                    self._cond.acquire()
                    self._busy = False
                    self._cond.notify_all()
        if isinstance(req.result, BaseException):
            raise req.result
        return req.result

    def norm(self) -> NormStats | None:
        """The normalisation statistics of the parameters acting now (an actor scales its
        rewards by them)."""
        return None if self.params is None else self.params.norm

    @torch.no_grad()
    def _run(self, batch: list[_Request]) -> None:
        try:
            version = self._refresh()
            sizes = [len(r.obs) for r in batch]
            x = torch.cat([r.obs for r in batch]).to(self.device, non_blocking=True)
            logits, _ = self.model(x)  # [sum B, A]
            logits = logits.float().cpu()
            actions = self.dist.sample(logits, self.generator)  # [sum B] or [sum B, n]
            for r, a, lg in zip(batch, actions.split(sizes), logits.split(sizes), strict=True):
                r.result = (a, lg, version)
            self.batches += 1
            self.rows += sum(sizes)
        except BaseException as e:  # every caller of this batch hears of it, not just one
            for r in batch:
                r.result = e

    def _refresh(self) -> int:
        """Take the server's newest parameters once ``stride`` versions newer than those held
        (a version number first: a cheap look); the version acting."""
        if self.params is not None and self.stride > 1:
            health = self.server.health()  # type: ignore[attr-defined]
            versions = [h[0] for h in health if h is not None]
            if versions and min(versions) - self.params.version < self.stride:
                return self.params.version
        p = self.server.pull(self.params)  # type: ignore[attr-defined]
        if p is not self.params:
            load_params(self.model, p, self.device)
            self.model.set_norm(p.norm)
            self.params = p
        return p.version
