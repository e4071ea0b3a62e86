"""The training mean's window: stop.window, but at least as many episodes as envs.

Envs that start their games together (a run's start, every --resume) end the short ones first,
so with more envs than the window the last ``stop.window`` episodes are the shortest of a round:
in Pong, the most lopsided wins. A resumed Pong run at 15 actors x 16 envs stopped "at 18.6"
on its first 17 games after the resume, all 18-21 wins, where the mean of its last 240 was 14.8.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import numpy as np
import pytest

from rltrain.config import load_config, to_dict
from rltrain.rl.config import StopConfig, TrainConfig
from rltrain.rl.config.sections import episode_window
from rltrain.rl.rollout import RoundCount as R
from rltrain.rl.rollout import WorkStats
from rltrain.rl.run.counters import KEEP_RETURNS, Counters
from rltrain.rl.run.tblog import status_line

ROOT = Path(__file__).resolve().parents[1]
A3C = ROOT / "configs" / "cartpole_a3c.yaml"
# what the resumed Pong run had: 223 games of its last round, then the first 17 of the new one
AFTER_A_RESUME = [14.0] * 223 + [21.0] * 17


def config(*overrides: str) -> TrainConfig:
    return load_config(TrainConfig, A3C, ["stop.mean_return=18", *overrides])


def test_the_window_holds_at_least_one_episode_per_env() -> None:
    assert episode_window(20, 240) == 240
    assert episode_window(20, 16) == 20
    assert config("actors=15", "env.num_envs=16").episode_window == 240
    assert config("actors=1", "env.num_envs=16").episode_window == 20
    assert config("actors=auto", "env.num_envs=64").episode_window == 20  # not sized yet


def test_the_score_stop_is_not_met_by_the_first_short_games_of_a_round() -> None:
    c = Counters(recent_returns=list(AFTER_A_RESUME))
    stop = StopConfig(mean_return=18, window=20)
    assert c.mean_return(20) == pytest.approx(19.95)  # what stop.window alone would judge
    assert c.stop_met(stop, 0.0, window=20) == "mean_return"
    assert c.mean_return(240) == pytest.approx((223 * 14 + 17 * 21) / 240)
    assert c.stop_met(stop, 0.0, window=240) == ""


def test_a_stop_at_the_best_return_is_met_through_float32_rounding() -> None:
    """The README's corridor (best return 1 - 0.1 - 0.1 = 0.8) summed its float32 rewards to
    0.79999999702 in every episode: a stop at 0.8 never came, the run went to max_seconds."""
    optimal = 1.0 + 2 * float(np.float32(-0.1))  # (float32 rewards summed in float64)
    assert optimal < 0.8
    c = Counters(recent_returns=[optimal] * 20)
    assert c.stop_met(StopConfig(mean_return=0.8, window=20), 0.0, window=20) == "mean_return"
    assert c.stop_met(StopConfig(mean_return=0.81, window=20), 0.0, window=20) == ""


def test_counters_keep_a_window_larger_than_their_usual_thousand() -> None:
    c = Counters()
    window = KEEP_RETURNS + 500
    for _ in range(3):
        c.add(WorkStats(env_steps=1, episode_returns=[1.0] * 600), window)
    assert len(c.recent_returns) == window
    assert c.best_mean_return == pytest.approx(1.0)
    c.add(WorkStats(env_steps=1, episode_returns=[1.0] * 600), 20)
    assert len(c.recent_returns) == KEEP_RETURNS


@pytest.mark.parametrize(("actors", "refused"), [(15, False), (1, True)])
def test_a_resume_judges_the_stop_with_the_window_of_the_run(
    tmp_path: Path, actors: int, refused: bool
) -> None:
    """A run stopped on a biased window can be resumed; one whose whole window met the
    stop cannot (every process would start only to stop)."""
    from rltrain.checkpoint import CheckpointError, save_checkpoint
    from rltrain.ps.server import make_shards
    from rltrain.rl.config import server_settings
    from rltrain.rl.env_spec import initial_params, probe_env
    from rltrain.rl.run.resume import load_resume

    cfg = config(f"actors={actors}", "env.num_envs=16")
    spec = probe_env(cfg)
    _, shards = make_shards(initial_params(cfg, spec), cfg.optimizer, server_settings(cfg), 1)
    counters = Counters(episodes=240, recent_returns=list(AFTER_A_RESUME))
    state = {
        "shards": [s.state_dict() for s in shards],
        "counters": counters.state(),
        "config": to_dict(cfg),
    }
    save_checkpoint(tmp_path, 0, state, keep=3)
    if refused:  # killed before its summary.json: the session only finishes the run
        assert load_resume(tmp_path, cfg, spec).unfinished == "mean_return"  # type: ignore[union-attr]
    (tmp_path / "summary.json").write_text(json.dumps({"env_steps": counters.env_steps}))
    if refused:
        said = r"already met stop.mean_return=18.0 \(the mean of its last 20 episodes: 19.95\)"
        with pytest.raises(CheckpointError, match=said):
            load_resume(tmp_path, cfg, spec)
    else:
        resumed = load_resume(tmp_path, cfg, spec)
        assert resumed is not None and resumed.counters.recent_returns == AFTER_A_RESUME
    # actors: auto on resume takes the last session's size from the checkpoint
    auto = dataclasses.replace(cfg, actors=0)
    if refused:
        with pytest.raises(CheckpointError):
            load_resume(tmp_path, auto, spec)
    else:
        assert load_resume(tmp_path, auto, spec) is not None


def test_a_resume_judges_the_mean_the_stop_met_not_the_episodes_after_it(
    tmp_path: Path,
) -> None:
    """explore97: the checkpoint written after a score stop also counts the episodes that the
    work in flight finished; their mean fell below the stop and a plain --resume trained a
    whole session again. The mean the stop met (summary.json's, over the same window) judges."""
    from rltrain.checkpoint import CheckpointError, save_checkpoint
    from rltrain.ps.server import make_shards
    from rltrain.rl.config import server_settings
    from rltrain.rl.env_spec import initial_params, probe_env
    from rltrain.rl.run.resume import load_resume

    cfg = config("actors=1", "env.num_envs=16")
    spec = probe_env(cfg)
    _, shards = make_shards(initial_params(cfg, spec), cfg.optimizer, server_settings(cfg), 1)
    counters = Counters(episodes=36, recent_returns=[19.0] * 20 + [10.0] * 16)
    assert counters.stop_met(cfg.stop, 0.0, window=20) == ""  # the last 20: 14.95
    state = {"shards": [s.state_dict() for s in shards], "counters": counters.state()}
    save_checkpoint(tmp_path, 0, {**state, "config": to_dict(cfg)}, keep=3)
    summary = {"env_steps": counters.env_steps, "stopped_by": "mean_return", "mean_window": 20}
    (tmp_path / "summary.json").write_text(json.dumps({**summary, "mean_return": 19.0}))
    said = r"met stop.mean_return=18.0 \(the mean of its last 20 episodes at the stop: 19.00\)"
    with pytest.raises(CheckpointError, match=said):
        load_resume(tmp_path, cfg, spec)
    higher = config("actors=1", "env.num_envs=16", "stop.mean_return=19.5")
    assert load_resume(tmp_path, higher, spec) is not None  # raised: it trains on
    other = {**summary, "mean_window": 240, "mean_return": 19.0}  # judged on another window
    (tmp_path / "summary.json").write_text(json.dumps(other))
    assert load_resume(tmp_path, cfg, spec) is not None
    # the episodes after the stop meet it too: the refusal still quotes the stop's mean
    # (explore113: it said the later mean, -197.81 for a stop met at -142.81)
    after = Counters(episodes=36, recent_returns=[20.0] * 20 + [18.5] * 16)
    save_checkpoint(tmp_path, 1, {**state, "counters": after.state(), "config": to_dict(cfg)}, 3)
    (tmp_path / "summary.json").write_text(json.dumps({**summary, "mean_return": 19.0}))
    with pytest.raises(CheckpointError, match=said):
        load_resume(tmp_path, cfg, spec)


def test_a_run_killed_mid_training_is_not_finished_by_a_lowered_stop(tmp_path: Path) -> None:
    """explore104: after a kill -9, --resume with stop.max_seconds below the seconds trained
    "finished" the run ("killed in its final evaluation?"); a checkpoint without the stop's
    record is no final one: refused as a finished run's resume is."""
    from rltrain.checkpoint import CheckpointError, save_checkpoint
    from rltrain.ps.server import make_shards
    from rltrain.rl.config import server_settings
    from rltrain.rl.env_spec import initial_params, probe_env
    from rltrain.rl.run.resume import load_resume

    ran = config("actors=1", "env.num_envs=16", "stop.max_seconds=250", "stop.mean_return=21")
    spec = probe_env(ran)
    _, shards = make_shards(initial_params(ran, spec), ran.optimizer, server_settings(ran), 1)
    counters = Counters(env_steps=4096, episodes=40, wall_seconds=166.0, recent_returns=[19.0] * 40)
    state = {"shards": [s.state_dict() for s in shards], "counters": counters.state()}
    save_checkpoint(tmp_path, 0, state | {"config": to_dict(ran)}, keep=3)  # no summary.json
    for lowered, said in (
        ("stop.max_seconds=146", "max_seconds=146.0"),
        ("stop.mean_return=18", "mean_return=18.0"),
    ):
        cfg = config(
            "actors=1", "env.num_envs=16", "stop.max_seconds=250", "stop.mean_return=21", lowered
        )
        with pytest.raises(CheckpointError, match=rf"already met stop.{said} \("):
            load_resume(tmp_path, cfg, spec)


def test_a_run_killed_in_its_final_evaluation_resumes_to_finish_on_the_stops_mean(
    tmp_path: Path,
) -> None:
    """No summary.json (the run was killed in its final evaluation): the final checkpoint's
    own record of the stop judges, not its window, which the work in flight moved below the
    stop (review 83: such a run trained a whole session again)."""
    from rltrain.checkpoint import save_checkpoint
    from rltrain.ps.server import make_shards
    from rltrain.rl.config import server_settings
    from rltrain.rl.env_spec import initial_params, probe_env
    from rltrain.rl.run.resume import finishing, load_resume, stop_record

    cfg = config("actors=1", "env.num_envs=16")
    spec = probe_env(cfg)
    _, shards = make_shards(initial_params(cfg, spec), cfg.optimizer, server_settings(cfg), 1)
    counters = Counters(episodes=36, recent_returns=[19.0] * 20 + [10.0] * 16)
    state = {"shards": [s.state_dict() for s in shards], "counters": counters.state()}
    state |= {"config": to_dict(cfg), "stop": stop_record("mean_return", 19.0, 20)}
    save_checkpoint(tmp_path, 0, state, keep=3)
    resumed = load_resume(tmp_path, cfg, spec)
    assert resumed is not None and resumed.unfinished == "mean_return"  # only its evaluation
    assert stop_record("", 19.0, 20) is None  # (a checkpoint before the stop keeps none)
    # the session that finishes it says the mean the stop met, over the window it judged
    assert finishing(cfg, state, "mean_return") == (cfg, 19.0)
    # not another stop's mean (review 84: max_env_steps came first, and the work in flight
    # then lifted the checkpoint's window past the score stop), nor another window's
    late = state | {"stop": stop_record("max_env_steps", 17.0, 20)}
    assert finishing(cfg, late, "mean_return") == (cfg, None)
    # the stop its session stopped by, not another the work in flight met after it
    # (review 84): a score stop whose late steps passed max_env_steps, and the mirror
    limit = config("actors=1", "env.num_envs=16", "stop.max_env_steps=100")
    past = {
        **state,
        "counters": Counters(
            episodes=36, recent_returns=counters.recent_returns, env_steps=101
        ).state(),
    }
    save_checkpoint(tmp_path, 1, past, keep=3)
    resumed = load_resume(tmp_path, limit, spec)
    assert resumed is not None and resumed.unfinished == "mean_return"
    assert finishing(limit, past, "mean_return")[1] == 19.0
    lifted = Counters(episodes=36, recent_returns=[10.0] * 16 + [19.0] * 20, env_steps=101)
    at_limit = {**past, "counters": lifted.state(), "stop": stop_record("max_env_steps", 14.95, 20)}
    save_checkpoint(tmp_path, 2, at_limit, keep=3)
    resumed = load_resume(tmp_path, limit, spec)
    assert resumed is not None and resumed.unfinished == "max_env_steps"
    assert finishing(limit, at_limit, "max_env_steps")[1] == 14.95
    auto = config("actors=auto", "env.num_envs=16")  # sized as the checkpoint's session was
    sized, mean = finishing(auto, state | {"config": {"actors": 3}}, "mean_return")
    assert (sized.actors, sized.episode_window, mean) == (3, 48, None)  # (16 x 3 envs)


def test_a_diverged_run_is_refused_in_one_line(tmp_path: Path) -> None:
    """A run the server stopped as diverged (every update refused as non-finite) says so on
    --resume, where it raised AttributeError (stop has no key 'diverged')."""
    from rltrain.checkpoint import CheckpointError, save_checkpoint
    from rltrain.ps.server import make_shards
    from rltrain.rl.config import server_settings
    from rltrain.rl.env_spec import initial_params, probe_env
    from rltrain.rl.run.counters import DIVERGED_AFTER
    from rltrain.rl.run.resume import load_resume

    cfg = config("actors=1")
    spec = probe_env(cfg)
    _, shards = make_shards(initial_params(cfg, spec), cfg.optimizer, server_settings(cfg), 1)
    counters = Counters(rejected_in_a_row=DIVERGED_AFTER)
    state = {
        "shards": [s.state_dict() for s in shards],
        "counters": counters.state(),
        "config": to_dict(cfg),
    }
    save_checkpoint(tmp_path, 0, state, keep=3)
    with pytest.raises(CheckpointError, match="diverged .* last 100 updates as non-finite"):
        load_resume(tmp_path, cfg, spec)


def test_a_run_logs_the_mean_the_stop_judges(tmp_path: Path) -> None:
    """TensorBoard's episode/mean_return is the live line's and the stop's mean, with the
    window summary.json names (6 actors x 8 envs: 48, more than stop.window=20). Games are
    cut at 60 steps, so that every env ends one within a few thousand steps of a resume
    however well the policy has learned."""
    import json

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from rltrain.cli import main

    run = tmp_path / "run"
    argv = ["train", str(ROOT / "configs" / "cartpole_appo.yaml"), "--run-dir", str(run)]
    for kv in (
        "runtime.backend=local",
        "actors=6",
        "stop.mean_return=null",
        "env.kwargs={max_episode_steps: 60}",
    ):
        argv += ["--set", kv]
    assert main([*argv, "--set", "stop.max_env_steps=4000"]) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["mean_window"] == 48 and summary["episodes"] >= 48
    tb = EventAccumulator(str(run / "tb"), size_guidance={"scalars": 0})
    tb.Reload()
    returns = [p.value for p in tb.Scalars("episode/return")]
    means = tb.Scalars("episode/mean_return")
    assert len(returns) >= 48 and means
    assert means[-1].value == pytest.approx(sum(returns[-48:]) / 48, rel=1e-5)
    assert means[-1].value == pytest.approx(summary["final_mean_return"], rel=1e-5)
    # the mean is judged once every env has ended a game, in each session: a resume's too
    assert main(["train", "--resume", str(run), "--set", "stop.max_env_steps=8000"]) == 0
    tb.Reload()
    starts = [e.step for e in tb.Scalars("session/start")]
    marks = [(e.step, e.value) for e in tb.Scalars("session/settled")]
    assert len(starts) == 2
    # each session: its first result marked (0, or 1 if an actor's envs all ended a game in
    # its first rollout), then a 1 once every env has ended one
    sessions = list(zip(starts, [*starts[1:], 10**9], strict=True))
    assert all(any(b <= s < e for s, _ in marks) for b, e in sessions)
    settled = [min(s for s, v in marks if v == 1.0 and b <= s < e) for b, e in sessions]
    assert json.loads((run / "summary.json").read_text())["envs_in_first_game"] == 0
    for begin, end, first in zip(starts, [*starts[1:], 10**9], settled, strict=True):
        assert begin < first < end

        def steps(tag: str, a: int = begin) -> list[int]:
            return [e.step for e in tb.Scalars(tag) if a < e.step]

        # episodes end by the settling result (all in it, where a policy that plays to the
        # time limit ends every env's first game in the same rollout); no mean before it
        assert (
            min(steps("episode/return")) <= first <= min(steps("episode/mean_return"), default=end)
        )


def test_the_score_stop_waits_until_every_env_has_ended_a_game_since_the_start() -> None:
    """After a start or a --resume every env starts a game at once: the first 239 games of
    240 envs are the round's shortest (in Pong the most lopsided wins) and its closest game is
    still being played. The stop judges once every actor says all of its envs ended one."""
    stop = StopConfig(mean_return=18, window=20)
    c = Counters(recent_returns=[10.0] * 240)
    c.new_session()
    c.add(WorkStats(episode_returns=[21.0] * 239, unsettled={0: R(1, 0.0), 1: R(0, 0.0)}), 240)
    assert c.mean_return(240) > 18 and c.full_mean(240) is None
    assert c.stop_met(stop, 0.0, window=240) == "" and c.best_mean_return is None
    line = status_line(c, 240, 4, 10.0, 0.0, "")
    assert "return 21.0 (239 ep, 1 env in its first game)" in line
    c.add(WorkStats(episode_returns=[-5.0], unsettled={0: R(0, 0.0)}), 240)  # the long, close game
    assert c.settled and c.full_mean(240) == pytest.approx((239 * 21 - 5) / 240)
    assert c.stop_met(stop, 0.0, window=240) == "mean_return"
    c.add(WorkStats(unsettled={1: R(16, 1.0)}), 240)  # actor 1 restarted: its envs start together
    assert not c.settled and c.stop_met(stop, 0.0, window=240) == ""
    c.actor_gone(1)  # ... that died for good: its games will never end
    assert c.settled and c.stop_met(stop, 0.0, window=240) == "mean_return"
    c.add(WorkStats(unsettled={1: R(16, 1.0)}), 240)  # its rollouts batched after the death
    assert c.settled and c.stop_met(stop, 0.0, window=240) == "mean_return"


def test_the_round_waits_for_every_actor_to_count_its_envs() -> None:
    """One actor's first result, every game of its envs ended, said the session settled while
    the other actor had not said anything yet (TensorBoard's session/settled read 1, then 0)."""
    c = Counters(recent_returns=[10.0] * 20)
    c.new_session()
    c.add(WorkStats(episode_returns=[21.0] * 20, unsettled={0: R(0, 0.0)}), 20, (2, 8))
    assert not c.settled and c.full_mean(20) is None and c.round_settled is False
    c.add(WorkStats(unsettled={1: R(0, 0.0)}), 20, (2, 8))
    assert c.settled and c.full_mean(20) == pytest.approx(21.0)
    assert c.per_env_steps == 0  # (no env steps in these results)


def test_counters_of_an_older_checkpoint_count_as_settled() -> None:
    """Checkpoints written before rounds were counted have no ``unsettled``: their stop
    judges as it did (the resume check), and a new session counts from {}. So does a run whose
    actors never say (an extension algorithm's own actors)."""
    c = Counters(recent_returns=[19.0] * 240)
    assert c.unsettled is None and c.settled and c.full_mean(240) == pytest.approx(19.0)
    c.add(WorkStats(unsettled={0: R(3, 0.0)}), 240)  # not counted before a session starts
    assert c.settled
    c.new_session()
    c.add(WorkStats(episode_returns=[19.0]), 240)
    assert c.settled and c.full_mean(240) == pytest.approx(19.0)
    c.add(WorkStats(unsettled={0: R(3, 0.0)}), 240)
    assert not c.settled and c.full_mean(240) is None


def test_a_checkpoint_keeps_counters_that_a_weights_only_load_reads(tmp_path: Path) -> None:
    """Checkpoints are read with ``torch.load(weights_only=True)``, which before torch 2.6
    refuses a set: the actors gone this session stay out (a new session has none)."""
    import torch

    c = Counters(recent_returns=[1.0, 2.0])
    c.new_session()
    c.add(WorkStats(episode_returns=[3.0], unsettled={0: R(2, 0.0), 1: R(1, 0.0)}), 20)
    c.actor_gone(1)
    state = c.state()

    def plain(v: object) -> bool:  # what every allowed torch's weights_only load takes
        if isinstance(v, dict):
            return all(plain(k) and plain(x) for k, x in v.items())
        if isinstance(v, list | tuple):
            return all(plain(x) for x in v)
        return v is None or isinstance(v, bool | int | float | str)

    assert "gone" not in state and plain(state)
    torch.save({"counters": state}, tmp_path / "c.pt")
    back = Counters(**torch.load(tmp_path / "c.pt", weights_only=True)["counters"])
    assert back == dataclasses.replace(c, gone=set(), since={})


def test_counts_that_arrive_out_of_order_leave_the_newest_standing() -> None:
    """Two learners report in any order: a count from earlier in a round (more envs in their
    first game) or from a restarted actor's previous life (rollouts still queued at another
    learner) does not overwrite the newer one, in a learner's batch or in the trainer's."""
    life, restart = 100.0, 160.0  # RoundCount.since: when each life of actor 1 began
    c = Counters()
    c.new_session()
    c.add(WorkStats(unsettled={1: R(0, life)}), 240)
    assert c.settled
    c.add(WorkStats(unsettled={1: R(3, life)}), 240)  # an older rollout, reported late
    assert c.settled
    c.add(WorkStats(unsettled={1: R(16, restart)}), 240)  # actor 1 restarted
    assert c.in_first_game == 16
    c.add(WorkStats(unsettled={1: R(0, life)}), 240)  # its previous life's last rollout
    assert c.in_first_game == 16
    c.add(WorkStats(unsettled={1: R(5, restart)}), 240)
    assert c.in_first_game == 5

    import torch

    from rltrain.rl.rollout import Rollout

    step = torch.zeros(1, 1)  # [T=1, B=1]
    empty = Rollout(
        actor_id=1,
        version=0,
        obs=torch.zeros(2, 1, 4),
        actions=step.long(),
        rewards=step,
        terminated=step.bool(),
        truncated=step.bool(),
        behaviour_logits=torch.zeros(1, 1, 2),
        final_obs=torch.zeros(0, 4),
        final_at=torch.zeros(0, 2).long(),
    )
    stats = WorkStats()
    for said in (R(4, restart), R(0, life), R(2, restart), R(3, restart)):
        stats.add_rollout(dataclasses.replace(empty, unsettled=((1, said),)))
    assert stats.unsettled == {1: R(2, restart)}


def test_first_round_counts_the_envs_still_in_their_first_game() -> None:
    from rltrain.rl.rollout import FirstRound

    r = FirstRound(4)
    assert r.pending == 4
    r.saw([])
    r.saw([1, 3, 1])
    assert r.pending == 2
    r.saw([0, 2, 3])
    assert r.pending == 0


def test_an_actors_rollouts_say_how_many_of_its_envs_are_in_their_first_game() -> None:
    """CartPole's games end within 500 steps: the rollouts of actor 3 count its 4 envs down
    to 0 (no CartPole game ends within 5 steps), and a learner batch of two actors' rollouts
    carries both counts."""
    from test_rl_components import server_for

    from rltrain.rl.actor import Actor
    from rltrain.rl.rollout import stack

    cfg = config("actors=1", "env.num_envs=4", "algo.rollout_length=5")
    server = server_for(cfg)
    actor = Actor(cfg, 3)
    first = actor.collect(server)
    assert [(a, n.pending) for a, n in first.unsettled] == [(3, 4)]
    seen = [4]
    while seen[-1] and len(seen) < 100:
        seen.append(actor.collect(server).unsettled[0][1].pending)
    assert seen == sorted(seen, reverse=True) and seen[-1] == 0
    since = first.unsettled[0][1].since  # when this life of actor 3 began: on every rollout
    assert 0 < since <= time.time() and actor.collect(server).unsettled[0][1].since == since
    assert Actor(cfg, 3).collect(server).unsettled[0][1].since > since  # a restart: later
    other = dataclasses.replace(first, actor_id=5, unsettled=((5, R(4, 0.0)),))
    both = stack([actor.collect(server), other])
    assert [(a, n.pending) for a, n in both.unsettled] == [(3, 0), (5, 4)]
    stats = WorkStats()
    stats.add_rollout(both)
    assert {a: n.pending for a, n in stats.unsettled.items()} == {3: 0, 5: 4}


@pytest.mark.slow
def test_a_run_that_loses_an_actor_for_good_still_judges_its_mean(tmp_path: Path) -> None:
    """Pendulum's games last exactly ``max_episode_steps``: actor 1 is killed (no restarts,
    the run goes on) long before its 4 envs end their first game, so only the trainer's
    ``Counters.actor_gone`` lets the run's mean (of 8 games, one per env) be judged once actor
    0's envs have ended two rounds."""
    import json

    from rltrain.cli import main

    run = tmp_path / "run"
    argv = ["train", str(ROOT / "configs" / "pendulum_appo.yaml"), "--run-dir", str(run)]
    for kv in (
        "runtime.backend=process",
        "stop.mean_return=null",
        "stop.window=1",
        "env.num_envs=4",
        "env.kwargs={max_episode_steps: 2000}",
        "algo.rollout_length=50",
        "ppo.epochs=1",
        "faults.max_restarts=0",
        "faults.on_worker_loss=continue",
        "faults.events=[{at: 0.3, target: actor, index: 1, action: kill}]",
        # actor 0's 4 envs end games at 8,000 and 16,000 of its steps; actor 1 makes about a
        # thousand of the 8,000 its first games need before the kill
        "stop.max_env_steps=20000",
    ):
        argv += ["--set", kv]
    assert main(argv) == 0
    s = json.loads((run / "summary.json").read_text())
    assert s["faults"]["injected"] == 1 and s["stopped_by"] == "max_env_steps"
    assert s["episodes"] >= 8 and s["mean_window"] == 8
    assert s["envs_in_first_game"] == 0 and s["best_mean_return"] is not None
