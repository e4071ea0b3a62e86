"""runtime.inference=server: one batched policy acts for every actor (rltrain.rl.inference)."""

from __future__ import annotations

import dataclasses
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import interrupt_when, read_summary

from rltrain.cli import main
from rltrain.config import ConfigError, load_config
from rltrain.ps.server import LocalServer
from rltrain.records import GradUpdate
from rltrain.rl.actor import Actor
from rltrain.rl.config import TrainConfig, server_settings
from rltrain.rl.env_spec import initial_params, probe_env
from rltrain.rl.inference import AT, IN_SLOT, ActSlots, PolicyWorker
from rltrain.rl.obs_slots import ObsSlots
from rltrain.rl.run.placement import inference_device

CFG = Path(__file__).resolve().parents[1] / "configs"


class Running:
    """A policy worker serving its slots in a thread (as on the thread runtime)."""

    def __init__(self, actors: int = 6, rows: int = 8, frames: ObsSlots | None = None) -> None:
        cfg = load_config(TrainConfig, CFG / "cartpole_appo.yaml")
        spec = probe_env(cfg)
        self.cfg = cfg
        self.server = LocalServer(initial_params(cfg, spec), cfg.optimizer, server_settings(cfg), 1)
        self.slots = ActSlots(
            actors, rows, spec.obs_shape, torch.float32, spec.actions, threading.Semaphore, frames
        )
        self.worker = PolicyWorker(cfg, spec.obs_shape, spec.actions, self.slots)
        self.result: dict = {}
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        try:
            self.result["served"] = self.worker.serve(self.server)
        except BaseException as e:  # noqa: BLE001 - the test reads it
            self.result["error"] = e

    def stop(self) -> dict:
        self.slots.stop()
        self.thread.join(timeout=10)
        return self.result


def test_concurrent_actors_each_get_their_own_rows_of_one_policy() -> None:
    run = Running()
    gen = torch.Generator().manual_seed(0)
    obs = [torch.randn(3 + i % 6, 4, generator=gen) for i in range(6)]  # 3..8 envs each
    out: dict[int, tuple] = {}
    start = threading.Barrier(6)

    def actor(i: int) -> None:
        client = run.slots.client(i)
        start.wait()
        out[i] = client.act(obs[i])

    threads = [threading.Thread(target=actor, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    served = run.stop()["served"]
    assert served["rows"] == sum(len(o) for o in obs) and 1 <= served["batches"] <= 6
    with torch.no_grad():
        for i, o in enumerate(obs):
            actions, logits, version = out[i]
            assert actions.shape == (len(o),) and version == 0
            torch.testing.assert_close(logits, run.worker.policy.model(o)[0])  # its own rows


def _collect_through_the_worker(shared: bool) -> tuple[Any, torch.Tensor, list[int]]:
    """One CartPole rollout in slot 1 of a run's ObsSlots, acted by a policy worker that is
    given those slots (``shared``) or not: the rollout, the act slot's observations after it,
    and where each request said its observations were (``meta[0, AT]``). Two env groups, as
    an Atari actor's: the second's columns start halfway along each step's row."""
    cfg = load_config(TrainConfig, CFG / "cartpole_appo.yaml")
    cfg = dataclasses.replace(cfg, env=dataclasses.replace(cfg.env, groups=2))
    frames = ObsSlots(2, cfg.algo.rollout_length, cfg.env.num_envs, (4,), torch.float32)
    run = Running(actors=1, rows=cfg.env.num_envs // 2, frames=frames if shared else None)
    client, asked_at = run.slots.client(0), []
    act = client.act

    def spy(obs: torch.Tensor, at: int | None = None) -> Any:
        out = act(obs, at)
        asked_at.append(int(run.slots.meta[0, AT]))
        return out

    client.act = spy  # type: ignore[method-assign]
    r = Actor(cfg, 0, client, frames).collect(run.server, slot=1)
    run.stop()
    return frames.attach(r), client.obs.clone(), asked_at


def test_an_actors_frames_are_read_where_it_wrote_them_for_the_learner() -> None:
    """With the run's observation slots (ObsSlots) the actor writes each frame once, into
    the rollout's slot; its request names the place and the policy worker reads it there.
    The rollout acts as it would with its frames copied into the act slot."""
    shared, act_slot, at = _collect_through_the_worker(shared=True)
    copied, _, copied_at = _collect_through_the_worker(shared=False)
    T, B = shared.actions.shape
    step = B * 4  # elements of one step's frames in a slot of CartPole's [T+1, B, 4]
    # slot 1, step t, group g (columns from g * B/2): in place
    assert at == [(T + 1) * step + t * step + g * (B // 2) * 4 for t in range(T) for g in (0, 1)]
    assert set(copied_at) == {IN_SLOT}
    assert not act_slot.any()  # the act slot itself was never written
    torch.testing.assert_close(shared.obs, copied.obs)
    torch.testing.assert_close(shared.behaviour_logits, copied.behaviour_logits)
    assert torch.equal(shared.actions, copied.actions)


def test_a_learner_batch_of_new_versions_acts_from_the_next_batch() -> None:
    """The policy takes new parameters by version, once a learner's batch of updates is in
    (ppo.epochs x ppo.minibatches versions), not at every version."""
    run = Running()
    run.worker.policy.LOOK_S = 0.0  # it looks at every batch (else at most every 10 ms)
    client, server = run.slots.client(0), run.server
    stride = run.cfg.ppo.epochs * run.cfg.ppo.minibatches
    assert run.worker.policy.stride == stride > 1
    obs = torch.zeros(2, 4)
    _, before, v0 = client.act(obs)
    numel = server.layout.numel
    for v in range(stride):
        assert client.act(obs)[2] == 0  # fewer than a batch's updates: the same parameters
        server.push(GradUpdate(0, v, torch.ones(numel), 1))
    _, after, v1 = client.act(obs)
    run.stop()
    assert (v0, v1) == (0, stride) and not torch.equal(before, after)


class Asked:
    """A server that counts the version requests (health) made of it."""

    def __init__(self, server: LocalServer) -> None:
        self.server, self.health_calls, self.pulls = server, 0, 0

    def health(self) -> list:
        self.health_calls += 1
        return self.server.health()

    def pull(self, *args: object) -> object:
        self.pulls += 1
        return self.server.pull(*args)

    def __getattr__(self, name: str) -> object:
        return getattr(self.server, name)


def test_the_version_posted_after_each_learn_spares_the_server_the_policy_workers_asks() -> None:
    """Where the trainer posts the server's version as each learn returns
    (``ActSlots.learned``), the policy worker takes new parameters by it without asking the
    server: one request per pull instead of one per look (100 a second). A version that
    went back (the shards restored) makes it pull at once."""
    run = Running()
    run.stop()  # the worker's policy is driven by hand below
    policy, slots = run.worker.policy, run.slots
    policy.LOOK_S = 0.0
    server = Asked(run.server)
    stride, numel = policy.stride, run.server.layout.numel
    assert policy.params.version == 0  # (the worker took the first ones as it started)
    for v in range(stride):
        run.server.push(GradUpdate(0, v, torch.ones(numel), 1))
        slots.learned(v + 1)
        assert policy.refresh(server) == (v + 1 == stride)  # a learner's batch: new ones
    assert policy.params.version == stride
    assert (server.health_calls, server.pulls) == (0, 1)
    slots.learned(stride - 1)  # as after a restore to an older point: behind, so it pulls
    policy.refresh(server)
    assert (server.health_calls, server.pulls) == (0, 2)


def test_an_observation_that_does_not_fit_the_slot_is_refused_in_the_actor() -> None:
    run = Running(actors=1, rows=4)
    client = run.slots.client(0)
    with pytest.raises(ValueError, match=r"actor 0: observations of shape \(2, 7\) do not fit"):
        client.act(torch.zeros(2, 7))
    with pytest.raises(ValueError, match="slot of 4"):
        client.act(torch.zeros(5, 4))
    assert client.act(torch.zeros(2, 4))[0].shape == (2,)  # the slot still works
    assert "error" not in run.stop()


def test_a_restarted_policy_worker_answers_what_was_left_unanswered() -> None:
    """A request posted while no policy worker serves (it died) is answered by the next one,
    once; an actor waiting meanwhile just waits."""
    run = Running(actors=2)
    run.stop()  # the first worker is gone
    run.slots.control[1] = 0.0  # (a new one starts on the same slots)
    got: dict[int, tuple] = {}
    waiting = threading.Thread(
        target=lambda: got.update({0: run.slots.client(0).act(torch.ones(3, 4))})
    )
    waiting.start()
    waiting.join(timeout=0.3)
    assert waiting.is_alive()  # nobody serves
    again = Running.__new__(Running)
    again.cfg, again.server, again.slots, again.result = run.cfg, run.server, run.slots, {}
    again.worker = PolicyWorker(run.cfg, (4,), run.worker.policy.dist and 2, run.slots)
    again.thread = threading.Thread(target=again._serve, daemon=True)
    again.thread.start()
    waiting.join(timeout=10)
    assert got[0][0].shape == (3,)
    assert again.stop()["served"]["rows"] == 3  # answered once


def test_the_reward_scale_is_that_of_the_parameters_acting() -> None:
    run = Running(actors=1)
    client = run.slots.client(0)
    client.act(torch.zeros(1, 4))
    assert client.reward_scale() is run.worker.policy.reward_scale() is None  # none seen yet
    run.stop()


def test_where_the_policy_acts(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = load_config(TrainConfig, CFG / "cartpole_appo.yaml")

    def using(inference: str, algo: str = "appo") -> TrainConfig:
        runtime = dataclasses.replace(cfg.runtime, inference=inference)
        return dataclasses.replace(
            cfg, runtime=runtime, algo=dataclasses.replace(cfg.algo, name=algo)
        )

    assert inference_device(using("auto"), gpu=False, backend="process") is None
    assert inference_device(using("server"), gpu=False, backend="local") == "cpu"
    assert inference_device(using("actor"), gpu=True, backend="process") is None
    with pytest.raises(ConfigError, match="runtime.inference=server cannot be used with algo"):
        inference_device(using("server", "a3c"), gpu=False, backend="process")
    with pytest.raises(ConfigError, match="runtime.backend ray"):
        inference_device(using("server"), gpu=False, backend="ray")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert inference_device(using("auto"), gpu=True, backend="process") == "cuda"
    assert inference_device(using("auto"), gpu=True, backend="ray") is None


@pytest.mark.parametrize("backend", ["process", "local"])
def test_actors_train_through_the_batched_policy(tmp_path: Path, backend: str) -> None:
    run_dir = tmp_path / "run"
    argv = ["train", str(CFG / "cartpole_appo.yaml"), "--run-dir", str(run_dir)]
    argv += ["--set", f"runtime.backend={backend}", "--set", "runtime.inference=server"]
    argv += ["--set", "stop.mean_return=null", "--set", "stop.max_env_steps=6000"]
    assert main(argv) == 0
    s = read_summary(run_dir)
    assert s["stopped_by"] == "max_env_steps" and s["env_steps"] >= 6000
    assert s["updates"] > 0
    from test_interrupt import scalars  # the policy worker's time shares reach TensorBoard

    (events,) = (run_dir / "tb").glob("events.*")
    shares = scalars(events, "perf/time/policy/inference")
    assert shares and all(0 < v <= 1 for _, v in shares)


@pytest.mark.slow
def test_a_killed_policy_worker_is_restarted_and_the_actors_go_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    argv = ["train", str(CFG / "cartpole_appo.yaml"), "--run-dir", str(run_dir)]
    argv += ["--set", "runtime.backend=process", "--set", "runtime.inference=server"]
    argv += ["--set", "stop.mean_return=null", "--set", "stop.max_seconds=120"]  # a cap
    argv += ["--set", "checkpoint.every_seconds=1"]
    argv += ["--set", "faults.events=[{action: kill, target: policy, index: 0, at: 2}]"]
    back: list[int] = []  # env steps in the first checkpoint that counts the restart

    def acting_again(ckpt: dict[str, Any]) -> bool:  # the actors act through the new one
        if not ckpt["faults"]["policy_restarts"]:
            return False
        back[:1] = back[:1] or [ckpt["counters"]["env_steps"]]
        return bool(ckpt["counters"]["env_steps"] >= back[0] + 2000)

    with interrupt_when(run_dir, acting_again):  # the run stops once that has happened
        assert main(argv) == 130
    s = read_summary(run_dir)
    assert s["stopped_by"] == "interrupt"
    assert s["faults"]["injected"] == 1 and s["faults"]["policy_restarts"] == 1
    assert s["updates"] > 0 and s["episodes"] > 0
    err = capsys.readouterr().err
    assert "policy 0 lost: its process died; the trainer restarts it" in err
    assert "policy 0 is back" in err, err


@pytest.mark.slow
def test_sigint_stops_the_policy_worker_and_resume_goes_on(tmp_path: Path) -> None:
    """Ctrl-C with actors waiting on the policy worker: a final checkpoint, exit code 130, and
    --resume starts a new policy worker on new slots."""
    from test_leftovers import wait_for_checkpoint

    run_dir = tmp_path / "run"
    served = ["--set", "runtime.backend=process", "--set", "runtime.inference=server"]
    argv = [sys.executable, "-m", "rltrain.cli", "train", str(CFG / "cartpole_appo.yaml")]
    argv += ["--run-dir", str(run_dir), "--set", "stop.mean_return=null", *served]
    argv += ["--set", "stop.max_seconds=120", "--set", "checkpoint.every_seconds=1"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for_checkpoint(proc, run_dir)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "Traceback" not in err, err
    steps = read_summary(run_dir)["env_steps"]
    more = ["--set", f"stop.max_env_steps={steps + 3000}"]
    assert main(["train", "--resume", str(run_dir), *served, *more]) == 0
    assert read_summary(run_dir)["env_steps"] >= steps + 3000
