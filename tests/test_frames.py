"""Atari stacks rebuilt from each step's newest frame (rltrain.rl.frames, rl.obs_slots)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from rltrain.envs import EnvConfig
from rltrain.ps.config import OptimizerConfig, ServerConfig
from rltrain.ps.server import LocalServer
from rltrain.rl.actor import Actor
from rltrain.rl.config import AlgoConfig, StopConfig, TrainConfig
from rltrain.rl.env_spec import initial_params, probe_env
from rltrain.rl.frames import blank_older, restack
from rltrain.rl.learner import Learner
from rltrain.rl.obs_slots import ObsSlots
from rltrain.rl.rollout import EMPTY_OBS, Rollout, stack

K = 4


def test_restack_is_a_view_of_each_steps_newest_frames() -> None:
    frames = torch.arange(7 * 3 * 2).view(7, 3, 2)  # [T+k, B, frame]: T = 3
    stacks = restack(frames, K)
    assert stacks.shape == (4, 3, K, 2)
    assert stacks.untyped_storage().data_ptr() == frames.untyped_storage().data_ptr()
    for t in range(4):
        assert torch.equal(stacks[t], frames[t : t + K].transpose(0, 1))  # oldest first
    # [T+1, B] flattens to the learner's [N] rows without a copy
    assert torch.equal(stacks.flatten(0, 1)[5], frames[1:5, 2])
    with pytest.raises(ValueError, match="no stack of 4"):
        restack(frames[:3], K)


def test_blank_older_zeroes_the_oldest_frames_of_young_stacks() -> None:
    stacks = torch.ones(3, K, 2, dtype=torch.uint8)
    out = blank_older(stacks, torch.tensor([0, 3, 1], dtype=torch.uint8))
    assert out[:, :, 0].tolist() == [[1, 1, 1, 1], [0, 0, 0, 1], [0, 1, 1, 1]]
    assert stacks.all()  # a new tensor: the frames it read are left alone


def _play(slots: ObsSlots, slot: int, lo: int, hi: int, steps: int, starts: set) -> torch.Tensor:
    """A synthetic env group's stacks written into ``slots`` as an actor writes them (games
    restart at the (t, b) in ``starts`` with blank older frames, as ale-py's do); returns
    what the env returned [T+1, B_g, k, *frame]. The policy worker's read of each step's
    rows is checked on the way."""
    g = torch.Generator().manual_seed(slot)
    frame = slots.frame_shape

    def new() -> torch.Tensor:
        return torch.randint(1, 255, frame, dtype=torch.uint8, generator=g)

    envs = hi - lo
    now = torch.stack([torch.stack([new() for _ in range(K)]) for _ in range(envs)])
    cols = slots.columns(slot, lo, hi)
    cols.first(now.clone())
    seen = [now.clone()]
    for t in range(1, steps + 1):
        restarted = [b for b in range(envs) if (t, b) in starts]
        nxt = torch.cat([now[:, 1:], torch.stack([new() for _ in range(envs)])[:, None]], 1)
        nxt[restarted, :-1] = 0
        now = nxt
        cols.write(t, now.clone(), restarted)
        assert torch.equal(slots.rows(cols.at(t), envs), now)  # the policy worker's read
        seen.append(now.clone())
    return torch.stack(seen)


def _rollout(steps: int, envs: int, slot: int) -> Rollout:
    z = torch.zeros(steps, envs)
    return Rollout(
        0, 0, EMPTY_OBS, z.long(), z, z.bool(), z.bool(), torch.zeros(steps, envs, 6),
        torch.zeros(0, K, 3, 2, dtype=torch.uint8), torch.zeros(0, 2, dtype=torch.int64),
        obs_slot=slot,
    )  # fmt: skip


def test_a_slot_of_frames_gives_back_every_stack_written_new_games_included() -> None:
    T, B = 6, 5
    slots = ObsSlots(3, T, B, (K, 3, 2), torch.uint8, frame_stack=K)
    assert slots.obs.shape == (3, T + K, B, 3, 2)  # each step's newest frame alone
    starts = {(1, 0), (2, 1), (3, 1), (6, 0), (4, 2)}  # (t, b): early, twice, last step
    left = _play(slots, 1, 0, 3, T, starts)  # two env groups, as an Atari actor's
    right = _play(slots, 1, 3, 5, T, {(2, 0)})
    whole = torch.cat([left, right], 1)
    r = slots.attach(_rollout(T, B, 1))
    assert r.frame_stack == K and r.blank is not None
    assert torch.equal(r.observations(), whole)
    # a learner batch of two rollouts, one without blank frames: stacked along B
    quiet = _play(slots, 2, 0, B, T, set())
    q = slots.attach(_rollout(T, B, 2))
    assert q.blank is None and torch.equal(q.observations(), quiet)
    both = stack([r, q])
    assert torch.equal(both.observations(), torch.cat([whole, quiet], 1))
    with pytest.raises(ValueError, match="cannot be stacked"):
        stack([r, dataclasses.replace(q, obs=quiet, frame_stack=1, blank=None)])


def test_slots_of_frames_are_reused_over_100_rollouts_without_growth() -> None:
    T, B = 5, 4
    slots = ObsSlots(3, T, B, (K, 3, 2), torch.uint8, frame_stack=K)
    where = slots.obs.data_ptr(), slots.blank.data_ptr()
    for i in range(100):
        k = i % len(slots)
        played = _play(slots, k, 0, B, T, {(1 + i % T, i % B)})
        r = slots.attach(_rollout(T, B, k))
        assert r.obs.data_ptr() == slots.obs[k].data_ptr()  # a view: no copy
        assert torch.equal(r.observations(), played)
    assert (slots.obs.data_ptr(), slots.blank.data_ptr()) == where and len(slots) == 3


def test_a_learner_restacks_young_rollouts_into_one_buffer() -> None:
    """A 29 MB copy per Pong rollout with a new game fragmented a CPU's heap: the learner
    keeps one buffer for the restacked young stacks, reused by every batch that fits it."""
    T, B = 5, 4
    slots = ObsSlots(2, T, B, (K, 3, 2), torch.uint8, frame_stack=K)
    learner = Learner(_atari("ALE/Pong-v5"), (K, 3, 2), 6)
    seen = []
    for k in range(2):
        played = _play(slots, k, 0, B, T, {(2, 1)})
        obs = learner.observations(slots.attach(_rollout(T, B, k)))
        assert torch.equal(obs, played)
        seen.append(obs.data_ptr())
    assert seen[0] == seen[1]
    quiet = _play(slots, 0, 0, B, T, set())  # no young stack: the slot's view, no copy
    assert learner.observations(slots.attach(_rollout(T, B, 0))).data_ptr() != seen[0]
    assert torch.equal(learner.observations(slots.attach(_rollout(T, B, 0))), quiet)


def test_slots_refuse_a_shape_that_is_no_stack() -> None:
    with pytest.raises(ValueError, match="no stack of frame_stack=4"):
        ObsSlots(1, 4, 2, (3, 84, 84), torch.uint8, frame_stack=K)


def _atari(env_id: str, **env: object) -> TrainConfig:
    return TrainConfig(
        env=EnvConfig(id=env_id, num_envs=4, groups=2, **env),  # type: ignore[arg-type]
        algo=AlgoConfig(name="appo", rollout_length=24),
        optimizer=OptimizerConfig(name="adam", lr=1e-3),
        stop=StopConfig(max_env_steps=1000),
    )


@pytest.mark.parametrize(
    "env_id, env",
    [
        ("ALE/Pong-v5", {"max_episode_frames": 120}),  # games cut every ~30 steps: new stacks
        ("ALE/Breakout-v5", {"episodic_life": True}),  # a lost life ends no game: no new stack
    ],
)
def test_an_atari_actors_slot_holds_the_stacks_its_envs_returned(env_id: str, env: dict) -> None:
    """The same actor (same seeds, same policy) with and without a slot of frames: the
    learner's restacked observations equal the stacks the envs returned, rollout after
    rollout (the slot scribbled over in between, as when lent to another actor), and the
    learner learns the same from them."""
    c = _atari(env_id, **env)
    spec = probe_env(c)
    slots = ObsSlots(1, c.algo.rollout_length, 4, spec.obs_shape, torch.uint8, frame_stack=K)
    server = LocalServer(initial_params(c, spec), c.optimizer, ServerConfig(), 1)
    framed, whole = Actor(c, 0, obs_slots=slots), Actor(c, 0)
    young = ended = 0
    for _ in range(3):
        slots.obs.fill_(7)  # what another actor lent the slot before left there
        slots.blank.fill_(2)
        a, b = slots.attach(framed.collect(server, slot=0)), whole.collect(server)
        assert torch.equal(a.actions, b.actions) and torch.equal(a.terminated, b.terminated)
        assert torch.equal(a.observations(), b.obs)
        young += a.blank is not None
        ended += int(b.terminated.sum() + b.truncated.sum())
    assert ended > 0  # games (or lives) ended along the way
    assert bool(young) == (env_id == "ALE/Pong-v5")
    learned = []
    for r in (a, b):
        learner = Learner(c, spec.obs_shape, spec.actions)
        learner.load(server.pull(None))
        learned.append(next(learner.gradients(r)).values)
    torch.testing.assert_close(*learned)
