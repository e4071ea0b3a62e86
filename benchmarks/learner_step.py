"""The learner's update against a plain PyTorch loop: ms per minibatch, host syncs, aten ops.

A learner's update is what a GPU box waits on (issue 36: 16 ms per minibatch on an H100 for
1.9 ms of GPU work). This runs the learner's real path (``Learner.learn``: the rollout to the
device, the targets, then epochs x minibatches of forward, loss, backward, clipping and a
push to a parameter-server shard beside it on the same device, whose parameters come back
into the model) and the plain loop a single-process trainer would write (CleanRL's
``ppo_atari``: the same targets and loss, ``clip_grad_norm_``, a fused ``torch.optim.Adam``
step) on identical synthetic rollouts of the config's shapes, on the same device, with one
torch thread: for an Atari config Pong's (``configs/pong_appo.yaml``'s: the learner is given
each step's newest frame, uint8 [T+4, B, 84, 84], as a run's observation slots give it, and
the plain loop the same stacked, [T+1, B, 4, 84, 84]), for any other env its own (one env
is opened to learn them: float vectors, Discrete or Box actions, e.g. ``--config configs/
mujoco_appo.yaml``, whose 32 minibatches of 64 per learn make the fixed cost per update
count).

On CUDA a third row, "plain loop, one CUDA graph per update", replays each update
(forward, loss, backward, clipping, Adam) as one captured CUDA graph: the bound on what
removing the per-op launches from Python would give the learner (issue 36 found it
launch-bound at minibatches of 256).

With ``--compile`` a row "learner, compiled" adds the learner with ``model.compile`` (its
minibatch step's forward, loss and backward compiled by ``torch.compile``), its first learn's
seconds (the compile) said apart; a config with ``model.compile: true`` compiles the
"learner" row itself. A dispatch mode sees no op inside a compiled graph: such a row has no
aten op count, and the host syncs are counted on the eager learner (none are made inside
the compiled step).

Two models for images: the Nature CNN (the config's, at its precision) and a tiny CNN (one
strided convolution and a 32-unit layer), whose own work is small, so that its ratio shows
the learner's fixed cost per update. For any other env one: the config's (an MLP for vectors).

Host syncs are counted as calls that read a tensor's value on the host (``.item()``,
``.tolist()``, ``float()``, ``int()``, ``bool()``, ``.cpu()``, ``.numpy()``) during one
``learn`` call; on CUDA also as torch's sync warnings (``torch.cuda.set_sync_debug_mode``).
They are counted for two batches, of ``epochs x minibatches`` updates and of one epoch's,
and split into a part per rollout and a part per minibatch (syncs = a + b x updates).
aten ops are counted per update with a ``TorchDispatchMode``.

    python benchmarks/learner_step.py [--device cpu|cuda] [--precision fp32|bf16]
        [--rollouts 2] [--repeats 3] [--config configs/pong_appo.yaml] [--set KEY=VALUE ...]
        [--compile]

The last line reads, for scripts:
``learner_step: nature 1.08x, tiny 1.41x, syncs/minibatch 0, syncs/rollout 1`` (for vectors
``learner_step: mlp 1.13x, ...``; for another env's images ``cnn``; with ``--compile``
``..., mlp compiled 0.76x, syncs/minibatch ...``).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
import traceback
import warnings
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from rltrain.config import load_config
from rltrain.envs import ActionSpace
from rltrain.envs.atari import is_atari
from rltrain.ps.server import LocalServer
from rltrain.rl.actor import policy_builder
from rltrain.rl.algos.base import ValueEstimator
from rltrain.rl.algos.distributions import Distribution, distribution
from rltrain.rl.algos.estimators import TargetInputs
from rltrain.rl.algos.losses import actor_critic_loss
from rltrain.rl.algos.models import ActorCritic, flat_params
from rltrain.rl.algos.ppo import PPOLoss
from rltrain.rl.algos.torsos import to_device, train_layout
from rltrain.rl.config import TrainConfig, server_settings
from rltrain.rl.env_spec import probe_env
from rltrain.rl.learner import Learner
from rltrain.rl.rollout import Rollout

ROOT = Path(__file__).resolve().parents[1]
COMPILED = "learner, compiled"
READS = {
    torch.Tensor.item,
    torch.Tensor.tolist,
    torch.Tensor.__float__,
    torch.Tensor.__int__,
    torch.Tensor.__bool__,
    torch.Tensor.__index__,
    torch.Tensor.cpu,
    torch.Tensor.numpy,
}


@dataclasses.dataclass(frozen=True)
class Task:
    """The shapes the synthetic rollouts take: observations, their dtype and the actions."""

    obs: tuple[int, ...]
    dtype: torch.dtype
    actions: ActionSpace


PONG = Task((4, 84, 84), torch.uint8, ActionSpace(6))


def task_of(cfg: TrainConfig) -> Task:
    """Pong's shapes for an Atari config (no emulator needed: the GPU box's script runs this
    first); any other env's own, from one env opened here."""
    if is_atari(cfg.env.id, cfg.env.wrappers):
        return PONG
    spec = probe_env(cfg)
    return Task(spec.obs_shape, getattr(torch, spec.obs_dtype), spec.actions)


class TinyTorso(nn.Module):
    """Every 4th pixel, one 3x3 convolution of stride 2 and 32 units: the same inputs, little
    work, so that what the learner adds per update shows."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        conv = nn.Conv2d(channels, 8, 3, stride=2)  # [N, 8, 10, 10]
        self.net = nn.Sequential(conv, nn.ReLU(), nn.Flatten(), nn.Linear(800, 32), nn.ReLU())
        self.out_dim = 32

    def forward(self, obs: torch.Tensor) -> torch.Tensor:  # [N, 4, 84, 84] uint8
        return self.net(obs[..., ::4, ::4].float() * (1.0 / 255.0))  # [N, 4, 21, 21]


class HostReads(TorchFunctionMode):
    """Counts the calls that read a tensor's value on the host, and where they are made."""

    def __init__(self) -> None:
        super().__init__()
        self.sites: Counter[str] = Counter()  # its total is the count

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func in READS:
            self.sites[call_site()] += 1
        return func(*args, **(kwargs or {}))


def call_site() -> str:
    """``file:line`` of the innermost rltrain frame on the stack (else this script's): where
    a host sync is made, for the next one to find it (session 34's H200 counted two per
    learn that the CPU count does not see)."""
    frames = traceback.extract_stack()[:-2]
    for f in reversed(frames):
        if "/rltrain/" in f.filename:
            return f"{Path(f.filename).name}:{f.lineno}"
    inner = next((f for f in reversed(frames) if f.filename == __file__), frames[-1])
    return f"{Path(inner.filename).name}:{inner.lineno}"


class AtenOps(TorchDispatchMode):
    """Counts the aten operations dispatched."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.count += 1
        return func(*args, **(kwargs or {}))


def rollout(cfg: TrainConfig, task: Task, seed: int) -> Rollout:
    """A synthetic rollout of the config's shape (a learn's: ``impala.learner_batch`` actors'
    rollouts side by side): random frames or vectors, random actions, sparse +-1 rewards.
    Pong's comes as a run's rollouts reach the learner through their slots: each step's
    newest frame, [T+4, B, 84, 84], with blank frames at the new games' first stacks
    (:mod:`rltrain.rl.frames`); :func:`whole` stacks it for the plain loop."""
    g = torch.Generator().manual_seed(seed)
    T, B = cfg.algo.rollout_length, cfg.env.num_envs * cfg.impala.learner_batch
    rewards = torch.randint(-1, 2, (T, B), generator=g).float()
    rewards *= torch.rand(T, B, generator=g) < 0.05
    terminated = torch.rand(T, B, generator=g) < 0.002
    k, blank = 1, None
    if task.dtype == torch.uint8:
        k = task.obs[0]
        shape = (T + k, B, *task.obs[1:])
        obs = torch.randint(0, 256, shape, generator=g, dtype=torch.uint8)
        blank, now = torch.zeros(T + 1, B, dtype=torch.uint8), torch.zeros(B, dtype=torch.uint8)
        for t in range(T):  # a terminal starts a game whose first stack has k-1 blank frames
            now = torch.where(terminated[t], k - 1, (now.int() - 1).clamp_min(0)).byte()
            blank[t + 1] = now
    else:
        obs = torch.randn(T + 1, B, *task.obs, generator=g).to(task.dtype)
    n = task.actions.n
    if task.actions.continuous:
        actions = torch.randn(T, B, n, generator=g)
        behaviour = torch.cat([torch.randn(T, B, n, generator=g) * 0.01, torch.zeros(T, B, n)], -1)
    else:
        actions = torch.randint(0, n, (T, B), generator=g)
        behaviour = torch.randn(T, B, n, generator=g) * 0.01
    return Rollout(
        actor_id=0,
        version=0,
        obs=obs,
        actions=actions,
        rewards=rewards,
        terminated=terminated,
        truncated=torch.zeros(T, B, dtype=torch.bool),
        behaviour_logits=behaviour,
        final_obs=torch.zeros(0, *task.obs, dtype=task.dtype),
        final_at=torch.zeros(0, 2, dtype=torch.long),
        frame_stack=k,
        blank=blank,
    )


def whole(r: Rollout) -> Rollout:
    """``r`` with its observations stacked, [T+1, B, *obs], as a single-process trainer
    keeps them."""
    obs = r.observations().contiguous()
    return dataclasses.replace(r, obs=obs, frame_stack=1, blank=None)


def model_for(cfg: TrainConfig, task: Task, kind: str, device: torch.device) -> ActorCritic:
    """The config's model (the Nature CNN at its precision, an MLP for vectors) in the
    learners' layout, or the tiny CNN."""
    torch.manual_seed(cfg.seed)
    if kind == "tiny":
        return ActorCritic(TinyTorso(task.obs[0]), task.actions).to(device)
    model = policy_builder(cfg)(cfg.model.kind, task.obs, task.actions, cfg.model.hidden)
    to_device(model, device, cfg.model.precision)
    train_layout(model)
    return model


def learner_path(
    cfg: TrainConfig, task: Task, kind: str, device: torch.device, compile: bool | None = None
) -> Callable[[Rollout], int]:
    """``Learner.learn`` with a shard beside it on ``device``; returns updates per call
    (``compile``: model.compile, its minibatch step compiled; None: the config's)."""
    if compile is not None:
        cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, compile=compile))
    learner = Learner(cfg, task.obs, task.actions, gpu=device.type == "cuda", threads=1)
    learner.model = model_for(cfg, task, kind, device)
    settings = dataclasses.replace(server_settings(cfg), shards=1)
    server = LocalServer(flat_params(learner.model), cfg.optimizer, settings, 1, device=device)

    def learn(r: Rollout) -> int:
        return learner.learn(server, 0.0, r).updates

    return learn


def batch_inputs(
    cfg: TrainConfig, model: ActorCritic, estimate: ValueEstimator, dist: Distribution, r: Rollout
) -> tuple[torch.Tensor, ...]:
    """A single-process trainer's batch: obs [N, *obs], actions [N] (or [N, n]), pi_old's
    logits [N, P], old values, targets and advantages [N] (N = T x B), from one no-grad pass
    over ``r``; ``estimate`` is built once per loop, as the learner builds its own (V-trace's
    behaviour policy: the rollout's, as the learner's)."""
    T, B = r.actions.shape[:2]
    with torch.no_grad():
        logits, values = model(r.obs.flatten(0, 1))
    logits, values = logits.view(T + 1, B, -1)[:T], values.view(T + 1, B)
    inputs = TargetInputs(
        log_probs=lambda: (
            dist.log_prob(r.behaviour_logits, r.actions),
            dist.log_prob(logits, r.actions),
        ),
        rewards=r.rewards,
        discounts=r.discounts(cfg.algo.gamma),
        values=values[:T],
        next_values=values[1:],
        continues=r.continues(),
    )
    targets, adv = estimate(inputs)
    obs, actions = r.obs[:T].flatten(0, 1), r.actions.flatten(0, 1)  # [N, *obs], [N(, n)]
    return (
        obs,
        actions,
        logits.flatten(0, 1),
        values[:T].flatten(),
        targets.flatten(),
        adv.flatten(),
    )


def plain_loop(
    cfg: TrainConfig, task: Task, kind: str, device: torch.device
) -> Callable[[Rollout], int]:
    """A single-process trainer's loop on the same model, targets and loss: no server."""
    model = model_for(cfg, task, kind, device)
    dist = distribution(task.actions)
    o = cfg.optimizer
    opt = torch.optim.Adam(model.parameters(), lr=o.lr, eps=o.eps, fused=True)
    spec, p = PPOLoss(cfg).spec(), cfg.ppo
    gen = torch.Generator().manual_seed(cfg.seed)
    estimate = cfg.algo_spec.make_estimator(cfg)

    def learn(r: Rollout) -> int:
        r = r.to(device)  # every tensor of it, as the learner moves a rollout
        obs, actions, old, old_v, targets, adv = batch_inputs(cfg, model, estimate, dist, r)
        n = len(actions)
        for _ in range(p.epochs):
            for idx in torch.randperm(n, generator=gen).to(device).split(n // p.minibatches):
                lg, v = model(obs[idx])
                loss = actor_critic_loss(
                    lg, actions[idx], v, targets[idx], adv[idx], spec, old[idx], old_v[idx], dist
                )
                opt.zero_grad(set_to_none=True)
                loss.total.backward()
                nn.utils.clip_grad_norm_(model.parameters(), cfg.algo.max_grad_norm)
                opt.step()
        return p.epochs * p.minibatches

    return learn


def graphed_loop(
    cfg: TrainConfig, task: Task, kind: str, device: torch.device
) -> Callable[[Rollout], int]:
    """The plain loop with each update (forward, loss, backward, clipping, Adam's step) one
    CUDA graph, replayed on a minibatch gathered into static buffers (PyTorch's whole-network
    capture, "CUDA Graphs" in its CUDA semantics notes): no op is launched from Python per
    update, so this is what a learner could reach where launching ~280 ops is the cost
    (issue 36: 6.2 ms per update for ~1.9 ms of GPU work at 256). CUDA only."""
    model = model_for(cfg, task, kind, device)
    dist = distribution(task.actions)
    o = cfg.optimizer
    opt = torch.optim.Adam(model.parameters(), lr=o.lr, eps=o.eps, capturable=True)
    spec, p = PPOLoss(cfg).spec(), cfg.ppo
    gen = torch.Generator().manual_seed(cfg.seed)
    estimate = cfg.algo_spec.make_estimator(cfg)
    mb = cfg.algo.rollout_length * cfg.env.num_envs * cfg.impala.learner_batch // p.minibatches
    a = task.actions
    static = {
        "obs": torch.zeros(mb, *task.obs, dtype=task.dtype, device=device),
        "actions": torch.zeros(mb, a.n, device=device)
        if a.continuous
        else torch.zeros(mb, dtype=torch.long, device=device),
        "old": torch.zeros(mb, task.actions.params, device=device),
        **{k: torch.zeros(mb, device=device) for k in ("old_v", "targets", "adv")},
    }

    def update() -> None:
        s = static
        lg, v = model(s["obs"])
        loss = actor_critic_loss(
            lg, s["actions"], v, s["targets"], s["adv"], spec, s["old"], s["old_v"], dist
        )
        loss.total.backward()
        nn.utils.clip_grad_norm_(model.parameters(), cfg.algo.max_grad_norm)
        opt.step()

    side = torch.cuda.Stream(device)  # warm-up on a side stream, as capture requires
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            update()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)  # the captured backward then writes the gradients anew
    with torch.cuda.graph(graph):
        update()

    def learn(r: Rollout) -> int:
        r = r.to(device)
        batch = dict(
            zip(
                ("obs", "actions", "old", "old_v", "targets", "adv"),
                batch_inputs(cfg, model, estimate, dist, r),
                strict=True,
            )
        )
        n = len(batch["actions"])
        for _ in range(p.epochs):
            for idx in torch.randperm(n, generator=gen).to(device).split(mb):
                for k, dst in static.items():
                    torch.index_select(batch[k], 0, idx, out=dst)
                graph.replay()
        return p.epochs * p.minibatches

    return learn


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def ms_per_update(
    fn: Callable[[Rollout], int], batches: list[Rollout], device: torch.device
) -> float:
    sync(device)
    t, updates = time.perf_counter(), 0
    for r in batches:
        updates += fn(r)
    sync(device)
    return 1000 * (time.perf_counter() - t) / updates


def syncs(fn: Callable[[Rollout], int], r: Rollout, device: torch.device) -> Counter[str]:
    """Host reads during one call by where they were made, or CUDA's sync warnings by where
    they were raised where there is a GPU and they are more (``.total()``: the count)."""
    reads, cuda = HostReads(), Counter[str]()

    def note(message: Warning | str, *args: Any, **kwargs: Any) -> None:
        if "synchronizing" in str(message):
            cuda[call_site()] += 1

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = note  # (catch_warnings puts the original back)
        if device.type == "cuda":
            torch.cuda.set_sync_debug_mode("warn")
        try:
            with reads:
                fn(r)
        finally:
            if device.type == "cuda":
                torch.cuda.set_sync_debug_mode(0)
    return cuda if cuda.total() > reads.sites.total() else reads.sites


def sync_split(
    cfg: TrainConfig, task: Task, kind: str, device: torch.device
) -> tuple[float, float, Counter[str]]:
    """(per rollout, per minibatch, where a learn's syncs are made) from two batch sizes:
    syncs = a + b x updates."""
    counts, sites = [], Counter[str]()
    for epochs in (cfg.ppo.epochs, 1):
        c = dataclasses.replace(cfg, ppo=dataclasses.replace(cfg.ppo, epochs=epochs))
        fn = learner_path(c, task, kind, device, compile=False)  # its syncs are outside
        r = rollout(c, task, 99)
        fn(r)  # warm: the optimizer's state, the first pull
        found = syncs(fn, r, device)
        sites = sites or found  # the config's own epochs
        counts.append((epochs * c.ppo.minibatches, found.total()))
    (u1, s1), (u2, s2) = counts
    b = (s1 - s2) / (u1 - u2) if u1 != u2 else 0.0
    return s1 - b * u1, b, sites


def first_call(fn: Callable[[Rollout], int], r: Rollout, device: torch.device) -> float:
    """Seconds of the first call (the optimizer's state, the first pull, a compile)."""
    sync(device)
    t = time.perf_counter()
    fn(r)
    sync(device)
    return time.perf_counter() - t


def aten_ops(fn: Callable[[Rollout], int], r: Rollout) -> float:
    ops = AtenOps()
    with ops:
        updates = fn(r)
    return ops.count / updates


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--config", default=str(ROOT / "configs" / "pong_appo.yaml"))
    p.add_argument("--precision", help="model.precision (default: the config's)")
    p.add_argument("--set", action="append", default=[], help="a config override (KEY=VALUE)")
    p.add_argument("--rollouts", type=int, default=2, help="rollouts per timed block")
    p.add_argument("--repeats", type=int, default=3, help="timed blocks per row (median)")
    p.add_argument(
        "--compile",
        action="store_true",
        help="add a row: the learner with model.compile (torch.compile of its minibatch step)",
    )
    args = p.parse_args()
    torch.set_num_threads(1)
    device = torch.device(args.device)
    cfg = load_config(TrainConfig, args.config, args.set)  # env.num_envs=64: minibatches of 1,024
    if args.precision:
        cfg = dataclasses.replace(
            cfg, model=dataclasses.replace(cfg.model, precision=args.precision)
        )
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    P, task = cfg.ppo, task_of(cfg)
    columns = cfg.env.num_envs * cfg.impala.learner_batch
    print(
        f"device {name}, 1 torch thread; {Path(args.config).name}: obs {task.obs}, "
        f"{task.actions.describe()} actions, rollouts of {cfg.algo.rollout_length} x {columns}, "
        f"{P.epochs} epochs x {P.minibatches} minibatches; median of {args.repeats} blocks of "
        f"{args.rollouts} rollouts"
    )
    print("| model | path | ms per update | vs plain | aten ops per update |")
    print("|---|---|---|---|---|")
    ratios: dict[str, float] = {}
    compiled_ratios: dict[str, float] = {}
    compile_row = args.compile and not cfg.model.compile  # (else the learner row is compiled)
    batches = [rollout(cfg, task, i) for i in range(args.rollouts)]
    stacked = [whole(r) for r in batches]  # the plain loops' (the learner's: frames)
    kinds = ("nature", "tiny") if task == PONG else ("cnn" if len(task.obs) == 3 else "mlp",)
    for kind in kinds:
        fns = {"plain loop": plain_loop(cfg, task, kind, device)}
        fns["learner"] = learner_path(cfg, task, kind, device)
        if compile_row:
            fns[COMPILED] = learner_path(cfg, task, kind, device, compile=True)
        if device.type == "cuda":  # what removing the launches would give: one graph each
            try:
                fns["plain loop, one CUDA graph per update"] = graphed_loop(cfg, task, kind, device)
            except Exception as e:  # noqa: BLE001 - a benchmark row, not the run
                print(f"(the CUDA graph row failed: {type(e).__name__}: {e})")
        given = {k: stacked if k.startswith("plain") else batches for k in fns}
        first = {k: first_call(fn, given[k][0], device) for k, fn in fns.items()}  # warm-up
        # (a dispatch mode sees no op inside a compiled graph: such a row has no count)
        compiled = {COMPILED, "learner"} if cfg.model.compile else {COMPILED}
        ops = {k: aten_ops(fn, given[k][0]) for k, fn in fns.items() if k not in compiled}
        times: dict[str, list[float]] = {k: [] for k in fns}
        for _ in range(args.repeats):  # interleaved: the machine's noise falls on both
            for k, fn in fns.items():
                times[k].append(ms_per_update(fn, given[k], device))
        base = statistics.median(times["plain loop"])
        for k in fns:
            ms = statistics.median(times[k])
            count = f"{ops[k]:.0f}" if k in ops else "-"
            print(f"| {kind} | {k} | {ms:.3f} | {ms / base:.2f}x | {count} |")
        ratios[kind] = statistics.median(times["learner"]) / base
        if compile_row:
            compiled_ratios[kind] = statistics.median(times[COMPILED]) / base
            print(f"({kind}: the compiled learner's first learn took {first[COMPILED]:.1f} s)")
    per_rollout, per_minibatch, sites = sync_split(cfg, task, kinds[-1], device)
    where = ", ".join(f"{site} x{n}" for site, n in sites.most_common()) or "none"
    print(f"learner's host syncs: {per_minibatch:g} per minibatch, {per_rollout:g} per rollout")
    print(f"a learn's host syncs, where they are made: {where}")
    models = ", ".join(f"{kind} {ratio:.2f}x" for kind, ratio in ratios.items())
    models += "".join(f", {kind} compiled {r:.2f}x" for kind, r in compiled_ratios.items())
    print(
        f"learner_step: {models}, syncs/minibatch {per_minibatch:g}, syncs/rollout {per_rollout:g}"
    )


if __name__ == "__main__":
    main()
