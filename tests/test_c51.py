"""C51, the distributional DQN (Bellemare et al. 2017) behind ``dqn.atoms``: the projection of
the moved target distribution onto the atoms, the cross-entropy loss, the network's head, and
its learner, checks and resume in one process."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from rltrain.rl.algos.losses import categorical_loss, categorical_targets
from rltrain.rl.algos.models import build_qnet
from tests.test_dqn import cfg, played_run, setup

SUPPORT = torch.tensor([-1.0, 0.0, 1.0])
DQN = ["algo.name=dqn", "stop.max_env_steps=1"]


def project(reward: float, done: bool, probs: list[float], gamma: float = 1.0) -> list[float]:
    out, _ = categorical_targets(
        torch.tensor([reward]), torch.tensor([done]), torch.tensor([probs]), SUPPORT, gamma
    )
    return [round(float(x), 6) for x in out[0]]


def test_the_moved_atoms_are_split_between_their_two_nearest() -> None:
    """Bellemare et al. 2017, Algorithm 1: r + gamma z_j lands between two atoms and its
    probability is split by its distance to each; a terminal moves every atom to r."""
    assert project(0.5, False, [0.0, 1.0, 0.0]) == [0.0, 0.5, 0.5]
    assert project(0.25, False, [1.0, 0.0, 0.0], gamma=0.5) == [0.25, 0.75, 0.0]  # -0.25
    assert project(-0.5, True, [0.0, 0.0, 1.0]) == [0.5, 0.5, 0.0]  # all at -0.5


def test_an_atom_landing_on_an_atom_keeps_its_probability() -> None:
    """Algorithm 1 as printed loses the probability of an atom whose b is an integer (its floor
    and ceiling are equal); here it stays there, and what leaves the support counts as its
    end."""
    assert project(1.0, True, [0.2, 0.3, 0.5]) == [0.0, 0.0, 1.0]
    assert project(0.0, False, [0.2, 0.3, 0.5]) == [0.2, 0.3, 0.5]  # the identity
    assert project(5.0, False, [0.2, 0.3, 0.5]) == [0.0, 0.0, 1.0]
    assert project(-5.0, False, [0.2, 0.3, 0.5]) == [1.0, 0.0, 0.0]


def test_the_projection_keeps_the_mass_and_the_mean_within_the_support() -> None:
    """Splitting by distance keeps the mean: inside the support, the target's mean is the
    double-DQN target r + gamma^k E[Z(s', a')] of the expected-value loss."""
    g = torch.Generator().manual_seed(0)
    support = torch.linspace(-10, 10, 51)
    probs = torch.randn(64, 51, generator=g).softmax(-1)
    rewards = torch.rand(64, generator=g) * 0.1 - 0.05  # 0.99 * 10 + 0.05 < 10: none clipped
    done = torch.rand(64, generator=g) < 0.2
    steps = torch.randint(1, 4, (64,), generator=g)
    out, beyond = categorical_targets(rewards, done, probs, support, 0.99, steps)
    assert torch.allclose(out.sum(-1), torch.ones(64))
    assert not beyond.any()
    discount = 0.99 ** steps.float() * (~done).float()
    assert torch.allclose(out @ support, rewards + discount * (probs @ support), atol=1e-5)


def test_an_atom_moved_to_the_top_of_any_support_stays_on_it() -> None:
    """review90: float32 put an atom clamped to v_max just above K - 1, and its ceiling past the
    last atom (an IndexError; on a GPU a device assert) for 20 of a grid of supports."""
    for k, low, high in [(51, -7.3, 9.9), (51, -10.0, 200.0), (51, -1.0, 3.3), (11, -0.3, 100.0)]:
        support = torch.linspace(low, high, k)
        probs = torch.full((3, k), 1.0 / k)
        out, beyond = categorical_targets(
            torch.tensor([1.0, 5.0, -500.0]),
            torch.tensor([False, True, False]),
            probs,
            support,
            0.99,
        )
        assert torch.allclose(out.sum(-1), torch.ones(3))
        assert float(beyond[2]) == pytest.approx(1.0)  # -500 + 0.99 z: below each of these supports


def test_the_loss_is_the_weighted_cross_entropy_at_the_action_taken() -> None:
    log_probs = torch.randn(2, 3, 4).log_softmax(-1)  # [N, A, K]
    targets = torch.tensor([[0.0, 0.5, 0.5, 0.0], [1.0, 0.0, 0.0, 0.0]])
    loss, ce = categorical_loss(log_probs, torch.tensor([2, 0]), targets, torch.tensor([1.0, 0.5]))
    expected = torch.stack(
        [-(targets[0] * log_probs[0, 2]).sum(), -(targets[1] * log_probs[1, 0]).sum()]
    )
    assert torch.allclose(ce, expected)
    assert torch.allclose(loss, (expected * torch.tensor([1.0, 0.5])).mean())


@pytest.mark.parametrize("dueling", [False, True])
def test_the_head_gives_a_distribution_per_action_whose_mean_acting_reads(dueling: bool) -> None:
    """Acting, evaluations and the target's double-DQN choice read Q = sum_k z_k p_k; the
    dueling head combines V and A per atom before the softmax (Hessel et al. 2018)."""
    torch.manual_seed(0)
    net = build_qnet("mlp", (4,), 3, 16, dueling=dueling, atoms=11, v_min=0, v_max=100)
    obs = torch.randn(5, 4)
    log_probs = net.log_probs(obs)
    assert log_probs.shape == (5, 3, 11)
    assert torch.allclose(log_probs.exp().sum(-1), torch.ones(5, 3))
    assert torch.allclose(net(obs), log_probs.exp() @ torch.linspace(0, 100, 11))
    plain = build_qnet("mlp", (4,), 3, 16, dueling=dueling)
    heads = sum(p.numel() for p in net.parameters()) - sum(p.numel() for p in plain.parameters())
    assert heads == 10 * (3 + dueling) * (16 + 1)  # 10 more outputs per action (and for V)
    assert "support" not in dict(net.named_parameters())  # the atoms' values are not learned


def test_the_learner_fits_a_terminal_reward_and_ranks_by_cross_entropy() -> None:
    """End to end in one process: the C51 learner's pushes move the mean of the distribution at
    a terminal transition to its reward, and prioritised replay gets every sample's
    cross-entropy."""
    from rltrain.rl.env_spec import probe_env
    from rltrain.rl.gorila import DQNActor, DQNLearner

    c = dataclasses.replace(
        cfg(atoms=11, v_min=0.0, v_max=100.0, n_step=3),
        replay=dataclasses.replace(cfg().replay, prioritized=True),
    )
    server, replay = setup(c)
    DQNActor(c, 0).collect(server, replay, 70)  # past learning_starts
    spec = probe_env(c)
    learner = DQNLearner(c, spec.obs_shape, spec.num_actions)
    stats = learner.learn(server, replay, 3)
    assert stats.applied == 3 and all(torch.isfinite(torch.tensor(x.td)) for x in stats.losses)
    assert stats.q_mean is not None and stats.q_mean > 0  # a distribution's mean on 0..100
    assert stats.support_beyond is not None and 0 <= stats.support_beyond <= 1

    # a one-state bandit: the terminal reward 7 is what the mean goes to
    obs = torch.zeros(8, 4)
    terminal = torch.ones(8, dtype=torch.bool)
    args = (obs, obs, torch.zeros(8, dtype=torch.long), torch.full((8,), 7.0), terminal)
    opt = torch.optim.Adam(learner.online.parameters(), lr=0.01)
    for _ in range(300):
        terms = learner.loss(learner.online, learner.target, *args, torch.ones(8))
        opt.zero_grad()
        terms.loss.backward()
        opt.step()
    assert terms.priority.shape == (8,) and bool((terms.priority >= 0).all())
    assert terms.beyond is not None and float(terms.beyond) == 0.0  # 7 lies inside 0..100
    with torch.no_grad():
        assert abs(float(learner.online(obs[:1])[0, 0]) - 7.0) < 0.5


def test_a_support_that_spans_nothing_is_refused() -> None:
    from rltrain.config import load_config
    from rltrain.rl.config import TrainConfig

    with pytest.raises(ValueError, match=r"dqn.v_min=5, dqn.v_max=5: .* v_min must be below"):
        load_config(TrainConfig, None, [*DQN, "dqn.atoms=51", "dqn.v_min=5", "dqn.v_max=5"])
    # float32 atoms: beyond its range (explore116), or spaced by 0 (review90b)
    for low, high in [("-10", "1e40"), ("-3.5e38", "-3.45e38"), ("1e8", "100000001")]:
        with pytest.raises(ValueError, match=r"the atoms are 51 float32 returns, which this"):
            load_config(
                TrainConfig, None, [*DQN, "dqn.atoms=51", f"dqn.v_min={low}", f"dqn.v_max={high}"]
            )
    load_config(TrainConfig, None, [*DQN, "dqn.atoms=51", "dqn.v_min=-1e30", "dqn.v_max=1e30"])
    # one atom is the expected-value DQN: its support is unused
    load_config(TrainConfig, None, [*DQN, "dqn.v_min=5", "dqn.v_max=5"])


def test_a_resume_that_changes_the_atoms_names_them() -> None:
    """The parameter count a changed dqn.atoms brings is named from the checkpoint's config,
    as dqn.dueling is."""
    from rltrain.checkpoint import CheckpointError
    from rltrain.config import to_dict
    from rltrain.rl.env_spec import check_fits

    was = cfg()
    state = {"shards": [{"param": torch.zeros(10)}], "config": to_dict(was)}
    with pytest.raises(CheckpointError, match=r"this resume changes dqn.atoms: 1 -> 51"):
        check_fits(Path("ckpt.pt"), state, torch.zeros(12), cfg(atoms=51))
    # a checkpoint from before dqn.atoms had the default, 1 (review90: it named nothing)
    for key in ("atoms", "v_min", "v_max"):
        del state["config"]["dqn"][key]
    with pytest.raises(CheckpointError, match=r"this resume changes dqn.atoms: 1 -> 51"):
        check_fits(Path("ckpt.pt"), state, torch.zeros(12), cfg(atoms=51))


def test_the_support_is_noted_where_it_changes_nothing_or_may_not_fit() -> None:
    from rltrain.config import load_config
    from rltrain.rl.config import TrainConfig
    from rltrain.rl.config.notes import support_notes

    def notes(*sets: str) -> list[str]:
        return support_notes(load_config(TrainConfig, None, [*DQN, *sets]))

    assert notes("dqn.v_max=100") == [
        "dqn.v_min=-10, dqn.v_max=100: the range of C51's atoms, read with dqn.atoms > 1 "
        "only: this run's one Q-value per action changes nothing"
    ]
    (note,) = notes("dqn.atoms=51")  # CartPole's returns reach 100
    assert note.startswith("dqn.atoms=51 on the default dqn.v_min=-10, dqn.v_max=10, which")
    assert "CartPole-v1's rewards are not clipped" in note
    assert notes("dqn.atoms=51", "dqn.v_min=0", "dqn.v_max=100") == []
    assert notes("env.id=ALE/Pong-v5", "dqn.atoms=51") == []  # clipped rewards
    assert notes() == []


def test_the_runs_first_lines_name_the_head() -> None:
    from rltrain.config import load_config
    from rltrain.rl.config import TrainConfig
    from rltrain.rl.run.sizing import describe_batch

    pong = Path(__file__).resolve().parents[1] / "configs" / "pong_gorila.yaml"
    sets = ["actors=1", "dqn.atoms=51", "dqn.dueling=true"]
    line = describe_batch(load_config(TrainConfig, pong, sets))
    assert "(8 envs); a dueling C51 head (51 atoms on [-10, 10]); learners sample" in line
    assert "head" not in describe_batch(load_config(TrainConfig, pong, ["actors=1"]))


@pytest.mark.slow
def test_a_c51_run_plays_its_checkpoint(tmp_path: Path) -> None:
    """A run with dqn.atoms trains through the runtime, saves the atoms in config.yaml and its
    evaluations build the same head from it."""
    run_dir = played_run(tmp_path / "run", dqn__atoms=11, dqn__v_min=0.0, dqn__v_max=100.0)
    assert "atoms: 11" in (run_dir / "config.yaml").read_text()
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir / "tb"))
    acc.Reload()
    assert 0 <= acc.Scalars("dqn/support_beyond")[-1].value <= 1  # (explore116)


def test_a_resume_that_moves_the_support_says_what_it_does() -> None:
    """explore116: v_min/v_max changed on --resume relabel the learned atoms (Q 44.8 -> 91.0)."""
    from rltrain.config import to_dict
    from rltrain.rl.run.resume import resume_changes

    was = cfg(atoms=51, v_min=0.0, v_max=100.0)
    now = cfg(atoms=51, v_min=-10.0, v_max=200.0)
    changes = resume_changes(Path("ckpt.pt"), to_dict(was), now)
    assert "dqn.v_max: 100.0 -> 200.0 (the atoms' learned probabilities are read at the new " in (
        "; ".join(changes)
    )
