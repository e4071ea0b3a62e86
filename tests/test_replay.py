"""The replay memory: exact transitions back (vectors, frame stacks, real Atari), FIFO eviction,
no stale frames after wrap-around, prioritized sampling (Schaul et al. 2016) and its footprint."""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import pytest

from rltrain.replay import ReplayMemory, SampledBatch, SumTree, TransitionBlock
from rltrain.replay.memory import frame_capacity

Key = tuple[bytes, int, float, bytes, bool]


class Rollout(NamedTuple):
    """What an actor holds after T steps of B envs (``final``: [K] as StepBatch.final_obs of
    the steps, concatenated)."""

    obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    final: np.ndarray

    def block(self, stream: int, frame_stack: int) -> TransitionBlock:
        return TransitionBlock.from_steps(
            stream, *self[:5], frame_stack=frame_stack, final_obs=self.final
        )


class FakeEnv:
    """B envs with SAME-STEP autoreset whose every frame is unique (a global counter).

    frame_stack 1: the observation is a float32 vector filled with the counter. Otherwise a
    uint8 stack of 2x3 frames, row 0 = k % 250 + 1, row 1 = k // 250 % 250 + 1 (never 0), and
    a new episode's stack is blank (zeros) but for its newest frame, as ale-py does. An episode
    that hits its time limit ends on a final observation (a fresh frame) that only
    ``final_obs`` shows.
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

    def _advanced(self, b: int) -> np.ndarray:
        if self.frame_stack == 1:
            return self._frame()
        return np.concatenate([self.obs[b, 1:], self._frame()[None]])

    def step(self, b: int) -> tuple[bool, bool, np.ndarray | None]:
        """Advance env b; returns (terminated, truncated, final observation if truncated)."""
        self.left[b] -= 1
        if self.left[b] == 0:
            terminated = bool(self.rng.random() < self.p_terminal)
            final = None if terminated else self._advanced(b)
            self._reset(b)
            return terminated, not terminated, final
        self.obs[b] = self._advanced(b)
        return False, False, None

    def rollout(self, steps: int) -> Rollout:
        num_envs = self.obs.shape[0]
        obs = [self.obs.copy()]
        ends = np.zeros((2, steps, num_envs), dtype=bool)
        finals = [self.obs[:0].copy()]
        for t in range(steps):
            for b in range(num_envs):
                *ends[:, t, b], final = self.step(b)
                if final is not None:
                    finals.append(final[None])
            obs.append(self.obs.copy())
        actions = self.rng.integers(0, 6, (steps, num_envs))
        rewards = self.rng.integers(-1, 2, (steps, num_envs)).astype(np.float32)
        return Rollout(np.stack(obs), actions, rewards, ends[0], ends[1], np.concatenate(finals))


def transition_keys(rollout: Rollout) -> tuple[list[Key], list[Key]]:
    """(every transition, the time-limit cuts) of a rollout, in the memory's order.

    A cut's s_{t+1} is its final observation and it is not done; a terminal's is what the env
    returned (the next episode's first observation), masked by done.
    """
    obs, actions, rewards, terminated, truncated, final = rollout
    finals = iter(final)
    stored: list[Key] = []
    cuts: list[Key] = []
    for t, b in itertools.product(range(actions.shape[0]), range(actions.shape[1])):
        last = next(finals) if truncated[t, b] else None
        cut = last is not None and not terminated[t, b]
        following = last if cut else obs[t + 1, b]
        key = (
            obs[t, b].tobytes(),
            int(actions[t, b]),
            float(rewards[t, b]),
            following.tobytes(),
            bool(terminated[t, b]),
        )
        stored.append(key)
        if cut:
            cuts.append(key)
    return stored, cuts


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
    """One rollout of ``env`` into ``memory`` as a block; returns its (stored, cut) keys."""
    rollout = env.rollout(steps)
    stored, cuts = transition_keys(rollout)
    assert memory.add(rollout.block(stream, env.frame_stack)) == len(stored)
    return stored, cuts


# ---------------------------------------------------------------------------------------------
# Vector observations


def test_vector_round_trip_keeps_cuts_with_their_final_obs() -> None:
    memory = ReplayMemory(1000, (4,), np.float32, seed=1)
    env = FakeEnv(3, seed=1, frame_stack=1)
    stored: list[Key] = []
    cuts: list[Key] = []
    for _ in range(5):
        new, cut = feed(memory, env, stream=7, steps=20)
        stored += new
        cuts += cut
    assert len(memory) == len(stored) == 300 and cuts
    assert memory.stats()["cuts"] == len(cuts)
    assert memory.stats()["frames"] == 3 + 300 + len(cuts)  # obs0, one per step, finals
    batch = memory.sample(4000)
    assert batch.obs.dtype == np.float32 and batch.actions.dtype == np.int64
    assert batch.weights.dtype == np.float32 and np.all(batch.weights == 1.0)
    sampled = set(batch_keys(batch))
    assert sampled == set(stored)  # every transition, cuts with their final obs, nothing else
    assert batch.done.any()  # terminal next_obs: what the env returned (next episode's first)
    assert memory.stats()["restarts"] == 3  # obs0 stored once per env stream


def test_truncated_by_hand_next_is_final_obs_and_not_done() -> None:
    """One env, 4 steps: a time-limit cut at step 1 (final obs 9, next episode starts at 20),
    a termination at step 3 (next episode starts at 30)."""
    obs = np.array([1, 2, 20, 21, 30], dtype=np.float32).reshape(5, 1, 1)
    terminated = np.array([[False], [False], [False], [True]])
    truncated = np.array([[False], [True], [False], [False]])
    rewards = np.array([[0.5], [1.5], [2.5], [3.5]], dtype=np.float32)
    final = np.array([[9.0]], dtype=np.float32)
    block = TransitionBlock.from_steps(
        0, obs, np.arange(4).reshape(4, 1), rewards, terminated, truncated, 1, final_obs=final
    )
    assert block.cut[:, 0].tolist() == [False, True, False, False]
    assert block.final_frames.tolist() == [[9.0]]
    memory = ReplayMemory(8, (1,), np.float32)
    assert memory.add(block) == 4
    batch = memory.sample(200)
    got = {
        (float(o[0]), int(a), float(r), float(n[0]), bool(d))
        for o, a, r, n, d in zip(
            batch.obs, batch.actions, batch.rewards, batch.next_obs, batch.done, strict=True
        )
    }
    assert got == {
        (1.0, 0, 0.5, 2.0, False),
        (2.0, 1, 1.5, 9.0, False),  # the cut: s' = final obs, bootstrapped
        (20.0, 2, 2.5, 21.0, False),
        (21.0, 3, 3.5, 30.0, True),  # the terminal: done, s' masked
    }


def test_terminated_and_truncated_at_once_is_terminal() -> None:
    """Gymnasium may report both (the goal reached at the last allowed step): no bootstrap,
    and the final obs it sends along is not stored."""
    obs = np.array([1, 2, 20], dtype=np.float32).reshape(3, 1, 1)
    both = np.array([[False], [True]])
    zeros = np.zeros((2, 1))
    block = TransitionBlock.from_steps(
        0,
        obs,
        zeros.astype(np.int64),
        zeros.astype(np.float32),
        both,
        both,
        1,
        final_obs=np.array([[9.0]], dtype=np.float32),
    )
    assert not block.cut.any() and block.final_frames.shape == (0, 1)
    memory = ReplayMemory(8, (1,), np.float32)
    memory.add(block)
    batch = memory.sample(100)
    assert {
        (float(o[0]), float(n[0]), bool(d))
        for o, n, d in zip(batch.obs, batch.next_obs, batch.done, strict=True)
    } == {(1.0, 2.0, False), (2.0, 20.0, True)}
    assert memory.stats()["frames"] == 3 and memory.stats()["cuts"] == 0


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


@pytest.mark.parametrize("prioritized", [False, True])
def test_frame_stacks_of_interleaved_streams_survive_wraparound(prioritized: bool) -> None:
    capacity = 60
    memory = ReplayMemory(
        capacity, (4, 2, 3), np.uint8, frame_stack=4, prioritized=prioritized, seed=3
    )
    envs = [FakeEnv(2, seed=s) for s in range(3)]
    rng = np.random.default_rng(3)
    stored: list[Key] = []
    cuts: set[Key] = set()
    for _ in range(40):  # ~560 steps (and ~30 final frames) through a ring of 125 frames
        stream = int(rng.integers(3))
        new, cut = feed(memory, envs[stream], stream, steps=int(rng.integers(1, 8)))
        stored += new
        cuts.update(cut)
        order = {key: i for i, key in enumerate(stored)}
        batch = memory.sample(64)
        if prioritized:  # TD errors move the masses; dropped transitions must stay at 0
            memory.update_priorities(batch.indices, rng.random(64) * 3)
        for key in batch_keys(batch):
            assert key in order
            assert order[key] >= len(stored) - capacity  # FIFO: only the newest C
    assert capacity - 10 <= len(memory) <= capacity
    batch = memory.sample(3000)
    assert np.any(np.all(batch.obs[:, :3] == 0, axis=(1, 2, 3)))  # episode starts
    assert np.any(np.all(batch.obs[:, 0] > 0, axis=(1, 2)))  # full stacks
    assert batch.done.any()
    sampled = set(batch_keys(batch))
    assert sampled & cuts  # cuts come back with their final stacks, not done
    assert all(not key[4] for key in cuts)
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
    assert memory.frame_capacity == frame_capacity(100, 4) == 167
    paused = FakeEnv(1, seed=5, max_len=50)
    early = feed(memory, paused, stream=0, steps=10)[0]  # frames 0..10 (obs0 is one frame)
    assert len(memory) == 10
    # One-step episodes that all hit their time limit write 2 frames per transition: the
    # frame ring turns over before the transition ring does, and the paused stream's
    # transitions go with their frames, not by FIFO.
    flood = FakeEnv(2, seed=6, max_len=1, p_terminal=0.0)
    flooded: list[Key] = []
    for _ in range(4):  # 2 + 4 x 40 frames, 80 transitions
        new, cut = feed(memory, flood, stream=1, steps=10)
        assert new == cut
        flooded += new
    # 173 frames through a ring of 167: frames 0..5 are gone, so are the stacks ending at
    # frames 0..8; the paused stream's last transition (s_t = frames 6..9) is still whole.
    assert len(memory) == 81 and memory.stats()["added"] == 90
    assert set(batch_keys(memory.sample(2000))) == set(flooded) | {early[-1]}
    for _ in range(3):  # the flood alone: its own oldest transitions go with their frames
        flooded += feed(memory, flood, stream=1, steps=10)[0]
        assert 60 <= len(memory) <= 83
        assert set(batch_keys(memory.sample(2000))) <= set(flooded[-len(memory) :])
    stored = feed(memory, paused, stream=0, steps=10)[0]  # resumes: obs0 is stored again
    assert memory.stats()["restarts"] == 4
    assert set(stored) <= set(batch_keys(memory.sample(2000)))


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
    is one the env went through: stacks byte-identical, with its action, reward and done; a
    time-limit cut comes back with ale-py's final stack as s_{t+1}, not done."""
    from rltrain.envs import EnvConfig, make_env

    def key(obs: np.ndarray, action: int, reward: float, next_obs: np.ndarray, done: bool) -> Key:
        digest = [hashlib.blake2b(o.tobytes(), digest_size=16).digest() for o in (obs, next_obs)]
        return digest[0], int(action), float(reward), digest[1], bool(done)

    memory = ReplayMemory(150, (4, 84, 84), np.uint8, frame_stack=4, seed=8)
    rng = np.random.default_rng(8)
    seen: set[Key] = set()
    cuts: set[Key] = set()
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
            final = np.concatenate([s.final_obs for s in steps])
            block = TransitionBlock.from_steps(
                0, np.stack(obs), actions, reward, term, trunc, 4, final_obs=final
            )
            assert np.array_equal(block.first, term | trunc)
            memory.add(block)
            finals = iter(final)
            for t, b in zip(*np.nonzero(np.ones_like(trunc)), strict=True):
                cut = trunc[t, b] and not term[t, b]
                following = next(finals) if cut else obs[t + 1][b]
                seen.add(key(obs[t][b], actions[t, b], reward[t, b], following, term[t, b]))
                if cut:
                    cuts.add(key(obs[t][b], actions[t, b], reward[t, b], following, False))
            batch = memory.sample(32)
            for transition in zip(
                batch.obs, batch.actions, batch.rewards, batch.next_obs, batch.done, strict=True
            ):
                assert key(*transition) in seen
    assert len(cuts) == 4 and memory.stats()["cuts"] == 4  # steps 100 and 200 of both games
    batch = memory.sample(2000)
    sampled = set(batch_keys_of(batch, key))
    assert len(sampled & cuts) == 2  # the cuts at step 200 are among the newest 150
    assert np.any(np.all(batch.obs[:, :3] == 0, axis=(1, 2, 3)))  # an episode's first stack
    assert len(memory) == 150 and memory.stats()["restarts"] == 2


def batch_keys_of(batch: SampledBatch, key: Callable[..., Key]) -> list[Key]:
    return [
        key(*transition)
        for transition in zip(
            batch.obs, batch.actions, batch.rewards, batch.next_obs, batch.done, strict=True
        )
    ]


def test_atari_final_stack_is_one_more_frame() -> None:
    """Two Atari-shaped games (uint8 [4, 84, 84]), 6 steps: game 0 is cut by its time limit at
    step 2, game 1 terminates at step 4. The cut's s_{t+1} is the final stack byte for byte,
    stored as one more frame: the memory writes 2 x 4 (obs0) + 12 (steps) + 1 frames."""
    rng = np.random.default_rng(14)
    steps, envs = 6, 2
    obs = np.zeros((steps + 1, envs, 4, 84, 84), dtype=np.uint8)
    obs[0] = rng.integers(1, 256, (envs, 4, 84, 84), dtype=np.uint8)  # full stacks
    terminated = np.zeros((steps, envs), dtype=bool)
    truncated = np.zeros((steps, envs), dtype=bool)
    truncated[2, 0] = terminated[4, 1] = True
    final = np.empty(0)
    for t, b in itertools.product(range(steps), range(envs)):
        newest = rng.integers(1, 256, (1, 84, 84), dtype=np.uint8)
        shifted = np.concatenate([obs[t, b, 1:], newest])
        if truncated[t, b] or terminated[t, b]:  # the next game starts: blanks, one frame
            obs[t + 1, b, -1] = rng.integers(1, 256, (84, 84), dtype=np.uint8)
            final = shifted if truncated[t, b] else final
        else:
            obs[t + 1, b] = shifted
    actions = np.arange(steps * envs).reshape(steps, envs)  # names each (t, b)
    rewards = np.ones((steps, envs), dtype=np.float32)
    block = TransitionBlock.from_steps(
        0, obs, actions, rewards, terminated, truncated, 4, final_obs=final[None]
    )
    assert block.final_frames.shape == (1, 84, 84)
    assert np.array_equal(block.final_frames[0], final[-1])
    assert 0 < block.nbytes - (2 * 4 + 12 + 1) * 84 * 84 < 1000  # obs0, then frames, not stacks
    memory = ReplayMemory(64, (4, 84, 84), np.uint8, frame_stack=4)
    assert memory.add(block) == 12
    assert memory.stats()["frames"] == 2 * 4 + 12 + 1 and memory.stats()["cuts"] == 1
    batch = memory.sample(600)
    assert sorted(set(batch.actions.tolist())) == list(range(12))
    for s, a, s_next, done in zip(
        batch.obs, batch.actions, batch.next_obs, batch.done, strict=True
    ):
        t, b = divmod(int(a), envs)
        assert np.array_equal(s, obs[t, b])
        assert np.array_equal(s_next, final if (t, b) == (2, 0) else obs[t + 1, b])
        assert done == ((t, b) == (4, 1))  # terminated only: the cut bootstraps
    # The final frame branches off game 0's chain: the next block still continues the stream.
    more = np.stack([obs[-1], obs[-1]])
    more[1, :, :3] = obs[-1, :, 1:]
    more[1, :, 3] = 7
    ends = np.zeros((1, envs), dtype=bool)
    memory.add(TransitionBlock.from_steps(0, more, ends, ends, ends, ends, frame_stack=4))
    assert memory.stats()["restarts"] == 2 and memory.stats()["frames"] == 21 + 2
    bad = final.copy()
    bad[0] = 0  # a final stack must continue s_t's
    with pytest.raises(ValueError, match=r"final_obs of step \(2, 0\) does not continue"):
        TransitionBlock.from_steps(
            0, obs, actions, rewards, terminated, truncated, 4, final_obs=bad[None]
        )


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
    env = FakeEnv(2, seed=13, frame_stack=1, max_len=100)  # no episode ends in these steps
    obs, actions, rewards, terminated, truncated, _ = env.rollout(3)
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
        memory.add(env.rollout(5).block(0, frame_stack=1))
    with pytest.raises(ValueError, match=r"\[T, B\]"):
        TransitionBlock.from_steps(0, obs, actions[:2], rewards, terminated, truncated, 1)
    cut = truncated.copy()
    cut[1, 0] = True  # a time-limit step needs its final observation
    with pytest.raises(ValueError, match=r"final_obs has shape \(0, 4\), expected \(1, 4\)"):
        TransitionBlock.from_steps(0, obs, actions, rewards, terminated, cut, 1)
    with pytest.raises(ValueError, match="final_obs dtype"):
        TransitionBlock.from_steps(
            0, obs, actions, rewards, terminated, cut, 1, final_obs=np.zeros((1, 4))
        )
    memory.add(TransitionBlock.from_steps(0, obs, actions, rewards, terminated, truncated, 1))
    with pytest.raises(ValueError, match="batch_size"):
        memory.sample(0)
    with pytest.raises(ValueError, match="finite"):
        memory.update_priorities(np.array([0]), np.array([np.nan]))
    with pytest.raises(ValueError, match="1-D"):
        memory.update_priorities(np.array([0, 1]), np.array([1.0]))


@pytest.mark.parametrize("prioritized", [True, False])
def test_each_minibatch_of_a_draw_spreads_over_the_whole_memory(prioritized: bool) -> None:
    """A learner's draw of 20 minibatches of 32: each minibatch is drawn on its own, so each
    spans the memory, not one contiguous 1/20 of it (issue 11, bug 5: median span 197 of
    4,096 before), and its importance weights are normalised within it."""
    memory = ReplayMemory(4096, (4,), np.float32, prioritized=prioritized, seed=3)
    env = FakeEnv(8, seed=3, frame_stack=1)
    for _ in range(16):
        feed(memory, env, stream=1, steps=32)
    assert len(memory) > 3500  # (a few slots hold no valid transition: episode ends)
    batch = memory.sample(32, batches=20)
    spans = [np.ptp(batch.slice(32 * i, 32 * (i + 1)).indices % memory.capacity) for i in range(20)]
    assert np.median(spans) > 3000
    for i in range(20):
        assert batch.slice(32 * i, 32 * (i + 1)).weights.max() == pytest.approx(1.0)
