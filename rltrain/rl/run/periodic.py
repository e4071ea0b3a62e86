"""Evaluation during training (``eval.every_steps``), as SB3's EvalCallback.

Training's own mean return is measured on episodes that older parameters played, with
training's exploration and (Atari) clipped rewards and episodic lives; it can stand well above
or below what the final parameters score. So every ``eval.every_steps`` agent steps the trainer
writes a checkpoint and an :class:`Evaluator`, a process of its own beside training, plays
``eval.episodes`` episodes with exactly those parameters under the evaluation protocol (raw
scores), on the same seeds each time so that the scores compare. :class:`PeriodicEval`, the
driver's side, records each score (TensorBoard ``eval/*``, ``evals.jsonl``, the progress
line) and keeps the best-scoring checkpoint as ``checkpoints/best.pt``
(``rltrain eval RUN --checkpoint best``).
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from rltrain import signals
from rltrain.checkpoint import (
    best_checkpoint,
    write_state,
)
from rltrain.envs import make_env
from rltrain.errors import RLTrainError
from rltrain.faults import RunFailed
from rltrain.normalize import NormStats
from rltrain.progress import quiet
from rltrain.rl.config import TrainConfig
from rltrain.rl.eval_args import DEFAULT_MAX_STEPS
from rltrain.rl.evaluate import load_policy, play_episodes, state_params
from rltrain.rl.run.counters import Counters, reaches
from rltrain.rl.run.scores import best_record, best_score, eval_settings, last_scored
from rltrain.rl.run.tblog import TrainLogger
from rltrain.rundir import EVALS_FILE
from rltrain.runtime.context import end_then_kill

if TYPE_CHECKING:
    from rltrain.runtime.contract import Runtime

MAX_STEPS = DEFAULT_MAX_STEPS  # vector steps of one evaluation, as `rltrain eval`'s
FAILURES = 3  # evaluations failed in a row before they are given up


class EvalFailed(RLTrainError):
    """An evaluation that could not score its episodes; the message is one line."""


@dataclass(frozen=True)
class EvalScore:
    """What an :class:`Evaluator` played: raw scores and lengths, one per episode."""

    version: int
    returns: tuple[float, ...]
    lengths: tuple[int, ...]
    seconds: float


class Evaluator:
    """Plays ``eval.episodes`` evaluation episodes with the parameters it is sent.

    Plain Python: Ray runs it as a process that reserves no CPU (it plays in bursts, beside
    the actors and learners that hold the cores), with one torch thread and (Atari) one
    emulator thread; the local backend, as a thread of the run.
    """

    def __init__(self, cfg: TrainConfig) -> None:
        if cfg.runtime.backend != "local":  # the local backend's count is process-wide
            torch.set_num_threads(1)
        self.cfg = cfg
        env = dataclasses.replace(cfg.env, num_threads=1)
        n = min(cfg.eval.episodes, 8)
        self.env = make_env(env, seed=cfg.eval.seed, num_envs=n, evaluation=True)
        self.stopping = threading.Event()

    def score(self, version: int, values: torch.Tensor, norm: NormStats | None) -> EvalScore:
        start = time.time()
        e, env = self.cfg.eval, self.env
        label = Path(f"parameters v{version}")
        params = (label, values, norm)
        policy = load_policy(self.cfg, label, params, env.obs_shape, env.action_space)
        returns, lengths = play_episodes(
            env, policy, e.episodes, e.seed, MAX_STEPS, e.deterministic, self.stopping.is_set
        )
        if self.stopping.is_set():
            raise EvalFailed(f"the evaluation of v{version} was stopped")
        if len(returns) < e.episodes:
            raise EvalFailed(
                f"{len(returns)} of {e.episodes} episodes ended in {MAX_STEPS:,} steps of "
                f"{env.num_envs} envs (an env without a time limit?)"
            )
        return EvalScore(version, tuple(returns), tuple(lengths), time.time() - start)

    def interrupt(self) -> None:
        """End the evaluation in play (the local backend's kill calls it from the driver's
        thread; Ray's ends the process)."""
        self.stopping.set()

    def close(self) -> None:
        self.env.close()


@dataclass
class Flight:
    """An evaluation in flight and the checkpoint it scores."""

    future: Any
    state: dict[str, Any]  # the checkpoint evaluated: becomes best.pt if it scores best
    checkpoint: str
    env_steps: int
    wall_seconds: float
    submitted: float = dataclasses.field(default_factory=time.time)
    """When the checkpoint was taken: the time of its point in TensorBoard."""
    at_stop: bool = False
    """The final evaluation of a run that stopped (between two multiples of every_steps)."""


class PeriodicEval:
    """The driver's side: sends a checkpoint's parameters to the evaluator when one is due and
    records the scores that come back. One evaluation is in flight at a time: one that falls due
    meanwhile starts when it ends (slow evaluations space out, they never queue up)."""

    FINISH_WAIT_S = 120.0  # at the end of a run: how long to wait for the evaluation in flight

    def __init__(
        self,
        cfg: TrainConfig,
        run_dir: Path,
        runtime: Runtime,
        env_steps: int,
        log: TrainLogger,
        say: Callable[[str], None],
    ) -> None:
        """``env_steps``: where the run starts (a resumed one); ``log``: its TensorBoard."""
        self.cfg, self.run_dir, self.rt, self.say = cfg, run_dir, runtime, say
        self.writer, self.frames_per_step = log.writer, log.frames_per_step
        self.every = cfg.eval.every_steps
        self.next_at = self._after(env_steps)
        self.remote: Any = None
        self.flight: Flight | None = None
        self.settings, same = eval_settings(cfg)
        # a resumed run keeps its best, if it was scored the same way
        record, damaged = best_record(run_dir) if self.every else (None, "")
        self.best = best_score(record, same)
        before = best_score(record) if self.best is None else None
        if before is not None:  # (said: a worse checkpoint may become best.pt next)
            say(
                f"checkpoints/best.pt ({before:.1f}) was scored under other evaluation settings "
                "(eval.episodes, deterministic, seed or the env's protocol): the next "
                "evaluation replaces it"
            )
        if damaged:  # (explore97: replaced unsaid by a worse score)
            say(f"{damaged}: the next evaluation replaces it")
        self.failures = 0  # in a row
        self.records: list[dict[str, Any]] = []  # the evaluations of this session
        # (env steps, version) of the parameters last scored (a resumed run: the last in
        # evals.jsonl), so that the end of a run does not score them twice
        self.scored: tuple[int, int] | None = last_scored(run_dir) if self.every else None
        self.final: tuple[Path, dict[str, Any]] | None = None  # the trainer's last checkpoint
        self.left_out = ""  # the checkpoint whose evaluation the end of the run did not wait for

    def _tell(self, line: str) -> None:
        """A routine line (a score, the final evaluation's start): none under quiet=True,
        where what goes wrong is still said (explore104: every score reached stderr)."""
        if not quiet():
            self.say(line)

    def _after(self, env_steps: int) -> int:
        return (env_steps // self.every + 1) * self.every if self.every else 0

    def reached(self, score: float) -> bool:
        """Whether an evaluation of this session scored ``score`` or more."""
        return any(reaches(r["mean_return"], score) for r in self.records)

    def due(self, env_steps: int) -> bool:
        return bool(self.every) and self.flight is None and env_steps >= self.next_at

    def start(self) -> None:
        """Start the evaluator (when evaluations are on), so that its process is up by the
        first one (a Ray process takes seconds to start)."""
        if self.every and self.remote is None:
            try:  # (the local backend builds it here; Ray, in its process)
                self.remote = self.rt.Remote(Evaluator, self.cfg, role="evaluator", num_cpus=0.0)
            except Exception as e:  # noqa: BLE001 - counted as a failed evaluation
                self._failed("the evaluator could not start", e)

    def submit(
        self, path: Path, state: dict[str, Any], counters: Counters, at_stop: bool = False
    ) -> None:
        """Evaluate checkpoint ``path`` (its ``state``), written at ``counters``."""
        steps = counters.env_steps
        self.next_at = self._after(steps)
        self.start()
        if self.remote is None:
            return
        version, values, norm = state_params(state)
        future = self.remote.call("score", version, values, norm)
        self.flight = Flight(
            future, state, path.name, steps, counters.wall_seconds, at_stop=at_stop
        )

    def poll(self, timeout: float = 0.0) -> None:
        """Record the evaluation in flight if it has ended (waiting up to ``timeout`` s)."""
        flight = self.flight
        if flight is None or not self.rt.wait_any([flight.future], timeout):
            return
        self.flight = None
        try:
            score = self.rt.get([flight.future])[0]
        except Exception as e:  # noqa: BLE001 - a lost evaluator costs one score, not the run
            self._failed(f"evaluation of {flight.checkpoint} failed", e)
            return
        self.failures = 0
        try:
            self._record(score, flight)
        except OSError as e:
            self.say(f"evaluation of {flight.checkpoint}: cannot write its record ({e})")

    def _failed(self, what: str, e: BaseException) -> None:
        """Note a failed evaluation; give evaluations up after FAILURES in a row (the run
        fails if it was to stop on them: stop.eval_mean_return)."""
        self.close()
        self.failures += 1
        why = " ".join(str(e).split())[:160] or type(e).__name__
        if self.failures < FAILURES:
            self.say(f"{what} ({why}); the next one restarts the evaluator")
            return
        if self.cfg.stop.eval_mean_return is not None:
            raise RunFailed(f"{what} ({why}), {FAILURES} times in a row: stop.eval_mean_return")
        self.every = 0
        self.say(f"{what} ({why}), {FAILURES} times in a row: no more evaluations in this run")

    def _record(self, score: EvalScore, flight: Flight) -> None:
        returns = np.asarray(score.returns, dtype=np.float64)
        record = {
            "env_steps": flight.env_steps,
            "env_frames": flight.env_steps * self.frames_per_step,
            "wall_seconds": round(flight.wall_seconds, 2),
            "checkpoint": flight.checkpoint,
            "version": score.version,
            "episodes": len(returns),
            "mean_return": round(float(returns.mean()), 4),
            "std_return": round(float(returns.std()), 4),
            "min_return": float(returns.min()),
            "max_return": float(returns.max()),
            "mean_length": round(float(np.mean(score.lengths)), 2),
            "seconds": round(score.seconds, 2),
            "at_stop": flight.at_stop,  # (its own row in `rltrain plot --evals`)
            **self.settings,
        }
        with (self.run_dir / EVALS_FILE).open("a") as f:
            f.write(json.dumps(record) + "\n")  # (its protocol plain JSON: scored_protocol)
        step = flight.env_steps
        for key in ("mean_return", "std_return", "mean_length"):
            self.writer.add_scalar(f"eval/{key}", record[key], step, walltime=flight.submitted)
        mean = record["mean_return"]
        best = self.best is None or mean > self.best
        if best:
            write_state(best_checkpoint(self.run_dir), {**flight.state, "eval": record})
            self.best = mean
        self.records.append(record)
        self.scored = (flight.env_steps, score.version)
        std = record["std_return"]
        self._tell(
            f"eval of {flight.checkpoint} ({step:,} steps): {mean:.1f} +- {std:.1f}"
            f" over {len(returns)} episodes in {score.seconds:.0f}s; "
            + ("the best so far: checkpoints/best.pt" if best else f"best {self.best:.1f}")
        )

    def finish(self, wait: bool) -> None:
        """The run ends: record the evaluation in flight (``wait``: up to FINISH_WAIT_S for it;
        Ctrl-C stops the wait); then, for a run that stopped (``wait``: not an interrupt or a
        fault), score its final checkpoint (:attr:`final`: (path, state), which the trainer
        sets as it ends) unless the last evaluation scored those parameters already, or no
        update was applied (a run stopped during its start-up), so that the final weights
        are evaluated and can become best.pt; then stop the evaluator."""
        final = wait and self.every and self.final is not None
        if final:  # a Ctrl-C from here on cuts the evaluation short, and says so
            signals.stopping_now(signals.FINAL_EVALUATION)
        try:
            if wait:
                self._wait()
            if final and self.flight is None:
                self._final()
        except KeyboardInterrupt:  # (in the evaluator's start: _wait catches its own)
            assert self.final is not None
            self.left_out = self.final[0].name
            self.say(f"the evaluation of {self.left_out} is left out: Ctrl-C")
        finally:
            signals.stopping_now(signals.FINAL_CHECKPOINT)
        self.close()

    def _final(self) -> None:
        """Score :attr:`final` unless it holds the initial parameters or was scored."""
        assert self.final is not None
        path, state = self.final
        counters = Counters(**state["counters"])
        version = state_params(state)[0]
        if version == 0:  # no update applied: the initial parameters, not worth the wait
            self._tell(f"no final evaluation: {path.name} holds the initial parameters")
        elif self.scored != (counters.env_steps, version):
            self._tell(f"final evaluation of {path.name} ({counters.env_steps:,} steps)")
            self.submit(path, state, counters, at_stop=True)
            self._wait()

    def _wait(self) -> None:
        """Wait up to FINISH_WAIT_S for the evaluation in flight, if any, and record it."""
        flight = self.flight
        if flight is None:
            return
        self._tell(f"waiting for the evaluation of {flight.checkpoint} (Ctrl-C: do not wait)")
        why = "it did not end"
        try:
            self.poll(self.FINISH_WAIT_S)
        except KeyboardInterrupt:
            why = "Ctrl-C"
        if self.flight is not None:
            self.left_out = flight.checkpoint  # (summary.json's eval.left_out)
            self.say(f"the evaluation of {flight.checkpoint} is left out: {why}")

    def close(self) -> None:
        if self.remote is not None:  # idle, it closes its env (a user's may flush there)
            end_then_kill([self.remote])
        self.remote, self.flight = None, None

    def summary(self) -> dict[str, Any]:
        """summary.json's ``eval``: this session's evaluations, the last, the best score."""
        if not self.every:
            return {}
        last = self.records[-1] if self.records else None
        evals: dict[str, Any] = {"evaluations": len(self.records), "last": last}
        evals["best_mean_return"] = self.best
        if self.left_out:
            evals["left_out"] = self.left_out
        return {"eval": evals}
