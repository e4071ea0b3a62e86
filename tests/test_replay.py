"""The replay memory: exact transitions back (vectors, frame stacks, real Atari), FIFO eviction,
no stale frames after wrap-around, prioritized sampling (Schaul et al. 2016) and its footprint."""

from __future__ import annotations

import hashlib
import itertools

import numpy as np
import pytest

from rltrain.replay import ReplayMemory, SampledBatch, SumTree, TransitionBlock
from rltrain.replay.memory import frame_capacity

Key = tuple[bytes, int, float, bytes, bool]


class FakeEnv:
    """B envs with SAME-STEP autoreset whose every frame is unique (a global counter).

    frame_stack 1: the observation is a float32 vector filled with the counter. Otherwise a
    uint8 stack of 2x3 frames, row 0 = k % 250 + 1, row 1 = k // 250 % 250 + 1 (never 0), and
    a new episode's stack is blank (zeros) but for its newest frame, as ale-py does.
    """

    def __init__(
        self,
        num_envs: int,
        seed: int,
        frame_stack: int = 4,
        max_len: int = 8,
        p_terminal: float = 0.5,
    ) -> None:
        self.rng = np.random.default_rng(seed)
        self.counter = itertools.count(1000 * seed)
        self.frame_stack, self.max_len, self.p_terminal = frame_stack, max_len, p_terminal
        shape = (4,) if frame_stack == 1 else (frame_stack, 2, 3)
        self.obs = np.zeros((num_envs, *shape), np.float32 if frame_stack == 1 else np.uint8)
        self.left = np.zeros(num_envs, dtype=np.int64)
        for b in range(num_envs):
            self._reset(b)

    def _frame(self) -> np.ndarray:
        k = next(self.counter)
        if self.frame_stack == 1:
            return np.full(4, k, dtype=np.float32)
        return np.array([[k % 250 + 1] * 3, [k // 250 % 250 + 1] * 3], dtype=np.uint8)

    def _reset(self, b: int) -> None:
        self.left[b] = self.rng.integers(1, self.max_len + 1)
        if self.frame_stack == 1:
            self.obs[b] = self._frame()
        else:
            self.obs[b] = 0
            self.obs[b, -1] = self._frame()

    def step(self, b: int) -> tuple[bool, bool]:
        """Advance env b; returns (terminated, truncated)."""
        self.left[b] -= 1
        if self.left[b] == 0:
            terminated = bool(self.rng.random() < self.p_terminal)
            self._reset(b)
            return terminated, not terminated
        if self.frame_stack == 1:
            self.obs[b] = self._frame()
        else:
            self.obs[b] = np.concatenate([self.obs[b, 1:], self._frame()[None]])
        return False, False

    def rollout(self, steps: int) -> tuple[np.ndarray, ...]:
        """obs [T+1, B, ...], actions, rewards, terminated, truncated [T, B]."""
        num_envs = self.obs.shape[0]
        obs = [self.obs.copy()]
        ends = np.zeros((2, steps, num_envs), dtype=bool)
        for t in range(steps):
            for b in range(num_envs):
                ends[:, t, b] = self.step(b)
            obs.append(self.obs.copy())
        actions = self.rng.integers(0, 6, (steps, num_envs))
        rewards = self.rng.integers(-1, 2, (steps, num_envs)).astype(np.float32)
        return np.stack(obs), actions, rewards, ends[0], ends[1]


def transition_keys(
    obs: np.ndarray,
    actions: np.ndarray,
    rewards: np.ndarray,
    terminated: np.ndarray,
    truncated: np.ndarray,
) -> tuple[list[Key], list[Key]]:
    """(stored, skipped) transition keys of a rollout, stored ones in the memory's order."""
    stored: list[Key] = []
    skipped: list[Key] = []
    for t, b in itertools.product(range(actions.shape[0]), range(actions.shape[1])):
        key = (
            obs[t, b].tobytes(),
            int(actions[t, b]),
            float(rewards[t, b]),
            obs[t + 1, b].tobytes(),
            bool(terminated[t, b]),
        )
        (skipped if truncated[t, b] and not terminated[t, b] else stored).append(key)
    return stored, skipped


def batch_keys(batch: SampledBatch) -> list[Key]:
    return [
        (o.tobytes(), int(a), float(r), n.tobytes(), bool(d))
        for o, a, r, n, d in zip(
            batch.obs, batch.actions, batch.rewards, batch.next_obs, batch.done, strict=True
        )
    ]


def feed(
    memory: ReplayMemory, env: FakeEnv, stream: int, steps: int
) -> tuple[list[Key], list[Key]]:
    """One rollout of ``env`` into ``memory`` as a block; returns its (stored, skipped) keys."""
    rollout = env.rollout(steps)
    block = TransitionBlock.from_steps(stream, *rollout, frame_stack=env.frame_stack)
    stored, skipped = transition_keys(*rollout)
    assert memory.add(block) == len(stored)
    return stored, skipped


# ---------------------------------------------------------------------------------------------
# Vector observations


def test_vector_round_trip_skips_truncated_steps() -> None:
    memory = ReplayMemory(1000, (4,), np.float32, seed=1)
    env = FakeEnv(3, seed=1, frame_stack=1)
    stored: list[Key] = []
    skipped: list[Key] = []
    for _ in range(5):
        new, trunc = feed(memory, env, stream=7, steps=20)
        stored += new
        skipped += trunc
    assert len(memory) == len(stored) == 300 - len(skipped) and skipped
    batch = memory.sample(4000)
    assert batch.obs.dtype == np.float32 and batch.actions.dtype == np.int64
    assert batch.weights.dtype == np.float32 and np.all(batch.weights == 1.0)
    sampled = set(batch_keys(batch))
    assert sampled == set(stored)  # every stored transition, nothing else
    assert not sampled & set(skipped)
    assert batch.done.any()  # terminal next_obs: what the env returned (next episode's first)
    assert memory.stats()["restarts"] == 3  # obs0 stored once per env stream


def test_vector_fifo_eviction_at_capacity() -> None:
    memory = ReplayMemory(50, (4,), "float32", seed=2)
    env = FakeEnv(2, seed=2, frame_stack=1, max_len=30)
    stored: list[Key] = []
    for _ in range(10):
        stored += feed(memory, env, stream=0, steps=10)[0]
    assert len(memory) == 50 and memory.stats()["added"] == len(stored)
    assert set(batch_keys(memory.sample(2000))) == set(stored[-50:])


# ---------------------------------------------------------------------------------------------
# Frame stacks


def test_frame_stacks_of_interleaved_streams_survive_wraparound() -> None:
    capacity = 60
    memory = ReplayMemory(capacity, (4, 2, 3), np.uint8, frame_stack=4, seed=3)
    envs = [FakeEnv(2, seed=s) for s in range(3)]
    rng = np.random.default_rng(3)
    stored: list[Key] = []
    skipped: set[Key] = set()
    for _ in range(40):  # ~560 steps through a ring of 125 frames
        stream = int(rng.integers(3))
        new, trunc = feed(memory, envs[stream], stream, steps=int(rng.integers(1, 8)))
        stored += new
        skipped.update(trunc)
        order = {key: i for i, key in enumerate(stored)}
        batch = memory.sample(64)
        for key in batch_keys(batch):
            assert key in order and key not in skipped
            assert order[key] >= len(stored) - capacity  # FIFO: only the newest C
    assert capacity - 10 <= len(memory) <= capacity
    batch = memory.sample(3000)
    assert np.any(np.all(batch.obs[:, :3] == 0, axis=(1, 2, 3)))  # episode starts
    assert np.any(np.all(batch.obs[:, 0] > 0, axis=(1, 2)))  # full stacks
    assert batch.done.any()
    assert memory.stats()["restarts"] >= 6  # each env's obs0 once, again after a long pause


def test_broken_stream_restarts_from_obs0() -> None:
    memory = ReplayMemory(100, (4, 2, 3), np.uint8, frame_stack=4)
    env = FakeEnv(2, seed=4, max_len=20)
    stored = feed(memory, env, stream=0, steps=5)[0]
    env.rollout(3)  # a block that never arrives: obs0 of the next one does not continue
    stored += feed(memory, env, stream=0, steps=5)[0]
    assert memory.stats()["restarts"] == 4
    assert set(batch_keys(memory.sample(1000))) == set(stored)


def test_transitions_whose_frames_are_overwritten_are_dropped() -> None:
    memory = ReplayMemory(100, (4, 2, 3), np.uint8, frame_stack=4)
    paused = FakeEnv(1, seed=5, max_len=50)
    feed(memory, paused, stream=0, steps=10)
    assert len(memory) == 10
    # Time-limit steps write frames but no transitions: the ring turns over, the memory empties.
    flood = FakeEnv(2, seed=6, max_len=1, p_terminal=0.0)
    for _ in range(frame_capacity(100, 4) // 20 + 1):
        assert feed(memory, flood, stream=1, steps=10)[0] == []
    assert len(memory) == 0
    with pytest.raises(ValueError, match="empty"):
        memory.sample(1)
    stored = feed(memory, paused, stream=0, steps=10)[0]  # resumes: obs0 is stored again
    assert len(memory) == 10 and set(batch_keys(memory.sample(500))) == set(stored)


def stacked_block(newest: list[list[int]], terminated: list[bool]) -> TransitionBlock:
    """A block of one env with stacks of 3 one-pixel frames, via from_steps."""
    obs = np.array(newest, dtype=np.uint8).reshape(len(newest), 1, 3, 1, 1)
    steps = (len(terminated), 1)
    ends = np.array(terminated).reshape(steps)
    zeros = np.zeros(steps, dtype=np.int64)
    return TransitionBlock.from_steps(3, obs, zeros, zeros, ends, ends & False, frame_stack=3)


def test_from_steps_links_frames_and_checks_stacks() -> None:
    stacks = [[0, 0, 1], [0, 1, 2], [1, 2, 3], [2, 3, 4]]
    block = stacked_block(stacks, [False, True, False])  # a lost life: the stack goes on
    assert block.frames[:, 0, 0, 0].tolist() == [2, 3, 4] and not block.first.any()
    assert block.actions.dtype == np.int64 and block.rewards.dtype == np.float32
    stacks[2] = [0, 0, 9]  # a new episode's stack after step 1: first (as the step ended)
    assert stacked_block(stacks[:3], [False, True]).first[:, 0].tolist() == [False, True]
    with pytest.raises(ValueError, match="neither continues"):
        stacked_block(stacks[:3], [False, False])
    with pytest.raises(ValueError, match="frame_stack=4"):  # stacks of 3 frames
        TransitionBlock.from_steps(0, np.zeros((3, 1, 3, 1, 1)), *np.zeros((4, 2, 1)), 4)


def test_real_atari_stacks_are_byte_identical() -> None:
    """Pong through ale-py (SAME-STEP autoreset, 100-step episodes): every sampled transition
    is one the env went through: stacks byte-identical, with its action, reward and done."""
    from envs import EnvConfig, make_env

    def key(obs: np.ndarray, action: int, reward: float, next_obs: np.ndarray, done: bool) -> Key:
        digest = [hashlib.blake2b(o.tobytes(), digest_size=16).digest() for o in (obs, next_obs)]
        return digest[0], int(action), float(reward), digest[1], bool(done)

    memory = ReplayMemory(150, (4, 84, 84), np.uint8, frame_stack=4, seed=8)
    rng = np.random.default_rng(8)
    seen: set[Key] = set()
    with make_env(EnvConfig(id="ALE/Pong-v5", num_envs=2, max_episode_frames=400), 0) as env:
        assert env.obs_shape == (4, 84, 84)
        obs = [env.reset()]
        for _ in range(10):  # 10 blocks of 25 steps; episodes are cut every 100 steps
            actions = rng.integers(0, env.num_actions, (25, 2))
            obs, steps = obs[-1:], [env.step(a) for a in actions]
            obs += [s.obs for s in steps]
            reward, term, trunc = (
                np.stack([getattr(s, f) for s in steps])
                for f in ("reward", "terminated", "truncated")
            )
            block = TransitionBlock.from_steps(0, np.stack(obs), actions, reward, term, trunc, 4)
            assert np.array_equal(block.first, term | trunc)
            memory.add(block)
            for t, b in zip(*np.nonzero(term | ~trunc), strict=True):
                seen.add(key(obs[t][b], actions[t, b], reward[t, b], obs[t + 1][b], term[t, b]))
            batch = memory.sample(32)
            for transition in zip(
                batch.obs, batch.actions, batch.rewards, batch.next_obs, batch.done, strict=True
            ):
                assert key(*transition) in seen
    batch = memory.sample(2000)
    assert np.any(np.all(batch.obs[:, :3] == 0, axis=(1, 2, 3)))  # an episode's first stack
    assert len(memory) == 150 and memory.stats()["restarts"] == 2


# ---------------------------------------------------------------------------------------------
# Prioritized replay


def handles_by_value(memory: ReplayMemory) -> dict[float, int]:
    """Handle of each stored transition, keyed by its obs[0] (unique in FakeEnv vectors)."""
    batch = memory.sample(4 * memory.capacity)
    return {float(o[0]): int(i) for o, i in zip(batch.obs, batch.indices, strict=True)}


def test_prioritized_frequencies_follow_p_alpha() -> None:
    memory = ReplayMemory(16, (4,), np.float32, prioritized=True, alpha=0.6, seed=9)
    feed(memory, FakeEnv(1, seed=9, frame_stack=1, max_len=100), stream=0, steps=8)
    handles = np.array(sorted(handles_by_value(memory).items()))[:, 1].astype(np.int64)
    assert len(handles) == 8
    priorities = np.arange(1.0, 9.0)
    memory.update_priorities(handles, priorities)
    expected = (priorities + 1e-6) ** 0.6 / np.sum((priorities + 1e-6) ** 0.6)
    np.testing.assert_allclose(memory.probabilities(handles), expected, rtol=1e-12)
    draws = np.concatenate([memory.sample(100).indices for _ in range(200)])
    counts = np.array([np.sum(draws == h) for h in handles])
    chi2 = np.sum((counts - len(draws) * expected) ** 2 / (len(draws) * expected))
    assert counts.sum() == len(draws) and chi2 < 24.3  # chi-square, 7 dof, p = 0.001


def test_prioritized_weights_by_hand_and_max_priority_for_new() -> None:
    memory = ReplayMemory(
        8, (4,), np.float32, prioritized=True, alpha=0.5, beta=1.0, priority_eps=0.0
    )
    env = FakeEnv(1, seed=10, frame_stack=1, max_len=100)
    feed(memory, env, stream=0, steps=2)
    handles = handles_by_value(memory)
    low, high = handles[min(handles)], handles[max(handles)]
    memory.update_priorities(np.array([low, high]), np.array([1.0, -4.0]))  # |TD error|
    # masses 1 and 2: P = 1/3, 2/3; w = (2 P)^-1 = 1.5, 0.75; normalised by the max: 1, 0.5
    batch = memory.sample(64)
    assert set(batch.indices.tolist()) == {low, high}
    np.testing.assert_allclose(batch.weights, np.where(batch.indices == low, 1.0, 0.5), rtol=1e-6)
    feed(memory, env, stream=0, steps=1)  # a new transition gets the max priority seen: 4
    new = max(handles_by_value(memory).values())
    np.testing.assert_allclose(memory.probabilities(np.array([low, high, new])), [0.2, 0.4, 0.4])


def test_stale_priority_updates_are_ignored() -> None:
    memory = ReplayMemory(4, (4,), np.float32, prioritized=True, seed=11)
    env = FakeEnv(1, seed=11, frame_stack=1, max_len=100)
    feed(memory, env, stream=0, steps=4)
    old = np.array(sorted(handles_by_value(memory).values()))
    feed(memory, env, stream=0, steps=4)  # evicts all four
    new = np.array(sorted(handles_by_value(memory).values()))
    assert not set(old) & set(new)
    memory.update_priorities(old, np.full(4, 100.0))
    np.testing.assert_allclose(memory.probabilities(new), 0.25)
    assert np.all(memory.probabilities(old) == 0.0)
    memory.update_priorities(new[:1], np.array([0.5]))
    feed(memory, env, stream=0, steps=1)  # evicts new[0]; gets the max priority seen: 1, not 100
    np.testing.assert_allclose(memory.probabilities(np.append(new[1:], new[-1] + 1)), 0.25)


def test_sumtree_sums_finds_and_keeps_the_last_duplicate() -> None:
    tree = SumTree(5)
    tree.set(np.array([0, 2, 2, 4]), np.array([1.0, 5.0, 2.0, 3.0]))
    assert tree.total == 6.0 and tree.get(np.arange(5)).tolist() == [1, 0, 2, 0, 3]
    assert tree.find(np.array([0.0, 0.99, 1.0, 2.99, 3.0, 5.99])).tolist() == [0, 0, 2, 2, 4, 4]
    tree.set(np.array([4]), 0.0)
    assert tree.total == 3.0
    assert set(tree.sample(100, np.random.default_rng(0)).tolist()) == {0, 2}


# ---------------------------------------------------------------------------------------------
# Footprint, determinism, errors


@pytest.mark.parametrize("prioritized", [False, True])
def test_atari_nbytes_is_about_one_frame_per_transition(prioritized: bool) -> None:
    capacity, frame = 2000, 84 * 84
    memory = ReplayMemory(capacity, (4, 84, 84), np.uint8, frame_stack=4, prioritized=prioritized)
    per_transition = memory.nbytes / capacity
    assert frame < per_transition < 1.1 * frame < 2 * frame  # vs 2 * 4 * frame for obs + next
    obs = np.random.default_rng(0).integers(1, 255, (6, 2, 4, 84, 84), dtype=np.uint8)
    for t in range(1, 6):
        obs[t, :, :3] = obs[t - 1, :, 1:]
    ends = np.zeros((5, 2), dtype=bool)
    memory.add(TransitionBlock.from_steps(0, obs, ends, ends, ends, ends, frame_stack=4))
    assert memory.nbytes == memory.stats()["nbytes"] == per_transition * capacity


def test_same_seed_same_samples() -> None:
    batches = []
    for _ in range(2):
        memory = ReplayMemory(64, (4, 2, 3), np.uint8, frame_stack=4, prioritized=True, seed=5)
        feed(memory, FakeEnv(2, seed=12), stream=0, steps=20)
        batches.append(memory.sample(16))
    assert np.array_equal(batches[0].indices, batches[1].indices)
    assert np.array_equal(batches[0].obs, batches[1].obs)


def test_bad_arguments_are_one_line_value_errors() -> None:
    for kwargs in (
        {"capacity": 0, "obs_shape": (4,), "obs_dtype": "float32"},
        {"capacity": 8, "obs_shape": (3, 84, 84), "obs_dtype": "uint8", "frame_stack": 4},
        {"capacity": 8, "obs_shape": (4,), "obs_dtype": "float32", "alpha": -1.0},
    ):
        with pytest.raises(ValueError) as info:
            ReplayMemory(**kwargs)
        assert "\n" not in str(info.value)
    memory = ReplayMemory(8, (4,), np.float32, prioritized=True)
    with pytest.raises(ValueError, match="empty"):
        memory.sample(4)
    env = FakeEnv(2, seed=13, frame_stack=1)
    obs, actions, rewards, terminated, truncated = env.rollout(3)
    with pytest.raises(ValueError, match="obs_shape"):
        memory.add(
            TransitionBlock.from_steps(
                0, obs[..., :3], actions, rewards, terminated, truncated, frame_stack=1
            )
        )
    with pytest.raises(ValueError, match="dtype"):
        memory.add(
            TransitionBlock.from_steps(
                0, obs.astype(np.float64), actions, rewards, terminated, truncated, frame_stack=1
            )
        )
    with pytest.raises(ValueError, match="does not fit"):
        memory.add(TransitionBlock.from_steps(0, *env.rollout(5), frame_stack=1))
    with pytest.raises(ValueError, match=r"\[T, B\]"):
        TransitionBlock.from_steps(0, obs, actions[:2], rewards, terminated, truncated, 1)
    memory.add(TransitionBlock.from_steps(0, obs, actions, rewards, terminated, truncated, 1))
    with pytest.raises(ValueError, match="batch_size"):
        memory.sample(0)
    with pytest.raises(ValueError, match="finite"):
        memory.update_priorities(np.array([0]), np.array([np.nan]))
    with pytest.raises(ValueError, match="1-D"):
        memory.update_priorities(np.array([0, 1]), np.array([1.0]))
