"""n-step returns in the replay memory (Hessel et al. 2018): each stored transition sums up to n
discounted rewards, bootstraps from s_{t+k} with gamma^k, and stops at an episode's end and at
its block's last step; the double-DQN target discounts its bootstrap by gamma^k."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from rltrain.replay import ReplayMemory, SampledBatch, TransitionBlock
from rltrain.replay.nstep import n_step_windows
from tests.test_replay import FakeEnv, Rollout


def test_windows_by_hand_stop_at_ends_and_at_the_block_end() -> None:
    rewards = np.array([[1.0, 1.0], [2.0, 1.0], [4.0, 1.0], [8.0, 1.0]], dtype=np.float32)
    ended = np.array([[False, False], [True, False], [False, False], [False, False]])
    total, last = n_step_windows(rewards, ended, n=3, gamma=0.5)
    # env 0: step 1 ends its episode, so step 0's window is 2 steps; steps 2-3 reach the block end
    assert last[:, 0].tolist() == [1, 1, 3, 3]
    np.testing.assert_allclose(total[:, 0], [1 + 0.5 * 2, 2, 4 + 0.5 * 8, 8])
    assert last[:, 1].tolist() == [2, 3, 3, 3]
    np.testing.assert_allclose(total[:, 1], [1.75, 1.75, 1.5, 1.0])
    one, same = n_step_windows(rewards, ended, n=1, gamma=0.5)
    assert same.tolist() == [[t, t] for t in range(4)] and np.array_equal(one, rewards)


def test_memory_by_hand_cut_and_terminal() -> None:
    """One env, 4 steps: a time-limit cut at step 1 (final obs 9), a termination at step 3."""
    obs = np.array([1, 2, 20, 21, 30], dtype=np.float32).reshape(5, 1, 1)
    terminated = np.array([[False], [False], [False], [True]])
    truncated = np.array([[False], [True], [False], [False]])
    rewards = np.array([[0.5], [1.5], [2.5], [3.5]], dtype=np.float32)
    block = TransitionBlock.from_steps(
        0, obs, np.arange(4).reshape(4, 1), rewards, terminated, truncated, 1,
        final_obs=np.array([[9.0]], dtype=np.float32),
    )  # fmt: skip
    memory = ReplayMemory(8, (1,), np.float32, n_step=3, gamma=0.5)
    assert memory.add(block) == 4
    batch = memory.sample(200)
    got = set(
        zip(
            batch.obs[:, 0].tolist(),
            batch.rewards.tolist(),
            batch.next_obs[:, 0].tolist(),
            batch.done.tolist(),
            batch.steps.tolist(),
            strict=True,
        )
    )
    assert got == {
        (1.0, 0.5 + 0.5 * 1.5, 9.0, False, 2),  # up to the cut: bootstrap from its final obs
        (2.0, 1.5, 9.0, False, 1),
        (20.0, 2.5 + 0.5 * 3.5, 30.0, True, 2),  # up to the terminal: no bootstrap
        (21.0, 3.5, 30.0, True, 1),
    }


Key = tuple[bytes, float, bytes, bool, int]


def n_step_keys(rollout: Rollout, n: int, gamma: float) -> set[Key]:
    """Every transition of a rollout by a plain loop: (s_t, R, s_{t+k}, done, k)."""
    obs, _, rewards, terminated, truncated, final = rollout
    finals = iter(final)
    cut_final: dict[tuple[int, int], np.ndarray] = {}
    for t, b in itertools.product(range(rewards.shape[0]), range(rewards.shape[1])):
        if truncated[t, b]:
            cut_final[t, b] = next(finals)
    keys: set[Key] = set()
    for t, b in itertools.product(range(rewards.shape[0]), range(rewards.shape[1])):
        total, j = 0.0, t
        while True:
            total += gamma ** (j - t) * float(rewards[j, b])
            if terminated[j, b] or truncated[j, b] or j - t + 1 == n or j + 1 == len(rewards):
                break
            j += 1
        cut = truncated[j, b] and not terminated[j, b]
        following = cut_final[j, b] if cut else obs[j + 1, b]
        done = bool(terminated[j, b])
        keys.add((obs[t, b].tobytes(), round(total, 4), following.tobytes(), done, j - t + 1))
    return keys


@pytest.mark.parametrize("frame_stack", [1, 4])
def test_stacked_streams_round_trip_against_a_plain_loop(frame_stack: int) -> None:
    """Frame stacks, cuts and terminals of two interleaved streams, several blocks each."""
    memory = ReplayMemory(4000, (4,) if frame_stack == 1 else (4, 2, 3),
                          np.float32 if frame_stack == 1 else np.uint8,
                          frame_stack=frame_stack, n_step=3, gamma=0.9, seed=3)  # fmt: skip
    envs = [FakeEnv(3, seed, frame_stack=frame_stack, max_len=5) for seed in (1, 2)]
    expected: set[Key] = set()
    for _, (stream, env) in itertools.product(range(4), enumerate(envs)):
        rollout = env.rollout(6)
        expected |= n_step_keys(rollout, 3, 0.9)
        memory.add(rollout.block(stream, frame_stack))
    got = sampled_keys(memory.sample(3000))
    assert got == expected
    assert {k[4] for k in got} == {1, 2, 3}


def sampled_keys(batch: SampledBatch) -> set[Key]:
    keys = zip(batch.obs, batch.rewards, batch.next_obs, batch.done, batch.steps, strict=True)
    return {
        (o.tobytes(), round(float(r), 4), x.tobytes(), bool(d), int(k)) for o, r, x, d, k in keys
    }


def test_target_discounts_the_bootstrap_by_gamma_to_the_k() -> None:
    from rltrain.rl.algos.losses import double_dqn_targets

    rewards = torch.tensor([1.0, 1.0, 1.0])
    done = torch.tensor([False, False, True])
    online = torch.tensor([[0.0, 1.0], [1.0, 0.0], [1.0, 0.0]])
    target = torch.tensor([[10.0, 20.0], [10.0, 20.0], [10.0, 20.0]])
    y = double_dqn_targets(rewards, done, online, target, 0.5, torch.tensor([1, 3, 2]))
    torch.testing.assert_close(y, torch.tensor([1 + 0.5 * 20, 1 + 0.125 * 10, 1.0]))


@pytest.mark.parametrize(("frame_stack", "prioritized"), [(1, False), (4, False), (4, True)])
def test_windows_survive_eviction_and_overwritten_frames(
    frame_stack: int, prioritized: bool
) -> None:
    """A small memory of three streams that pause and resume, blocks of n to 6 steps: every
    sample is a transition of the plain loop, so no window points at an overwritten frame
    (s_{t+k}'s frames are s_t's or newer, and go after them; review 76's stress test)."""
    rng = np.random.default_rng(0)
    shape = (4,) if frame_stack == 1 else (4, 2, 3)
    dtype = np.float32 if frame_stack == 1 else np.uint8
    memory = ReplayMemory(24, shape, dtype, frame_stack, prioritized, n_step=3, gamma=0.9, seed=0)
    lengths = rng.integers(1, 6, 3)
    envs = [FakeEnv(2, s, frame_stack, int(lengths[s]), p_terminal=0.3) for s in (0, 1, 2)]
    expected: set[Key] = set()
    for _ in range(120):
        stream = int(rng.integers(0, 3))
        rollout = envs[stream].rollout(int(rng.integers(3, 7)))
        expected |= n_step_keys(rollout, 3, 0.9)
        memory.add(rollout.block(stream, frame_stack))
        batch = memory.sample(64)
        assert sampled_keys(batch) <= expected
        if prioritized:
            memory.update_priorities(batch.indices, rng.random(len(batch.indices)))


def test_a_step_both_terminated_and_truncated_ends_a_window_as_a_terminal() -> None:
    obs = np.array([1, 2, 20, 21, 30], dtype=np.float32).reshape(5, 1, 1)
    terminated = np.array([[False], [True], [False], [False]])
    truncated = np.array([[False], [True], [True], [False]])  # step 1 both; step 2 a cut
    rewards = np.array([[0.5], [1.5], [2.5], [3.5]], dtype=np.float32)
    block = TransitionBlock.from_steps(
        0, obs, np.zeros((4, 1), np.int64), rewards, terminated, truncated, 1,
        final_obs=np.array([[7.0], [9.0]], dtype=np.float32),
    )  # fmt: skip
    memory = ReplayMemory(8, (1,), np.float32, n_step=3, gamma=0.5)
    memory.add(block)
    batch = memory.sample(300)
    got = zip(batch.obs[:, 0].tolist(), batch.rewards.tolist(), batch.next_obs[:, 0].tolist(),
              batch.done.tolist(), batch.steps.tolist(), strict=True)  # fmt: skip
    assert set(got) == {
        (1.0, 0.5 + 0.5 * 1.5, 20.0, True, 2),  # up to the terminal: done, no bootstrap
        (2.0, 1.5, 20.0, True, 1),
        (20.0, 2.5, 9.0, False, 1),  # the cut: its final observation
        (21.0, 3.5, 30.0, False, 1),  # the block's last step
    }
