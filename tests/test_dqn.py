"""Gorila DQN components in one process: epsilons, actors filling replay, learners pushing, and
time-limit truncation handled as a cut, not a terminal (Pardo et al. 2018)."""

from __future__ import annotations

import contextlib
import dataclasses
import io
from pathlib import Path

import numpy as np
import pytest
import torch

from rltrain.envs import EnvConfig
from rltrain.ps.config import OptimizerConfig, ServerConfig
from rltrain.ps.server import LocalServer
from rltrain.replay import ReplayMemory, TransitionBlock
from rltrain.replay.local import LocalReplay
from rltrain.rl.config import AlgoConfig, DQNConfig, ReplayConfig, StopConfig, TrainConfig
from rltrain.rl.env_spec import initial_params, probe_env
from rltrain.rl.gorila import DQNActor, DQNLearner, apex_epsilon, memory_args


def cfg(env: str = "CartPole-v1", **dqn: object) -> TrainConfig:
    return TrainConfig(
        env=EnvConfig(id=env, num_envs=2),
        algo=AlgoConfig(name="dqn", rollout_length=4),
        dqn=dataclasses.replace(  # type: ignore[arg-type]
            DQNConfig(batch_size=8, target_update=3, learning_starts=500), **dqn
        ),
        replay=ReplayConfig(capacity=500),
        optimizer=OptimizerConfig(name="adam", lr=1e-3),
        stop=StopConfig(max_env_steps=1000),
    )


def setup(c: TrainConfig) -> tuple[LocalServer, LocalReplay]:
    spec = probe_env(c)
    server = LocalServer(initial_params(c, spec), c.optimizer, ServerConfig(), 1)
    replay = LocalReplay([ReplayMemory(*memory_args(c, spec, 0))])
    return server, replay


def test_apex_epsilons() -> None:
    assert apex_epsilon(0.4, 7, 0, 8) == pytest.approx(0.4)
    assert apex_epsilon(0.4, 7, 7, 8) == pytest.approx(0.4**8)
    assert apex_epsilon(0.4, 7, 0, 1) == pytest.approx(0.4)
    eps = [apex_epsilon(0.4, 7, i, 4) for i in range(4)]
    assert eps == sorted(eps, reverse=True)


def test_apex_epsilons_spread_over_every_env_of_every_actor() -> None:
    """explore84: one actor (a small box's actors: auto) played at the base 0.4 for good."""
    one = DQNActor(dataclasses.replace(cfg(), actors=1), 0)  # 2 envs: 0.4 and 0.4^8
    np.testing.assert_allclose(one.epsilons(), [0.4, 0.4**8])
    c = dataclasses.replace(cfg(), actors=2)
    both = np.concatenate([DQNActor(c, i).epsilons() for i in (0, 1)])
    np.testing.assert_allclose(both, [apex_epsilon(0.4, 7, i, 4) for i in range(4)])
    assert one.epsilon() == pytest.approx((0.4 + 0.4**8) / 2)  # dqn/epsilon: their mean


def test_decaying_epsilon() -> None:
    c = cfg(epsilon="decay", epsilon_start=1.0, epsilon_final=0.1, epsilon_decay_steps=8)
    actor = DQNActor(c, 0)
    assert actor.epsilon() == pytest.approx(1.0)
    server, replay = setup(c)
    actor.collect(server, replay, 1)  # 4 steps per env
    assert actor.epsilon() == pytest.approx(0.55)
    actor.collect(server, replay, 2)
    assert actor.epsilon() == pytest.approx(0.1)


@pytest.mark.parametrize("n_step", [1, 3])
def test_actor_fills_replay_and_learner_pushes(n_step: int) -> None:
    c = cfg(n_step=n_step)
    server, replay = setup(c)
    actor = DQNActor(c, 0)
    stats = actor.collect(server, replay, 10)
    assert stats.env_steps == 80 and stats.epsilon is not None
    assert replay.sizes()[0] == 80  # every step, time-limit cuts included
    assert int(replay.sample(0, 200).steps.max()) == n_step  # windows of up to n steps
    said = stats.unsettled[0]  # its envs in their first game, stamped with its start
    assert 0 <= said.pending <= c.env.num_envs and said.since > 0
    spec = probe_env(c)
    learner = DQNLearner(c, spec.obs_shape, spec.num_actions)
    pushed: list = []
    begin = server.exchange_begin
    server.exchange_begin = lambda u, *a: (pushed.append(u), begin(u, *a))[1]  # type: ignore[method-assign]
    out = learner.learn(server, replay, 5)
    assert out.updates == out.applied == 5
    assert [set(u.losses) for u in pushed] == [{"td"}] * 5  # named: not a policy loss
    assert server.pull().version == 5
    assert out.q_mean is not None and np.isfinite(out.q_mean)
    assert all(loss.td is not None and loss.td >= 0 for loss in out.losses)
    # target refreshed at version 0 and again once 3 versions have passed
    assert learner.target_version == 3


def test_atari_dqn_actor_blocks() -> None:
    c = cfg(env="ALE/Pong-v5")
    server, replay = setup(c)
    DQNActor(c, 0).collect(server, replay, 2)
    batch = replay.sample(0, 4)
    assert batch.obs.shape == (4, 4, 84, 84) and batch.obs.dtype == np.uint8


def one_hot(positions: list[int]) -> np.ndarray:
    """Chain-v0 observations: float32 one-hot cells of the 8-cell corridor."""
    return np.eye(8, dtype=np.float32)[positions]


def test_chain_actor_stores_time_limit_cuts_with_their_final_obs() -> None:
    """Random acting on Chain-v0 (time limit 32) cuts episodes; every stored transition that is
    not done moves one cell as its action says, so a cut's s' is the episode's last cell, not
    the next episode's start (which SAME-STEP autoreset puts in obs)."""
    c = cfg(env="rltrain/Chain-v0", epsilon="decay", epsilon_start=1.0, epsilon_final=1.0)
    c = dataclasses.replace(c, seed=3)
    server, replay = setup(c)
    stats = DQNActor(c, 0).collect(server, replay, 40)  # 2 envs x 160 steps
    cut = [
        n == 32 and r == 0
        for n, r in zip(stats.episode_lengths, stats.episode_returns, strict=True)
    ]
    memory = replay.memories[0]
    assert sum(cut) >= 2 and memory.stats()["cuts"] == sum(cut)
    assert len(memory) == 320  # every step, none dropped
    batch = memory.sample(3000)
    pos, nxt = batch.obs.argmax(1), batch.next_obs.argmax(1)
    moved = np.clip(pos + np.where(batch.actions == 1, 1, -1), 0, 7)
    assert np.array_equal(nxt[~batch.done], moved[~batch.done])
    assert np.all(moved[batch.done] == 7) and np.all(batch.rewards == batch.done)


def test_double_dqn_target_of_a_cut_bootstraps_from_the_final_obs() -> None:
    """A hand-made Chain block: env 0 is cut at cell 5 -> 6 (the next episode starts at 2),
    env 1 reaches the goal 6 -> 7 (the next episode starts at 0). The learner's TD errors
    are y - Q_online(s, a) with y = r + gamma Q_target(6, argmax_a Q_online(6, a)) for the
    cut and y = 1 for the terminal."""
    c = cfg(env="rltrain/Chain-v0")
    spec = probe_env(c)
    memory = ReplayMemory(*memory_args(c, spec, 0))
    obs = np.stack([one_hot([5, 6]), one_hot([2, 0])])  # [T + 1, B, 8]
    block = TransitionBlock.from_steps(
        0,
        obs,
        np.ones((1, 2), dtype=np.int64),
        np.array([[0.0, 1.0]], dtype=np.float32),
        np.array([[False, True]]),
        np.array([[True, False]]),
        frame_stack=1,
        final_obs=one_hot([6]),
    )
    assert memory.add(block) == 2
    batch = memory.sample(32)
    cut = batch.obs.argmax(1) == 5
    assert cut.any() and (~cut).any()
    assert np.all(batch.next_obs[cut].argmax(1) == 6) and not batch.done[cut].any()
    assert batch.done[~cut].all()

    learner = DQNLearner(c, spec.obs_shape, spec.num_actions)
    torch.manual_seed(0)
    for p in learner.target.parameters():  # a target network apart from the online one
        p.data.add_(torch.randn_like(p))
    _, _, td, _ = learner.gradient(batch)
    with torch.no_grad():
        q_online = learner.online(torch.from_numpy(one_hot([5, 6, 2]))).numpy()
        q_target = learner.target(torch.from_numpy(one_hot([6, 2]))).numpy()
    gamma = c.algo.gamma
    y_cut = 0.0 + gamma * q_target[0, q_online[1].argmax()]
    np.testing.assert_allclose(td[cut], y_cut - q_online[0, 1], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(td[~cut], 1.0 - q_online[1, 1], rtol=1e-5, atol=1e-6)
    # the test tells a right target from a wrong one: a terminal cut, or s' = the next start
    for wrong in (0.0, gamma * q_target[1, q_online[2].argmax()]):
        assert abs(wrong - y_cut) > 1e-3


def test_learners_sample_shards_in_proportion_to_what_they_hold() -> None:
    """One actor, two replay shards (pong_gorila.yaml on 2 cores): the empty shard is never
    drawn; otherwise shards are drawn as uniform sampling over the whole memory would."""
    from rltrain.rl.gorila import pick_shard

    rng = np.random.default_rng(0)
    assert {pick_shard([500, 0], rng) for _ in range(200)} == {0}
    draws = [pick_shard([300, 100], rng) for _ in range(4000)]
    assert abs(draws.count(0) / 4000 - 0.75) < 0.03


@pytest.mark.slow
def test_a_resume_with_more_envs_goes_on_with_the_epsilon_schedule(tmp_path: Path) -> None:
    """Each actor's epsilon decays over its envs' steps; a resume took them as env_steps over
    the new session's actors x num_envs, so 4 envs -> 16 moved epsilon back up (0.90 ->
    0.97). The per-env count is now the run's (Counters.per_env_steps), across sessions."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from rltrain.cli import main

    run = tmp_path / "run"
    config = str(Path(__file__).resolve().parents[1] / "configs" / "cartpole_gorila.yaml")
    sets = ["stop.mean_return=null", "dqn.learning_starts=500", "stop.max_env_steps=3000"]
    argv = ["train", config, "--run-dir", str(run)]
    assert main([*argv, *(a for s in sets for a in ("--set", s))]) == 0
    resume = ["--set", "stop.max_env_steps=4500", "--set", "env.num_envs=16"]
    assert main(["train", "--resume", str(run), *resume]) == 0
    eps = []
    for f in sorted((run / "tb").glob("events.*")):
        acc = EventAccumulator(str(f))
        acc.Reload()
        eps.append([e.value for e in acc.Scalars("dqn/epsilon")])
    first, second = eps
    assert second and max(second) < first[-1]  # on down from where it was
    # eval: at dqn.eval_epsilon (0.05), or greedy; at 0, --no-deterministic changes nothing
    said = io.StringIO()
    with contextlib.redirect_stdout(said):
        assert main(["eval", str(run), "--episodes", "1"]) == 0
        assert main(["eval", str(run), "--episodes", "1", "--deterministic"]) == 0
        more = ["--set", "stop.max_env_steps=6000", "--set", "dqn.eval_epsilon=0"]
        assert main(["train", "--resume", str(run), *more]) == 0
        assert main(["eval", str(run), "--episodes", "1", "--no-deterministic"]) == 0
    out = said.getvalue()
    assert "epsilon-greedy actions, epsilon 0.05" in out and ", greedy actions, seed" in out
    assert "greedy actions: dqn.eval_epsilon is 0, --no-deterministic changes nothing" in out


def test_the_replay_size_outlives_its_shards() -> None:
    """The plan stops the replay shards after the loop, and the run's last TensorBoard point
    is logged after that: on Ray it read their sizes from dead processes, and the point was
    dropped unsaid (TensorBoard ended at 40,192 steps of 44,672)."""
    from rltrain.rl.run.replay_plan import ReplayPlan

    class Shards:
        handles, alive = [0, 1], True

        def sizes(self) -> list[int]:
            assert self.alive, "read after its shards were stopped"
            return [3, 4]

        def nbytes(self) -> int:
            return 10

    class Runtime:
        def kill(self, handle: int) -> None:
            shards.alive = False

    shards, plan = Shards(), object.__new__(ReplayPlan)  # (only what finish and the size use)
    plan.replay, plan.runtime, plan.replay_kept = shards, Runtime(), None
    assert plan.replay_size() == 7
    plan.finish()
    assert not shards.alive and plan.replay_size() == 7 and plan.replay_bytes == 10
    # a Ctrl-C while the shards were being built (1.8 GB of Pong's replay zero-filled):
    # finish raised AttributeError in the interrupt's handler, the run's processes stayed
    # up and the command hung (explore112)
    unbuilt = object.__new__(ReplayPlan)
    unbuilt.replay, unbuilt.replay_kept = None, None
    unbuilt.finish()
    assert unbuilt.replay_size() is None


def test_the_replay_ratio_counts_from_this_sessions_learning_start() -> None:
    """A resume that adds dqn.env_steps_per_update: the earlier sessions' 217k env steps
    against 6k updates must not hold the actors back (explore84 saw them paused for good)."""
    from rltrain.rl.run.replay_plan import ReplayRatio

    ratio = ReplayRatio(4.0)
    ratio.start(env_steps=219_648, updates=6_200)  # the refill done, learning starts
    assert not ratio.ahead(219_648, 6_200)
    assert not ratio.ahead(219_648 + 400, 6_300)  # 4 env steps per update: on the line
    assert ratio.ahead(219_648 + 404, 6_300)
    assert not ReplayRatio(0.0).ahead(10**9, 0)  # 0: never pause


def test_learners_under_sync_step_together_and_drop_nothing() -> None:
    """explore84: an overlapped push under sync was one version stale and dropped (48% of
    them with one learner, 67% with two). Each push now waits for the version it makes."""
    import threading

    c = dataclasses.replace(cfg(), server=ServerConfig(rule="sync"), learners=2)
    spec = probe_env(c)
    server = LocalServer(initial_params(c, spec), c.optimizer, c.server, 2)
    replay = LocalReplay([ReplayMemory(*memory_args(c, spec, 0))])
    DQNActor(c, 0).collect(server, replay, 10)
    learners = [DQNLearner(c, spec.obs_shape, spec.num_actions, learner_id=i) for i in (0, 1)]
    out: list = [None, None]

    def learn(i: int) -> None:
        out[i] = learners[i].learn(server, replay, 6)

    threads = [threading.Thread(target=learn, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert [(o.updates, o.applied, o.dropped) for o in out] == [(6, 6, 0)] * 2
    assert server.pull().version == 6  # one step per pair of gradients


def test_evaluations_act_epsilon_greedily_and_older_runs_greedily(tmp_path: Path) -> None:
    """explore84: a greedy Breakout policy never pressed FIRE, and its evaluation never ended.
    Evaluations play at dqn.eval_epsilon (Mnih et al. 2015: 0.05); deterministic: greedy. A
    run folder from before the key plays greedily, as it was scored."""
    import yaml

    from rltrain.config import to_dict
    from rltrain.rl.config import load_run_config
    from rltrain.rl.played_policy import Policy

    q = torch.nn.Linear(3, 4)
    torch.nn.init.zeros_(q.weight)
    with torch.no_grad():
        q.bias.copy_(torch.tensor([1.0, 0.0, 0.0, 0.0]))  # action 0 is best everywhere
    obs = np.zeros((4000, 3), dtype=np.float32)
    gen = torch.Generator().manual_seed(0)
    policy = Policy(q, greedy=True, epsilon=0.5)
    other = float((policy.act(obs, gen) != 0).mean())
    assert other == pytest.approx(0.5 * 3 / 4, abs=0.03)
    assert not policy.plays_greedy(False) and policy.plays_greedy(True)
    assert (policy.act(obs, gen, deterministic=True) == 0).all()
    assert Policy(q, greedy=True).plays_greedy(False)  # epsilon 0
    old = to_dict(cfg())
    del old["dqn"]["eval_epsilon"]
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(old))
    assert load_run_config(TrainConfig, tmp_path / "config.yaml").dqn.eval_epsilon == 0.0
    assert cfg().dqn.eval_epsilon == 0.05


def test_the_dueling_head_is_a_value_plus_centred_advantages_end_to_end(tmp_path: Path) -> None:
    """dqn.dueling (Wang et al. 2016, eq. 9): Q = V + A - mean_a A. The actors, the learners,
    the server's parameter count and an evaluation all build the same network."""
    from rltrain.rl.algos.models import build_qnet

    torch.manual_seed(0)
    net = build_qnet("mlp", (4,), 3, 16, dueling=True)
    obs = torch.randn(5, 4)
    assert net.value is not None
    h = net.torso(obs)
    a = net.q(h)
    expected = net.value(h) + a - a.mean(-1, keepdim=True)  # [5, 3]
    assert torch.allclose(net(obs), expected)
    assert torch.allclose(net(obs).mean(-1), net.value(h).squeeze(-1))  # V: the actions' mean
    plain = build_qnet("mlp", (4,), 3, 16)
    count = sum(p.numel() for p in net.parameters()) - sum(p.numel() for p in plain.parameters())
    assert count == 16 + 1  # the value head alone
    c = dataclasses.replace(cfg(dueling=True), seed=3)
    server, replay = setup(c)
    plain_run = initial_params(cfg(), probe_env(cfg())).numel()
    assert server.pull().values.numel() == plain_run + c.model.hidden + 1
    actor = DQNActor(c, 0)
    actor.collect(server, replay, 70)  # past learning_starts
    spec = probe_env(c)
    learner = DQNLearner(c, spec.obs_shape, spec.num_actions)
    assert learner.learn(server, replay, 3).applied == 3


def played_run(run_dir: Path, **sets: object) -> Path:
    """A short in-process CartPole Gorila run with ``sets``, whose checkpoint an evaluation
    plays one game of; its run folder."""
    import rltrain

    run = rltrain.train(
        Path(__file__).resolve().parents[1] / "configs" / "cartpole_gorila.yaml",
        run_dir=run_dir,
        dqn__learning_starts=200,
        runtime__backend="local",
        stop__mean_return=None,
        stop__max_env_steps=1500,
        eval__every_steps=0,
        **sets,
    )
    assert run.updates > 0
    assert len(rltrain.evaluate(run.run_dir, episodes=1).returns) == 1
    return run.run_dir


@pytest.mark.slow
def test_a_dueling_run_plays_its_checkpoint(tmp_path: Path) -> None:
    """Evaluations and `rltrain eval` build the run's network from its config.yaml: a dueling
    checkpoint does not fit a plain Q-network."""
    run_dir = played_run(tmp_path / "run", dqn__dueling=True)
    assert "dueling: true" in (run_dir / "config.yaml").read_text()


def test_target_refreshes_copy_or_move_tau_of_the_way() -> None:
    """dqn.target_tau (Polyak averaging): every target_update versions the target moves tau of
    the way to the online network; the first refresh and one after a restore copy it."""
    c = cfg(target_update=2, target_tau=0.25)
    learner = DQNLearner(c, (4,), 2)
    flat = torch.nn.utils.parameters_to_vector

    def at(version: int, value: float) -> torch.Tensor:
        for p in learner.online.parameters():
            torch.nn.init.constant_(p, value)
        learner.refresh_target(version)
        return flat(learner.target.parameters())

    assert torch.allclose(at(0, 1.0), torch.ones(1))  # the first: a copy
    assert torch.allclose(at(1, 5.0), torch.ones(1))  # not due yet
    assert torch.allclose(at(2, 5.0), torch.full((1,), 2.0))  # 1 + 0.25 (5 - 1)
    # two refreshes missed (other learners pushed): 1 - 0.75^2 of the way, from version 6 on
    assert torch.allclose(at(7, 10.0), torch.full((1,), 2.0 + 0.4375 * 8.0))
    assert torch.allclose(at(7, 0.0), torch.full((1,), 5.5))  # not due until version 8
    with torch.no_grad():  # a target that diverged, then a restore: a copy clears it
        next(learner.target.parameters()).fill_(float("nan"))
    assert torch.allclose(at(1, 3.0), torch.full((1,), 3.0))
