"""The command line's checks of its arguments: argparse types for numbers, and a config of
the other command (a bench config given to ``train``) named as such instead of failing on its
first foreign key."""

from __future__ import annotations

import argparse
import contextlib
import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from shlex import quote

from rltrain.errors import ConfigError, RLTrainError
from rltrain.launch import UserError


def count_arg(text: str) -> int:
    """An argparse type: a whole number >= 1."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {n}")
    return n


def score_arg(text: str) -> float:
    """An argparse type: a finite number (plot's --marks)."""
    try:
        x = float(text)
    except ValueError:
        # `plot --marks 100 runs/*` takes the runs for scores (explore101): say where they go
        after = " (a run folder: give --marks after the runs)"
        after = after if Path(text).exists() else ""
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}{after}") from None
    if not math.isfinite(x):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return x


def episodes_arg(text: str) -> int:
    """An argparse type: eval's --episodes, by the rule rltrain.evaluate() checks (EPISODES)."""
    from rltrain.rl.eval_args import EPISODES

    try:
        return EPISODES.check(int(text))
    except ValueError:
        got = text.strip() if text.strip().lstrip("+-").isdigit() else repr(text)  # 0, 'ten'
        raise argparse.ArgumentTypeError(f"expected {EPISODES}, got {got}") from None


def seed_arg(text: str) -> int:
    """An argparse type: eval's --seed, by the rule rltrain.evaluate() checks (SEED)."""
    from rltrain.rl.eval_args import SEED

    try:
        return SEED.check(int(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {SEED}, got {text!r}") from None


@contextlib.contextmanager
def meant_for(path: str | Path, command: str, overrides: Sequence[str] = ()) -> Iterator[None]:
    """A config of the other command (a bench config given to ``train`` or ``eval``, a train
    config to ``bench``) fails on its first foreign key: say which command it is for. On
    ``resume`` (``path``: a run's config.yaml), an override of a key a resumed run keeps is
    named first, where the config it makes fails its own checks (``--set algo.name=dqn`` was
    told to change normalize.obs, itself kept: advice no resume could follow)."""
    try:
        yield
    except ConfigError as e:
        kept = _kept_change(Path(path).parent, overrides) if command == "resume" else ""
        if kept:
            raise UserError(kept) from None
        foreign = foreign_keys(path, command) if "unknown config key" in str(e) else []
        if not foreign:
            raise
        keys = ", ".join(foreign[:3])
        if command == "bench":
            raise UserError(
                f"{path} is a `rltrain train` config (it has {keys}); run: rltrain train "
                f"{quote(str(path))}"
            ) from None
        if command in ("eval", "resume"):  # a run folder's config.yaml
            run = Path(path).parent
            raise UserError(
                f"{run} is a `rltrain bench` run (its config.yaml has {keys}): its results are "
                f"in {run / 'results.md'}, its curves in tensorboard --logdir "
                f"{quote(str(run / 'tb'))}"
            ) from None
        raise UserError(
            f"{path} is a `rltrain bench` config (it has {keys}); run: rltrain bench {path}"
        ) from None


def foreign_keys(path: str | Path, command: str) -> list[str]:
    """The top-level keys of the YAML at ``path`` that only the other command's config has."""
    import dataclasses

    from rltrain.rl.config import TrainConfig
    from rltrain.supervised.config import BenchConfig
    from rltrain.yaml_files import read_yaml

    try:
        keys = read_yaml(path)
    except RLTrainError:
        return []
    train = {f.name for f in dataclasses.fields(TrainConfig)}
    bench = {f.name for f in dataclasses.fields(BenchConfig)}
    mine, theirs = (
        (bench - train, train - bench) if command == "bench" else (train - bench, bench - train)
    )
    if any(k in mine for k in keys):  # this command's config with a typo: its own error says
        return []
    return [k for k in keys if k in theirs]


def _kept_change(run_dir: Path, overrides: Sequence[str]) -> str:
    """The refusal of the first ``--set`` that changes a key of the run's config.yaml that a
    resumed run keeps ("" for none, or where either cannot be read)."""
    from rltrain.config import parse_overrides
    from rltrain.config_keys import dotted
    from rltrain.launch import KEPT_FIRST
    from rltrain.rl.config import run_yaml
    from rltrain.rl.run.resume import KEPT_ON_RESUME, kept_refusal

    try:
        asked = dotted(parse_overrides(overrides))
        was = dotted(run_yaml(run_dir / "config.yaml"))
    except (RLTrainError, OSError):
        return ""
    for key in sorted(KEPT_ON_RESUME, key=lambda k: k != KEPT_FIRST):
        old, new = was.get(key, "auto"), asked.get(key, "auto")
        if old != new and "auto" not in (old, new):
            return kept_refusal(key, new, old, run_dir)
    return ""
