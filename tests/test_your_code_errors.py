"""An exception in the user's own code (a loss, a rule: a module the config ``imports``) stops
what it ran in as a fault, said in one line that names the error and its line: a train run
writes its summary.json and final checkpoint and exits 1; a bench fails that mode alone, runs
the others and exits 1 (explore86: a traceback, no summary, and the other modes never ran)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import rltrain
from rltrain.cli import main
from rltrain.failure import TRACEBACK, your_error, your_frame
from rltrain.faults import BenchFailed
from rltrain.rl.algos import algo_names, unregister_algo
from rltrain.runtime.process.child import RemoteError, rebuild

ROOT = Path(__file__).resolve().parents[1]
RLTRAIN = str(ROOT / "rltrain")

LOSS = """\
from rltrain.rl.algos import AlgoSpec, register_algo
from rltrain.rl.algos.a3c import ActorCriticLoss, gae


class TypoLoss(ActorCriticLoss):
    def __call__(self, b):
        return lgop  # noqa


register_algo(AlgoSpec("typo", "worker", TypoLoss, gae))
"""

RULE = """\
from rltrain.ps.rules import Async, register_rule


class Raises(Async):
    name = "raises"

    def lr_scale(self, server, staleness):
        raise RuntimeError("my rule blew up")


register_rule(Raises())
"""


@pytest.fixture
def modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """my_loss.py and my_rule.py on sys.path (the config's ``imports`` finds them)."""
    from rltrain.ps.rules import rule_names, unregister_rule

    folder = tmp_path / "code"
    folder.mkdir()
    (folder / "my_loss.py").write_text(LOSS)
    (folder / "my_rule.py").write_text(RULE)
    monkeypatch.syspath_prepend(str(folder))
    yield folder
    if "typo" in algo_names():
        unregister_algo("typo")
    if "raises" in rule_names():
        unregister_rule("raises")
    for name in ("my_loss", "my_rule"):
        sys.modules.pop(name, None)


def test_the_line_names_the_error_and_the_users_frame_wherever_it_ran(modules: Path) -> None:
    import my_loss  # type: ignore[import-not-found]

    try:
        my_loss.TypoLoss.__call__(None, None)
    except NameError as e:
        here = e
    where = " (at my_loss.py:7, in __call__)"
    assert your_frame(here, ["my_loss"]) == where
    line = f"an error in your code: NameError: name 'lgop' is not defined{where}"
    assert your_error(here, ["my_loss"]) == line
    assert your_error(here, []) is None  # a module not of imports: rltrain's bug, not yours
    # from a child process: the original, its traceback as text in its cause (or, unpicklable,
    # the text alone, ending with the exception's own line); on Ray's nodes the module is a
    # shipped copy elsewhere: its name's path decides
    for folder in (modules, Path("/tmp/ray/session_1/runtime_resources/py_modules_files/x")):
        text = f'{TRACEBACK}\n  File "{RLTRAIN}/rl/learner.py", line 189, in _one_pass\n'
        text += f'    loss = self.loss(\n  File "{folder / "my_loss.py"}", line 7, in __call__\n'
        text += "    return lgop\nNameError: name 'lgop' is not defined\n"
        remote = rebuild(NameError("name 'lgop' is not defined"), text)
        assert your_error(remote, ["my_loss"]) == line
        assert your_error(RemoteError(text), ["my_loss"]) == line
    assert your_error(KeyboardInterrupt(), ["my_loss"]) is None


def test_whose_error_is_decided_by_the_innermost_frame_of_yours_or_rltrains() -> None:
    """review77: rltrain's code that your code called raising is rltrain's bug; torch's raising
    under your loss is yours; an error raised while rltrain handled yours is rltrain's."""

    def text(*files: str, last: str = "ValueError: bad") -> RemoteError:
        frames = "".join(f'  File "{f}", line 3, in f\n    x()\n' for f in files)
        return RemoteError(f"{TRACEBACK}\n{frames}{last}\n")

    mine, torch_file = "/home/u/proj/mypkg/losses.py", "/v/lib/python3.12/site-packages/torch/f.py"
    ours = f"{RLTRAIN}/rl/algos/a3c.py"
    assert your_frame(text(ours, mine, torch_file), ["mypkg"]) == " (at losses.py:3, in f)"
    assert your_frame(text(mine, ours), ["mypkg"]) == ""  # (rltrain's, called by yours)
    assert your_frame(text(mine), ["mypkg.other"]) == ""  # another module of the package
    assert your_frame(text("/v/lib/python3.12/site-packages/my_loss.py"), ["my_loss"]) == ""
    try:
        try:
            raise RemoteError(str(text(mine)))
        except RemoteError:
            raise RuntimeError("rltrain's bug while handling it") from None
    except RuntimeError as handled:
        assert your_error(handled, ["mypkg"]) is None
    one = your_error(text(mine, last="ValueError: two\nlines"), ["mypkg"])
    assert one == "an error in your code: ValueError: two (at losses.py:3, in f)"


@pytest.mark.slow
def test_a_loss_that_raises_stops_the_run_as_a_fault_with_its_summary(
    modules: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    argv = ["train", str(ROOT / "configs" / "cartpole_a3c.yaml"), "--run-dir", str(run)]
    for kv in ("imports=[my_loss]", "algo.name=typo", "runtime.backend=local", "actors=1"):
        argv += ["--set", kv]
    assert main([*argv, "--set", "stop.max_env_steps=2000"]) == 1
    err = capsys.readouterr().err
    line = "an error in your code: NameError: name 'lgop' is not defined (at my_loss.py:7, in"
    assert f"rltrain: run failed: {line} __call__)" in err
    assert "Traceback" not in err  # (it is in failure.log)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["stopped_by"] == "fault" and summary["failure"].startswith(line)
    assert "NameError" in (run / "failure.log").read_text()
    assert list((run / "checkpoints").glob("ckpt-*.pt"))  # --resume goes on once it is mended


@pytest.mark.slow
def test_a_bench_mode_whose_rule_raises_fails_alone_and_the_others_run(
    modules: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], no_ray: None
) -> None:
    config = {
        "imports": ["my_rule"],
        "modes": ["raises", "async"],
        "workers": 2,
        "runtime": {"backend": "process"},
        "data": {"dataset": "toy_quadratic", "toy": {"dim": 8, "samples": 600}},
        "budget": {"max_seconds": 0, "epochs": 1},
    }
    with pytest.raises(BenchFailed, match=r"^mode raises: an error in your code: Runtime") as e:
        rltrain.bench(config, run_dir=tmp_path / "run")
    out = capsys.readouterr().out
    run = tmp_path / "run"
    assert "[1/2 raises] failed: an error in your code: RuntimeError: my rule blew up" in out
    assert e.value.result.run_dir == run and list(e.value.result.by_mode()) == ["async"]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["stopped_by"] == "done" and list(summary["failed"]) == ["raises"]
    assert "(at my_rule.py:8, in lr_scale)" in summary["failed"]["raises"]
    assert "**raises failed**" in (run / "results.md").read_text()
    assert "my rule blew up" in (run / "failure-raises.log").read_text()
