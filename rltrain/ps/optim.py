"""Server-side optimizers by name, all from ``torch.optim`` (never hand-written)."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from rltrain.ps.config import OptimizerConfig


def make_optimizer(
    params: Iterable[torch.nn.Parameter], cfg: OptimizerConfig
) -> torch.optim.Optimizer:
    """The ``torch.optim`` optimizer named by ``cfg.name`` with its hyper-parameters."""
    p = list(params)
    wd = cfg.weight_decay
    if cfg.name == "sgd":
        return torch.optim.SGD(p, lr=cfg.lr, weight_decay=wd)
    if cfg.name == "momentum":
        return torch.optim.SGD(p, lr=cfg.lr, momentum=cfg.momentum, weight_decay=wd)
    if cfg.name == "nesterov":
        return torch.optim.SGD(p, lr=cfg.lr, momentum=cfg.momentum, nesterov=True, weight_decay=wd)
    if cfg.name == "adagrad":
        return torch.optim.Adagrad(p, lr=cfg.lr, eps=cfg.eps, weight_decay=wd)
    if cfg.name == "rmsprop":
        return torch.optim.RMSprop(
            p,
            lr=cfg.lr,
            alpha=cfg.alpha,
            eps=cfg.eps,
            momentum=cfg.rmsprop_momentum,
            centered=cfg.centered,
            weight_decay=wd,
        )
    if cfg.name == "adadelta":
        return torch.optim.Adadelta(p, lr=cfg.lr, rho=cfg.rho, eps=cfg.eps, weight_decay=wd)
    if cfg.name == "adam":
        return torch.optim.Adam(
            p, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps, weight_decay=wd
        )
    raise ValueError(f"unknown optimizer {cfg.name!r}")  # OptimizerConfig already checked choices


def materialize_state(opt: torch.optim.Optimizer) -> None:
    """Create the optimizer's lazily-built state now, equal to its fresh state.

    Hogwild shares the optimizer state between processes, so it must exist (and be moved to
    shared memory) before the workers start. One step with zero gradients, lr=0 and no weight
    decay leaves every buffer at its initial value; only the step counters moved, and they are
    set back to zero.
    """
    saved = [(g["lr"], g.get("weight_decay", 0.0)) for g in opt.param_groups]
    for g in opt.param_groups:
        g["lr"] = 0.0
        g["weight_decay"] = 0.0
        for p in g["params"]:
            p.grad = torch.zeros_like(p)
    opt.step()
    for g, (lr, wd) in zip(opt.param_groups, saved, strict=True):
        g["lr"] = lr
        g["weight_decay"] = wd
        for p in g["params"]:
            p.grad = None
            step = opt.state[p].get("step")
            if isinstance(step, torch.Tensor):
                step.zero_()
            elif step is not None:
                opt.state[p]["step"] = 0
