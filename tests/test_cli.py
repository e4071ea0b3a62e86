"""Bad input on the command line: one clear line, exit code 2, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

from rltrain.cli import main

ROOT = Path(__file__).resolve().parents[1]
BENCH = str(ROOT / "configs" / "bench_fashion_mnist.yaml")


def run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str]:
    code = main(argv)
    err = capsys.readouterr().err.strip()
    return code, err


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["bench", "nope.yaml"], ["config file not found", "nope.yaml"]),
        (["bench", BENCH, "--set", "optimizer.lrr=1"], ["optimizer.lrr", "did you mean lr"]),
        (["bench", BENCH, "--set", "workers=-1"], ["workers=-1", ">= 1"]),
        (["bench", BENCH, "--set", "optimizer.name=adamw"], ["optimizer.name='adamw'", "allowed"]),
        (["bench", BENCH, "--set", "modes=[fast]"], ["modes[0]='fast'"]),
        (["bench", BENCH, "--set", "data.dataset=imagenet"], ["data.dataset='imagenet'"]),
        (["bench", BENCH, "--set", "oops"], ["KEY=VALUE"]),
    ],
)
def test_config_errors_are_one_line_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], words: list[str]
) -> None:
    run_dir = tmp_path / "run"
    code, err = run(capsys, [*argv, "--run-dir", str(run_dir)])
    assert code == 2
    assert err.startswith("rltrain: error: ") and "\n" not in err
    assert "Traceback" not in err
    for w in words:
        assert w in err
    assert not run_dir.exists()  # nothing written


def test_missing_dataset_says_which_files_to_put_where(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rltrain.supervised import datasets

    monkeypatch.setattr(datasets, "SYSTEM_DIRS", {})
    run_dir = tmp_path / "run"
    argv = ["bench", BENCH, "--run-dir", str(run_dir), "--set", f"data.root={tmp_path / 'empty'}"]
    code, err = run(capsys, [*argv, "--set", "data.download=false"])
    assert code == 2 and "\n" not in err
    assert "train-images-idx3-ubyte.gz" in err and str(tmp_path / "empty") in err
    assert not run_dir.exists()


def test_non_empty_run_dir_is_never_overwritten(
    capsys: pytest.CaptureFixture[str], tiny_root: Path, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "results.csv").write_text("precious\n")
    argv = ["bench", BENCH, "--run-dir", str(run_dir), "--set", f"data.root={tiny_root}"]
    code, err = run(capsys, argv)
    assert code == 2 and "not empty" in err
    assert (run_dir / "results.csv").read_text() == "precious\n"


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
