"""A learner beside its shard: the model's parameters are views of the shard's own buffer, so
a push is the optimizer's step and a pull copies nothing; the results are those of a learner
that pulls copies."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from rltrain.envs.config import EnvConfig
from rltrain.ps.config import OptimizerConfig, ServerConfig
from rltrain.ps.server import LocalServer
from rltrain.rl.actor import Actor
from rltrain.rl.config import AlgoConfig, PPOConfig, StopConfig, TrainConfig
from rltrain.rl.env_spec import initial_params, probe_env
from rltrain.rl.learner import Learner


class Copies:
    """The same server behind a proxy: a learner cannot view its buffer, and pulls copies."""

    def __init__(self, server: LocalServer) -> None:
        self._server = server

    def __getattr__(self, name: str) -> Any:
        return getattr(self._server, name)


def _cfg(**ppo: Any) -> TrainConfig:
    return TrainConfig(
        env=EnvConfig(id="CartPole-v1", num_envs=4),
        algo=AlgoConfig(name="appo", rollout_length=16),
        ppo=PPOConfig(epochs=2, minibatches=4, **ppo),
        optimizer=OptimizerConfig(name="adam", lr=3e-3),
        stop=StopConfig(max_env_steps=1000),
    )


def _learner_and_server(c: TrainConfig, workers: int = 1) -> tuple[Learner, LocalServer]:
    spec = probe_env(c)
    server = LocalServer(initial_params(c, spec), c.optimizer, ServerConfig(), workers)
    return Learner(c, spec.obs_shape, spec.actions), server


def test_the_views_equal_a_learner_that_pulls_copies_after_the_same_pushes() -> None:
    c = _cfg()
    rollouts = [Actor(c, 0).rollout() for _ in range(3)]
    viewing, server = _learner_and_server(c)
    copying, other = _learner_and_server(c)
    for r in rollouts:
        viewing.learn(server, 0.0, r)
        copying.learn(Copies(other), 0.0, r)  # type: ignore[arg-type]
    live = server.shards[0].live_values()
    assert viewing.live is not None and copying.live is None
    params = list(viewing.model.parameters())
    assert params[0].data_ptr() == live.data_ptr()  # a view: no copy of its own
    assert server.stats().version == other.stats().version == 3 * 2 * 4
    torch.testing.assert_close(live, other.pull().values, rtol=0, atol=1e-6)
    flat = torch.cat([p.detach().reshape(-1) for p in copying.model.parameters()])
    torch.testing.assert_close(torch.cat([p.detach().reshape(-1) for p in params]), flat)


def test_a_second_pusher_or_an_overlapped_push_gets_copies() -> None:
    """Views are for the shard's only pusher: with two, the other's step would change the
    parameters under this one's forward pass; a learner that had them gives them up."""
    c = _cfg()
    r = Actor(c, 0).rollout()
    learner, shared = _learner_and_server(c, workers=2)
    learner.learn(shared, 0.0, r)
    assert learner.live is None
    learner, server = _learner_and_server(c)
    learner.learn(server, 0.0, r)
    assert learner.live is not None
    server.join(7)  # a second learner joins (elastic)
    learner.learn(server, 0.0, r)
    assert learner.live is None
    assert (
        list(learner.model.parameters())[0].data_ptr() != server.shards[0].live_values().data_ptr()
    )
    overlapped = dataclasses.replace(c, ppo=dataclasses.replace(c.ppo, overlap_push=True))
    learner, server = _learner_and_server(overlapped)
    learner.learn(server, 0.0, r)
    assert learner.live is None


class HostReads(torch.overrides.TorchFunctionMode):
    """Counts the calls that read a tensor's value on the host (each a GPU sync there)."""

    READS = (torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.__float__, torch.Tensor.cpu)

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.count += func in self.READS
        return func(*args, **(kwargs or {}))


def test_a_learn_reads_the_device_once_whatever_its_minibatches() -> None:
    """Issue 36: no host sync inside a rollout's minibatches (loss terms, the gradient's norm
    and its finiteness stay on the device), one per learn: benchmarks/learner_step.py's
    count, pinned on the CPU (where each read would be a GPU sync)."""
    counts = []
    for epochs in (1, 3):
        c = dataclasses.replace(_cfg(), ppo=PPOConfig(epochs=epochs, minibatches=4))
        r = Actor(c, 0).rollout()
        learner, server = _learner_and_server(c)
        learner.learn(server, 0.0, r)  # warm: the optimizer's state, the first pull
        with HostReads() as reads:
            learner.learn(server, 0.0, r)
        counts.append(reads.count)
    assert counts[0] == counts[1] <= 1, counts  # 4 and 12 minibatches: the same reads
