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

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from envs import make_env
from rltrain.checkpoint import CheckpointError, best_checkpoint, load_checkpoint, write_state
from rltrain.normalize import NormStats
from rltrain.rl.config import TrainConfig
from rltrain.rl.evaluate import load_policy, play_episodes, state_params
from rltrain.rl.setup import Counters
from rltrain.rl.tblog import TrainLogger

EVALS_FILE = "evals.jsonl"
MAX_STEPS = 1_000_000  # vector steps of one evaluation (a policy that never ends an episode)


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
    the actors and learners that hold the cores); the local backend, as a thread.
    """

    def __init__(self, cfg: TrainConfig) -> None:
        torch.set_num_threads(cfg.runtime.threads_per_worker)
        self.cfg = cfg
        n = min(cfg.eval.episodes, 8)
        self.env = make_env(cfg.env, seed=cfg.eval.seed, num_envs=n, evaluation=True)

    def score(self, version: int, values: torch.Tensor, norm: NormStats | None) -> EvalScore:
        start = time.time()
        e, env = self.cfg.eval, self.env
        label = Path(f"parameters v{version}")
        params = (label, values, norm)
        policy = load_policy(self.cfg, label, params, env.obs_shape, env.action_space)
        returns, lengths = play_episodes(
            env, policy, e.episodes, e.seed, MAX_STEPS, e.deterministic
        )
        return EvalScore(version, tuple(returns), tuple(lengths), time.time() - start)

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


class PeriodicEval:
    """The driver's side: sends a checkpoint's parameters to the evaluator when one is due and
    records the scores that come back. One evaluation is in flight at a time: one that falls due
    meanwhile starts when it ends (slow evaluations space out, they never queue up)."""

    FINISH_WAIT_S = 120.0  # at the end of a run: how long to wait for the evaluation in flight

    def __init__(
        self,
        cfg: TrainConfig,
        run_dir: Path,
        runtime: Any,
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
        self.best = best_score(run_dir) if self.every else None  # a resumed run keeps its best
        self.done = 0  # evaluations recorded this session
        self.session_best: float | None = None
        self.last: dict[str, Any] | None = None

    def _after(self, env_steps: int) -> int:
        return (env_steps // self.every + 1) * self.every if self.every else 0

    def reached(self, score: float) -> bool:
        """Whether an evaluation of this session scored ``score`` or more."""
        return self.session_best is not None and self.session_best >= score

    def due(self, env_steps: int) -> bool:
        return bool(self.every) and self.flight is None and env_steps >= self.next_at

    def start(self) -> None:
        """Start the evaluator (when evaluations are on), so that its process is up by the
        first one (a Ray process takes seconds to start)."""
        if self.every and self.remote is None:
            self.remote = self.rt.Remote(Evaluator, self.cfg, role="worker", num_cpus=0.0)

    def submit(self, path: Path, state: dict[str, Any], counters: Counters) -> None:
        """Evaluate checkpoint ``path`` (its ``state``), written at ``counters``."""
        self.start()
        version, values, norm = state_params(state)
        future = self.remote.call("score", version, values, norm)
        steps = counters.env_steps
        self.flight = Flight(future, state, path.name, steps, counters.wall_seconds)
        self.next_at = self._after(steps)

    def poll(self, timeout: float = 0.0) -> None:
        """Record the evaluation in flight if it has ended (waiting up to ``timeout`` s)."""
        flight = self.flight
        if flight is None or not self.rt.wait_any([flight.future], timeout):
            return
        self.flight = None
        try:
            score = self.rt.get([flight.future])[0]
        except Exception as e:  # noqa: BLE001 - a lost evaluator costs one score, not the run
            why = " ".join(str(e).split())[:160] or type(e).__name__
            self.say(f"evaluation of {flight.checkpoint} failed ({why}); the next one restarts it")
            self.close()
            return
        self._record(score, flight)

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
        }
        with (self.run_dir / EVALS_FILE).open("a") as f:
            f.write(json.dumps(record) + "\n")
        step = flight.env_steps
        for key in ("mean_return", "std_return", "mean_length"):
            self.writer.add_scalar(f"eval/{key}", record[key], step)
        mean = record["mean_return"]
        best = self.best is None or mean > self.best
        if best:
            write_state(best_checkpoint(self.run_dir), {**flight.state, "eval": record})
            self.best = mean
        self.done += 1
        self.last = record
        self.session_best = max(mean, self.session_best if self.session_best is not None else mean)
        std = record["std_return"]
        self.say(
            f"eval of {flight.checkpoint} ({step:,} steps): {mean:.1f} +- {std:.1f}"
            f" over {len(returns)} episodes in {score.seconds:.0f}s; "
            + ("the best so far: checkpoints/best.pt" if best else f"best {self.best:.1f}")
        )

    def finish(self, wait: bool) -> None:
        """The run ends: record the evaluation in flight (``wait``: up to FINISH_WAIT_S for it),
        then stop the evaluator."""
        if self.flight is not None and wait:
            self.say(f"waiting for the evaluation of {self.flight.checkpoint}")
            self.poll(self.FINISH_WAIT_S)
        self.close()

    def close(self) -> None:
        if self.remote is not None:
            self.remote.kill()
        self.remote, self.flight = None, None

    def summary(self) -> dict[str, Any]:
        """summary.json's ``eval``: this session's evaluations, the last, the best score."""
        if not self.every:
            return {}
        evals = {"evaluations": self.done, "last": self.last, "best_mean_return": self.best}
        return {"eval": evals}


def best_score(run_dir: Path) -> float | None:
    """The mean raw score of the run's ``best.pt`` (None: none yet, or unreadable: the next
    evaluation replaces it)."""
    path = best_checkpoint(run_dir)
    if not path.is_file():
        return None
    try:
        record = load_checkpoint(path).get("eval")
    except CheckpointError:
        return None
    return float(record["mean_return"]) if isinstance(record, dict) else None
