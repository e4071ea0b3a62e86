"""The environments layer: shapes, SAME-STEP auto-reset, raw scores, determinism, Atari protocol."""

from __future__ import annotations

import dataclasses
import re

import gymnasium
import numpy as np
import pytest

from rltrain.config import ConfigError, from_dict
from rltrain.envs import CHAIN_ID, ActionSpace, EnvConfig, EnvError, StepBatch, VectorEnv, make_env
from rltrain.envs.toy import CHAIN_LENGTH, CHAIN_MAX_STEPS
from rltrain.options import field_docs


def rollout(env: VectorEnv, actions: np.ndarray) -> list[StepBatch]:
    """Step ``env`` with actions [T, B] and return every batch."""
    return [env.step(a) for a in actions]


def random_actions(env: VectorEnv, steps: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, env.num_actions, (steps, env.num_envs))


# ---------------------------------------------------------------------------------------------
# Config


def test_config_fields_have_docs_and_bounds() -> None:
    docs = field_docs(EnvConfig)
    assert set(docs) == {f.name for f in dataclasses.fields(EnvConfig)}
    with pytest.raises(ConfigError, match="sticky_actions"):
        from_dict(EnvConfig, {"sticky_actions": 1.5})
    with pytest.raises(ConfigError, match="num_envs"):
        from_dict(EnvConfig, {"num_envs": 0})


# ---------------------------------------------------------------------------------------------
# Gymnasium ids


def test_cartpole_shapes_and_dtypes() -> None:
    with make_env(EnvConfig(id="CartPole-v1", num_envs=3), seed=0) as env:
        assert (env.num_envs, env.obs_shape, env.num_actions) == (3, (4,), 2)
        assert env.obs_dtype == np.float32
        obs = env.reset()
        assert obs.shape == (3, 4) and obs.dtype == np.float32
        batch = env.step(np.zeros(3, dtype=np.int64))
        assert batch.obs.shape == (3, 4) and batch.obs.dtype == np.float32
        assert batch.reward.shape == (3,) and batch.reward.dtype == np.float32
        assert batch.terminated.dtype == np.bool_ and batch.truncated.dtype == np.bool_
        assert env.protocol["id"] == "CartPole-v1" and env.protocol["autoreset"] == "same_step"


def test_cartpole_same_step_autoreset_reports_each_episode_once() -> None:
    """Always pushing left ends episodes in ~10 steps; each end is seen once, already reset."""
    with make_env(EnvConfig(id="CartPole-v1", num_envs=2), seed=1) as env:
        env.reset()
        steps_in_episode = np.zeros(2, dtype=int)
        expected: list[int] = []
        reported: list[int] = []
        for batch in rollout(env, np.zeros((60, 2), dtype=np.int64)):
            steps_in_episode += 1
            ended = batch.terminated | batch.truncated
            for i in np.flatnonzero(ended):
                # The returned obs is the next episode's first one: CartPole starts near 0.
                assert np.all(np.abs(batch.obs[i]) <= 0.05)
                assert batch.reward[i] == 1.0  # the ended episode's last reward
                expected.append(int(steps_in_episode[i]))
                steps_in_episode[i] = 0
            reported.extend(batch.episode_lengths)
            assert batch.episode_returns == [float(n) for n in batch.episode_lengths]
        assert len(expected) >= 4
        assert sorted(reported) == sorted(expected)


def test_chain_reaches_goal_and_resets_same_step() -> None:
    with make_env(EnvConfig(id=CHAIN_ID, num_envs=2), seed=3) as env:
        assert (env.obs_shape, env.obs_dtype, env.num_actions) == ((CHAIN_LENGTH,), np.float32, 2)
        obs = env.reset()
        start = obs.argmax(axis=1)
        assert np.all(start < CHAIN_LENGTH // 2) and np.all(obs.sum(axis=1) == 1)
        to_goal = CHAIN_LENGTH - 1 - start
        batches = rollout(env, np.ones((int(to_goal.max()), 2), dtype=np.int64))
        for i in range(2):
            batch = batches[to_goal[i] - 1]
            assert batch.terminated[i] and not batch.truncated[i] and batch.reward[i] == 1.0
            assert batch.obs[i].argmax() < CHAIN_LENGTH // 2  # fresh start, not the goal cell
            assert 1.0 in batch.episode_returns and int(to_goal[i]) in batch.episode_lengths
        assert sum(len(b.episode_returns) for b in batches) == 2


def test_chain_truncates_at_time_limit() -> None:
    with make_env(EnvConfig(id=CHAIN_ID, num_envs=2), seed=0) as env:
        env.reset()
        batches = rollout(env, np.zeros((CHAIN_MAX_STEPS, 2), dtype=np.int64))
        assert not any(b.episode_returns for b in batches[:-1])
        last = batches[-1]
        assert last.truncated.all() and not last.terminated.any()
        assert last.episode_returns == [0.0, 0.0]
        assert last.episode_lengths == [CHAIN_MAX_STEPS] * 2


@pytest.mark.parametrize("env_id", ["CartPole-v1", CHAIN_ID])
def test_same_seed_same_trajectory(env_id: str) -> None:
    def trajectory(seed: int) -> np.ndarray:
        with make_env(EnvConfig(id=env_id, num_envs=3), seed=seed) as env:
            first = env.reset()
            steps = rollout(env, random_actions(env, 50))
            return np.stack([first] + [b.obs for b in steps])

    a, b = trajectory(7), trajectory(7)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, trajectory(8))


def test_reset_seeds_env_i_with_seed_plus_i() -> None:
    with make_env(EnvConfig(id="CartPole-v1", num_envs=3), seed=0) as env:
        three = env.reset(seed=10)
    with make_env(EnvConfig(id="CartPole-v1", num_envs=1), seed=0) as env:
        np.testing.assert_array_equal(env.reset(seed=12)[0], three[2])


def test_unknown_id_names_close_match_in_one_line() -> None:
    with pytest.raises(EnvError) as err:
        make_env(EnvConfig(id="CartPol-v1"), seed=0)
    msg = str(err.value)
    assert "CartPole-v1" in msg and "CartPol-v1" in msg and "\n" not in msg
    with pytest.raises(EnvError, match="ALE/Pong-v5"):
        make_env(EnvConfig(id="ALE/Pongg-v5"), seed=0)


PROTOCOL = "the protocol is set by the env.* fields (frame_skip, sticky_actions, ...)"


@pytest.mark.parametrize(
    ("kwargs", "use"),
    [
        ({"continuous": True}, PROTOCOL),
        ({"batch_size": 1}, PROTOCOL),
        ({"frameskip": 2}, "use env.frame_skip for frameskip"),  # the key that sets it
        (
            {"repeat_action_probability": 0.1},
            "use env.sticky_actions for repeat_action_probability",
        ),
        (
            {"mode": 1},
            f"{PROTOCOL}; a game's mode and difficulty: PongNoFrameskip-v4 with env.wrappers",
        ),
    ],
)
def test_atari_kwargs_that_change_the_protocol_are_refused_in_one_line(
    kwargs: dict, use: str
) -> None:
    with pytest.raises(EnvError) as err:
        make_env(EnvConfig(id="ALE/Pong-v5", num_envs=2, kwargs=kwargs), seed=0)
    assert str(err.value) == (
        f"env.kwargs {list(kwargs)} of ALE/Pong-v5: allowed for Atari only "
        f"thread_affinity_offset; {use}"
    )


def test_box_actions_are_continuous_and_clipped_to_their_bounds() -> None:
    """env.action_map: clip, the samples clipped to the Box (what runs before the key did)."""
    from rltrain.envs.gym_vector import to_env_actions

    env = make_env(EnvConfig(id="Pendulum-v1", num_envs=2, action_map="clip"), seed=0)
    space = env.action_space
    assert space == ActionSpace(1, True, (-2.0,), (2.0,), "clip") and env.num_actions == 1
    assert env.protocol["action_map"] == "clip"
    env.reset()
    step = env.step(np.array([[5.0], [-0.5]], np.float32))  # 5 is stepped as 2
    assert step.reward.shape == (2,)
    env.close()
    clipped = to_env_actions(np.array([[5.0], [-0.5]]), space)
    assert clipped.dtype == np.float32 and clipped.tolist() == [[2.0], [-0.5]]


@pytest.mark.parametrize(
    ("mapping", "expected"),
    [  # Box([0, -5, -inf], [1, 10, inf]) at u = (-2, 0, 3) and (0.5, -0.5, -7)
        ("affine", [[0.0, 2.5, 3.0], [0.75, -1.25, -7.0]]),
        ("tanh", [[0.0179862, 2.5, 3.0], [0.7310586, -0.9658790, -7.0]]),
        ("clip", [[0.0, 0.0, 3.0], [0.5, -0.5, -7.0]]),
    ],
)
def test_box_actions_reach_the_env_by_the_action_map(mapping: str, expected: list) -> None:
    """affine: [-1, 1] onto [low, high]; tanh: squashed onto it; unbounded dimensions as drawn."""
    space = ActionSpace(3, True, (0.0, -5.0, -np.inf), (1.0, 10.0, np.inf), mapping)
    got = space.to_env(np.array([[-2.0, 0.0, 3.0], [0.5, -0.5, -7.0]]))
    assert got.dtype == np.float32 and np.allclose(got, expected, atol=1e-6)
    assert make_env(EnvConfig(id="Pendulum-v1", num_envs=1), seed=0).action_space.mapping == (
        "affine"  # the default
    )


@pytest.mark.parametrize("mapping", ["affine", "tanh", "clip"])
def test_box_actions_stay_in_bounds_of_any_width_and_dtype(mapping: str) -> None:
    """The width of bounds near float32's limits overflowed in float32 (NaN actions, or
    every one pinned to high); float64 bounds rounded to float32 put actions outside them
    (float32(-0.1) < -0.1). The env now gets its own dtype, within its own bounds."""
    import gymnasium

    from rltrain.envs.gym_vector import action_space_of
    from rltrain.envs.single import gym_action_space

    u = np.random.default_rng(0).normal(scale=0.5, size=(256, 2))
    big = np.finfo(np.float32).max
    for box in (
        gymnasium.spaces.Box(-big, big, (2,), np.float32),
        gymnasium.spaces.Box(-3e38, 3e38, (2,), np.float32),
        gymnasium.spaces.Box(-0.1, 0.1, (2,), np.float64),
        gymnasium.spaces.Box(np.array([0.1, -0.3]), np.array([0.7, 0.3]), (2,), np.float64),
    ):
        space = action_space_of("e", box, mapping)
        a = space.to_env(u)
        assert a.dtype == box.dtype and np.isfinite(a).all()
        assert all(box.contains(row) for row in a), (box, mapping)
        assert len(np.unique(a[:, 0])) > 100 or mapping == "clip"  # not pinned to an edge
        assert gym_action_space(space) == box  # rltrain.make_env's, as the env's


@pytest.mark.parametrize("mapping", ["affine", "tanh", "clip"])
def test_from_env_gives_the_samples_that_reach_those_actions(mapping: str) -> None:
    """rltrain.make_env's loop steps with the env's own actions (load_policy's): the
    vector maps samples, so they go back to samples first (they were mapped twice)."""
    space = ActionSpace(4, True, (0.0, -5.0, -np.inf, 2.0), (1.0, 10.0, np.inf, 2.0), mapping)
    actions = np.array([[0.0, 2.5, 3.0, 2.0], [0.75, -1.25, -7.0, 2.0], [1.0, -5.0, 0.0, 2.0]])
    assert np.allclose(space.to_env(space.from_env(actions)), actions, atol=1e-5)
    beyond = space.from_env(np.array([[9.0, 99.0, 1.0, 2.0]]))  # past the Box: its edge
    assert np.allclose(space.to_env(beyond), [[1.0, 10.0, 1.0, 2.0]], atol=1e-5)


def test_a_discrete_action_space_with_a_start_gets_the_policys_actions_shifted() -> None:
    """The policy picks 0..n-1: Discrete(3, start=-1) got them unshifted, silently; now the
    env gets -1..1, and a loop in the env's units (rltrain.make_env) steps with -1..1."""
    import gymnasium

    from rltrain.envs.gym_vector import action_space_of
    from rltrain.envs.single import gym_action_space

    space = action_space_of("e", gymnasium.spaces.Discrete(3, start=-1))
    assert (space.n, space.start, space.describe()) == (3, -1, "Discrete(3, start=-1)")
    assert space.to_env(np.array([0, 1, 2])).tolist() == [-1, 0, 1]
    assert space.from_env(np.array([-1, 0, 1])).tolist() == [0, 1, 2]
    assert gym_action_space(space) == gymnasium.spaces.Discrete(3, start=-1)
    assert action_space_of("e", gymnasium.spaces.Discrete(3)).describe() == "Discrete(3)"


def test_other_action_spaces_are_rejected_naming_what_is_supported() -> None:
    from rltrain.envs.gym_vector import action_space_of

    supported = "supported: Discrete, 1-D MultiDiscrete or MultiBinary, or a 1-D float Box"
    for space, what in (
        (gymnasium.spaces.MultiDiscrete([[2, 2], [2, 2]]), "MultiDiscrete of shape (2, 2), int64,"),
        (gymnasium.spaces.Box(-1, 1, (2, 2)), "Box of shape (2, 2), float32,"),
        (gymnasium.spaces.Text(5), "Text"),
    ):
        with pytest.raises(EnvError, match=re.escape(f"has a {what} action space; {supported}")):
            action_space_of("e", space)
    with pytest.raises(EnvError, match="an action wrapper in env.wrappers can present it"):
        action_space_of("e", gymnasium.spaces.Box(-1, 1, (2, 2)))


def test_multi_discrete_and_multi_binary_actions_are_vectors_of_categoricals() -> None:
    from rltrain.envs.gym_vector import action_space_of
    from rltrain.envs.single import gym_action_space

    md = gymnasium.spaces.MultiDiscrete([3, 4], start=[-1, 0])
    space = action_space_of("e", md)
    assert (space.n, space.nvec, space.starts, space.params) == (2, (3, 4), (-1, 0), 7)
    assert space.describe() == "MultiDiscrete([3, 4])" and not space.continuous
    assert space.to_env(np.array([[0, 3], [2, 0]])).tolist() == [[-1, 3], [1, 0]]
    assert space.from_env(np.array([[-1, 3]])).tolist() == [[0, 3]]
    assert gym_action_space(space) == md
    binary = action_space_of("e", gymnasium.spaces.MultiBinary(4))
    assert (binary.nvec, binary.starts, binary.params) == ((2, 2, 2, 2), (), 8)
    assert binary.describe() == "MultiBinary(4)"
    assert gym_action_space(binary) == gymnasium.spaces.MultiBinary(4)
    # the env's dtype: gymnasium's contains() refuses int64 actions of an int32 space
    small = gymnasium.spaces.MultiDiscrete([3, 4], dtype=np.int32, start=[-1, 0])
    as_space = action_space_of("e", small)
    assert small.contains(as_space.to_env(np.array([[2, 3]]))[0])
    assert gym_action_space(as_space) == small
    cfg = EnvConfig(id="rltrain_test/MultiDiscrete-v0", imports=("custom_envs",), num_envs=2)
    with make_env(cfg, seed=0) as env:  # the env refuses an action outside its space
        env.reset()
        step = env.step(np.array([[0, 3], [2, 0]]))
        assert step.reward.shape == (2,)


# ---------------------------------------------------------------------------------------------
# Atari (ale-py's C++ vector env)


def test_pong_protocol_shapes_and_clipped_rewards() -> None:
    with make_env(EnvConfig(id="ALE/Pong-v5", num_envs=2, num_threads=2), seed=0) as env:
        assert (env.obs_shape, env.obs_dtype, env.num_actions) == ((4, 84, 84), np.uint8, 6)
        p = env.protocol
        assert (p["game"], p["sticky_actions"], p["frame_skip"]) == ("pong", 0.25, 4)
        assert (p["frame_stack"], p["noop_max"], p["image_size"]) == (4, 30, 84)
        assert p["clip_rewards"] is True and p["episodic_life"] is False
        obs = env.reset()
        assert obs.shape == (2, 4, 84, 84) and obs.dtype == np.uint8
        batches = rollout(env, random_actions(env, 150))
        first = batches[0].obs.copy()
        assert batches[-1].obs.shape == (2, 4, 84, 84) and batches[-1].obs.dtype == np.uint8
        np.testing.assert_array_equal(batches[0].obs, first)  # later steps do not overwrite it
        rewards = np.concatenate([b.reward for b in batches])
        assert rewards.dtype == np.float32 and set(rewards.tolist()) <= {-1.0, 0.0, 1.0}


def test_noframeskip_ids_run_under_the_protocol_with_the_ids_sticky_actions() -> None:
    """PongNoFrameskip-v4, the id of most Atari code, runs as ALE/Pong-v5 does (not as a raw
    210x160 RGB Gymnasium env), with v4's sticky actions (0) unless env.sticky_actions says."""
    from rltrain.envs.atari import AtariEnv, resolve_sticky

    with make_env(EnvConfig(id="PongNoFrameskip-v4", num_envs=2, num_threads=2), seed=0) as env:
        assert isinstance(env, AtariEnv) and env.obs_shape == (4, 84, 84)
        p = env.protocol
        assert (p["game"], p["sticky_actions"], p["frame_skip"]) == ("pong", 0.0, 4)
        assert env.reset().shape == (2, 4, 84, 84)
    resolved = {
        (env_id, sticky): resolve_sticky(EnvConfig(id=env_id, sticky_actions=sticky)).sticky_actions
        for env_id in ("ALE/Pong-v5", "PongNoFrameskip-v4", "PongNoFrameskip-v0", "CartPole-v1")
        for sticky in (None, 0.1)
    }
    assert resolved == {
        ("ALE/Pong-v5", None): 0.25,
        ("PongNoFrameskip-v4", None): 0.0,
        ("PongNoFrameskip-v0", None): 0.25,
        ("CartPole-v1", None): None,  # not Atari: nothing to resolve
        **{(env_id, 0.1): 0.1 for env_id, _ in resolved},  # a value set is kept
    }


def test_fire_reset_is_an_option_the_emulator_obeys() -> None:
    """explore88: FIRE at each game's start was part of the protocol without a key. Breakout
    waits for FIRE to serve: with it a player who never moves loses a life, without it none."""
    from ale_py.vector_env import AtariVectorEnv

    from rltrain.envs.atari import atari_protocol, vector_args

    lives = {}
    for fire in (True, False):
        cfg = EnvConfig(id="ALE/Breakout-v5", fire_reset=fire, sticky_actions=0.0, noop_max=0)
        protocol = atari_protocol(cfg, "breakout", 1, 0, False)
        assert protocol["fire_reset"] is fire
        env = AtariVectorEnv("breakout", 1, **vector_args(cfg, protocol))
        env.reset(seed=0)
        for _ in range(300):
            info = env.step(np.zeros(1, dtype=np.int64))[4]
        lives[fire] = int(info["lives"][0])
        env.close()
    assert lives == {True: 4, False: 5}


def test_atari_ids_that_skip_frames_themselves_are_refused_unless_wrapped() -> None:
    from rltrain.envs.gym_vector import GymVectorEnv

    with pytest.raises(EnvError) as e:
        make_env(EnvConfig(id="Pong-v4", num_envs=1), seed=0)
    assert "\n" not in str(e.value)
    assert "Pong-v4 skips 2 to 4 frames at random" in str(e.value)
    assert "use PongNoFrameskip-v4" in str(e.value) and "ALE/Pong-v5" in str(e.value)
    wrapped = EnvConfig(
        id="Pong-v4", num_envs=1, wrappers=("gymnasium.wrappers:TimeLimit(max_episode_steps=5)",)
    )
    with make_env(wrapped, seed=0) as env:  # the user's wrappers preprocess it: a Gymnasium env
        assert isinstance(env, GymVectorEnv) and env.obs_shape == (12, 210, 160)


def test_atari_truncation_reports_raw_score_once() -> None:
    cfg = EnvConfig(id="ALE/Pong-v5", num_envs=2, max_episode_frames=400)  # 100 agent steps
    with make_env(cfg, seed=0) as env:
        env.reset()
        batches = rollout(env, random_actions(env, 101))
        assert not any(b.episode_returns for b in batches[:99])
        end = batches[99]
        assert end.truncated.all() and end.episode_lengths == [100, 100]
        # SAME-STEP: obs is already the new game's first stack (older frames are blank).
        assert (end.obs[:, :-1] == 0).all() and (end.obs[:, -1] > 0).any(axis=(1, 2)).all()
        for score in end.episode_returns:
            assert isinstance(score, float) and score == int(score) and -21 <= score <= 21
        assert not batches[100].truncated.any() and not batches[100].episode_returns


def test_atari_training_reward_is_sign_of_raw_score() -> None:
    """Same seed and actions: the evaluation run sees raw rewards, training their sign."""
    cfg = EnvConfig(id="ALE/SpaceInvaders-v5", num_envs=2, max_episode_frames=1200)
    runs = []
    for evaluation in (False, True):
        with make_env(cfg, seed=5, evaluation=evaluation) as env:
            env.reset()
            runs.append(rollout(env, random_actions(env, 300, seed=1)))
    train, raw = runs
    raw_rewards = np.stack([b.reward for b in raw])
    assert raw_rewards.max() > 1  # Space Invaders scores 5..30 per alien
    np.testing.assert_array_equal(np.stack([b.reward for b in train]), np.sign(raw_rewards))
    train_scores = [s for b in train for s in b.episode_returns]
    assert train_scores == [s for b in raw for s in b.episode_returns] and train_scores
    assert max(train_scores) > 1  # the reported score is raw, not clipped


def test_episodic_life_terminates_on_life_loss_but_scores_whole_game() -> None:
    cfg = EnvConfig(id="ALE/Breakout-v5", num_envs=1, episodic_life=True)
    runs = []
    for evaluation in (False, True):
        with make_env(cfg, seed=2, evaluation=evaluation) as env:
            assert env.protocol["episodic_life"] is (not evaluation)
            env.reset()
            runs.append(rollout(env, random_actions(env, 1500, seed=4)))
    train, raw = runs
    game_over = next(t for t, b in enumerate(raw) if b.episode_returns)
    assert raw[game_over].terminated[0]
    assert sum(bool(b.terminated[0]) for b in raw[: game_over + 1]) == 1
    # Training: one terminal per lost life (Breakout has 5), the game itself goes on.
    assert sum(bool(b.terminated[0]) for b in train[: game_over + 1]) == 5
    assert [b.episode_returns for b in train] == [b.episode_returns for b in raw]
    assert train[game_over].episode_lengths == [game_over + 1]


def test_an_ended_episodes_last_observation_is_kept_for_one_env_loops() -> None:
    """VectorEnv.ended_obs (rltrain.make_env's step at an episode's end): a game's last stack
    where ale-py began the next, the stack itself at a lost life (episodic life: no reset)."""
    cfg = EnvConfig(id="ALE/Breakout-v5", num_envs=2, episodic_life=True, max_episode_frames=800)
    with make_env(cfg, seed=2) as env:
        with pytest.raises(RuntimeError, match="no step since"):
            env.ended_obs(np.array([True, False]))
        prev, ends = env.reset(), {"life": 0, "game": 0}
        for a in random_actions(env, 201, seed=4):
            b = env.step(a)
            ended = b.terminated | b.truncated
            last = env.ended_obs(ended)
            assert last.shape == (int(ended.sum()), 4, 84, 84)
            for k, i in enumerate(np.flatnonzero(ended)):
                game = i in b.episode_envs  # else a lost life: the game goes on from this stack
                if game:  # the stack before ale-py's reset: it continues the one before
                    np.testing.assert_array_equal(last[k][:-1], prev[i][1:])
                    assert not (last[k] == b.obs[i]).all()
                else:
                    np.testing.assert_array_equal(last[k], b.obs[i])
                ends["game" if game else "life"] += 1
            prev = b.obs.copy()
        assert ends["life"] >= 5 and ends["game"] >= 2  # (a game over, and the time limit)


def test_evaluation_disables_clipping_and_episodic_life() -> None:
    cfg = EnvConfig(id="ALE/Pong-v5", num_envs=1, clip_rewards=True, episodic_life=True)
    with make_env(cfg, seed=0, evaluation=True) as env:
        assert env.protocol["clip_rewards"] is False and env.protocol["episodic_life"] is False
        assert env.protocol["evaluation"] is True
    with make_env(cfg, seed=0, num_envs=3) as env:
        assert env.protocol["clip_rewards"] is True and env.protocol["episodic_life"] is True
        assert env.num_envs == 3 and env.reset().shape == (3, 4, 84, 84)


def test_an_episode_shorter_than_one_step_is_refused() -> None:
    """max_episode_frames 3 at frame_skip 4: every step ended its episode, the run never scored."""
    with pytest.raises(ValueError, match="max_episode_frames=3 is below frame_skip=4: every"):
        EnvConfig(id="ALE/Pong-v5", max_episode_frames=3)
    assert EnvConfig(id="ALE/Pong-v5", max_episode_frames=4).max_episode_frames == 4


def test_the_atari_protocol_is_said_in_the_runs_first_lines() -> None:
    """explore115: a v4 id's sticky actions 0 (v5: 0.25), episodic life, the full action set
    were in config.yaml and TensorBoard only."""
    from rltrain.envs.atari_text import protocol_line

    v5 = protocol_line(EnvConfig(id="ALE/Breakout-v5"))
    assert v5.startswith("env: ALE/Breakout-v5 under the Atari protocol: sticky actions 0.25, ")
    assert "the game's own actions" in v5 and "a lost life ends no training episode" in v5
    v4 = EnvConfig(id="BreakoutNoFrameskip-v4", full_action_space=True, episodic_life=True)
    line = protocol_line(v4)
    assert "sticky actions 0, " in line and "all 18 actions" in line
    assert "a lost life ends a training episode" in line
    assert protocol_line(EnvConfig(id="CartPole-v1")) == ""
