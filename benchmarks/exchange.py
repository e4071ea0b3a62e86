"""Seconds per update: a push to a shard beside the learner against a plain optimizer step.

A learner in the trainer's process (runtime.backend process or local) pushes each
minibatch's gradient to a parameter-server shard of the same process. With ``server.device:
auto`` the shard lives on the learner's device, so the push is the optimizer step that a
single-process trainer would take anyway, plus the server's bookkeeping: the update's checks
(shape, version, finiteness), the rule, the version and staleness counters. This measures
that overhead against ``torch.optim``'s step alone on the same device, with the same model
size and optimizer, and the whole exchange (push and pull, the parameters loaded into the
learner's model) against a step that needs no loading.

Rows, each the median over ``--repeats`` blocks of ``--steps`` updates, interleaved:

* ``optimizer.step()``: the config's optimizer over one flat parameter on ``--device``,
  the gradient assigned to ``.grad`` (what a single-process trainer does per minibatch);
* ``push``: ``LocalServer.push`` of a ``GradUpdate`` to a shard on ``--device``, marked
  finite as the learners mark theirs (their clipping's norm was finite:
  ``GradUpdate.finite``);
* ``push, the shard checks finiteness``: the same unmarked (a supervised worker's push, or
  any sender that has not looked), so the shard makes its own pass over the values;
* ``exchange``: ``LocalServer.exchange`` and loading the returned parameters into the model;
* ``exchange, shard on cpu``: the same with the shard on the CPU (``server.device: cpu``; on
  a GPU, the layout before: the gradient to the host, Adam there, parameters back).

    python benchmarks/exchange.py [--device cpu|cuda] [--steps 200] [--repeats 5]
        [--configs configs/cartpole_appo.yaml configs/pong_appo.yaml]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

from rltrain.config import load_config
from rltrain.ps.optim import make_optimizer
from rltrain.ps.server import LocalServer
from rltrain.records import GradUpdate
from rltrain.rl.actor import load_params, policy_builder
from rltrain.rl.config import TrainConfig, server_settings
from rltrain.rl.env_spec import probe_env

ROOT = Path(__file__).resolve().parents[1]


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def per_update(fn: Callable[[int], None], steps: int, device: torch.device) -> float:
    """Seconds per call of ``fn(i)``, the device's queue drained at both ends."""
    sync(device)
    t = time.perf_counter()
    for i in range(steps):
        fn(i)
    sync(device)
    return (time.perf_counter() - t) / steps


def cases(cfg: TrainConfig, device: torch.device) -> tuple[int, dict[str, Callable[[int], None]]]:
    """The parameter count of the config's model, and each row's update."""
    spec = probe_env(cfg)
    torch.manual_seed(cfg.seed)
    model = policy_builder(cfg)(cfg.model.kind, spec.obs_shape, spec.actions, cfg.model.hidden)
    model.to(device)
    init = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    grads = [torch.randn(init.numel(), device=device) * 1e-3 for _ in range(8)]
    settings = dataclasses.replace(server_settings(cfg), shards=1)

    flat = torch.nn.Parameter(init.clone())
    opt = make_optimizer([flat], cfg.optimizer)

    def step(i: int) -> None:
        flat.grad = grads[i % 8]
        opt.step()

    servers = {d: LocalServer(init, cfg.optimizer, settings, 1, device=d) for d in (device, "cpu")}
    versions = {d: 0 for d in servers}

    def push_with(finite: bool) -> Callable[[int], None]:
        def push(i: int) -> None:
            u = GradUpdate(0, versions[device], grads[i % 8], 1, finite=finite)
            versions[device] = servers[device].push(u).version

        return push

    def exchange_on(d: torch.device | str) -> Callable[[int], None]:
        def exchange(i: int) -> None:
            u = GradUpdate(0, versions[d], grads[i % 8], 1, finite=True)
            _, p = servers[d].exchange(u)
            versions[d] = p.version
            load_params(model, p, device)

        return exchange

    out = {
        "optimizer.step()": step,
        "push": push_with(True),
        "push, the shard checks finiteness": push_with(False),
        "exchange": exchange_on(device),
    }
    if device.type != "cpu":
        out["exchange, shard on cpu"] = exchange_on("cpu")
    return init.numel(), out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=1, help="torch threads (a shard's: 1)")
    p.add_argument(
        "--configs",
        nargs="+",
        default=[str(ROOT / "configs" / c) for c in ("cartpole_appo.yaml", "pong_appo.yaml")],
    )
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"device {name}, {args.threads} torch thread(s), median of {args.repeats} x {args.steps}")
    print("| config | parameters | optimizer | row | ms per update | vs optimizer.step() |")
    print("|---|---|---|---|---|---|")
    for path in args.configs:
        cfg = load_config(TrainConfig, path)
        numel, fns = cases(cfg, device)
        for fn in fns.values():
            per_update(fn, 10, device)  # warm-up: the optimizer's state, allocator, kernels
        times: dict[str, list[float]] = {k: [] for k in fns}
        for _ in range(args.repeats):
            for k, fn in fns.items():
                times[k].append(per_update(fn, args.steps, device))
        base = statistics.median(times["optimizer.step()"])
        for k, ts in times.items():
            t = statistics.median(ts)
            print(
                f"| {Path(path).name} | {numel:,} | {cfg.optimizer.name} | {k} | "
                f"{t * 1e3:.3f} | {t / base:.2f}x |"
            )


if __name__ == "__main__":
    main()
