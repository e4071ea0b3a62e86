"""The command line's working paths; bad input is in tests/test_bad_input.py."""

from __future__ import annotations

import pytest

from rltrain.cli import main


def test_options_lists_every_key(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["options", "bench"]) == 0
    out = capsys.readouterr().out
    for key in (
        "server.rule",
        "server.n_fetch",
        "optimizer.name",
        "runtime.address",
        "budget.epochs",
    ):
        assert key in out


def test_options_train_lists_env_and_stop_keys(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["options", "train"]) == 0
    out = capsys.readouterr().out
    for key in ("env.id", "algo.name", "stop.mean_return", "checkpoint.keep", "runtime.address"):
        assert key in out
