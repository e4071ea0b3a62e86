"""A learner's pushes: each gradient of a batch exchanged with the parameter server.

A push is an exchange with the server, and every minibatch step of PPO is a server step:
behind a barrier the next minibatch's gradient is computed at the parameters the last
exchange returned; without one, while that exchange is in flight (see
:func:`push_gradients`). The batch's statistics are read from the device once, at its end.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Protocol, cast

from rltrain.ps.server import LocalServer, Server
from rltrain.records import GradUpdate, Params, PushResult
from rltrain.rl.rollout import Gradient, Rollout, WorkStats, read_losses

if TYPE_CHECKING:
    import torch

    from rltrain.perf import PhaseTimer
    from rltrain.rl.algos.models import ActorCritic
    from rltrain.rl.config import TrainConfig


def round_end(version: int, per_call: int) -> int:
    """The version a call of ``per_call`` server steps ends at behind a barrier: the next
    multiple of ``per_call`` after ``version``, so that every pusher's call ends there together,
    one that joined in the middle (restarted) too, and none waits at a barrier for one that
    has already returned (a2c's workers, dqn's learners)."""
    return (version // per_call + 1) * per_call


class Pusher(Protocol):
    """What the exchange needs of a learner (:class:`rltrain.rl.learner.Learner` is one)."""

    cfg: TrainConfig
    timer: PhaseTimer
    model: ActorCritic
    live: torch.Tensor | None
    """The shard's buffer the model's parameters view (None: a copy of its own)."""

    def gradients(self, r: Rollout) -> Iterator[Gradient]: ...

    def load(self, params: Params, norm: bool = True) -> None: ...


def push_gradients(
    learner: Pusher,
    server: Server,
    batch: Rollout,
    version: int,
    worker_id: int,
    stats: WorkStats,
    barrier: bool = False,
    until: int | None = None,
    restore_epoch: int = 0,
) -> Params:
    """Push each gradient of ``batch`` (the first computed at parameters of ``version``) and
    load the parameters each exchange returns; returns the last of them.

    ``barrier``: wait at the server for the next version after each push (a2c, ppo). Each
    gradient is computed at the parameters the previous exchange returned, unless
    ``ppo.overlap_push`` (and no barrier): then the next gradient is computed while the
    previous exchange is in flight, at the parameters before it (one step of staleness), so
    the round trip costs no learner time, but PPO's epochs become unstable (see the
    option).
    ``until``: stop once the server reaches this version (a barrier round's end); ``restore_epoch``:
    that of the parameters at ``version`` (``GradUpdate.restore_epoch``). The batch's
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
    exchange = server.exchange_begin
    if learner.live is not None:  # the model views the shard's buffer: nothing to copy back
        exchange = functools.partial(cast(LocalServer, server).exchange_begin, live=True)
    pushed: list[Gradient] = []
    results: list[PushResult] = []

    def finish() -> Params:
        assert pending is not None
        with timer.phase("exchange"):
            result, p = pending()
        record_push(stats, result)
        results.append(result)
        with timer.phase("collate"):
            learner.load(p, norm=False)
        return p

    while True:
        at, at_restore = version, restore_epoch  # the parameters the next gradient is computed at
        with timer.phase("learn"):
            g = next(gradients, None)
        if pending is not None:  # overlap_push: the exchange that overlapped it
            params, pending = finish(), None
            version, restore_epoch = params.version, params.restore_epoch
        if g is None:
            break
        # the verdict travels unread: a shard beside the learner steps with it on the device
        update = GradUpdate(
            worker_id, at, g.values, g.samples, {}, norm, restore_epoch=at_restore, finite=g.finite
        )
        norm = None
        with timer.phase("exchange"):
            pending = exchange(update, at + 1 if barrier else 0, timeout)
        pushed.append(g)
        if not overlap:
            params, pending = finish(), None
            version, restore_epoch = params.version, params.restore_epoch
            if until is not None and params.version >= until:
                break
    assert params is not None, "a batch has at least one gradient"
    with timer.phase("learn"):
        losses = read_losses(pushed)  # the batch's one wait for the device
    stats.losses.extend(losses)
    for loss, result in zip(losses, results, strict=True):
        if result.deferred and not math.isfinite(loss.grad_norm):
            refused_on_device(stats, result)
    learner.model.set_norm(params.norm)
    stats.version = params.version
    return params


def refused_on_device(stats: WorkStats, result: PushResult) -> None:
    """A push counted as applied whose unread verdict said non-finite: the shard's step was a
    no-op (:attr:`PushResult.deferred`), so it was rejected."""
    stats.applied -= 1
    stats.rejected += 1
    stats.staleness.remove(result.staleness)
    stats.lr_scales.remove(result.lr_scale)


def record_push(stats: WorkStats, result: PushResult) -> None:
    stats.updates += 1
    if result.status in ("applied", "accumulated"):
        stats.applied += 1
        stats.staleness.append(result.staleness)
        stats.lr_scales.append(result.lr_scale)
    elif result.status == "dropped":
        stats.dropped += 1
    else:
        stats.rejected += 1
