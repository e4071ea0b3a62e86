"""The arguments of ``rltrain eval`` and :func:`rltrain.evaluate`: their checks, and the
errors that name them as the command line does (``--max-steps N``) or the API (``max_steps=N``).
"""

from __future__ import annotations

import json
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from shlex import quote
from typing import Any, Literal

from rltrain.checkpoint import CheckpointError, as_saved
from rltrain.config import to_dict
from rltrain.config_keys import moved_keys
from rltrain.envs.atari import is_atari
from rltrain.errors import RLTrainError, shown
from rltrain.rl.config import TrainConfig
from rltrain.rundir import EVALS_FILE

Style = Literal["cli", "api"]
"""How errors name the arguments: the command line's flags (``--checkpoint latest``) or the
Python API's keywords (``checkpoint="latest"``)."""


class EvalError(RLTrainError):
    """An evaluation that cannot give the score asked for (episodes that never end)."""


def named(arg: str, value: str, style: Style) -> str:
    """Argument ``arg`` set to ``value`` as an error names it in ``style``."""
    return f"--{arg.replace('_', '-')} {value}" if style == "cli" else f'{arg}="{value}"'


@dataclass(frozen=True)
class Whole:
    """A whole-number argument of ``rltrain eval`` and ``rltrain.evaluate()``, which both check
    it with :meth:`check` (the bounds of the config's ``eval.episodes`` and ``eval.seed``)."""

    least: int
    most: int | None = None

    def __str__(self) -> str:
        top = f"{self.least} .. {self.most}" if self.most is not None else f">= {self.least}"
        return f"a whole number {top}"

    def check(self, value: object) -> int:
        """``value`` (an int or a NumPy integer, not a bool) as an int; else a ValueError."""
        if isinstance(value, numbers.Integral) and not isinstance(value, bool):
            n = int(value)
            if n >= self.least and (self.most is None or n <= self.most):
                return n
        raise ValueError(f"expected {self}")


EPISODES = Whole(1)
MAX_STEPS = Whole(1)
DEFAULT_MAX_STEPS = 1_000_000  # agent steps per env before episodes still going fail it
SEED = Whole(0, 2**31 - 1)
"""Env i is seeded seed + i, which must stay within the 2**32 numpy and Gymnasium take."""


def unended(cfg: TrainConfig, ended: int, episodes: int, max_steps: int, style: Style) -> str:
    """The error of an evaluation whose episodes did not all end in ``max_steps`` steps."""
    more = "--max-steps N" if style == "cli" else "max_steps=N"
    if is_atari(cfg.env.id, cfg.env.wrappers):  # (ale-py ends each at env.max_episode_frames)
        most = cfg.env.max_episode_frames // cfg.env.frame_skip  # (the run's config sets them)
        fix = f"allow more steps: {more}; a game here lasts up to {most:,} steps, the run's "
        fix += "env.max_episode_frames / env.frame_skip"
    else:
        fix = "an env without a time limit? train it with one, env.kwargs.max_episode_steps "
        fix += f"(which `rltrain train --resume RUN --set` takes); or allow more: {more}"
    return f"{ended} of {episodes} episodes ended in {max_steps:,} steps ({fix})"


PLAYED_KEYS = (
    *("env.id", "env.kwargs", "env.wrappers", "env.full_action_space", "normalize.obs"),
    *("model.kind", "model.hidden", "env.action_map"),
)
"""Keys that make a network what it is and what it sees: a checkpoint trained with others
(another run's, through ``--checkpoint PATH``) would be played wrongly. (Keys that change
the network's size are caught as its parameters load as well; ``env.action_map`` is how a
Box policy's samples reach the env: another map scored the same checkpoint -45.3 or -34.3.)"""
ATARI_PLAYED_KEYS = ("env.frame_skip", "env.image_size", "env.frame_stack")
"""What an Atari network sees (another image size was said only not to fit the model)."""


def check_played_as(
    path: Path, saved: Any, cfg: TrainConfig, run_dir: Path, style: Style = "cli"
) -> None:
    """A CheckpointError when the checkpoint's config (``saved``) has another value than
    ``cfg`` for a key of :data:`PLAYED_KEYS` (``auto`` on either side is not compared)."""
    if not isinstance(saved, dict):  # (older checkpoints: the model's size is still checked)
        return
    old, new = moved_keys(TrainConfig, saved), as_saved(to_dict(cfg))
    for key in PLAYED_KEYS + (ATARI_PLAYED_KEYS if is_atari(cfg.env.id) else ()):
        was, now = _at(old, key), _at(new, key)
        if was is _NONE or was == now or "auto" in (was, now):
            continue
        home, said = path.parent.parent, f"{path} was trained with {key}={shown(was)}, not"
        if home.resolve() == run_dir.resolve():  # the run's own: its config.yaml was edited
            raise CheckpointError(
                f"{said} the {shown(now)} of {run_dir}/config.yaml, changed since it was "
                "saved (by an edit, or a resume's --set); set it back to play this checkpoint"
            )
        own = quote(str(home)) if (home / "config.yaml").is_file() else "its run"
        again = f"run_dir {own}"
        if style == "cli":
            again = f"rltrain eval {own} --checkpoint {quote(str(path))}"
        raise CheckpointError(
            f"{said} the {shown(now)} of {run_dir}: a checkpoint plays with its own run's "
            f"config ({again})"
        )


_NONE = object()


def _at(data: dict[str, Any], dotted_key: str) -> Any:
    for part in dotted_key.split("."):
        if not isinstance(data, dict) or part not in data:
            return _NONE
        data = data[part]
    return [*data] if isinstance(data, tuple) else data


def trained_steps(run_dir: Path) -> int:
    """The env steps the run's summary.json says it trained (0: none, or no summary): a run
    that trained wrote a checkpoint as it stopped (explore107: deleted ones were "not yet")."""
    try:
        steps = json.loads((run_dir / "summary.json").read_text()).get("env_steps")
    except (OSError, ValueError, AttributeError):
        return 0
    return steps if isinstance(steps, int) and not isinstance(steps, bool) else 0


def evals_held(run_dir: Path) -> int:
    """The records of the run's evals.jsonl (each evaluation's checkpoint was kept as best.pt
    where it scored best so far, so the first one at least)."""
    try:
        return sum(1 for line in (run_dir / EVALS_FILE).read_text().splitlines() if line.strip())
    except (OSError, UnicodeDecodeError):
        return 0


def cut_games(cfg: TrainConfig, lengths: Sequence[int]) -> str:
    """A note for Atari games the run's ``env.max_episode_frames`` cut (explore115: a score
    of games cut at 250 steps, said as any other)."""
    limit = cfg.env.max_episode_frames // cfg.env.frame_skip
    cut = sum(n >= limit for n in lengths)
    if not cut or not is_atari(cfg.env.id, cfg.env.wrappers):
        return ""
    return (
        f"{cut} of {len(lengths)} games cut at env.max_episode_frames="
        f"{cfg.env.max_episode_frames:,} ({limit:,} steps): their scores are of part of a game"
    )
