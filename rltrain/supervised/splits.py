"""The in-memory datasets a bench trains on: a toy problem's vectors (:class:`VectorDataset`)
and a named dataset's two splits (:class:`SplitDataset`). Images are
:class:`~rltrain.supervised.formats.ArrayDataset`, as the file readers return them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from rltrain.supervised.formats import ArrayDataset


@dataclass(frozen=True, eq=False)
class VectorDataset:
    """Feature vectors and real targets: ``x`` float32 [N, D], ``y`` float32 [N]."""

    x: torch.Tensor
    y: torch.Tensor

    def __post_init__(self) -> None:
        if self.x.dtype != torch.float32 or self.x.dim() != 2:
            raise ValueError(f"x must be float32 [N, D], got {self.x.dtype} {tuple(self.x.shape)}")
        if self.y.dtype != torch.float32 or self.y.shape != self.x.shape[:1]:
            raise ValueError(f"y must be float32 [{len(self.x)}], got {tuple(self.y.shape)}")

    def __len__(self) -> int:
        return int(self.y.shape[0])


@dataclass(frozen=True, eq=False)
class SplitDataset:
    """A named dataset with its train/test splits and the per-channel normalisation constants.

    ``mean``/``std`` are the conventional per-channel statistics of the train images in [0, 1]
    units, so models normalise exactly like the published baselines do.
    """

    name: str
    train: ArrayDataset | VectorDataset
    test: ArrayDataset | VectorDataset
    num_classes: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    objective: str = "cross_entropy"
    """The loss trained: cross_entropy (images), squared or logistic (the toy problems)."""
    l2: float = 0.0
    """An L2 term l2/2 |w|^2 that is part of the objective (not of the optimizer)."""
    optimum: torch.Tensor | None = None
    """The parameters that minimise the training objective, where known (toy problems)."""
    validation: ArrayDataset | VectorDataset | None = None
    """Training samples held out to choose a snapshot by (``data.validation``)."""
    source: Path | None = None
    """The folder (or CIFAR-10's archive) the files were read from; None: generated."""
