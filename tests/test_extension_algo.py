"""A new algorithm is one registry entry: REINFORCE with a learned baseline, its loss and its
own config section defined in this file alone, trains CartPole through the trainer."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch

import rltrain
from rltrain.config import ConfigError, spec
from rltrain.rl.algos import (
    AlgoSpec,
    LossBatch,
    PolicyLoss,
    RunSettings,
    algo_names,
    algo_spec,
    register_algo,
    unregister_algo,
)
from rltrain.rl.algos.estimators import NStep
from rltrain.rl.algos.losses import LossTerms
from rltrain.rl.config import StopConfig, TrainConfig

ROOT = Path(__file__).resolve().parents[1]
SEEN: list[tuple[float, tuple[int, ...]]] = []


@dataclass(frozen=True)
class ReinforceConfig:
    """reinforce (section ``reinforce``): the learned baseline's weight."""

    baseline_coef: float = field(default=0.5, metadata=spec(ge=0))
    """Weight of the baseline's squared error beside the policy term."""


class ReinforceLoss(PolicyLoss):
    """-log pi(a|x) (G - b(x)) + c_b (b(x) - G)^2 - c_e H(pi) (Williams 1992, with a learned
    baseline b = V): G is the return to the end of the rollout (:class:`NStep`)."""

    def __init__(self, cfg: RunSettings) -> None:
        super().__init__(cfg)
        self.baseline_coef = cfg.section("reinforce").baseline_coef

    def __call__(self, b: LossBatch) -> LossTerms:
        SEEN.append((self.baseline_coef, tuple(b.logits.shape)))
        logp = b.dist.log_prob(b.logits, b.actions)  # [N]
        policy = -(logp * b.advantages.detach()).mean()
        baseline = ((b.values - b.value_targets.detach()) ** 2).mean()
        entropy = b.dist.entropy(b.logits).mean()
        total = policy + self.baseline_coef * baseline - self.entropy_coef * entropy
        zero = torch.zeros(())
        parts = torch.stack([policy, baseline, entropy, zero, zero]).detach()
        return LossTerms(total, parts, absent=("kl", "clip_fraction"))


def returns_to_go(cfg: RunSettings) -> NStep:
    """Each step's return to the end of the rollout, bootstrapped from its last value."""
    return NStep()


REINFORCE = AlgoSpec(
    "reinforce",
    "worker",
    ReinforceLoss,
    returns_to_go,
    sections=("algo", "reinforce"),
    options={"reinforce": ReinforceConfig},
    summary="REINFORCE with a learned baseline (Williams 1992)",
)


@pytest.fixture
def reinforce() -> Iterator[AlgoSpec]:
    SEEN.clear()
    yield register_algo(REINFORCE)
    unregister_algo("reinforce")


@pytest.mark.parametrize("backend", ["local", "process"])
def test_a_registered_algorithm_with_its_own_loss_and_option_trains(
    reinforce: AlgoSpec, tmp_path: Path, backend: str
) -> None:
    """On threads the workers see the registration made here; the process runtime's children
    (forks of a forkserver that started earlier) get it with their arguments. Its option is a
    section of the run's config.yaml, as a built-in algorithm's."""
    run = rltrain.train(
        ROOT / "configs" / "cartpole_a3c.yaml",
        run_dir=tmp_path / "run",
        algo__name="reinforce",
        reinforce__baseline_coef=0.25,
        actors=1,
        runtime__backend=backend,
        stop__mean_return=None,
        stop__max_env_steps=2_000,
    )
    assert run.stopped_by == "max_env_steps"
    assert run.summary["algo"] == "reinforce" and run.summary["updates"] > 0
    saved = (tmp_path / "run" / "config.yaml").read_text()
    assert "reinforce:\n  baseline_coef: 0.25" in saved
    if backend == "local":  # the loss ran in this process, on [T B, A] logits
        assert SEEN and SEEN[0] == (0.25, (16 * 8, 2))


def test_its_section_is_checked_listed_and_gone_with_it(reinforce: AlgoSpec) -> None:
    from rltrain.config import load_config
    from rltrain.options import describe

    over = ["algo.name=reinforce", "stop.max_env_steps=10"]
    cfg = load_config(TrainConfig, None, [*over, "reinforce.baseline_coef=2"])
    assert cfg.section("reinforce") == ReinforceConfig(2.0)
    with pytest.raises(ConfigError, match=r"reinforce.baseline_coef=-1.0: must be >= 0"):
        load_config(TrainConfig, None, [*over, "reinforce.baseline_coef=-1"])
    with pytest.raises(ConfigError, match=r"unknown config key 'reinforce.basline_coef'"):
        load_config(TrainConfig, None, [*over, "reinforce.basline_coef=1"])
    assert "reinforce.baseline_coef" in [row[0] for row in describe(TrainConfig)]
    unregister_algo("reinforce")
    with pytest.raises(ConfigError, match=r"unknown config key 'reinforce'") as e:
        load_config(TrainConfig, None, ["reinforce.baseline_coef=1", "stop.max_env_steps=10"])
    # its module not imported: said as such, not as a typo (explore108)
    own = "once the module that registers it is named in the top-level key imports"
    assert str(e.value).endswith(f"; a section of an algorithm of yours exists {own}")
    with pytest.raises(
        ConfigError, match=f"allowed values are .*; one of your own is allowed {own}"
    ):
        load_config(TrainConfig, None, ["algo.name=reinforce", "stop.max_env_steps=10"])
    register_algo(REINFORCE)  # for the fixture's unregister


def test_estimators_are_swappable_objects() -> None:
    """A spec's estimator is an object built from the config: impala's is V-trace, or GAE
    with impala.correction: none; a3c's is GAE(lambda)."""
    from rltrain.config import load_config
    from rltrain.rl.algos.estimators import GAE, VTrace

    cfg = load_config(TrainConfig, None, ["algo.name=impala", "stop.max_env_steps=10"])
    assert isinstance(cfg.algo_spec.make_estimator(cfg), VTrace)
    cfg = load_config(
        TrainConfig,
        None,
        ["algo.name=impala", "impala.correction=none"]
        + ["algo.gae_lambda=0.9", "stop.max_env_steps=10"],
    )
    assert cfg.algo_spec.make_estimator(cfg) == GAE(0.9)


def test_the_registry_names_every_algorithm_in_a_bad_name_error(reinforce: AlgoSpec) -> None:
    assert algo_spec("reinforce") is reinforce
    with pytest.raises(ConfigError, match=r"algo.name='toy': allowed values are a3c, .*reinforce"):
        rltrain.Config.from_yaml(ROOT / "configs" / "cartpole_a3c.yaml").with_overrides(
            {"algo.name": "toy"}
        )
    # the same spec again is the same algorithm (as a child process that holds the driver's
    # imports the module that registers it); another under its name is refused
    assert register_algo(dataclasses.replace(REINFORCE)) is reinforce
    with pytest.raises(ValueError, match="registered already"):
        register_algo(dataclasses.replace(REINFORCE, layout="actor_learner"))
    with pytest.raises(ValueError, match="config section 'ppo' is taken"):
        register_algo(AlgoSpec("mine", "worker", ReinforceLoss, NStep, options={"ppo": dict}))


def test_options_of_the_old_flat_algo_section_still_load() -> None:
    """Configs, command lines and checkpoints of an older rltrain kept PPO's and IMPALA's
    options in ``algo``: they land in their own sections."""
    cfg = rltrain.Config.from_yaml(ROOT / "configs" / "cartpole_appo.yaml").with_overrides(
        {"algo.epochs": 3, "algo.correction": "none", "algo.gamma": 0.9}
    )
    assert cfg.value.ppo.epochs == 3 and cfg.value.impala.correction == "none"
    assert cfg.value.algo.gamma == 0.9
    assert algo_spec("appo").sections == ("algo", "impala", "ppo")


def test_a_new_key_set_over_an_old_run_config_wins(tmp_path: Path) -> None:
    """A run's config.yaml from before the sections holds algo.epochs; --set ppo.epochs on
    resume must win over it, and a resume names the change."""
    from rltrain.config import load_config
    from rltrain.rl.run.resume import resume_changes

    old = tmp_path / "config.yaml"
    old.write_text("algo: {name: appo, epochs: 4}\nstop: {max_env_steps: 100}\n")
    cfg = load_config(TrainConfig, old, ["ppo.epochs=8"])
    assert cfg.ppo.epochs == 8
    saved = {"algo": {"name": "appo", "epochs": 4}, "stop": {"max_env_steps": 100}}
    assert resume_changes(tmp_path / "ckpt.pt", saved, cfg) == ["ppo.epochs: 4 -> 8"]


def test_a_module_of_imports_registers_before_the_config_is_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From the command line a user's algorithm lives in a module of ``imports``: it is
    imported before ``algo.name`` is checked (and by every process that makes an env or
    learns)."""
    from rltrain.config import load_config

    (tmp_path / "my_algos.py").write_text(
        "from rltrain.rl.algos import AlgoSpec, register_algo\n"
        "from rltrain.rl.algos.a3c import ActorCriticLoss, gae\n"
        'register_algo(AlgoSpec("mine", "worker", ActorCriticLoss, gae))\n'
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        argv = ["imports=[my_algos]", "algo.name=mine", "stop.max_env_steps=10"]
        assert load_config(TrainConfig, None, argv).algo_spec.name == "mine"
    finally:
        unregister_algo("mine")
        sys.modules.pop("my_algos", None)


def test_reading_a_train_config_imports_no_torch() -> None:
    """``rltrain train`` reads its config, then starts Ray while torch loads elsewhere: the
    registries keep their tensor code out of the config's imports."""
    code = "import sys, rltrain.rl.config; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_a_child_takes_its_modules_own_spec_over_the_drivers_unpickled_copy() -> None:
    """explore86: a loss given as a functools.partial (or a lambda by value) unpickles as a new
    object, so the child's copy of the driver's spec was unequal to the one its imports module
    then registered: "registered already", every process-runtime run a fault."""
    import functools

    from rltrain.rl.algos.base import _add_unknown

    loss = functools.partial(ReinforceLoss)
    driver = dataclasses.replace(REINFORCE, name="reinforce_p", loss=loss)
    _add_unknown(driver)  # what a child restores first (rltrain.extensions)
    try:
        own = dataclasses.replace(driver, loss=functools.partial(ReinforceLoss))
        assert register_algo(own) is own  # the module's own definition, in place of the copy
        with pytest.raises(ValueError, match="registered already"):  # but never twice
            register_algo(dataclasses.replace(driver, loss=functools.partial(ReinforceLoss)))
    finally:
        unregister_algo("reinforce_p")


def test_a_section_named_after_a_top_level_key_is_refused() -> None:
    """explore86: a section called stop broke every config, the built-in algorithms' too."""
    import dataclasses as dc

    from rltrain.rl.algos.base import TOP_LEVEL_KEYS, section_types

    clash = dc.replace(REINFORCE, name="clash", options={"stop": ReinforceConfig})
    with pytest.raises(ValueError, match="config section 'stop' is taken"):
        register_algo(clash)
    assert "clash" not in algo_names()
    fields = {f.name for f in dc.fields(TrainConfig)}  # TOP_LEVEL_KEYS is TrainConfig's
    assert set(TOP_LEVEL_KEYS) == fields - set(section_types(built_in=True))


def test_the_extending_pages_modules_are_the_examples_and_register_what_it_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """docs/extending.md shows examples/vpg.py and examples/decay_rule.py as they are, and
    they register what it says."""
    import importlib
    import re

    from rltrain.config import load_config
    from rltrain.ps.config import ServerConfig
    from rltrain.ps.rules import rule_named, unregister_rule

    page = (ROOT / "docs" / "extending.md").read_text()
    algo, rule = re.findall(r"^```python\n(.*?)^```", page, re.S | re.M)
    assert algo == (ROOT / "examples" / "vpg.py").read_text()
    assert rule == (ROOT / "examples" / "decay_rule.py").read_text()
    monkeypatch.syspath_prepend(str(ROOT))  # where `examples` is found, as the page's commands
    try:
        importlib.import_module("examples.vpg")
        importlib.import_module("examples.decay_rule")
        assert algo_spec("vpg").summary.startswith("REINFORCE")
        sets = ["algo.name=vpg", "vpg.baseline_coef=0.2", "server.rule=async_decay"]
        cfg = load_config(TrainConfig, ROOT / "configs" / "cartpole_a3c.yaml", sets)
        assert cfg.section("vpg").baseline_coef == 0.2
        decay = rule_named("async_decay")
        assert decay.lr_scale(ServerConfig(), 2) == pytest.approx(0.64)
        assert decay.decides(ServerConfig())  # decided once for every shard
    finally:
        unregister_algo("vpg")
        unregister_rule("async_decay")
        for name in ("examples.vpg", "examples.decay_rule"):
            sys.modules.pop(name, None)


def test_options_imports_a_module_and_lists_its_section(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """explore86: `rltrain options train` could not list an algorithm's own options (its
    module was never imported); --import MODULE imports it first, as a config's imports."""
    from rltrain.cli import main

    monkeypatch.chdir(ROOT)  # (examples/ from the repository's root, as the docs run it)
    try:
        assert main(["options", "train", "--import", "examples.vpg"]) == 0
        assert "vpg.baseline_coef" in capsys.readouterr().out
    finally:
        unregister_algo("vpg")
        sys.modules.pop("examples.vpg", None)
    assert main(["options", "train", "--import", "no_such_module"]) == 2
    assert "rltrain: error: --import: cannot import module 'no_such_module'" in (
        capsys.readouterr().err
    )


@pytest.mark.slow
def test_a_run_that_a_script_trained_lists_the_module_that_registered_its_algorithm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """explore86: a script that imported its algorithm's module, then called rltrain.train,
    left a run that `rltrain eval` and --resume could not read ("unknown config key"): the
    run now lists that module in its imports; a run whose algorithm nothing names is one line."""
    from rltrain.cli import main

    (tmp_path / "my_algos2.py").write_text(
        "from rltrain.rl.algos import AlgoSpec, register_algo\n"
        "from rltrain.rl.algos.a3c import ActorCriticLoss, gae\n"
        'register_algo(AlgoSpec("mine2", "worker", ActorCriticLoss, gae))\n'
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    run = tmp_path / "run"
    try:
        import my_algos2  # type: ignore[import-not-found]  # noqa: F401 - as a script would

        rltrain.train(
            ROOT / "configs" / "cartpole_a3c.yaml",
            run_dir=run,
            algo__name="mine2",
            actors=1,
            runtime__backend="local",
            stop__mean_return=None,
            stop__max_env_steps=500,
        )
        assert "imports:\n- my_algos2\n" in (run / "config.yaml").read_text()
        unregister_algo("mine2")  # a new command: nothing registered
        sys.modules.pop("my_algos2")
        assert main(["eval", str(run), "--episodes", "1"]) == 0  # its imports register it
        unregister_algo("mine2")
        sys.modules.pop("my_algos2")
        text = (run / "config.yaml").read_text().replace("imports:\n- my_algos2\n", "imports: []\n")
        (run / "config.yaml").write_text(text)
        capsys.readouterr()
        assert main(["eval", str(run), "--episodes", "1"]) == 2
        err = capsys.readouterr().err
        assert "algo.name='mine2' is none of this rltrain's (a3c, " in err
        assert "name the module that registers it in imports (--set imports=[module])" in err
    finally:
        if "mine2" in algo_names():
            unregister_algo("mine2")
        sys.modules.pop("my_algos2", None)
    from rltrain.extensions import _IMPORTED_BY

    assert ("rltrain.rl.algos", "mine2") not in _IMPORTED_BY  # forgotten with it


@pytest.mark.slow
def test_a_scripts_own_algorithm_with_options_trains_on_the_process_runtime(
    tmp_path: Path,
) -> None:
    """explore91: a script that defines its algorithm and its options section in ``__main__``
    and trains on the default runtime failed as "an internal error" (the config's section, an
    instance of a ``__main__`` class, could not be pickled for the children): it travels by
    value now, as the registration does."""
    script = tmp_path / "mine.py"
    script.write_text(
        "import dataclasses\n"
        "import rltrain\n"
        "from rltrain.rl.algos import AlgoSpec, register_algo\n"
        "from rltrain.rl.algos.a3c import ActorCriticLoss, gae\n\n"
        "@dataclasses.dataclass(frozen=True)\n"
        "class MineConfig:\n"
        "    coef: float = 0.5\n\n"
        "class MineLoss(ActorCriticLoss):\n"
        "    def __init__(self, cfg):\n"
        "        super().__init__(cfg)\n"
        "        assert cfg.section('mine').coef == 0.25\n\n"
        "register_algo(AlgoSpec('mine', 'worker', MineLoss, gae, sections=('algo', 'mine'),\n"
        "                       options={'mine': MineConfig}))\n"
        "if __name__ == '__main__':\n"
        f"    run = rltrain.train({str(ROOT / 'configs' / 'cartpole_a3c.yaml')!r}, run_dir='run',\n"
        "        algo__name='mine', mine__coef=0.25, actors=1, runtime__backend='process',\n"
        "        stop__mean_return=None, stop__max_env_steps=1000)\n"
        "    assert run.stopped_by == 'max_env_steps', run.stopped_by\n"
    )
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


def test_a_section_name_that_is_no_section_is_one_line_naming_the_caller() -> None:
    """explore91: a loss of one's own that reads cfg.section("nosuch") (a typo) ended as "an
    internal error (a bug; please report it)": it is the config's one-line error, naming the
    line that asked and the sections there are."""
    from rltrain.config import ConfigError

    cfg = TrainConfig(stop=StopConfig(max_env_steps=100))
    with pytest.raises(ConfigError, match=r"cfg.section\('nosuch'\) at test_extension_algo.py:\d+"):
        cfg.section("nosuch")
    with pytest.raises(ConfigError, match="the config's are env, algo, ppo, .*, runtime$"):
        cfg.section("nosuch")


def test_an_error_in_a_loss_the_script_defines_is_the_users(tmp_path: Path) -> None:
    """explore108: docs/extending.md lets a script's ``__main__`` define a loss; an error in it
    was "an internal error (a bug; please report it)" and a raw NameError, where the same loss
    in an imported module was TrainFailed naming its line."""
    script = tmp_path / "buggy.py"
    script.write_text(
        "import rltrain\n"
        "from rltrain.rl.algos import AlgoSpec, register_algo\n"
        "from rltrain.rl.algos.a3c import ActorCriticLoss, gae\n\n"
        "class Buggy(ActorCriticLoss):\n"
        "    def __call__(self, b):\n"
        "        return lgop * 2  # noqa: F821\n\n"
        "register_algo(AlgoSpec('buggy', 'worker', Buggy, gae))\n"
        "try:\n"
        f"    rltrain.train({str(ROOT / 'configs' / 'cartpole_a3c.yaml')!r}, run_dir='run',\n"
        "        algo__name='buggy', actors=1, runtime__backend='local', quiet=True,\n"
        "        stop__mean_return=None, stop__max_env_steps=1000)\n"
        "except rltrain.TrainFailed as e:\n"
        "    print('failed:', e)\n"
    )
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert "failed: an error in your code: NameError: name 'lgop' is not defined" in done.stdout
    assert "(at buggy.py:7, in __call__)" in done.stdout, done.stdout + done.stderr[-2000:]
