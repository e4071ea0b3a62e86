"""Start notes on settings that change nothing in a run: a rule or staleness policy with one
pusher, keys only a barrier reads under a rule without one, keys of a section the algorithm
does not read. Said, not refused: a config written for one setting may be run under another
by ``--set``."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from rltrain.config import read_config
from rltrain.envs.atari import game_name, is_atari
from rltrain.ps.config import ServerConfig
from rltrain.rl.algos import section_types
from rltrain.rl.algos.impala import in_flight_range
from rltrain.rl.config.train import TrainConfig, server_settings
from rltrain.yaml_files import config_chain


def rule_notes(cfg: TrainConfig) -> list[str]:
    """Start notes where a rule or staleness policy meets one pusher (impala, appo, dqn with
    one learner; a3c, a2c, ppo with one worker): its pushes are never stale and no barrier has
    another to wait for, so the setting changes nothing (explore85, explore98), while the
    actors' lag behind the learner, which no server setting acts on, shows as loss/lag_kl
    (impala, appo); and where keys only a barrier reads are set under a rule without one."""
    return [*one_pusher_notes(cfg), *barrier_key_notes(cfg)]


def one_pusher_notes(cfg: TrainConfig) -> list[str]:
    server, split = server_settings(cfg), cfg.algo_spec.split
    who, n = ("learner", cfg.learners) if split else ("worker", cfg.actors)  # (0: auto)
    if n != 1:
        return []
    set_ = [f"server.rule={server.rule}"] if server.rule in ("sync", "soft_sync") else []
    set_ += [f"server.staleness={server.staleness}"] if server.staleness != "none" else []
    if not set_:
        return []
    lag = "; the actors' lag behind the learner is not what it acts on" * split
    lag += " (loss/lag_kl)" * (
        split and cfg.algo_spec.layout != "replay"
    )  # (not dqn's: explore112)
    raise_ = "learners" if split else "actors"
    return [
        f"{' and '.join(set_)} with 1 {who}: one pusher, never stale, with no other to wait "
        f"for, so it runs as async would{lag}; raise {raise_} to compare rules"
    ]


def barrier_key_notes(cfg: TrainConfig) -> list[str]:
    """server.barrier_timeout_s and faults.on_worker_loss under a rule with no barrier (a3c's
    async took them without a word: explore98). Said, not refused: a config written for a
    barrier may be run under async by --set server.rule."""
    if server_settings(cfg).update_rule.barrier:
        return []
    set_ = [f"server.barrier_timeout_s={cfg.server.barrier_timeout_s:g}"] * (
        cfg.server.barrier_timeout_s != ServerConfig().barrier_timeout_s
    )
    loss = cfg.faults.on_worker_loss
    set_ += [f"faults.on_worker_loss={loss}"] * (loss != type(cfg.faults)().on_worker_loss)
    if not set_:
        return []
    return [
        f"{', '.join(set_)}: read at a barrier (server.rule sync, soft_sync) only; this run's "
        f"rule is {server_settings(cfg).rule}: they change nothing"
    ]


ONE_READER = ("dqn", "replay")
"""Sections only their own algorithm reads (the built-ins' others are read across: appo's
``impala``, every learner's ``ppo.overlap_push``), besides every registered algorithm's own."""

READ_ACROSS = {"ppo": ("overlap_push",)}
"""Sections of which every algorithm reads the keys named, and only its own algorithms the
rest (explore105: pendulum_appo.yaml's ppo.epochs under algo.name=a2c ran unsaid)."""


def unread_notes(cfg: TrainConfig) -> list[str]:
    """A start note for keys set in a section that ``algo.name`` does not read: ``dqn.n_step=3``
    on a3c ran and said nothing (explore95). Said, not refused: a config file switched to
    another algorithm by --set keeps its sections."""
    reads, extra = set(cfg.algo_spec.sections), section_types(built_in=False)
    unread = []
    for name in (*ONE_READER, *READ_ACROSS, *extra):
        if name in reads:
            continue
        section = cfg.section(name)
        default = type(section)()
        for f in dataclasses.fields(section):
            value = getattr(section, f.name)
            if value != getattr(default, f.name) and f.name not in READ_ACROSS.get(name, ()):
                unread.append(f"{name}.{f.name}={value}")
    if not unread:
        return []
    return [
        f"{', '.join(unread)}: not read by algo.name={cfg.algo.name} (its sections: "
        f"{', '.join(cfg.algo_spec.sections)}); they change nothing in this run"
    ]


def in_flight_notes(cfg: TrainConfig) -> list[str]:
    """A start note where ``impala.in_flight`` lies outside what the run can hold, which it
    then holds instead (review 85: 40 with 15 actors held 16 without a word)."""
    want = cfg.impala.in_flight
    if not want or not cfg.algo_spec.lags or not cfg.actors:
        return []
    low, high = in_flight_range(cfg.learners, cfg.impala.learner_batch, cfg.actors)
    held = min(max(want, low), high)
    if held == want:
        return []
    why = (
        "every actor acting, a batch per learner queued" if held == high else "a batch per learner"
    )
    most = "the most" if held == high else "the fewest"
    return [f"impala.in_flight={want}: holds {held} rollouts in flight, {most} it can ({why})"]


def carried_stop_note(config_path: str | Path | None, cfg: TrainConfig) -> list[str]:
    """A start note where the run plays another game than the config file that set its score
    stop (the file itself, or a ``base:`` beneath it) while that score stays: pong_a3c.yaml's
    18 stopped a SpaceInvaders run at a random player's 199.5 in 29 s (explore103). Said, not
    refused: the score may be meant."""
    if not config_path or cfg.stop.mean_return is None:
        return []
    try:
        chain = config_chain(config_path)
        where = next(p for p, own in chain if "mean_return" in (own.get("stop") or {}))
        file = read_config(where)
    except (StopIteration, OSError, ValueError):  # none sets it, or (a race) unreadable
        return []
    game, score = (file.get("env") or {}).get("id"), (file.get("stop") or {}).get("mean_return")
    if not isinstance(game, str) or score != cfg.stop.mean_return or same_game(game, cfg.env.id):
        return []
    return [
        f"stop.mean_return={score:g} is {where.name}'s, a score of {game}; this run plays "
        f"{cfg.env.id}: set stop.mean_return to a score of its own, or null to train to the "
        "other stops"
    ]


def same_game(a: str, b: str) -> bool:
    """Whether two env ids name one game (ALE/Pong-v5 and PongNoFrameskip-v4; a module's
    ``module:Env-v0`` and its ``Env-v0``), whose scores compare."""
    return game_name(a.split(":")[-1]).lower() == game_name(b.split(":")[-1]).lower()


def learning_start_notes(cfg: TrainConfig, done: int = 0) -> list[str]:
    """A start note for a dqn session whose step limit comes before its learners start, the
    run having ``done`` env steps (a resume fills the memory again: review89) (explore112:
    it stopped untrained with "faults: none"; a note, not a refusal: a smoke test of a few
    steps is a fair use)."""
    limit, starts = cfg.stop.max_env_steps, cfg.dqn.learning_starts
    if cfg.algo_spec.layout != "replay" or not limit or limit - done > starts:
        return []
    left = f" ({limit - done:,} steps after the {done:,} done)" if done else ""
    return [
        f"stop.max_env_steps={limit}: the session ends{left} before its learners start, at "
        f"dqn.learning_starts={starts} transitions in the replay memory, so it learns nothing; "
        "raise it, or lower dqn.learning_starts"
    ]


def support_notes(cfg: TrainConfig) -> list[str]:
    """Start notes on C51's support (``dqn.v_min``, ``dqn.v_max``): set where one atom reads
    none of it (review90), and left at the default -10..10, which suits clipped rewards at
    gamma 0.99, where the rewards are not clipped (a return beyond it counts as its end)."""
    d = cfg.dqn
    if cfg.algo_spec.layout != "replay":
        return []
    default = type(d)()
    span = f"dqn.v_min={d.v_min:g}, dqn.v_max={d.v_max:g}"
    if d.atoms == 1 and (d.v_min, d.v_max) != (default.v_min, default.v_max):
        return [
            f"{span}: the range of C51's atoms, read with dqn.atoms > 1 only: this run's one "
            "Q-value per action changes nothing"
        ]
    clipped = is_atari(cfg.env.id, cfg.env.wrappers) and cfg.env.clip_rewards
    if d.atoms > 1 and (d.v_min, d.v_max) == (default.v_min, default.v_max) and not clipped:
        return [
            f"dqn.atoms={d.atoms} on the default {span}, which suits rewards clipped to "
            f"[-1, 1] at gamma 0.99; {cfg.env.id}'s rewards are not clipped, and a return "
            "beyond the range counts as its end: set them to the range of its discounted "
            "returns"
        ]
    return []
