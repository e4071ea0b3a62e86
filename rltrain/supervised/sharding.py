"""Dataset sharding: each supervised worker's disjoint part of the training set.

Kept apart from the file-format readers (:mod:`rltrain.supervised.datasets`): how a dataset is
split among workers has nothing to do with how its files are read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import torch

from rltrain.errors import UserError
from rltrain.supervised.config import DataConfig
from rltrain.supervised.datasets import ArrayDataset, SplitDataset, load_dataset
from rltrain.supervised.splits import VectorDataset
from rltrain.supervised.toys import TOY_PROBLEMS, make_toy


def shard_indices(n: int, num_shards: int, shard: int, seed: int) -> torch.Tensor:
    """Indices of worker ``shard``'s disjoint part of ``range(n)``.

    A permutation seeded by ``seed`` (same on every worker) is cut into ``num_shards`` contiguous
    parts whose sizes differ by at most one, so shards are disjoint, cover ``range(n)`` and are
    balanced. Raises ValueError on bad arguments.
    """
    _check_int("n", n, 0)
    _check_int("num_shards", num_shards, 1)
    _check_int("shard", shard, 0)
    _check_int("seed", seed, None)
    if shard >= num_shards:
        raise ValueError(f"shard must be in [0, {num_shards}), got {shard}")
    generator = torch.Generator().manual_seed(seed)
    permutation = torch.randperm(n, generator=generator)
    return torch.tensor_split(permutation, num_shards)[shard].clone()


def _check_int(label: str, value: object, minimum: int | None) -> None:
    """Raise ValueError unless ``value`` is an int (not bool) that is at least ``minimum``."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{label} must be an int, got {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{label} must be >= {minimum}, got {value}")


Examples = TypeVar("Examples", bound=ArrayDataset | VectorDataset)


def take(ds: Examples, idx: torch.Tensor) -> Examples:
    """The examples of ``ds`` at integer positions ``idx`` (e.g. a shard), as a new dataset."""
    idx = torch.as_tensor(idx, dtype=torch.int64)
    return type(ds)(*(getattr(ds, f.name)[idx] for f in dataclasses.fields(ds)))


def load_data(
    data: DataConfig, log: Callable[[str], None] | None = None, optimum: bool = True
) -> SplitDataset:
    """The dataset ``data`` names: read (and downloaded if missing), or generated (toys;
    ``optimum=False`` skips solving for their optimum)."""
    if data.dataset in TOY_PROBLEMS:
        split = make_toy(data.dataset, data.toy, solve=optimum)
        if log is not None:
            t = data.toy
            log(
                f"{data.dataset}: generated, dim {t.dim}, {len(split.train)} train / "
                f"{len(split.test)} test, curvature {t.curvature:g}, condition {t.condition:g}"
            )
        return split
    split = load_dataset(data.dataset, data.root, data.download, log)
    return hold_out(split, data.validation, log) if data.validation else split


VALIDATION_SEED = 20_121
"""The validation draw's seed: one held-out set for every mode, seed and worker process."""


def hold_out(split: SplitDataset, n: int, log: Callable[[str], None] | None = None) -> SplitDataset:
    """``split`` with ``n`` training samples, drawn at random, moved to its validation set
    (the rest keep their order); a UserError when the training set cannot spare them."""
    size = len(split.train)
    if n >= size:
        raise UserError(
            f"data.validation={n}: the training set has {size:,} samples; hold out fewer, "
            "so that each worker keeps at least a batch of them"
        )
    order = torch.randperm(size, generator=torch.Generator().manual_seed(VALIDATION_SEED))
    held, kept = order[:n], order[n:].sort().values
    if log is not None:
        log(
            f"{split.name}: {n:,} training samples held out for validation, {size - n:,} trained on"
        )
    return dataclasses.replace(
        split, train=take(split.train, kept), validation=take(split.train, held)
    )


@dataclass(frozen=True)
class ShardSource:
    """Where a worker loads its own training shard from, in its own process.

    Workers read their shard from disk rather than receiving it through Ray's object store:
    a worker trains faster on arrays it loaded itself. It is also how a cluster scales: each
    node reads (or downloads) its local copy.
    """

    data: DataConfig
    num_shards: int
    shard: int
    seed: int

    def load(self) -> ArrayDataset | VectorDataset:
        train = load_data(self.data, optimum=False).train  # only the driver measures to w*
        return self.cut(train)

    def cut(self, train: Examples) -> Examples:
        """This worker's shard of ``train``, the whole training set (as :meth:`load` reads
        it; `rltrain reapply` hands the set it has read and checked)."""
        return take(train, shard_indices(len(train), self.num_shards, self.shard, self.seed))
