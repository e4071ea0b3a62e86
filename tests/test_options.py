"""`rltrain options`, the manual of every config key: its type column (bounds and auto from
the checker's spec), one key or section looked up, and docs wrapped on a terminal only
(explore101 findings 4 and 10). What each command lists is in tests/test_cli.py."""

from __future__ import annotations

import dataclasses
import re
import typing
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from rltrain.cli import main
from rltrain.config import ConfigError, _check, spec
from rltrain.options import bounds_of, describe, manual, select
from rltrain.rl.config import TrainConfig
from rltrain.supervised.config import BenchConfig

CLASSES = {"train": TrainConfig, "bench": BenchConfig}
BOUNDS = ("ge", "gt", "le", "lt")


def kinds(command: str) -> dict[str, str]:
    """Key -> type column of `rltrain options <command>`."""
    return {key: kind for key, kind, _, _ in describe(CLASSES[command], command=command)}


def specs(cls: type, prefix: str = "") -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(key, field metadata) of every key of ``cls``, its sections' and list items' too."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        item = typing.get_args(tp)[0] if typing.get_origin(tp) is tuple else None
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            yield from specs(tp, f"{prefix}{f.name}.")
        elif isinstance(item, type) and dataclasses.is_dataclass(item):
            yield from specs(item, f"{prefix}{f.name}[].")
        else:
            yield prefix + f.name, f.metadata


@pytest.mark.parametrize(
    ("command", "key", "kind"),
    [
        ("train", "algo.gamma", "float in [0, 1]"),
        ("train", "stop.window", "int >= 1"),
        ("train", "model.log_std_init", "float in [-5, 5]"),
        ("train", "env.image_size", "int >= 8"),
        ("train", "env.sticky_actions", "float in [0, 1) | null"),
        ("train", "faults.max_restarts", "int >= -1"),
        ("train", "seed", "int in [0, 2147483647]"),
        ("train", "actors", "int >= 0 | auto"),
        ("train", "env.groups", "int >= 0 | auto"),
        ("train", "env.num_threads", "int >= 0 | auto"),
        ("train", "faults.events[].index", "int >= 0"),
        ("bench", "eval.targets", "list[float in (0, 1]]"),
        ("bench", "server.n_push", "int >= 1"),
        ("train", "stop.mean_return", "float | null"),
    ],
)
def test_the_type_column_shows_the_bounds_and_auto(command: str, key: str, kind: str) -> None:
    assert kinds(command)[key] == kind


@pytest.mark.parametrize("command", ["train", "bench"])
def test_every_bound_and_auto_the_checker_enforces_is_shown(command: str) -> None:
    """Read from the spec the checker reads: each key with a bound shows each of its values,
    and exactly the keys that take auto say so (choices that hold it aside)."""
    shown = kinds(command)
    metas = {k: m for k, m in specs(CLASSES[command]) if k in shown}
    bounded = {k: m for k, m in metas.items() if any(m.get(b) is not None for b in BOUNDS)}
    assert len(bounded) > (80 if command == "train" else 30)  # (train: 89 in explore101)
    for key, meta in bounded.items():
        numbers = {float(n) for n in re.findall(r"-?\d+(?:\.\d+)?(?:e-?\d+)?", shown[key])}
        assert {float(meta[b]) for b in BOUNDS if meta.get(b) is not None} <= numbers, key
    auto = {k for k, kind in shown.items() if kind.endswith(" | auto")}
    assert auto == {k for k, m in metas.items() if m.get("auto")}
    if command == "train":
        assert auto == {"actors", "env.groups", "env.num_threads"}


@pytest.mark.parametrize(
    "meta",
    [spec(ge=0, le=1), spec(ge=0, lt=1), spec(gt=0, le=1), spec(gt=0, lt=1), spec(ge=1)]
    + [spec(gt=0), spec(le=1), spec(lt=1), spec()],
)
def test_a_shown_range_accepts_what_the_checker_accepts(meta: dict[str, Any]) -> None:
    """Brackets and words mean what the checker does: a value the manual's range holds is
    accepted, one it does not is refused."""
    text = bounds_of(meta)
    for value in (-0.5, 0.0, 0.5, 1.0, 1.5):
        try:
            _check(value, "k", meta)
            accepted = True
        except ConfigError:
            accepted = False
        assert accepted == holds(text, value), (text, value)


def holds(text: str, value: float) -> bool:
    """Whether the range ``text`` (`` in [0, 1)``, `` >= 1``, "") holds ``value``."""
    interval = re.fullmatch(r" in ([\[(])(\S+), (\S+)([\])])", text)
    if interval:
        opens, low, high, closes = interval.groups()
        above = value >= float(low) if opens == "[" else value > float(low)
        return above and (value <= float(high) if closes == "]" else value < float(high))
    tests = {">=": float.__ge__, ">": float.__gt__, "<=": float.__le__, "<": float.__lt__}
    pairs = re.findall(r" (>=|>|<=|<) (\S+)", text)
    return all(tests[word](value, float(bound)) for word, bound in pairs)


def test_one_key_or_a_section_is_looked_up(capsys: pytest.CaptureFixture[str]) -> None:
    """`rltrain options train algo.gamma` was refused as an unrecognized argument; piped (as
    under capsys), each key keeps its doc on one line, for grep."""
    assert main(["options", "train", "algo.gamma"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "algo.gamma  float in [0, 1]  (default 0.99)",
        "            Discount factor.",
    ]
    rows = describe(TrainConfig, command="train")
    ppo = select(rows, "ppo", "train")
    assert ppo and {r[0] for r in ppo} == {r[0] for r in rows if r[0].startswith("ppo.")}
    events = {r[0] for r in select(rows, "faults.events", "train")}
    assert {"faults.events", "faults.events[].action"} <= events
    assert not {r[0] for r in select(rows, "env", "train")} & {"eval.every_steps"}
    assert [r[0] for r in select(rows, "faults.events[].at", "train")] == ["faults.events[].at"]
    assert main(["options", "bench", "server.n_push"]) == 0
    assert capsys.readouterr().out.startswith("server.n_push  int >= 1  (default 1)\n")


@pytest.mark.parametrize(
    "argv",
    [
        ["options", "train", "vpg", "--import", "m"],
        ["options", "train", "--import", "m", "vpg"],  # (argparse left KEY out: vpg refused)
        ["options", "--import", "m", "train", "vpg"],
    ],
)
def test_the_key_may_come_before_or_after_import(argv: list[str]) -> None:
    from rltrain.cli_parser import build_parser

    args = build_parser().parse_args(argv)
    assert (args.kind, args.key, args.imports) == ("train", "vpg", ["m"])


@pytest.mark.parametrize(
    ("key", "said"),
    [
        ("algo.gama", "did you mean algo.gamma"),
        ("gamma", "did you mean algo.gamma?"),  # a key's name without its section
        ("stop.gamma", "did you mean algo.gamma?"),
        ("alg", "did you mean algo"),  # a prefix is a whole section name
        ("runtme", "did you mean runtime?"),
        ("zzzzqq", "top-level keys and sections: seed, imports, env, algo, "),
    ],
)
def test_an_unknown_key_is_one_line_naming_the_closest(
    capsys: pytest.CaptureFixture[str], key: str, said: str
) -> None:
    assert main(["options", "train", key]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1
    assert err.startswith(f"rltrain: error: {key!r}: no key or section of rltrain train's")
    assert said in err


def test_a_key_of_the_other_command_is_said_to_be_its(capsys: pytest.CaptureFixture[str]) -> None:
    """review 85: a 280-character list of train's sections, never saying bench has it."""
    assert main(["options", "train", "server.record"]) == 2
    said = "server.record: a key of rltrain bench only (rltrain options bench server.record)"
    assert said in capsys.readouterr().err
    assert main(["options", "bench", "runtime.inference"]) == 2
    assert "runtime.inference: a key of rltrain train only" in capsys.readouterr().err


def test_docs_are_wrapped_to_a_terminal_under_their_indent() -> None:
    """A terminal's width wraps each doc under the type column (700-character lines wrapped
    to the margin before); piped, one line per doc."""
    rows = select(describe(TrainConfig, command="train"), "faults", "train")
    piped = manual(rows)
    assert len(piped) == 2 * len(rows) and max(map(len, piped)) > 300
    indent = " " * (max(len(r[0]) for r in rows) + 2)
    wrapped = manual(rows, columns=80)
    docs = [line for line in wrapped if line.startswith(indent)]  # (a key's line is kept)
    assert max(map(len, docs)) <= 80 and len(docs) > len(rows)
    assert [line for line in wrapped if not line.startswith(indent)] == piped[::2]
    assert all(not line[len(indent)].isspace() for line in docs)
    assert " ".join(line.strip() for line in docs) == " ".join(r[3] for r in rows if r[3])
    narrow = manual(rows, columns=20)  # still 40 characters of doc a line past the indent
    assert all(len(line) <= len(indent) + 40 for line in narrow if line.startswith(indent))


def test_a_terminal_wraps_the_command_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from rltrain import cli

    monkeypatch.setattr(cli, "terminal_columns", lambda: 100)
    assert main(["options", "train", "faults.hang_timeout_s"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) > 3 and max(map(len, lines[1:])) <= 100
    assert all(line.startswith(" " * 23) for line in lines[1:])  # (the key's 21 + 2)
