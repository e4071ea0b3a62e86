"""Toy problems with a known optimum: the first benchmark of the distributed-SGD literature.

``toy_quadratic`` is least squares with a Hessian of chosen curvature and conditioning;
``toy_logistic`` is L2-regularised logistic regression on data separated by a known weight
vector. Both are generated from ``data.toy.seed`` (every process makes the same data, nothing is
downloaded), and the optimum ``w*`` is computed in float64 to ~1e-12, so the bench can report the
distance ``||w - w*||`` of every snapshot, which an image dataset cannot.

The model is a linear map without bias (:class:`rltrain.supervised.models.Linear`), so the
parameter vector is ``w`` itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from rltrain.config import spec
from rltrain.supervised.formats import DatasetError
from rltrain.supervised.splits import SplitDataset, VectorDataset

TOY_PROBLEMS: tuple[str, ...] = ("toy_quadratic", "toy_logistic")

#: The objective each problem trains (image datasets: ``cross_entropy``).
OBJECTIVES: dict[str, str] = {"toy_quadratic": "squared", "toy_logistic": "logistic"}


@dataclass(frozen=True)
class ToyConfig:
    """The generated problems with a known optimum (data.dataset toy_quadratic / toy_logistic).

    Features have the second moment U diag(lambda) U^T: eigenvalues spaced geometrically from
    curvature / condition up to curvature, in a random rotation U. toy_quadratic is least
    squares, 1/2 mean (x.w - y)^2 with y = x.w_true + noise, so its Hessian is exactly that
    matrix; toy_logistic labels each x by the sign of x.w_true (separable) and adds l2/2 |w|^2.
    """

    dim: int = field(default=100, metadata=spec(ge=1))
    """Dimension D: the model is w in R^D (a linear map without bias)."""
    samples: int = field(default=20_000, metadata=spec(ge=1))
    """Training examples (the test set is a fifth of this many more)."""
    curvature: float = field(default=1.0, metadata=spec(gt=0))
    """The largest eigenvalue L of the feature second moment (toy_quadratic: of the Hessian).
    Plain SGD is stable for lr < 2 / L; staleness lowers that bound."""
    condition: float = field(default=100.0, metadata=spec(ge=1))
    """L over the smallest eigenvalue."""
    noise: float = field(default=0.1, metadata=spec(ge=0))
    """toy_quadratic: standard deviation of the label noise. It is the gradient noise at the
    optimum (0: every example's gradient vanishes there, and SGD converges linearly)."""
    l2: float = field(default=0.01, metadata=spec(gt=0))
    """toy_logistic: the L2 term that makes the optimum finite on separable data."""
    seed: int = field(default=0, metadata=spec(ge=0, le=2**31 - 1))
    """Seed of the generated data (the same in every process)."""


def objective_loss(name: str, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The mean loss of a batch: ``out`` [B, K] model outputs, ``y`` [B] targets."""
    if name == "cross_entropy":
        return F.cross_entropy(out, y)
    if name == "squared":  # f(w) = 1/2 mean (x.w - y)^2, Hessian X^T X / N
        return 0.5 * (out.squeeze(1) - y).pow(2).mean()
    if name == "logistic":  # y in {0, 1}
        return F.binary_cross_entropy_with_logits(out.squeeze(1), y)
    raise ValueError(f"unknown objective {name!r}; allowed: cross_entropy, squared, logistic")


def make_toy(name: str, cfg: ToyConfig, solve: bool = True) -> SplitDataset:
    """Generate ``name`` (one of :data:`TOY_PROBLEMS`) with its optimum (float64 solve;
    ``solve=False``: without, for the workers, which never measure distances)."""
    if name not in TOY_PROBLEMS:
        raise ValueError(f"unknown toy problem {name!r}; allowed: {', '.join(TOY_PROBLEMS)}")
    if cfg.samples < cfg.dim:  # (checked here: another dataset never reads data.toy)
        raise DatasetError(
            f"data.toy.samples={cfg.samples} is below data.toy.dim={cfg.dim}: "
            "the least-squares optimum would not be unique"
        )
    g = torch.Generator().manual_seed(cfg.seed)
    n_test = max(1, cfg.samples // 5)
    x, x_test, w_true = _features(cfg, n_test, g)
    if name == "toy_quadratic":
        y = x @ w_true + cfg.noise * torch.randn(cfg.samples, generator=g, dtype=torch.float64)
        y_test = x_test @ w_true
        optimum = torch.linalg.solve(x.T @ x, x.T @ y) if solve else None  # normal equations
        l2 = 0.0
    else:
        y, y_test = (x @ w_true > 0).double(), (x_test @ w_true > 0).double()
        l2 = cfg.l2
        optimum = logistic_optimum(x, y, l2) if solve else None
    return SplitDataset(
        name=name,
        train=VectorDataset(x.float(), y.float()),
        test=VectorDataset(x_test.float(), y_test.float()),
        num_classes=1,
        mean=(),
        std=(),
        objective=OBJECTIVES[name],
        l2=l2,
        optimum=optimum,  # float64: distances are measured to it in float64
    )


def _features(
    cfg: ToyConfig, n_test: int, g: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Train features whose second moment X^T X / N is exactly U diag(lambda) U^T, with lambda
    spaced geometrically from curvature / condition to curvature and U a random rotation (so
    that no coordinate-wise optimizer gets the axes for free); test features from the same
    distribution; and the true weights, a random unit vector. All float64."""
    d, n = cfg.dim, cfg.samples
    eig = torch.logspace(
        math.log10(cfg.curvature / cfg.condition), math.log10(cfg.curvature), d, dtype=torch.float64
    )
    rotation, _ = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=torch.float64))
    q, _ = torch.linalg.qr(torch.randn(n, d, generator=g, dtype=torch.float64))  # Q^T Q = I
    x = math.sqrt(n) * q * eig.sqrt() @ rotation.T
    z = torch.randn(n_test, d, generator=g, dtype=torch.float64)
    x_test = z * eig.sqrt() @ rotation.T
    w_true = torch.randn(d, generator=g, dtype=torch.float64)
    return x, x_test, w_true / w_true.norm()


def logistic_optimum(
    x: torch.Tensor, y: torch.Tensor, l2: float, tol: float = 1e-12
) -> torch.Tensor:
    """argmin_w mean softplus-loss(x w, y) + l2/2 |w|^2 by Newton's method (float64).

    The objective is l2-strongly convex, so Newton from 0 converges quadratically; a step
    halving guards the first iterations, where the logistic curvature is far from constant.
    """
    x, y = x.double(), y.double()
    n, d = x.shape
    w = torch.zeros(d, dtype=torch.float64)

    def loss(v: torch.Tensor) -> float:
        return float(F.binary_cross_entropy_with_logits(x @ v, y) + 0.5 * l2 * v @ v)

    for _ in range(100):
        p = torch.sigmoid(x @ w)
        grad = x.T @ (p - y) / n + l2 * w
        if float(grad.norm()) < tol:
            break
        hess = (x.T * (p * (1 - p))) @ x / n + l2 * torch.eye(d, dtype=torch.float64)
        step = torch.linalg.solve(hess, grad)
        t, f0 = 1.0, loss(w)
        while loss(w - t * step) > f0 and t > 1e-8:
            t /= 2
        w = w - t * step
    return w


def relative_distance(params: torch.Tensor, optimum: torch.Tensor, start: torch.Tensor) -> float:
    """||w - w*|| / ||w0 - w*||: 1 at the start, 0 at the optimum (scale-free across problems),
    in float64 (float32 parameters still put a floor near 1e-7 on it)."""
    w, opt = params.double(), optimum.double()
    return float((w - opt).norm() / (start.double() - opt).norm().clamp_min(1e-30))
