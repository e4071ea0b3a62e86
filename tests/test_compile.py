"""model.compile: the minibatch step compiled by torch.compile gives the eager learner's
parameters, compiles once for a whole run (a schedule's coefficient does not recompile it
per batch), falls back to eager in one line where compiling fails, and is refused where
there is no minibatch step."""

from __future__ import annotations

import dataclasses
import shutil
from typing import Any

import pytest
import torch
import torch._dynamo.utils as dynamo_utils
from torch._dynamo.exc import TorchDynamoException

from rltrain.envs.config import EnvConfig
from rltrain.ps.config import OptimizerConfig, ServerConfig
from rltrain.ps.server import LocalServer
from rltrain.rl.actor import Actor
from rltrain.rl.config import AlgoConfig, ModelConfig, PPOConfig, StopConfig, TrainConfig
from rltrain.rl.config.sections import ScheduleConfig
from rltrain.rl.device import compiled
from rltrain.rl.env_spec import initial_params, probe_env
from rltrain.rl.learner import Learner

COMPILER = shutil.which("c++") or shutil.which("g++")  # Inductor's, on a CPU


def _cfg(compile: bool, env: str = "CartPole-v1") -> TrainConfig:
    return TrainConfig(
        env=EnvConfig(id=env, num_envs=4),
        algo=AlgoConfig(name="appo", rollout_length=16, entropy_coef=0.01),
        ppo=PPOConfig(epochs=2, minibatches=4),
        model=ModelConfig(compile=compile),
        optimizer=OptimizerConfig(name="adam", lr=3e-3),
        schedule=ScheduleConfig(entropy_end=0.0),  # the coefficient moves every batch
        stop=StopConfig(max_env_steps=1000),
    )


def _learn(c: TrainConfig, rollouts: list[Any]) -> torch.Tensor:
    spec = probe_env(c)
    server = LocalServer(initial_params(c, spec), c.optimizer, ServerConfig(), 1)
    learner = Learner(c, spec.obs_shape, spec.actions)
    for i, r in enumerate(rollouts):
        learner.learn(server, i / len(rollouts), r)
    return server.pull().values


@pytest.mark.parametrize("env", ["CartPole-v1", "Pendulum-v1"])  # logits; a Gaussian's
def test_the_compiled_step_gives_the_eager_parameters_and_compiles_once(env: str) -> None:
    rollouts = [Actor(_cfg(False, env), 0).rollout() for _ in range(4)]
    eager = _learn(_cfg(False, env), rollouts)
    torch._dynamo.reset()
    dynamo_utils.counters.clear()
    fast = _learn(_cfg(True, env), rollouts)
    torch.testing.assert_close(fast, eager, rtol=1e-4, atol=1e-5)
    graphs = dynamo_utils.counters["stats"]["unique_graphs"]
    if COMPILER:  # (without one the run goes on eagerly: the next test)
        # the first graph, then one with the entropy coefficient a symbol once it moved
        assert 1 <= graphs <= 2


def test_a_compile_that_fails_runs_eagerly_and_says_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(fn: Any) -> Any:
        def fail(*args: Any) -> Any:  # as Dynamo wraps its backend's error
            raise TorchDynamoException("InvalidCxxCompiler: No working C++ compiler found\nmore")

        return fail

    monkeypatch.setattr(torch, "compile", broken)
    calls: list[int] = []

    def double(x: int) -> int:
        calls.append(x)
        return 2 * x

    step = compiled(double, "learner 0")
    assert step(3) == 6 and step(4) == 8 and calls == [3, 4]
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "rltrain: learner 0: torch.compile failed (TorchDynamoException: InvalidCxxCompiler: No "
        "working C++ compiler found); it runs eagerly (model.compile=false skips compiling)"
    ]


def test_a_platform_without_torch_compile_runs_eagerly(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def unsupported(fn: Any) -> Any:
        raise RuntimeError("torch.compile is not supported on this platform")

    monkeypatch.setattr(torch, "compile", unsupported)
    assert compiled(lambda x: x + 1, "learner 1")(1) == 2
    assert "rltrain: learner 1: torch.compile failed (RuntimeError: torch.compile is not " in (
        capsys.readouterr().err
    )


def test_an_error_of_the_step_itself_is_raised_as_it_is(
    capsys: pytest.CaptureFixture[str],
) -> None:
    def bad(x: torch.Tensor) -> torch.Tensor:
        raise ValueError("a shape the loss does not take")

    with pytest.raises(ValueError, match="a shape the loss does not take"):
        compiled(bad, "learner 0")(torch.zeros(2))
    assert "torch.compile failed" not in capsys.readouterr().err


@pytest.mark.parametrize("algo", ["a3c", "impala", "dqn"])
def test_compile_without_a_minibatch_step_is_refused(algo: str) -> None:
    c = _cfg(True)
    with pytest.raises(ValueError, match=rf"^model.compile=true: .*algo.name={algo}"):
        dataclasses.replace(c, algo=dataclasses.replace(c.algo, name=algo))
