"""Server-side optimizers by name: ``torch.optim``, plus what it does not offer.

Hand-written: TensorFlow's RMSProp (:class:`RMSpropTF`), the form the A3C/IMPALA papers used,
and nonlinear conjugate gradients (:class:`ConjugateGradient`), one of DistBelief's
comparisons. Every other name is a ``torch.optim`` class.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from typing import Any

import torch

from rltrain.ps.config import OptimizerConfig


def run_closure(closure: Callable[[], float] | None) -> float | None:
    """torch.optim's step(closure) protocol: re-evaluate the loss with gradients enabled."""
    if closure is None:
        return None
    with torch.enable_grad():
        return closure()


class RMSpropTF(torch.optim.Optimizer):
    """RMSProp as TensorFlow 1 computes it: epsilon inside the root, mean square starting at 1.

    ``torch.optim`` has no such variant, so this is the one hand-written optimizer here. It is
    ``tf.train.RMSPropOptimizer`` (tensorflow/python/training/rmsprop.py, kernel
    ``ApplyRMSProp``), which IMPALA's scalable_agent used (eps 0.01), and the update written in
    the A3C paper (Mnih et al. 2016, Sec. 4 "Optimization": shared RMSProp)::

        ms  <- alpha ms + (1 - alpha) g^2          ms starts at 1 (TF1's slot is `ones`)
        mom <- momentum mom + lr g / sqrt(ms + eps)
        p   <- p - mom

    ``torch.optim.RMSprop`` divides by ``sqrt(ms) + eps`` instead, with ms starting at 0. For
    small gradients torch's step is about ``lr g / eps`` and this one's ``lr g / sqrt(eps)``
    (eps 0.1: torch's is ~3x larger). Torch's first step is ``lr g / (0.1 |g|)`` (alpha 0.99),
    i.e. 10 lr sign(g); here ms is still near 1, so the first ~1/(1-alpha) steps are about
    ``lr g / sqrt(1 + eps)``: a built-in warm-up while ms decays towards the gradients' scale.

    centered follows TF's ``ApplyCenteredRMSProp``: ``mg <- alpha mg + (1 - alpha) g`` and the
    root is ``sqrt(ms - mg^2 + eps)``. TF1 has no weight decay; ``weight_decay`` adds
    ``wd * p`` to g first, as torch's optimizers do. Like TF (and unlike torch), lr sits inside
    the momentum buffer, so a changed lr (staleness scaling) applies to the new gradient only.
    ``initial_square_avg`` is TF1's 1.0 (Keras/TF2 use 0); it is there to measure the effect.

    State is created on the first :meth:`step` (or :meth:`init_state`), all tensors, updated in
    place (Hogwild shares it between processes): ``step``, ``square_avg``, ``grad_avg``
    (centered) and ``momentum_buffer`` (momentum > 0).
    """

    def __init__(
        self,
        params: Iterable[torch.nn.Parameter],
        lr: float = 1e-2,
        alpha: float = 0.99,
        eps: float = 1e-10,
        momentum: float = 0.0,
        centered: bool = False,
        weight_decay: float = 0.0,
        initial_square_avg: float = 1.0,
    ) -> None:
        if lr < 0 or eps < 0 or momentum < 0 or weight_decay < 0 or initial_square_avg < 0:
            raise ValueError("RMSpropTF: lr, eps, momentum, weight_decay, initial_square_avg >= 0")
        if not 0 <= alpha <= 1:
            raise ValueError(f"RMSpropTF: alpha must be in [0, 1], got {alpha}")
        defaults = {
            "lr": lr,
            "alpha": alpha,
            "eps": eps,
            "momentum": momentum,
            "centered": centered,
            "weight_decay": weight_decay,
            "initial_square_avg": initial_square_avg,
        }
        super().__init__(params, defaults)

    def init_state(self) -> None:
        """Create the fresh state of every parameter that has none yet."""
        for group in self.param_groups:
            for p in group["params"]:
                state = self.state[p]
                if state:
                    continue
                state["step"] = torch.tensor(0.0)
                state["square_avg"] = torch.full_like(
                    p, group["initial_square_avg"], memory_format=torch.preserve_format
                )
                if group["centered"]:
                    state["grad_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                if group["momentum"] > 0:
                    state["momentum_buffer"] = torch.zeros_like(
                        p, memory_format=torch.preserve_format
                    )

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        """One update of every parameter with a gradient (equations in the class docstring)."""
        loss = run_closure(closure)
        self.init_state()
        for group in self.param_groups:
            lr, alpha, eps = group["lr"], group["alpha"], group["eps"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state: dict[str, Any] = self.state[p]
                g = p.grad
                if group["weight_decay"] != 0:
                    g = g.add(p, alpha=group["weight_decay"])
                state["step"] += 1
                ms = state["square_avg"]
                ms.mul_(alpha).addcmul_(g, g, value=1 - alpha)
                if group["centered"]:
                    mg = state["grad_avg"]
                    mg.mul_(alpha).add_(g, alpha=1 - alpha)
                    denom = ms.addcmul(mg, mg, value=-1).add_(eps).sqrt_()
                else:
                    denom = ms.add(eps).sqrt_()
                if group["momentum"] > 0:
                    mom = state["momentum_buffer"]
                    mom.mul_(group["momentum"]).addcdiv_(g, denom, value=lr)
                    p.sub_(mom)
                else:
                    p.addcdiv_(g, denom, value=-lr)
        return loss


class ConjugateGradient(torch.optim.Optimizer):
    """Nonlinear conjugate gradients with a fixed step (``cg_fr``, ``cg_hs``)::

        p_{t+1} = beta_{t+1} p_t - g_t,   W_{t+1} = W_t + lr p_{t+1}

    beta of Fletcher-Reeves, g_t.g_t / g_{t-1}.g_{t-1}, or of Hestenes-Stiefel,
    g_t.(g_t - g_{t-1}) / p_t.(g_t - g_{t-1}) (Nocedal & Wright 2006, Sec. 5.2), clipped at 0
    (the PR+/HS+ restart), and 0 on the first step and every ``restart`` steps (0: never).
    The dot products run over every parameter of the optimizer: on a sharded server each
    shard keeps its own direction and previous gradient, as DistBelief's per-shard Adagrad.
    With the exact line-search step of a quadratic (:meth:`direction` gives p first, so that
    the step can be chosen), both reach the optimum of an n-dimensional quadratic in n steps.
    """

    VARIANTS = ("fr", "hs")

    def __init__(
        self,
        params: Iterable[torch.nn.Parameter],
        lr: float,
        variant: str = "fr",
        restart: int = 0,
        weight_decay: float = 0.0,
    ) -> None:
        """``weight_decay``: an L2 term added to each gradient, as torch.optim's do."""
        if variant not in self.VARIANTS:
            raise ValueError(f"conjugate gradient variant {variant!r}; allowed: fr, hs")
        defaults = dict(lr=lr, variant=variant, restart=restart, weight_decay=weight_decay)
        super().__init__(params, defaults)
        self._ready = False  # direction() ran for the gradients held now

    def init_state(self) -> None:
        """Zero direction and previous gradient, no steps (shared memory needs them now)."""
        for g in self.param_groups:
            for p in g["params"]:
                st = self.state[p]
                st["p"] = torch.zeros_like(p)
                st["g_prev"] = torch.zeros_like(p)
                st["step"] = 0

    @staticmethod
    def _grad(p: torch.Tensor, group: dict[str, Any]) -> torch.Tensor:
        grad = p.grad
        assert grad is not None  # callers pass only parameters with a gradient
        wd = group["weight_decay"]
        return grad if not wd else grad + wd * p

    def _beta(self, group: dict[str, Any]) -> float:
        params = [p for p in group["params"] if p.grad is not None]
        steps = self.state[params[0]].get("step", 0) if params else 0
        if steps == 0 or (group["restart"] and steps % group["restart"] == 0):
            return 0.0
        num = den = 0.0
        for p in params:
            g, st = self._grad(p, group), self.state[p]
            if group["variant"] == "fr":
                num += float(g.pow(2).sum())
                den += float(st["g_prev"].pow(2).sum())
            else:
                y = g - st["g_prev"]
                num += float((g * y).sum())
                den += float((st["p"] * y).sum())
        return max(0.0, num / den) if den != 0 else 0.0

    @torch.no_grad()
    def direction(self) -> list[torch.Tensor]:
        """p_{t+1} for the gradients held now (one tensor per parameter with a gradient)."""
        out: list[torch.Tensor] = []
        for group in self.param_groups:
            beta = self._beta(group)
            for p in group["params"]:
                if p.grad is None:
                    continue
                st = self.state[p]
                if "p" not in st:
                    st["p"], st["g_prev"], st["step"] = torch.zeros_like(p), torch.zeros_like(p), 0
                g = self._grad(p, group)
                st["p"].mul_(beta).sub_(g)
                st["g_prev"].copy_(g)
                st["step"] += 1
                out.append(st["p"])
        self._ready = True
        return out

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        """W += lr p_{t+1}; the direction is computed here unless :meth:`direction` just did."""
        loss = run_closure(closure)
        if not self._ready:
            self.direction()
        self._ready = False
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.add_(self.state[p]["p"], alpha=group["lr"])
        return loss


def skips_on_device(opt: torch.optim.Optimizer) -> bool:
    """Whether ``opt`` can skip a step on the device, told by a tensor (torch's fused Adam,
    AdamW, SGD and Adagrad: the kernels ``torch.amp.GradScaler`` drives with ``found_inf``)."""
    return bool(getattr(opt, "_step_supports_amp_scaling", False))


def step_unless_nonfinite(opt: torch.optim.Optimizer, finite: torch.Tensor | None) -> None:
    """``opt.step()``; where ``finite`` ([] bool on the device, unread) is False, a step that
    leaves the parameters, the optimizer's state and its step count as they were
    (:func:`skips_on_device` optimizers only), with no wait for the device to say which."""
    if finite is None:
        opt.step()
        return
    o: Any = opt  # GradScaler's protocol: attributes the fused step reads, removed after
    o.grad_scale, o.found_inf = None, finite.logical_not().float()
    try:
        opt.step()
    finally:
        del o.grad_scale, o.found_inf


WARMUP_KEY = "warmup_step"
"""The param group's count of steps taken, for the warm-up (saved with the optimizer's state)."""


def warmup_factor(taken: int, steps: int) -> float:
    """The factor of lr at an optimizer's step after ``taken`` steps, under a warm-up over
    ``steps`` steps (0: none): (taken + 1) / steps, then 1."""
    return min(1.0, (taken + 1) / steps) if steps > 0 else 1.0


def warm_up(opt: torch.optim.Optimizer, steps: int) -> torch.optim.Optimizer:
    """Gradual warm-up (Goyal et al. 2017, section 2.2): step k (from 0) of ``opt`` runs at
    lr x (k + 1) / ``steps`` until ``steps`` steps have run. The hooks scale each group's lr
    for the step alone and put it back after, so what sets the lr between steps (a shard's
    schedule and staleness scaling) is scaled in turn. The count is a param group key: a
    saved state carries it (:func:`load_optimizer_state` keeps it)."""
    if steps <= 0:
        return opt
    for g in opt.param_groups:
        g[WARMUP_KEY] = 0
    saved: list[float] = []

    def scale(o: torch.optim.Optimizer, *_: Any) -> None:
        saved[:] = [g["lr"] for g in o.param_groups]
        for g in o.param_groups:
            g["lr"] = g["lr"] * warmup_factor(g.get(WARMUP_KEY, 0), steps)

    def restore(o: torch.optim.Optimizer, *_: Any) -> None:
        for g, lr in zip(o.param_groups, saved, strict=True):
            g["lr"] = lr
            g[WARMUP_KEY] = g.get(WARMUP_KEY, 0) + 1  # (a state saved without: from 0)

    opt.register_step_pre_hook(scale)
    opt.register_step_post_hook(restore)
    return opt


def make_optimizer(
    params: Iterable[torch.nn.Parameter], cfg: OptimizerConfig
) -> torch.optim.Optimizer:
    """The optimizer named by ``cfg.name`` with its hyper-parameters (and ``cfg.warmup_steps``
    of warm-up: :func:`warm_up`)."""
    return warm_up(_optimizer(list(params), cfg), cfg.warmup_steps)


def _optimizer(p: list[torch.nn.Parameter], cfg: OptimizerConfig) -> torch.optim.Optimizer:
    wd = cfg.weight_decay
    # torch's fused CPU kernels: one pass over the parameters per step instead of one per
    # operation, with results equal to 1e-7; Adam's step gains most. A shard steps once per push.
    # On a GPU the fused kernel is one launch per step (foreach: one per operation), for the
    # optimizers that have one there (Adam, SGD); Adagrad's fused kernel is the CPU's alone.
    kinds = {x.device.type for x in p}
    fused = {"fused": True} if kinds == {"cpu"} else {}
    if kinds == {"cuda"} and cfg.name in ("sgd", "momentum", "nesterov", "adam"):
        fused = {"fused": True}
    if cfg.name == "adagrad" and kinds != {"cpu"}:
        fused = {}
    if cfg.name == "sgd":
        return torch.optim.SGD(p, lr=cfg.lr, weight_decay=wd, **fused)
    if cfg.name == "momentum":
        return torch.optim.SGD(p, lr=cfg.lr, momentum=cfg.momentum, weight_decay=wd, **fused)
    if cfg.name == "nesterov":
        return torch.optim.SGD(
            p, lr=cfg.lr, momentum=cfg.momentum, nesterov=True, weight_decay=wd, **fused
        )
    if cfg.name == "adagrad":
        return torch.optim.Adagrad(p, lr=cfg.lr, eps=cfg.eps, weight_decay=wd, **fused)
    if cfg.name in ("rmsprop", "rmsprop_tf"):
        rmsprop = torch.optim.RMSprop if cfg.name == "rmsprop" else RMSpropTF
        return rmsprop(
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
            p, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps, weight_decay=wd, **fused
        )
    if cfg.name in ("cg_fr", "cg_hs"):
        variant = cfg.name.removeprefix("cg_")
        return ConjugateGradient(p, cfg.lr, variant, cfg.cg_restart, weight_decay=wd)
    raise ValueError(f"unknown optimizer {cfg.name!r}")  # OptimizerConfig already checked choices


def materialize_state(opt: torch.optim.Optimizer) -> None:
    """Create the optimizer's lazily-built state now, equal to its fresh state.

    Hogwild shares the optimizer state between processes, so it must exist (and be moved to
    shared memory) before the workers start. One step with zero gradients, lr=0 and no weight
    decay leaves every buffer at its initial value; only the step counters moved, and they are
    set back to zero. :class:`RMSpropTF` builds its state directly: its mean square starts at
    one, which a zero-gradient step would decay.
    """
    if isinstance(opt, RMSpropTF | ConjugateGradient):
        opt.init_state()
        return
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


def load_optimizer_state(opt: torch.optim.Optimizer, state: dict) -> None:
    """``opt.load_state_dict(state)``: the saved moments and step counts, with ``opt``'s own
    hyperparameters and way of running (torch would take the saved groups' whole): a run
    resumed with ``--set optimizer.eps=...`` steps with the new eps, and a state saved by an
    optimizer built otherwise (``fused``, ``foreach``) does not switch them off."""
    built = [  # (the warm-up's count is the saved run's)
        {k: v for k, v in group.items() if k not in ("params", WARMUP_KEY)}
        for group in opt.param_groups
    ]
    # a copy: torch keeps the given tensors where they already have the parameters' device and
    # dtype, and its steps would then write into ``state`` (a restore point, restored from
    # again after the next fault, would have moved with the run)
    opt.load_state_dict(copy.deepcopy(state))
    for group, settings in zip(opt.param_groups, built, strict=True):
        group.update(settings)


def cpu_copy(obj: object) -> object:
    """``obj`` (an optimizer's state dict) with every tensor copied to the CPU: a snapshot that
    shares nothing with the live optimizer and loads where there is no GPU."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return {k: cpu_copy(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(cpu_copy(v) for v in obj)
    return copy.deepcopy(obj)
