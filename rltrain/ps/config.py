"""Config sections of the parameter server: the server-side optimizer and the update rule."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from rltrain.config import spec
from rltrain.ps.rules import UpdateRule, rule_named, rule_names

OPTIMIZERS = (
    "sgd",
    "momentum",
    "nesterov",
    "adagrad",
    "rmsprop",
    "rmsprop_tf",
    "adadelta",
    "adam",
    "cg_fr",
    "cg_hs",
)
STALENESS_POLICIES = ("none", "scale", "drop")
COMPRESSIONS = ("none", "fp16", "int8", "topk", "sign")  # rltrain.ps.compression


@dataclass(frozen=True)
class OptimizerConfig:
    """The server-side optimizer: one per shard, over that shard's flat parameter slice."""

    name: str = field(default="adam", metadata=spec(choices=OPTIMIZERS))
    """sgd, momentum (SGD+momentum), nesterov, adagrad, rmsprop, adadelta or adam, all from
    torch.optim; or rmsprop_tf: TensorFlow 1's RMSProp, the form A3C and IMPALA used (eps inside
    the square root, lr g / sqrt(ms + eps), and the mean square ms starting at 1;
    rltrain.ps.optim.RMSpropTF); or cg_fr / cg_hs: nonlinear conjugate gradients with
    Fletcher-Reeves or Hestenes-Stiefel beta and the fixed step lr (ConjugateGradient)."""
    lr: float = field(default=1e-3, metadata=spec(gt=0))
    """Learning rate (before any staleness scaling). The defaults shown hold for the default
    optimizer (train: rmsprop with A3C's lr 7e-4, eps 0.1, alpha 0.99; bench: adam); a section
    naming another optimizer starts from generic values (lr 1e-3, eps 1e-8)."""
    momentum: float = field(default=0.9, metadata=spec(ge=0, le=1))
    """Momentum of momentum/nesterov (rmsprop and rmsprop_tf use rmsprop_momentum)."""
    rmsprop_momentum: float = field(default=0.0, metadata=spec(ge=0, le=1))
    """Momentum of rmsprop/rmsprop_tf (0 = none, as in A3C's shared RMSProp)."""
    weight_decay: float = field(default=0.0, metadata=spec(ge=0))
    """L2 penalty added by the optimizer."""
    beta1: float = field(default=0.9, metadata=spec(ge=0, le=1))
    """Adam's first-moment decay."""
    beta2: float = field(default=0.999, metadata=spec(ge=0, le=1))
    """Adam's second-moment decay."""
    alpha: float = field(default=0.99, metadata=spec(ge=0, le=1))
    """Squared-gradient decay of rmsprop/rmsprop_tf (A3C: 0.99)."""
    rho: float = field(default=0.9, metadata=spec(ge=0, le=1))
    """Adadelta's decay."""
    eps: float = field(default=1e-8, metadata=spec(gt=0))
    """Denominator epsilon of adagrad/rmsprop/rmsprop_tf/adadelta/adam. rmsprop adds it outside
    the root, lr g / (sqrt(ms) + eps); rmsprop_tf inside, lr g / sqrt(ms + eps), as A3C (0.1) and
    IMPALA (0.01) did. For small gradients the same eps then gives rmsprop_tf a step sqrt(eps)
    times rmsprop's (eps 0.1: ~3x smaller). The default shown is the default optimizer's (see
    lr)."""
    cg_restart: int = field(default=0, metadata=spec(ge=0))
    """cg_fr/cg_hs: restart (beta = 0, a plain gradient step) every this many steps; 0 = only
    when beta comes out negative (it is clipped at 0)."""
    centered: bool = False
    """Centered RMSProp (rmsprop, and rmsprop_tf in TF's form sqrt(ms - mg^2 + eps))."""
    warmup_steps: int = field(default=0, metadata=spec(ge=0))
    """Gradual warm-up (Goyal et al. 2017): the learning rate rises linearly from
    lr / warmup_steps to lr over the first warmup_steps steps of each optimizer, then holds;
    0 = none. Each optimizer counts its own steps: a server shard's (sync: one per round of N
    gradients; async: one per gradient), the baseline's, allreduce's and average's local
    steps, each hogwild worker's. For sync with many workers at lr x N (the linear scaling
    rule), whose first steps are too large."""


@dataclass(frozen=True)
class ServerConfig:
    """How pushes become optimizer steps (docs/architecture.md, "The data flow")."""

    rule: str = field(default="async", metadata=spec(choices=rule_names))
    """The update rule (rltrain.ps.rules; a registered rule's name). sync: wait for all N
    updates of a version, average, step once. soft_sync: step after the first K of N, drop the
    late ones (SyncReplicasOptimizer, N-K backup workers). async: apply every update on arrival
    (Downpour / Gorila / A3C). average: workers push parameters every `average_every` local
    steps and the server averages them."""
    shards: int = field(default=1, metadata=spec(ge=1))
    """Number of parameter-server shards; the flat parameter vector is split across them by
    size, each shard with its own optimizer (DistBelief): a process of its own on Ray; on the
    process runtime in the learner's process (impala/appo, one learner) or the trainer's."""
    k: int = field(default=0, metadata=spec(ge=0))
    """soft_sync: updates to aggregate per step (K of N); 0 means N-1, one backup worker."""
    n_fetch: int = field(default=1, metadata=spec(ge=1))
    """async: workers pull fresh parameters every n_fetch steps (Downpour's n_fetch): bench
    workers, and impala/appo/dqn actors (a3c's workers get them back with each push)."""
    n_push: int = field(default=1, metadata={**spec(ge=1), "only": "bench"})
    """rltrain bench, async: workers push accumulated gradients every n_push steps (Downpour's
    n_push; rltrain train pushes every gradient as it is made)."""
    pipeline: bool = field(default=True, metadata={"only": "bench"})
    """rltrain bench, async: send each push/pull round trip in the background and compute the
    next gradient meanwhile, on the parameters already held (hides the network latency; most
    updates are then a version staler, which a staleness policy scales or drops; hogwild's
    workers write shared memory, with no round trip to hide: never pipelined)."""
    staleness: str = field(default="none", metadata=spec(choices=STALENESS_POLICIES))
    """async staleness policy: none; scale (lr / max(1, staleness)); drop (refuse updates with
    staleness > max_staleness)."""
    max_staleness: int = field(default=4, metadata=spec(ge=0))
    """async with staleness=drop: the largest staleness still applied."""
    average_every: int = field(default=10, metadata={**spec(ge=1), "only": "bench"})
    """average: local optimizer steps between parameter averages."""
    barrier_timeout_s: float = field(default=60.0, metadata=spec(gt=0))
    """sync/soft_sync/average: longest a worker waits at a barrier before pulling anyway."""
    compression: str = field(default="none", metadata=spec(choices=COMPRESSIONS))
    """Pushed gradients travel as: none (float32), fp16, int8 (scaled to the slice's largest
    magnitude), topk (the topk_fraction largest, as index + value) or sign (1 bit a value, times
    the mean magnitude). What is lost is added to the pusher's next push (error feedback: 1-bit
    SGD, Seide et al. 2014; Deep Gradient Compression, Lin et al. 2018)."""
    topk_fraction: float = field(default=0.01, metadata=spec(gt=0, le=1))
    """compression=topk: the fraction of each slice's values sent."""
    momentum_correction: bool = False
    """async with optimizer momentum/nesterov: asynchrony among N pushers acts as an extra
    momentum of about 1 - 1/N (Mitliagkas et al. 2016, "Asynchrony begets momentum"), so the
    server's explicit momentum is lowered to optimizer.momentum - (1 - 1/N), at least 0, and
    the total stays near the configured value."""
    device: str = field(default="auto", metadata={**spec(choices=("auto", "cpu")), "only": "train"})
    """rltrain train: where the shards keep the parameters and the optimizer's state. auto: on
    the learners' GPU when the shards are objects of the learners' process (runtime.backend
    process or local, learners on a GPU), so that a push is an optimizer step on the GPU with
    no copy to the host; else the CPU. cpu: always the CPU (a shard of Ray's is a process of
    its own, always on the CPU)."""
    record: bool = field(default=False, metadata={"only": "bench"})
    """rltrain bench (sync, soft_sync, async*): the shard logs every push it receives (worker,
    version, staleness, the batches behind it) and the run saves the log and the final
    parameters to record/<mode>.pt, so that `rltrain reapply RUN` recomputes the gradients
    serially and reproduces the parameters bit for bit. Needs server.shards 1; rltrain train
    ignores it."""

    @property
    def update_rule(self) -> UpdateRule:
        """The registered rule object named by ``rule``."""
        return rule_named(self.rule)

    @property
    def scales(self) -> bool:
        """Whether an applied update may step at another rate than the optimizer's
        (:meth:`UpdateRule.scales`: staleness scale, or a rule's own lr_scale)."""
        return self.update_rule.scales(self)


def decides_per_update(server: ServerConfig) -> bool:
    """Whether shards could decide an update differently, by their own versions and arrival
    orders: several shards under a barrier rule or a staleness policy. Shard 0 then decides
    for all (:meth:`~rltrain.ps.shard.ParameterShard.push`); async without a staleness policy
    applies every update everywhere and needs no coordination (one round trip, not two)."""
    return server.shards > 1 and server.update_rule.decides(server)


def implicit_momentum(workers: int) -> float:
    """The momentum that asynchrony among ``workers`` pushers adds, 1 - 1/N: under the queueing
    model of Mitliagkas et al. (2016, Theorem 1) an update is k steps stale with probability
    (1 - mu) mu^k, which in expectation is a momentum step with coefficient mu = 1 - 1/N."""
    return 1.0 - 1.0 / max(1, workers)


def check_momentum_correction(optimizer: OptimizerConfig, server: ServerConfig) -> None:
    """ValueError when ``server.momentum_correction`` has no momentum to correct."""
    if server.momentum_correction and optimizer.name not in ("momentum", "nesterov"):
        raise ValueError(
            f"server.momentum_correction=true needs optimizer.name momentum or nesterov, "
            f"got {optimizer.name}"
        )


def corrected_optimizer(
    optimizer: OptimizerConfig, server: ServerConfig, workers: int
) -> OptimizerConfig:
    """The optimizer a shard runs: ``optimizer``, with ``server.momentum_correction``'s lower
    explicit momentum under a rule that applies updates on arrival (unchanged otherwise)."""
    if not (server.momentum_correction and server.update_rule.corrects_momentum):
        return optimizer
    if optimizer.name not in ("momentum", "nesterov"):
        return optimizer
    explicit = max(0.0, optimizer.momentum - implicit_momentum(workers))
    # torch's Nesterov needs a momentum above 0; at 0 both are plain SGD
    name = optimizer.name if explicit > 0 else "momentum"
    return dataclasses.replace(optimizer, name=name, momentum=explicit)
