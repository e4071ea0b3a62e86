"""TensorBoard logging of `rltrain train` (tags: episode/, perf/, ps/, loss/; docs/architecture.md).

``perf/time/<role>/<phase>``: the share of the role's wall time (its processes summed) spent in
each phase over the last interval (:mod:`rltrain.perf`); the live line names the biggest.
``perf/env_fps``, ``perf/learner_updates_per_s`` and ``replay/sampled_per_s``: rates over the
last :data:`RATE_WINDOW_S` seconds, so that steps arriving a rollout at a time give no 0 at a
log point that fell between two rollouts. Each run's tb folder holds a custom-scalars layout
(:data:`LAYOUT`, TensorBoard's CUSTOM SCALARS tab) of these tags. ``session/start``
(:data:`SESSION_TAG`) marks where each session (the run, each ``--resume``) began.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from torch.utils.tensorboard import SummaryWriter

from rltrain import perf, signals
from rltrain.faults import RunFailed
from rltrain.rl.algos.losses import LossSpec, absent_parts
from rltrain.rl.config import StopConfig, TrainConfig, server_settings
from rltrain.rl.rollout import LOSS_TERMS, LossStats, WorkStats
from rltrain.rl.run.counters import Counters
from rltrain.rl.run.hparams import write_settings
from rltrain.rundir import folder_gone

MEANS = {
    "epsilon": "dqn/epsilon",
    "q_mean": "dqn/q_mean",
    "support_beyond": "dqn/support_beyond",  # C51: near 0 where the support holds the returns
    "epochs": "ppo/epochs",  # below ppo.epochs where ppo.target_kl ended some
    "clipped": "policy/actions_clipped",  # a Box's action map (explore113: pinned, unseen)
}
"""WorkStats' fields (None where a call has none) written as their interval's mean."""
RATE_WINDOW_S = 10.0
"""Seconds of wall time the logged rates average over (at least one log interval)."""
SESSION_TAG = "session/start"
"""A scalar (1) written first as each session of a run starts, at the env steps it starts
from: ``rltrain plot`` leaves out the time from the previous session's last event to it, the
downtime before a ``--resume`` (:func:`rltrain.curves.running_seconds`)."""
SETTLED_TAG = "session/settled"
"""A scalar written at the env steps where the round's state changes: 1 once a session's
every env has ended a game, 0 when a restarted actor's envs start theirs together. The score
stop and ``rltrain plot``'s marks judge the mean of the last episodes from a 1 to the next 0
(:attr:`rltrain.rl.run.counters.Counters.settled`)."""

# the RL roles that time phases (perf/time/<role>/*): policy is the policy worker's
_ROLES = ("actor", "learner", "worker", "policy")
LAYOUT: dict[str, dict[str, list[Any]]] = {
    "returns": {
        # training's episodes and the periodic evaluations' means (eval.every_steps) together
        "raw score: episodes, evaluation mean": [
            "Multiline",
            ["^episode/return$", "^episode/mean_return$", "^eval/mean_return$"],
        ],
        "episode length": ["Multiline", ["^episode/length$", "^eval/mean_length$"]],
    },
    "speed": {
        "env frames/s": ["Multiline", ["^perf/env_fps$"]],
        "learner updates/s": ["Multiline", ["^perf/learner_updates_per_s$"]],
        "network bytes": ["Multiline", ["^net/bytes_.*"]],
        "replay size": ["Multiline", ["^replay/size$"]],
        "replay samples/s": ["Multiline", ["^replay/sampled_per_s$"]],
        **{f"{r} time shares": ["Multiline", [f"^perf/time/{r}/.*"]] for r in _ROLES},
        "session starts (the run, each --resume), and their first games all ended": [
            "Multiline",
            [f"^{SESSION_TAG}$", f"^{SETTLED_TAG}$"],
        ],
    },
    "staleness": {
        "staleness of applied updates (versions)": ["Multiline", ["^ps/staleness_(mean|max)$"]],
        "updates dropped as stale (fraction)": ["Multiline", ["^ps/dropped_fraction$"]],
        "behaviour-policy lag KL": ["Multiline", ["^loss/lag_kl$"]],
        "actors' lag behind the learner (versions)": ["Multiline", ["^ps/actor_lag_(mean|max)$"]],
        "server version": ["Multiline", ["^ps/version$"]],
    },
    "losses": {
        **{t: ["Multiline", [f"^loss/{t}$"]] for t in ("policy", "value", "entropy", "td")},
        "kl, clip fraction": ["Multiline", ["^loss/(kl|clip_fraction)$"]],
        "gradient norm": ["Multiline", ["^loss/grad_norm$"]],
        "learning rate": ["Multiline", ["^optim/lr(_effective)?$"]],
        "dqn Q mean, epsilon": ["Multiline", ["^dqn/(q_mean|epsilon)$"]],
        "C51: target probability beyond the support": ["Multiline", ["^dqn/support_beyond$"]],
    },
    "faults": {
        "faults (cumulative counts)": ["Multiline", ["^faults/.*"]],
    },
}
"""TensorBoard custom-scalars layout: category -> chart title -> [kind, tag regexes]; a run
writes the charts it fills (:func:`run_layout`)."""


def run_layout(cfg: TrainConfig, policy_worker: bool) -> dict[str, dict[str, list[Any]]]:
    """:data:`LAYOUT` less the charts this run never fills: an a3c run's CUSTOM SCALARS tab
    showed 9 empty panels (replay, dqn, lag, the roles it has not; explore98).
    ``policy_worker``: a policy worker acts for the actors (runtime.inference, as placed)."""
    empty = set(_unwritten(cfg, policy_worker))
    return {
        category: {title: chart for title, chart in charts.items() if title not in empty}
        for category, charts in LAYOUT.items()
    }


def _unwritten(cfg: TrainConfig, policy_worker: bool) -> Iterator[str]:
    """The titles of :data:`LAYOUT`'s charts whose tags ``cfg``'s run never writes."""
    spec = cfg.algo_spec
    roles = {"worker"} if spec.layout == "worker" else {"actor", "learner"}
    roles |= {"policy"} if policy_worker else set()
    yield from (f"{r} time shares" for r in _ROLES if r not in roles)
    if spec.layout != "replay":
        yield from ("replay size", "replay samples/s")
    if not spec.lags:
        yield from ("behaviour-policy lag KL", "actors' lag behind the learner (versions)")
    if spec.loss is None:  # a Q-learner's loss is its TD error
        if cfg.dqn.atoms == 1:
            yield "C51: target probability beyond the support"
        yield from ("policy", "value", "entropy", "kl, clip fraction")
        return
    yield from ("td", "dqn Q mean, epsilon", "C51: target probability beyond the support")
    made = getattr(spec.make_loss(cfg), "spec", None)  # the built-in actor-critics' LossSpec
    loss_spec = made() if callable(made) else None
    if isinstance(loss_spec, LossSpec) and {"kl", "clip_fraction"} <= set(absent_parts(loss_spec)):
        yield "kl, clip fraction"


class TrainLogger:
    """Episodes are written as they arrive; rates, losses and staleness every interval."""

    def __init__(
        self,
        tb_dir: Path,
        cfg: TrainConfig,
        protocol: dict[str, Any],
        frames_per_step: int,
        start_steps: int = 0,
    ) -> None:
        # a resumed run counts on from its checkpoint's steps: TensorBoard hides what the
        # stopped session logged after that (a crash leaves no checkpoint at its last step)
        writer = SummaryWriter(str(tb_dir), purge_step=start_steps + 1 if start_steps else None)
        quiet_writer_errors()
        self.writer = cast(SummaryWriter, SignalSafe(writer, tb_dir))
        self.writer.add_scalar(SESSION_TAG, 1.0, start_steps)  # the first event of a session
        self.every = cfg.log_every_seconds
        self.frames_per_step = frames_per_step
        self.batch_size = cfg.dqn.batch_size
        write_settings(self.writer, cfg, protocol, start_steps)  # (config, protocol, HPARAMS)
        self._last_t = time.time()
        window = max(RATE_WINDOW_S, self.every)
        self._step_rate = perf.RateWindow(window, start_steps, self._last_t)
        self._update_rate = perf.RateWindow(window, 0, self._last_t)
        self._all_updates = 0
        self._points = 0  # points flushed this session
        self._absorbed = False  # a result has come this session
        self.rates = True  # False once the session's stop has come (the trainer sets it)
        self._losses: list[LossStats] = []
        self._staleness: list[int] = []
        self._lr_scales: list[float] = []  # the applied updates' (a rule's lr_scale)
        self._scaled = server_settings(cfg).scales  # optim/lr_effective is written
        self._actor_lag: list[int] = []  # impala/appo: per batch (WorkStats.actor_lag)
        self._pushed = self._dropped = 0  # this interval's pushes, and those dropped as stale
        self._means: dict[str, list[float]] = {k: [] for k in MEANS}  # (WorkStats' names)
        self._phases: dict[str, float] = {}
        self.top = ""  # the biggest phase of each role over the last interval (the live line)
        self._settled: bool | None = None  # the round's state as last marked (None: not yet;
        # a session's first result marks it, 0 or 1, so that every session whose actors count
        # their envs has an event, and a reader tells it from one an older rltrain wrote)

    def layout(self, cfg: TrainConfig, policy_worker: bool) -> None:
        """Write the CUSTOM SCALARS tab's charts (:func:`run_layout`) once the session's
        processes are placed (``policy_worker``: runtime.inference's choice)."""
        self.writer.add_custom_scalars(run_layout(cfg, policy_worker))

    def round(self, settled: bool | None, env_steps: int) -> None:
        """Mark the round's state at the session's first result, then where it settles and
        where it unsettles again (:data:`SETTLED_TAG`); ``settled``:
        :attr:`rltrain.rl.run.counters.Counters.round_settled` after a result."""
        if settled is None or settled == self._settled:
            return
        self.writer.add_scalar(SETTLED_TAG, float(settled), env_steps)
        self._settled = settled

    def absorb(self, stats: WorkStats, env_steps: int, mean: float | None = None) -> None:
        """Log one result; ``mean``: the training mean after it (a full window: the stop's
        ``TrainConfig.episode_window``), written as ``episode/mean_return`` when episodes
        ended in it."""
        for ret, length in zip(stats.episode_returns, stats.episode_lengths, strict=False):
            self.writer.add_scalar("episode/return", ret, env_steps)
            self.writer.add_scalar("episode/length", length, env_steps)
        if mean is not None and stats.episode_returns:
            self.writer.add_scalar("episode/mean_return", mean, env_steps)
        self._all_updates += stats.updates
        self._absorbed = True
        if stats.env_steps:
            self._step_rate.add(env_steps)
        if stats.updates:
            self._update_rate.add(self._all_updates)
        self._losses.extend(stats.losses)
        for name, values in self._means.items():
            if (value := getattr(stats, name)) is not None:
                values.append(value)
        self._staleness.extend(stats.staleness)
        self._lr_scales.extend(stats.lr_scales)
        self._actor_lag.extend(stats.actor_lag)
        self._pushed, self._dropped = self._pushed + stats.updates, self._dropped + stats.dropped
        perf.merge(self._phases, stats.phases)

    def due(self) -> bool:
        """An interval is over, and a result has come (start-up's points stacked at step 0,
        six for an Atari run's 12 s, explore88; the stop writes the last point anyway)."""
        return self._absorbed and time.time() - self._last_t >= self.every

    def flush(
        self,
        env_steps: int,
        version: int,
        replay_size: int | None = None,
        net: tuple[int, int] | None = None,
        lr: float | None = None,
    ) -> None:
        """Write the interval's scalars; ``net``: the shards' (bytes pushed, bytes pulled);
        ``lr``: the learning rate the shards step with now (schedule.lr_end moves it)."""
        now = time.time()
        self._step_rate.add(env_steps, now)
        fps = self._step_rate.rate(now) * self.frames_per_step
        updates_per_s = self._update_rate.rate(now)
        # none after the stop, where the work in flight lands at once (Breakout's last point
        # read 2,867 frames/s, its run 2,048): unless the run has none yet
        rates = self.rates or not self._points
        if rates:
            self.writer.add_scalar("perf/env_fps", fps, env_steps)
            self.writer.add_scalar("perf/learner_updates_per_s", updates_per_s, env_steps)
        self._points += 1
        self.writer.add_scalar("ps/version", version, env_steps)
        if lr is not None:
            self.writer.add_scalar("optim/lr", lr, env_steps)
            # the rate now times the interval's mean factor where a rule scales (staleness:
            # scale's lr / staleness; explore98: optim/lr alone hid it)
            if self._scaled and self._lr_scales:
                mean = sum(self._lr_scales) / len(self._lr_scales)
                self.writer.add_scalar("optim/lr_effective", lr * mean, env_steps)
        if net is not None:
            self.writer.add_scalar("net/bytes_pushed", net[0], env_steps)
            self.writer.add_scalar("net/bytes_pulled", net[1], env_steps)
        if replay_size is not None:
            self.writer.add_scalar("replay/size", replay_size, env_steps)
            sampled = updates_per_s * self.batch_size  # every learner update samples a batch
            if rates:
                self.writer.add_scalar("replay/sampled_per_s", sampled, env_steps)
        if self._staleness:
            # one bin per staleness value: TensorBoard's default bins (about 1,500 edges,
            # exponential) cost 4.7 kB a point for Gorila's spread, 8.5 MB/h (explore87)
            edges = np.arange(max(self._staleness) + 2) - 0.5
            self.writer.add_histogram(
                "ps/staleness", _as_tensor(self._staleness), env_steps, bins=edges
            )
            mean = sum(self._staleness) / len(self._staleness)
            self.writer.add_scalar("ps/staleness_mean", mean, env_steps)
            self.writer.add_scalar("ps/staleness_max", max(self._staleness), env_steps)
        if lag := self._actor_lag:  # the actors', where the staleness is the pushers'
            self.writer.add_scalar("ps/actor_lag_mean", sum(lag) / len(lag), env_steps)
            self.writer.add_scalar("ps/actor_lag_max", max(lag), env_steps)
        if self._pushed:  # the staleness above is the applied updates': drops are not in it
            self.writer.add_scalar("ps/dropped_fraction", self._dropped / self._pushed, env_steps)
        for name in ("grad_norm", *LOSS_TERMS):
            values = [getattr(x, name) for x in self._losses if getattr(x, name) is not None]
            if values:
                self.writer.add_scalar(f"loss/{name}", sum(values) / len(values), env_steps)
        for key, share in perf.shares(self._phases).items():
            self.writer.add_scalar(f"perf/time/{key}", share, env_steps)
        if self._phases:
            self.top = perf.biggest(self._phases)
        stds = [x.action_std for x in self._losses if x.action_std is not None]
        means = [(MEANS[k], v) for k, v in self._means.items()]  # (MEANS' tags)
        for tag, values in (("policy/action_std", stds), *means):  # a Box's: dimensions' mean
            if values:
                self.writer.add_scalar(tag, sum(values) / len(values), env_steps)
        self.writer.flush()
        self._last_t = now
        self._losses, self._staleness, self._actor_lag, self._lr_scales = [], [], [], []
        self._pushed = self._dropped = 0
        self._means, self._phases = {k: [] for k in MEANS}, {}

    def faults(self, counters: Any, env_steps: int) -> None:
        """``faults/*`` counters (restarts, restores, lost updates, ...)."""
        for tag, value in counters.tags().items():
            self.writer.add_scalar(tag, value, env_steps)

    def close(self) -> None:
        self.writer.close()


class SignalSafe:
    """A SummaryWriter whose calls hold a first Ctrl-C / SIGTERM until they return
    (:func:`rltrain.signals.deferred`). Its writes put events on a queue under a Condition; a
    KeyboardInterrupt raised while that Condition re-acquires its lock left the lock released
    twice ("RuntimeError: release unlocked lock"), a traceback and exit code 1 where a
    graceful stop was asked for (CI, test_leftovers' SIGTERM to the whole group).

    A write that fails (its folder moved away, a full disk) stops the run once, in one line
    (:class:`RunFailed`); the calls after it do nothing, so that the stop can finish."""

    def __init__(self, writer: SummaryWriter, tb_dir: Path) -> None:
        self._writer, self._dir = writer, tb_dir
        self.failed = ""

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._writer, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            if self.failed:  # (said once: the run is stopping on it)
                return None
            try:
                with signals.deferred():
                    return attr(*args, **kwargs)
            except OSError as e:  # (the writer's thread failed, and now each call raises it)
                self.failed = events_failure(self._dir, e)
                raise RunFailed(self.failed) from None

        return call


def quiet_writer_errors() -> None:
    """TensorBoard's writer thread prints its failure as a traceback, then hands it to the
    next write, which :class:`SignalSafe` says in one line: leave the traceback out (the
    other threads' exceptions go to the hook installed before)."""
    previous = threading.excepthook
    if getattr(previous, "quiet_writer", False):
        return

    def hook(args: threading.ExceptHookArgs) -> None:
        if isinstance(args.exc_value, OSError) and type(args.thread).__name__ == WRITER_THREAD:
            return
        previous(args)

    hook.quiet_writer = True  # type: ignore[attr-defined]
    threading.excepthook = hook


WRITER_THREAD = "_AsyncWriterThread"  # (tensorboard.summary.writer.event_file_writer's)


def events_failure(tb_dir: Path, error: OSError) -> str:
    """The one line of a TensorBoard write that failed."""
    if not tb_dir.parent.is_dir():
        return folder_gone(tb_dir.parent)
    why = error.strerror or error
    return f"cannot write TensorBoard events in {tb_dir} ({why}); free space or allow writes"


def _as_tensor(values: list[int]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)


def stop_fraction(stop: StopConfig, counters: Counters, wall_seconds: float, window: int) -> float:
    """How far the run is towards its first stop criterion, in [0, 1] (the progress bar;
    ``window``: the episodes of the mean)."""
    s, c = stop, counters
    parts = []
    if s.max_seconds:
        parts.append(wall_seconds / s.max_seconds)
    if s.max_env_steps:
        parts.append(c.env_steps / s.max_env_steps)
    mean = c.mean_return(window)
    if s.mean_return is not None and mean is not None:
        part = max(0.0, mean / s.mean_return) if s.mean_return > 0 else 0
        # short of 100% until the stop may judge the mean: an IMPALA run read 100% from 41 s
        # while envs were still in their first games (explore103)
        parts.append(part if c.full_mean(window) is not None else min(part, 0.99))
    return max(parts, default=0.0)


def status_line(
    c: Counters, window: int, frames_per_step: int, secs: float, wall_base: float, top: str
) -> str:
    """The live line: the run's seconds (``wall_base``, those of its earlier sessions, plus this
    one's ``secs``: the clock its percent and its stop line count), steps, frames/s over the
    whole run, mean return, updates, staleness and (``top``) the biggest phase of each role."""
    mean = c.mean_return(window)
    fps = c.env_steps * frames_per_step / max(1e-9, secs + wall_base) if secs else 0
    ret = f"{mean:.1f}" if mean is not None else "-"
    stale = c.staleness_sum / c.applied if c.applied else 0.0
    first = c.in_first_game  # the stop waits for them
    games = f", {first:,} envs in their first game" if first > 1 else ""
    games = ", 1 env in its first game" if first == 1 else games
    return (
        f"{wall_base + secs:5.0f}s  steps {c.env_steps:,}  {fps:,.0f} frames/s  return {ret} "
        f"({c.episodes:,} ep{games})  updates {c.updates:,}"
        + (f" ({c.rejected:,} refused)" if c.rejected else "")  # non-finite: nothing learned
        + (f" ({c.dropped:,} dropped)" if c.dropped else "")  # stale: staleness is the rest's
        + f"  staleness {stale:.2f}"
        + (f"  time: {top}" if top else "")
    )
