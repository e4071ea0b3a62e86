"""Typed records passed between components (docs/architecture.md: Params, GradUpdate).

One vocabulary for both halves of the project: an RL learner and a supervised worker are the
same thing to the parameter server, something that pushes :class:`GradUpdate` records and
pulls :class:`Params`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import torch

from rltrain.names import LoggedStatus, PushStatus, Role, Verdict
from rltrain.normalize import NormStats

__all__ = ["LoggedStatus", "PushStatus", "Role", "Verdict"]  # and the records below


@dataclass(frozen=True)
class Params:
    """The flat parameter vector (or one shard of it) and its version.

    ``version`` is the number of optimizer steps the server has applied.
    """

    version: int
    values: torch.Tensor  # [P] float32
    norm: NormStats | None = None  # merged normalisation statistics (shard 0 holds them)
    restore_epoch: int = 0
    """The server's restores so far when these were read (see
    :attr:`GradUpdate.restore_epoch`)."""


class BatchId(NamedTuple):
    """Which minibatch a supervised gradient came from, and on which parameters.

    The worker's batch ``position`` of ``epoch`` (its order comes from its seed and the epoch),
    computed on the parameters of server ``version``: with ``server.n_fetch`` < ``n_push`` the
    batches of one update were computed on different versions. Enough to recompute the
    gradient exactly (``rltrain reapply``)."""

    epoch: int
    position: int
    version: int


@dataclass(frozen=True)
class GradUpdate:
    """What a worker pushes: a flat gradient computed from parameters of ``version``.

    Under the ``average`` rule ``values`` holds the worker's parameters instead of a gradient.
    """

    worker_id: int
    version: int
    values: torch.Tensor  # [P] float32
    num_samples: int
    losses: dict[str, float] = field(default_factory=dict)
    """The loss terms of the batch behind ``values``, by name: policy, value, entropy (and
    kl, clip_fraction) for the actor-critics, td for DQN, cross_entropy for the supervised
    workers. For logs and diagnosis; the server steps on ``values`` alone. Empty from the
    actor-critic learners, which read theirs from the device once per batch."""
    norm: NormStats | None = None  # normalisation statistics seen since the last push (a delta)
    batches: tuple[BatchId, ...] = ()
    """The supervised batches averaged into ``values``, in order (empty for the RL learners):
    what a recording server logs so that a run can be reapplied."""
    restore_epoch: int = 0
    """The restore epoch of the parameters ``values`` was computed from
    (:attr:`Params.restore_epoch`). A restore from a restore point starts a new restore epoch
    on every shard, and a shard drops an update of an older one: computed on parameters the
    restore threw away, it would drift an async run, and a push split over shards could land
    on one before its restore and on another after it."""
    finite: bool | torch.Tensor = False
    """The sender has seen that every value is finite: the gradient's global norm, which a
    learner's clipping computes anyway (Pascanu et al. 2013), was finite, and clipping only
    scales it down. A shard then skips its own pass over them, a quarter of an
    Adam step on a large model; False (not known) makes the shard look. A decompressed update
    is looked at again (fp16 can overflow).

    A tensor ([] bool, on the sender's device) is that verdict not yet read: reading it would
    make the host wait for the GPU's backward pass before every push. A shard on the same
    device whose optimizer can skip a step on the device (torch's fused kernels, as
    ``torch.amp.GradScaler`` uses them) steps with it unread (:attr:`PushResult.deferred`);
    any other shard reads it."""


@dataclass(frozen=True)
class PushResult:
    """What the server did with one push."""

    status: PushStatus
    version: int  # server version after the push
    staleness: int = 0  # server version at arrival - update version
    reason: str = ""  # why it was rejected or dropped
    count: int = 1  # updates averaged into the step this push completed (barrier rules)
    lr_scale: float = 1.0
    """The learning-rate factor the rule gave an update applied on arrival. Shard 0's travels
    to the other shards with its decision, and they step by it: the rule's own code runs on
    shard 0 alone, before any shard steps, so an error in it leaves no shard a step ahead."""
    waits: bool = False
    """The pusher is in a barrier round that has not stepped yet (its update is accumulated, or
    it pushed again after its wait timed out): it waits for the round's step, not push again."""
    deferred: bool = False
    """Applied with the sender's finiteness verdict unread (:attr:`GradUpdate.finite` a
    tensor): where the verdict says non-finite, the step left the parameters and the
    optimizer's state as they were (a step of zero, which the version still counts), and the
    shard and the sender count the update as rejected once they read the verdict."""


@dataclass(frozen=True)
class PushRecord:
    """One push as a recording shard saw it (``server.record``), in arrival order."""

    worker_id: int
    version: int  # the version the update was computed from (left: the shard's then)
    staleness: int
    status: LoggedStatus
    batches: tuple[BatchId, ...]  # the data behind it (GradUpdate.batches; left: none)


STALENESS_BINS = 65  # bins 0..63 count exactly; bin 64 counts staleness >= 64


@dataclass(frozen=True)
class ServerStats:
    """Counters of a parameter server (or one shard)."""

    version: int
    applied: int  # updates that took part in an optimizer step
    dropped: int  # late (sync/soft_sync) or too stale (async drop policy)
    rejected: int  # non-finite, wrong shape or unknown version; never applied
    samples: int  # samples covered by every update received
    staleness_sum: int
    staleness_hist: tuple[int, ...] = field(default=(0,) * STALENESS_BINS)
    last_reject: str = ""
    bytes_pushed: int = 0  # update values received, as they travelled (server.compression)
    bytes_pulled: int = 0  # parameter values sent
    zero_steps: int = 0
    """Rejected updates that the version counts: non-finite, refused on the device as they
    were stepped (:attr:`PushResult.deferred`). The version is ``applied + zero_steps`` under
    an on-arrival rule."""
    samples_by: dict[int, int] = field(default_factory=dict)
    """``samples`` per worker id: a worker restarted mid-run under an asynchronous rule goes
    on from its own (the supervised bench's epoch budget)."""
    dropped_by: dict[int, int] = field(default_factory=dict)
    """``dropped`` per worker id: whose updates a rule dropped (soft_sync's straggler)."""

    @property
    def mean_staleness(self) -> float:
        return self.staleness_sum / self.applied if self.applied else 0.0


def check_update(
    values: torch.Tensor,
    numel: int,
    version: int,
    server_version: int,
    finite: bool | torch.Tensor = False,
) -> str:
    """Why an update must be rejected, or ``""`` if it may be used.

    A rejected update never touches the parameters: a wrong shape, a non-finite value or a
    version the server never published would poison every worker that pulls afterwards.
    ``finite``: the sender has already seen every value finite (:attr:`GradUpdate.finite`).
    """
    if values.dim() != 1 or values.numel() != numel:
        return f"wrong shape {tuple(values.shape)}, expected ({numel},)"
    if not values.is_floating_point():
        return f"wrong dtype {values.dtype}, expected a floating-point tensor"
    if version < 0 or version > server_version:
        return f"unknown version {version} (server is at {server_version})"
    if not bool(finite) and not all_finite(values):  # a tensor verdict is read here
        return "non-finite values (NaN or inf)"
    return ""


def all_finite(values: torch.Tensor) -> bool:
    """Whether every value is finite. A NaN or an infinity makes the sum NaN or infinite, so
    a finite sum settles it in one vectorised pass with no allocation, where
    ``isfinite(values).all()`` writes a mask as large as the values and costs a push more than
    the optimizer's step; a sum that overflows looks value by value."""
    return bool(torch.isfinite(values.sum())) or bool(torch.isfinite(values).all())


def tensor_of(array: np.ndarray) -> torch.Tensor:
    """A numpy array that crossed a process boundary as a tensor: shared where it is
    writable, a copy where it is not (Ray hands out its object store's read-only memory,
    which torch.from_numpy would share and warns about)."""
    return torch.from_numpy(array if array.flags.writeable else array.copy())
