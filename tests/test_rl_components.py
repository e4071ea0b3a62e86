"""Actors, learners and A3C workers in one process, against the in-process server."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools

import pytest
import torch

from rltrain.envs import EnvConfig
from rltrain.ps.config import OptimizerConfig, ServerConfig
from rltrain.ps.server import LocalServer
from rltrain.rl.actor import Actor
from rltrain.rl.config import AlgoConfig, ImpalaConfig, PPOConfig, StopConfig, TrainConfig
from rltrain.rl.env_spec import initial_params, probe_env
from rltrain.rl.learner import Learner
from rltrain.rl.rollout import stack
from rltrain.rl.worker import Worker


def cfg(algo: str = "a3c", env: str = "CartPole-v1", **kw: object) -> TrainConfig:
    return TrainConfig(
        env=EnvConfig(id=env, num_envs=3),
        algo=AlgoConfig(name=algo, rollout_length=5),
        optimizer=OptimizerConfig(name="adam", lr=1e-3),
        stop=StopConfig(max_env_steps=1000),
        **kw,  # type: ignore[arg-type]
    )


def server_for(c: TrainConfig, workers: int = 1, rule: str = "async") -> LocalServer:
    return LocalServer(
        initial_params(c, probe_env(c)), c.optimizer, ServerConfig(rule=rule), workers
    )


def test_actor_rollout_shapes_and_version() -> None:
    c = cfg()
    server = server_for(c)
    actor = Actor(c, 0)
    r = actor.collect(server)
    assert r.version == 0 and r.actor_id == 0
    assert r.obs.shape == (6, 3, 4) and r.obs.dtype == torch.float32
    assert r.actions.shape == (5, 3) and r.actions.dtype == torch.int64
    assert r.rewards.shape == r.terminated.shape == r.truncated.shape == (5, 3)
    assert r.behaviour_logits.shape == (5, 3, 2)
    assert r.env_steps == 15
    # the server moves on; with n_fetch=1 the next rollout carries the new version
    server.push(dataclasses.replace(_grad_update(server), version=0))
    assert actor.collect(server).version == 1


def _grad_update(server: LocalServer):  # noqa: ANN202
    from rltrain.records import GradUpdate

    return GradUpdate(0, 0, torch.zeros(server.layout.numel), 1)


def test_actor_reports_raw_episode_returns() -> None:
    c = cfg()
    actor = Actor(c, 0)
    actor.load(server_for(c).pull())
    returns, lengths = [], []
    for _ in range(40):  # random-ish CartPole episodes last ~20 steps
        r = actor.rollout()
        returns.extend(r.episode_returns)
        lengths.extend(r.episode_lengths)
    assert returns and len(returns) == len(lengths)
    assert all(ret == length for ret, length in zip(returns, lengths, strict=True))  # +1 per step


def test_learner_gradient_matches_model_size_and_moves_server() -> None:
    c = cfg("impala")
    spec = probe_env(c)
    server = server_for(c)
    rollouts = [Actor(c, i).collect(server) for i in range(2)]
    learner = Learner(c, spec.obs_shape, spec.num_actions)
    stats = learner.learn(server, 0.0, *rollouts)
    assert stats.updates == stats.applied == 1 and stats.env_steps == 30
    assert server.pull().version == 1
    assert stack(rollouts).actions.shape == (5, 6)


def test_a3c_worker_pushes_each_rollout() -> None:
    c = cfg()
    server = server_for(c)
    worker = Worker(c, 0)
    stats = worker.work(server, 4)
    assert stats.updates == stats.applied == 4 and stats.env_steps == 60
    assert server.pull().version == 4
    assert worker.actor.version == 4  # the worker acts with what the last exchange returned
    assert len(stats.losses) == 4 and stats.losses[0].grad_norm >= 0


def test_ppo_worker_pushes_every_minibatch_of_every_epoch() -> None:
    c = dataclasses.replace(
        cfg("ppo"),
        algo=AlgoConfig(name="ppo", rollout_length=5),
        ppo=PPOConfig(epochs=3, minibatches=2),
    )
    server = server_for(c, rule="sync")
    stats = Worker(c, 0).work(server, 1)
    assert stats.updates == stats.applied == 6 and stats.env_steps == 15
    assert server.pull().version == 6
    assert all(x.clip_fraction is not None for x in stats.losses)


def test_minibatches_that_do_not_divide_the_batch_are_all_pushed() -> None:
    """15 samples in 6 minibatches: 6 pushes (3, 3, 3, 2, 2, 2), not the 5 chunks of
    ceil(15 / 6) = 3 samples that fell short of ppo.minibatches."""
    c = dataclasses.replace(
        cfg("ppo"),
        algo=AlgoConfig(name="ppo", rollout_length=5),
        ppo=PPOConfig(epochs=2, minibatches=6),
    )
    stats = Worker(c, 0).work(server_for(c, rule="sync"), 1)
    assert stats.env_steps == 15 and stats.updates == stats.applied == 12


def test_appo_learner_steps_epochs_x_minibatches_per_batch() -> None:
    c = dataclasses.replace(
        cfg("appo"),
        algo=AlgoConfig(name="appo", rollout_length=5),
        ppo=PPOConfig(epochs=2, minibatches=3),
    )
    server = server_for(c)
    spec = probe_env(c)
    rollouts = [Actor(c, i).collect(server) for i in range(2)]
    learner = Learner(c, spec.obs_shape, spec.num_actions)
    stats = learner.learn(server, 0.5, *rollouts)
    assert stats.updates == stats.applied == 6 and stats.env_steps == 30
    assert learner.params is not None and learner.params.version == 6
    # the batch's normalisation statistics reached the server with its first push
    norm = server.pull().norm
    assert norm is not None and norm.obs is not None and norm.obs.count == 30


def test_target_kl_ends_a_batchs_epochs_once_the_policy_moved_enough() -> None:
    """ppo.target_kl: after each epoch the mean KL(pi_old || pi) of its minibatches is read;
    past 1.5x the target the batch's remaining epochs are skipped. A tiny target stops after
    the first epoch (its first minibatch has KL 0, the next have moved); 0 runs them all."""
    c = dataclasses.replace(
        cfg("appo"),
        algo=AlgoConfig(name="appo", rollout_length=5),
        optimizer=OptimizerConfig(name="adam", lr=0.05),
        ppo=PPOConfig(epochs=4, minibatches=3, target_kl=1e-9),
    )
    spec = probe_env(c)
    for target_kl, updates, epochs in ((1e-9, 3, 1), (0.0, 12, 4)):
        c = dataclasses.replace(c, ppo=dataclasses.replace(c.ppo, target_kl=target_kl))
        server = server_for(c)
        rollout = Actor(c, 0).collect(server)
        learner = Learner(c, spec.obs_shape, spec.num_actions)
        stats = learner.learn(server, 0.0, rollout)
        assert (stats.updates, stats.epochs) == (updates, epochs)


def _lagging_batch(correction: str):  # noqa: ANN202
    """An appo learner and a rollout whose actors' policy mu is far from the learner's."""
    c = dataclasses.replace(
        cfg("appo"),
        algo=AlgoConfig(name="appo", rollout_length=5),
        ppo=PPOConfig(epochs=1, minibatches=1),
        impala=ImpalaConfig(correction=correction),
    )
    server = server_for(c)
    spec = probe_env(c)
    r = Actor(c, 0).collect(server)
    far = torch.tensor([8.0, -8.0]).expand_as(r.behaviour_logits)  # mu: almost always action 0
    learner = Learner(c, spec.obs_shape, spec.num_actions)
    learner.load(server.pull())
    return learner, r, dataclasses.replace(r, behaviour_logits=far.clone())


def test_appo_clips_around_the_learners_policy_not_the_actors() -> None:
    """The trust region is pi_old, the learner's policy at the batch's start: a rollout whose
    behaviour policy lags far behind starts inside it (ratio 1, nothing clipped), and the lag
    is V-trace's business."""
    learner, _, lagging = _lagging_batch("vtrace")
    (g,) = list(learner.gradients(lagging))
    assert g.loss.clip_fraction == 0.0 and g.loss.kl == pytest.approx(0.0, abs=1e-6)


def _targets(learner: Learner, r):  # noqa: ANN001, ANN202
    with torch.no_grad():
        logits, values, final = learner.forward_rollout(r)
    return learner.targets(r, logits, values, final)


def test_vtrace_corrects_the_actors_lag_and_correction_none_ignores_it() -> None:
    """impala.correction: vtrace weighs the lagging actors' data (Espeholt et al. 2018); none
    takes it as the learner's own (lambda-returns and GAE, IMPALA's "no correction")."""
    learner, on_policy, lagging = _lagging_batch("vtrace")
    assert not torch.allclose(_targets(learner, on_policy)[1], _targets(learner, lagging)[1])
    learner, on_policy, lagging = _lagging_batch("none")
    for a, b in zip(_targets(learner, on_policy), _targets(learner, lagging), strict=True):
        torch.testing.assert_close(a, b)


def test_the_actors_lag_is_reported_as_lag_kl() -> None:
    learner, on_policy, lagging = _lagging_batch("vtrace")
    (g,) = list(learner.gradients(on_policy))
    assert g.loss.lag_kl == pytest.approx(0.0, abs=1e-6)
    (g,) = list(learner.gradients(lagging))
    assert g.loss.lag_kl is not None and g.loss.lag_kl > 0.1
    assert "lag_kl" in g.loss.terms()
    # workers act with the policy they learn: no lag to report
    c = dataclasses.replace(cfg("ppo"), algo=AlgoConfig(name="ppo", rollout_length=5))
    stats = Worker(c, 0).work(server_for(c, rule="sync"), 1)
    assert all(x.lag_kl is None for x in stats.losses)


@pytest.mark.parametrize(("overlap", "staleness"), [(False, 0), (True, 1)])
def test_appo_minibatches_wait_for_their_push_unless_overlapped(
    overlap: bool, staleness: int
) -> None:
    """By default each minibatch's gradient is computed at the parameters the previous push
    returned (no staleness); overlap_push computes it during that push, one version behind."""
    c = dataclasses.replace(
        cfg("appo"),
        algo=AlgoConfig(name="appo", rollout_length=5),
        ppo=PPOConfig(epochs=2, minibatches=2, overlap_push=overlap),
    )
    server = server_for(c)
    spec = probe_env(c)
    learner = Learner(c, spec.obs_shape, spec.num_actions)
    stats = learner.learn(server, 0.0, Actor(c, 0).collect(server))
    assert stats.applied == 4
    assert stats.staleness == [0] + [staleness] * 3


def test_atari_actor_rollout_is_uint8_frames() -> None:
    c = cfg(env="ALE/Pong-v5")
    server = server_for(c)
    r = Actor(c, 0).collect(server)
    assert r.obs.shape == (6, 3, 4, 84, 84) and r.obs.dtype == torch.uint8
    assert r.behaviour_logits.shape == (5, 3, 6)
    assert set(r.rewards.unique().tolist()) <= {-1.0, 0.0, 1.0}


@pytest.mark.parametrize("algo", ["a3c", "appo"])
def test_sync_means_one_push_per_version_for_workers_and_learners(algo: str) -> None:
    """Under `sync` two a3c workers (= a2c) and two appo learners wait at the barrier after
    each push, so none is dropped as a second update for a version, and every step averages
    both (run in threads against the in-process server)."""
    c = dataclasses.replace(
        cfg(algo),
        algo=AlgoConfig(name=algo, rollout_length=5),
        ppo=PPOConfig(epochs=2, minibatches=2),
        server=ServerConfig(rule="sync"),
    )
    server = server_for(c, workers=2, rule="sync")
    if algo == "a3c":
        jobs = [functools.partial(Worker(c, i).work, server, 3) for i in range(2)]
    else:
        spec = probe_env(c)
        jobs = [
            functools.partial(
                Learner(c, spec.obs_shape, spec.num_actions, learner_id=i).learn,
                server,
                0.0,
                Actor(c, i).collect(server),
            )
            for i in range(2)
        ]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        results = [f.result(timeout=30) for f in [pool.submit(j) for j in jobs]]
    assert all(r.dropped == 0 and r.applied == r.updates for r in results)
    assert server.pull().version == (3 if algo == "a3c" else 4)


def test_a_learners_loss_terms_are_named() -> None:
    """A learner's loss terms are named, read from the device once per batch: the
    actor-critic's policy/value/entropy, not one unnamed float that means the policy loss here
    and the TD loss elsewhere (issue 11, bug 7)."""
    c = cfg("appo")
    actor = Actor(c, 0)
    server = server_for(c)
    learner = Learner(c, actor.env.obs_shape, actor.env.num_actions)
    stats = learner.learn(server, 0.0, actor.collect(server))
    assert len(stats.losses) == stats.updates == c.ppo.epochs * c.ppo.minibatches
    assert all({"policy", "value", "entropy", "lag_kl"} <= set(x.terms()) for x in stats.losses)
    assert all("td" not in x.terms() for x in stats.losses)


def test_a_learner_marks_finite_pushes_and_a_nan_batch_is_still_refused() -> None:
    """A learner marks a push whose clipping norm was finite (GradUpdate.finite), so the shard
    skips its own pass over the values; a NaN batch gives a NaN norm, and the shard beside the
    learner refuses it on the device, the verdict unread (fused Adam's found_inf): the
    parameters stay as they were, and the shard and the learner count it as rejected once
    they read it."""
    c = cfg("appo")
    server = server_for(c)
    pushed: list = []
    exchange = server.exchange_begin
    server.exchange_begin = lambda u, *a, **k: (pushed.append(u), exchange(u, *a, **k))[1]  # type: ignore[method-assign]
    actor = Actor(c, 0)
    learner = Learner(c, actor.env.obs_shape, actor.env.num_actions)
    learner.learn(server, 0.0, actor.collect(server))
    assert pushed and all(u.finite for u in pushed)
    before, applied = server.pull(), server.stats().applied
    r = actor.collect(server)
    r = dataclasses.replace(r, rewards=torch.full_like(r.rewards, float("nan")))
    pushed.clear()
    work = learner.learn(server, 0.0, r)
    assert pushed and not any(u.finite for u in pushed)
    assert work.rejected == work.updates == len(pushed) and work.applied == 0
    st = server.stats()
    assert st.applied == applied and st.rejected == len(pushed) == st.zero_steps
    assert st.version == st.applied + st.zero_steps  # steps of zero: the version counts them
    assert torch.equal(server.pull().values, before.values)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a GPU that torch cannot see")
def test_a_learner_given_a_gpu_torch_cannot_see_says_so_and_uses_the_cpu(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from rltrain.rl.device import pick_device

    assert pick_device(True, "learner 3") == torch.device("cpu")
    err = capsys.readouterr().err
    assert err.startswith("rltrain: learner 3 was given a GPU, but torch") and err.count("\n") == 1
    assert pick_device(False) == torch.device("cpu") and not capsys.readouterr().err


def test_a_process_computing_on_cuda_runs_fp32_matmuls_in_tf32() -> None:
    """Issue 36 item 5: the learner's and the policy worker's processes alike (a CUDA device
    object needs no GPU to be made; a CPU's precision is left as it is)."""
    from rltrain.rl.device import tf32_on

    was = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("highest")
        assert tf32_on(torch.device("cpu")).type == "cpu"
        assert torch.get_float32_matmul_precision() == "highest"
        assert tf32_on(torch.device("cuda")).type == "cuda"
        assert torch.get_float32_matmul_precision() == "high"
    finally:
        torch.set_float32_matmul_precision(was)
