"""Config of `rltrain bench`: the supervised benchmark of the update rules."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from rltrain.config import spec
from rltrain.config_keys import check_command_keys
from rltrain.envs.user import import_listed
from rltrain.faults import FaultsConfig
from rltrain.ps.config import OptimizerConfig, ServerConfig, check_momentum_correction
from rltrain.ps.rules import rule_named, rule_names
from rltrain.runtime.config import RuntimeConfig
from rltrain.supervised.datasets import DATASETS
from rltrain.supervised.mode_keys import check_pipeline, check_read, check_unread_parts
from rltrain.supervised.models import MODELS
from rltrain.supervised.toys import TOY_PROBLEMS, ToyConfig

# Each mode is a server rule (plus a staleness policy), the single-process baseline, or Hogwild.
# An update rule registered later (rltrain.ps.rules.register_rule) is a mode of its own name.
MODES = (
    "baseline",
    "sync",
    "soft_sync",
    "async",
    "async_scale",
    "async_drop",
    "average",
    "hogwild",
    "sandblaster",
    "allreduce",
)


ASYNC_MODES = ("async", "async_scale", "async_drop", "hogwild")
"""The built-in modes that run the async rule (staleness policies; Hogwild's lock-free twin)."""


def mode_names() -> tuple[str, ...]:
    """Every mode ``modes`` accepts: the built-in ones, then the update rules registered later."""
    return MODES + tuple(name for name in rule_names() if name not in MODES)


def rule_modes(modes: tuple[str, ...]) -> list[str]:
    """Those of ``modes`` named after an update rule (run on the server as that rule)."""
    names = rule_names()
    return [m for m in modes if m in names]


def gradient_modes() -> tuple[str, ...]:
    """The modes whose workers push gradients to a parameter server: the rules that do, and
    async's staleness variants."""
    pushing = tuple(n for n in rule_names() if rule_named(n).records_gradients)
    return (*pushing, "async_scale", "async_drop")


def server_modes() -> tuple[str, ...]:
    """The modes with a parameter server and its workers: every rule's, and async's variants."""
    return (*rule_names(), "async_scale", "async_drop")


@dataclass(frozen=True)
class DataConfig:
    """Which dataset and where its files are."""

    dataset: str = field(default="fashion_mnist", metadata=spec(choices=DATASETS + TOY_PROBLEMS))
    """mnist, fashion_mnist or cifar10; or a generated problem with a known optimum,
    toy_quadratic or toy_logistic (data.toy), whose bench reports the distance to it."""
    root: str = "~/.cache/rltrain/data"
    """Folder holding <dataset>/ with the standard files (IDX .gz files, or
    cifar-10-python.tar.gz / cifar-10-batches-py/), or MNIST's or Fashion-MNIST's four files
    themselves (told apart by their labels). Where it holds none, Fashion-MNIST is read from
    /usr/share/datasets/fashion-mnist (Debian's package)."""
    download: bool = True
    """Download missing files from the canonical sources (checksum-verified)."""
    validation: int = field(default=0, metadata=spec(ge=0))
    """Training samples held out (a draw of its own, the same for every mode and seed) on
    which every snapshot is also scored: best_accuracy is then the test accuracy of the
    snapshot best on them, chosen without the test set (0: none; best_accuracy is the best
    test accuracy, an optimistic pick). The workers train on the rest."""
    toy: ToyConfig = ToyConfig()


@dataclass(frozen=True)
class BudgetConfig:
    """How long each mode trains: whichever limit comes first."""

    max_seconds: float = field(default=120.0, metadata=spec(ge=0))
    """Training seconds per mode (0 = no time limit)."""
    epochs: int = field(default=0, metadata=spec(ge=0))
    """Passes over the training set per mode, shared by the workers (0 = no epoch limit)."""

    def __post_init__(self) -> None:
        if self.max_seconds == 0 and self.epochs == 0:
            raise ValueError("set budget.max_seconds or budget.epochs (both are 0: no limit)")


@dataclass(frozen=True)
class EvalConfig:
    """Test-set evaluation.

    The driver snapshots the parameters every `every_seconds` while the workers train, and
    evaluates the snapshots after the mode ends, so evaluation never steals CPU from training
    and time-to-accuracy is measured on training time alone.
    """

    every_seconds: float = field(default=5.0, metadata=spec(gt=0))
    """Seconds between parameter snapshots (the resolution of time-to-accuracy; at most 256
    are kept, then half of them at twice the interval)."""
    targets: tuple[float, ...] = field(default=(0.85, 0.88), metadata=spec(gt=0, le=1, unique=True))
    """Test accuracies whose seconds and samples to reach are reported."""
    test_samples: int = field(default=0, metadata=spec(ge=0))
    """Evaluate on N test samples drawn at random under ``seed``, the same for every mode
    (0 = the whole test set; at most its size)."""
    distance_targets: tuple[float, ...] = field(
        default=(0.1, 0.01), metadata=spec(gt=0, le=1, unique=True)
    )
    """Toy problems, in place of targets: relative distances to the optimum,
    |w - w*| / |w0 - w*|, whose seconds, samples and updates to reach are reported."""
    save_models: bool = True
    """Each run's final model in models/<mode>[-seed<s>].pt (rltrain.supervised.models'
    build_model and torch.load read it back: 1.2 MB a run for CIFAR-10's ResNet, 0.4 MB for
    MNIST's CNN); false: none written."""


@dataclass(frozen=True)
class WarmStartConfig:
    """DistBelief's warm start: one worker trains alone before the others join."""

    seconds: float = field(default=0.0, metadata=spec(ge=0))
    """Worker 0 trains alone this long, or until it ends its share of an epoch budget; then the
    others pull and push too (0 = together). Server modes: sync, soft_sync, async*, average."""


@dataclass(frozen=True)
class SandblasterConfig:
    """Mode sandblaster: L-BFGS run by the driver through commands to the shards, over large
    batches whose portions the workers compute (Dean et al. 2012, section 4.2)."""

    # Dean et al. (2012, section 4.2) run Sandblaster on large batches, not the whole data set:
    # the coordinator's point is many cheap L-BFGS iterations, each batch's gradient spread
    # over the workers. A full pass over the training set per iteration leaves a time-boxed
    # bench only a few iterations; a tenth of Fashion-MNIST buys ten times as many
    # (docs/supervised.md). A fixed size, not a share of the training set: what an
    # evaluation costs is its samples, whatever the data set's size.
    batch_size: int = field(default=6000, metadata=spec(ge=0))
    """Samples per function evaluation: a fresh batch per iteration, with each (s, y) pair
    measured on one batch. 0 (or at least the training set's size) = the whole training set,
    the same every iteration (deterministic L-BFGS)."""
    portions: int = field(default=16, metadata=spec(ge=1))
    """Pieces each batch is cut into and handed out one at a time to free workers (load
    balancing: a fast worker takes more)."""
    backup_after: float = field(default=0.8, metadata=spec(gt=0, le=1))
    """Once this fraction of a batch's portions is done, the outstanding ones are handed out
    again to idle workers and the first result wins (backup tasks); 1 = no backups."""
    memory: int = field(default=10, metadata=spec(ge=1))
    """(s, y) pairs L-BFGS keeps (m)."""
    max_line_search: int = field(default=10, metadata=spec(ge=1))
    """Backtracking halvings tried before the history is dropped and the step skipped."""


SYNTHETIC = ("none", "dni", "cdni")
"""``model.synthetic``: GPipe's exact backward, or synthetic gradients (unconditioned or
conditioned on the labels): :mod:`rltrain.supervised.synthetic`."""


@dataclass(frozen=True)
class SupervisedModelConfig:
    """The supervised model, and its split over stage processes (model parallelism: GPipe,
    Huang et al. 2019; DistBelief's model partitions). ``model: cnn`` is short for
    ``model: {name: cnn}``."""

    name: str = field(default="auto", metadata=spec(choices=MODELS))
    """auto: a small CNN for MNIST-like data, a small residual CNN for CIFAR-10, linear for the
    toy problems; linear: a linear map of the flattened input (softmax regression on images);
    deep_linear: the same map factored into 3 layers (D x D, D x D, outputs x D), so that a
    toy problem's model can be cut into stages (toy_quadratic: its optimum is the linear one)."""
    stages: int = field(default=1, metadata=spec(ge=1))
    """Processes each replica's model is split over, layers cut where the stages' measured
    times balance (1 = no split). Modes sync and async; each stage exchanges its slice of the
    parameters with its own server shard. A run takes workers x stages processes."""
    micro_batches: int = field(default=4, metadata=spec(ge=1))
    """Pieces each minibatch is cut into, so that stage s works on one while stage s+1 works
    on the one before; their gradients add up to the minibatch's exactly."""
    synthetic: str = field(default="none", metadata=spec(choices=SYNTHETIC))
    """With model.stages >= 2. none: each stage waits for the gradient from the stages after
    it (GPipe). dni, cdni: every stage but the last steps at once on the gradient a small
    model of its output predicts (cdni: from the labels too), and that model learns from the
    true gradient when it comes (synthetic gradients, Jaderberg et al. 2017)."""
    link_ms: float = field(default=0.0, metadata=spec(ge=0))
    """With model.stages >= 2: milliseconds each activation or gradient takes from one stage
    to another (a slow link between machines: on the process runtime each hop is delayed
    in the relay, neither stage waiting; on Ray the sending stage waits; 0: as fast as the
    runtime passes them)."""
    synthetic_hidden: int = field(default=0, metadata=spec(ge=0))
    """Hidden units of each gradient predictor (0: a linear map, its output layer starting at
    zero either way, as in the paper)."""
    synthetic_lr: float = field(default=1e-3, metadata=spec(gt=0))
    """With model.synthetic dni or cdni: the Adam learning rate of each gradient predictor's
    L2 regression (its own optimizer, beside the server's for the model; its error is
    ``synthetic_relative_l2``)."""
    synthetic_delay: int = field(default=2, metadata=spec(ge=1))
    """With model.synthetic dni or cdni: batches after its own that a minibatch's true
    gradients reach the stages before the last (and the replica's lead waits for a batch's
    exchanges). 1: each batch's at the start of the next, so stage 0 waits for the last
    stage's previous batch; 2 or more: every stage works at its own pace, the predictors
    learning from gradients that many updates old (the counters' staleness)."""


TOY_MODELS = ("auto", "linear", "deep_linear")
"""The models of the toy problems: linear maps, whose end-to-end w has the known optimum."""

RAY_MODES = ("sandblaster", "allreduce")
"""Modes whose processes only Ray places."""


def bench_backend(cfg: BenchConfig) -> tuple[str, str]:
    """The runtime of a bench and why: ``auto`` is Ray for a cluster or for a mode that runs
    on Ray only, else the process runtime."""
    from rltrain.runtime.config import chosen_backend

    name, why = chosen_backend(cfg.runtime)
    ray_only = [m for m in cfg.modes if m in RAY_MODES]
    if cfg.runtime.backend == "auto" and ray_only and not cfg.runtime.address:  # (the address
        return "ray", f"runtime.backend=auto with mode {ray_only[0]}, which runs on Ray only"
    return name, why  # is the reason where one is given: explore99)


@dataclass(frozen=True)
class BenchConfig:
    """`rltrain bench`: the same problem trained by each update rule, compared on one table."""

    COMMAND: ClassVar[str] = "bench"  # (its config.yaml leaves out train's keys: to_dict)
    seed: int = field(default=0, metadata=spec(ge=0, le=2**31 - 1))
    """Seed of the model initialisation; worker i shuffles its data with seed + i."""
    seeds: int = field(default=1, metadata=spec(ge=1, le=100))
    """Runs of each mode, at seeds seed, seed + 1, ...; results.md then gives each mode's mean
    and standard deviation over them, beside every run's row. The runs go round by round
    (every mode at one seed, then at the next), so that a machine's drift in speed falls on
    every mode alike."""
    modes: tuple[str, ...] = field(
        default=("baseline", "sync", "soft_sync", "async", "async_scale", "average", "hogwild"),
        metadata=spec(choices=mode_names),
    )
    """Modes to run, in order. baseline: a plain single-process PyTorch loop; sync, soft_sync,
    async, average: the parameter-server rules; async_scale / async_drop: async with the
    staleness policy scale / drop; hogwild: shared-memory lock-free workers, no server;
    sandblaster: L-BFGS driven by a coordinator over the shards (the optimizer keys unused);
    allreduce: no server, workers average gradients with torch.distributed (gloo) and each
    steps its own optimizer (DDP / Horovod). An update rule registered since
    (rltrain.ps.rules.register_rule) is a server mode of its own name."""
    workers: int = field(default=2, metadata=spec(ge=1))
    """Workers per mode (N); each trains on its own shard of the training set."""
    batch_size: int = field(default=64, metadata=spec(ge=1))
    """Minibatch per worker step (and of the baseline)."""
    model: SupervisedModelConfig = SupervisedModelConfig()
    baseline_threads: int = field(default=0, metadata=spec(ge=0))
    """torch threads of the baseline loop; 0 = runtime.threads_per_worker (a fair 1-vs-1)."""
    data: DataConfig = DataConfig()
    budget: BudgetConfig = BudgetConfig()
    eval: EvalConfig = EvalConfig()
    optimizer: OptimizerConfig = OptimizerConfig()
    server: ServerConfig = ServerConfig()
    faults: FaultsConfig = FaultsConfig()
    runtime: RuntimeConfig = RuntimeConfig()
    sandblaster: SandblasterConfig = SandblasterConfig()
    warm_start: WarmStartConfig = WarmStartConfig()
    imports: tuple[str, ...] = ()
    """Your modules, imported before the config is checked, e.g. one that registers an update
    rule (rltrain.ps.rules.register_rule) named in modes, so that the command line and
    `rltrain reapply` know it; what they register reaches the workers with the run. The
    current directory is searched too."""

    @staticmethod
    def before_check(data: Mapping[str, Any]) -> None:
        import_listed(data)

    def __post_init__(self) -> None:
        check_command_keys(self, "bench")  # runtime.inference, ...: train's keys
        if not self.modes:
            raise ValueError("modes: list at least one mode")
        twice = sorted({m for m in self.modes if self.modes.count(m) > 1})
        if twice:  # one row, one tb/<mode> folder and one results column per mode
            raise ValueError(f"modes: {', '.join(twice)} listed twice; list each mode once")
        if self.runtime.backend == "local":
            raise ValueError(
                "runtime.backend=local: rltrain bench runs its workers as processes; use backend "
                "auto, process or ray (backend local is for rltrain train)"
            )
        if self.runtime.backend == "process" and self.runtime.address:  # (as train: explore99)
            raise ValueError(
                "runtime.backend=process runs on this machine: it joins no Ray cluster "
                f"(address {self.runtime.address!r}); use backend ray or auto with --address"
            )
        ray_only = [m for m in self.modes if m in RAY_MODES]
        if self.runtime.backend == "process" and ray_only:
            raise ValueError(
                f"runtime.backend=process: mode {ray_only[0]} runs on Ray only; use backend "
                "ray, or auto (a local Ray for the bench when a mode needs one)"
            )
        check_momentum_correction(self.optimizer, self.server)
        self._check_server_options()
        check_pipeline(self)
        check_unread_parts(self)
        averaging = [m for m in rule_modes(self.modes) if rule_named(m).pushes_parameters]
        if self.server.compression != "none" and averaging:
            raise ValueError(
                f"server.compression={self.server.compression}: not with mode {averaging[0]}, "
                "whose workers push parameters (compression with error feedback is for gradients)"
            )
        if self.data.validation and self.data.dataset in TOY_PROBLEMS:
            raise ValueError(
                f"data.validation={self.data.validation}: for the image datasets; a toy "
                "problem is scored by its distance to the known optimum of its training set"
            )
        if self.data.dataset in TOY_PROBLEMS and self.model.name not in TOY_MODELS:
            raise ValueError(
                f"model={self.model.name} needs images; {self.data.dataset} takes model "
                f"{', '.join(TOY_MODELS)}"
            )
        if self.data.dataset == "toy_logistic" and self.model.name == "deep_linear":
            raise ValueError(
                "model=deep_linear: toy_logistic's known optimum is under an L2 term on the "
                "end-to-end w, which weight decay on the factors does not keep; use "
                "data.dataset=toy_quadratic, or model linear"
            )
        self.faults.check_targets({"worker": self.workers, "shard": self.server.shards})
        for mode in rule_modes(self.modes):  # the count each barrier waits for (K of N)
            rule_named(mode).aggregate_count(self.server, self.workers)
        if self.server.record and self.seeds > 1:
            raise ValueError(
                f"server.record=true needs seeds=1, got {self.seeds}: `rltrain reapply` "
                "replays one run of each mode"
            )
        if self.server.record and self.server.shards != 1:
            raise ValueError(
                f"server.record=true needs server.shards=1, got {self.server.shards}: reapplying "
                "follows one shard's order of the updates, and each shard has its own"
            )

    def _check_server_options(self) -> None:
        """Options that no mode in ``modes`` would use, or that reapplying could not follow,
        are refused rather than ignored."""
        srv, modes = self.server, set(self.modes)
        check_read(self.modes, MODES, srv, self.model.stages)
        if srv.rule != ServerConfig.rule:
            raise ValueError(
                f"server.rule={srv.rule}: each bench mode sets its own rule; choose them with "
                f"modes (one or more of {', '.join(mode_names())})"
            )
        pushing = modes & set(gradient_modes())
        if srv.compression != "none" and not pushing:
            raise ValueError(
                f"server.compression={srv.compression}: no mode in modes pushes gradients to "
                f"a server (one of {', '.join(gradient_modes())})"
            )
        on_arrival = {m for m in rule_modes(self.modes) if rule_named(m).corrects_momentum}
        if srv.momentum_correction and not modes & {*ASYNC_MODES, *on_arrival}:
            raise ValueError(
                "server.momentum_correction=true: applies to async modes, none is in modes"
            )
        warm = self.warm_start.seconds
        if warm > 0 and not modes & set(server_modes()):
            raise ValueError("warm_start.seconds: applies to the server modes, none is in modes")
        if warm > 0 and 0 < self.budget.max_seconds <= warm:
            raise ValueError(
                f"warm_start.seconds={warm:g} is not below budget.max_seconds="
                f"{self.budget.max_seconds:g}: the other workers would never join"
            )
        elastic = any(e.action in ("add", "remove") for e in self.faults.events)
        if srv.record and (srv.compression != "none" or warm > 0 or elastic):
            raise ValueError(
                "server.record=true: not with server.compression, warm_start or add/remove "
                "events, which reapplying does not follow"
            )
