"""`rltrain eval`: play a run's checkpoint (the latest, by default) with the evaluation protocol.

Evaluation always reports the raw game score: no reward clipping and no episodic life.

With a video, env 0's first game is played again, first, alone in a *recording env*, and
filmed (``EvalResult.filmed``: its score and length); the episodes scored are played in
training's vector env as without a video, so the score is the same. The recording env
(:mod:`rltrain.envs.screen`) shows the agent the observations training's env would and can show
its screen.

``video_view="game"`` films the screen as a person sees it (Atari: the emulator's 210x160 RGB
screen; other ids: ``env.render()``); ``"agent"`` what the network sees (Atari: the newest
frame of its stack, 84x84 gray; a Gymnasium image env: its newest image; vector observations:
a bar chart of the values). One frame is recorded per agent step (the screen after the step,
and the first one after the reset), played at the game's speed (Atari: 60 / frame_skip per
second). Objects a game draws only on every other emulator frame may therefore be missing from
a game-view video, as from the agent's own frames between max-pools.

The video is ``eval-v<version>.mp4`` (``-agent.mp4`` for the agent view; H.264 through
imageio-ffmpeg), or a GIF (Pillow) when asked for (``video_format="gif"``) or when
imageio-ffmpeg cannot be imported (``EvalResult.note`` says so; :mod:`rltrain.video`).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from rltrain.checkpoint import (
    CKPT_DIR,
    CheckpointError,
    best_checkpoint,
    latest_checkpoint,
    load_checkpoint,
)
from rltrain.envs import ActionSpace, VectorEnv, make_env, registered
from rltrain.envs.base import EnvError
from rltrain.envs.screen import make_recording_env
from rltrain.envs.user import load_env_code
from rltrain.normalize import NormStats
from rltrain.progress import Paced
from rltrain.rl.actor import model_builder
from rltrain.rl.algos.distributions import distribution
from rltrain.rl.algos.models import ActorCritic, load_flat
from rltrain.rl.config import TrainConfig
from rltrain.rl.device import torch_threads
from rltrain.rl.eval_args import (
    DEFAULT_MAX_STEPS,
    EvalError,
    Style,
    check_played_as,
    cut_games,
    evals_held,
    named,
    trained_steps,
    unended,
)
from rltrain.rl.filming import VideoView, draft_of, publish, record_episode
from rltrain.rl.played_policy import Policy
from rltrain.video import VideoFormat


@dataclass(frozen=True)
class EvalResult:
    checkpoint: Path
    version: int
    returns: tuple[float, ...]
    """Raw scores, one per episode, as each env ended its share (env i: seed + i)."""
    lengths: tuple[int, ...]
    """Their lengths in agent steps."""
    seed: int
    """Of the evaluation envs (env i: seed + i)."""
    deterministic: bool
    """Whether it played the most likely actions (asked for, or a dqn run's with
    dqn.eval_epsilon 0)."""
    video: Path | None
    view: VideoView | None = None
    """What the video shows (``game`` unless the env cannot draw its screen)."""
    note: str = ""
    """Why the view is not the one asked for, if it is not."""
    filmed: tuple[float, int] | None = None
    """The filmed game's raw score and length: env 0's first game (seed ``seed``), played
    again apart with env 0's draws, so one of ``returns`` (summed in float64, theirs in
    float32: equal to about 1e-6)."""

    @property
    def mean(self) -> float:
        return float(np.mean(self.returns))

    @property
    def std(self) -> float:
        return float(np.std(self.returns))


def checkpoint_params(
    run_dir: Path, which: str = "latest", style: Style = "cli", cfg: TrainConfig | None = None
) -> tuple[Path, int, torch.Tensor, NormStats | None]:
    """A checkpoint's parameters, joined from its shards, and the normalisation statistics
    they were trained with (shard 0 holds them; None when the run had none). ``which``:
    ``latest`` (the newest ``ckpt-*.pt``), ``best`` (``best.pt``, kept by ``eval.every_steps``)
    or the path of a checkpoint file; one trained otherwise than ``cfg`` plays is refused."""
    path, state = load_picked(run_dir, which, style)
    if cfg is not None:
        check_played_as(path, state.get("config"), cfg, run_dir, style)
    version, values, stats = state_params(state)
    return path, version, values, stats


def load_picked(run_dir: Path, which: str, style: Style = "cli") -> tuple[Path, dict[str, Any]]:
    """The checkpoint ``which`` names, loaded. A run that trains now prunes its older
    checkpoints as it writes one, and the newest, picked a moment before, may be gone by the
    time it is read (explore89, checkpoint.keep 1): then the newest is picked again."""
    for tries_left in reversed(range(10)):
        path = pick_checkpoint(run_dir, which, style)
        try:
            return path, load_checkpoint(path)
        except CheckpointError:
            if which != "latest" or path.exists() or not tries_left:
                raise
    raise AssertionError("unreachable: the last try returns or raises")


def pick_checkpoint(run_dir: Path, which: str, style: Style = "cli") -> Path:
    if which == "latest":
        path = latest_checkpoint(run_dir)
        if path is None:
            steps = trained_steps(run_dir)
            raise CheckpointError(
                f"{run_dir} has no {CKPT_DIR}/ckpt-*.pt, though its summary.json says it "
                f"trained {steps:,} steps: they were deleted or moved"
                if steps
                else f"{run_dir} has no {CKPT_DIR}/ckpt-*.pt to evaluate yet: a run writes one "
                "every checkpoint.every_seconds and one as it stops"
            )
        return path
    if which == "best":
        path = best_checkpoint(run_dir)
        if not path.is_file():
            evals = evals_held(run_dir)
            why = (
                f"though its evals.jsonl holds {evals} evaluation(s): it was deleted or moved"
                if evals
                else "it is written by runs with eval.every_steps > 0"
            )
            raise CheckpointError(
                f"{run_dir} has no {CKPT_DIR}/{path.name}, {why}; use "
                f"{named('checkpoint', 'latest', style)} or a checkpoint's path"
            )
        return path
    path = Path(which).expanduser()
    insides = () if path.is_absolute() else (run_dir / path, run_dir / CKPT_DIR / path)
    for inside in insides:  # as the run's own folder names them
        if not path.is_file() and inside.is_file():
            return inside
    if not path.is_file():
        choices = "latest, best" if style == "cli" else '"latest", "best"'
        folder = any(p.is_dir() for p in (path, *insides))  # (--checkpoint checkpoints: explore97)
        what = "a folder, not a file" if folder else "no such file"
        what += "" if path.is_absolute() else f" (here, in {run_dir} or its {CKPT_DIR}/)"
        raise CheckpointError(
            f"{named('checkpoint', which, style)}: {what}; use {choices} or a "
            f"checkpoint's path ({CKPT_DIR}/ckpt-*.pt)"
        )
    return path


def state_params(state: dict[str, Any]) -> tuple[int, torch.Tensor, NormStats | None]:
    """A checkpoint state's (version, flat parameters, normalisation statistics or None)."""
    shards = state["shards"]
    values = torch.cat([s["param"].reshape(-1) for s in shards])
    norm = shards[0].get("norm")
    stats = NormStats.from_state(norm) if norm else None
    return int(min(s["version"] for s in shards)), values, stats


def load_policy(
    cfg: TrainConfig,
    run_dir: Path,
    params: tuple[Path, torch.Tensor, NormStats | None],
    obs_shape: tuple[int, ...],
    actions: ActionSpace | int,
) -> Policy:
    """The run's network with the checkpoint's (path, values, norm) loaded into it."""
    path, values, norm = params
    dqn = cfg.algo_spec.q_network
    build = model_builder(cfg)
    model = build(cfg.model.kind, obs_shape, actions, cfg.model.hidden)
    if sum(p.numel() for p in model.parameters()) != values.numel():
        raise CheckpointError(f"{path} does not fit the model of {run_dir}/config.yaml")
    load_flat(model, values)
    if not dqn:
        if norm is not None and norm.obs is not None and cast(ActorCritic, model).obs_norm is None:
            raise CheckpointError(
                f"{path} was trained on normalised observations, which the config of "
                f"{run_dir} does not normalise (normalize.obs): a checkpoint plays with its "
                "own run's config"
            )
        cast(ActorCritic, model).set_norm(norm)  # the statistics the policy was trained with
    return Policy(model, dqn, distribution(actions), cfg.dqn.eval_epsilon)


def evaluate(
    cfg: TrainConfig,
    run_dir: Path,
    episodes: int | None = None,
    video: bool = False,
    seed: int | None = None,
    max_steps: int = DEFAULT_MAX_STEPS,
    video_view: VideoView | None = None,
    deterministic: bool | None = None,
    checkpoint: str = "latest",
    video_format: VideoFormat | None = None,
    style: Style = "cli",
    progress: bool = True,
) -> EvalResult:
    """Play ``episodes`` episodes in up to 8 parallel envs (env i seeded ``seed + i``, its
    actions drawn from a generator of that seed); with ``video``, env 0's first game is played
    again first, alone in a recording env, and filmed into ``run_dir``: the same game, move
    for move, so the score is the one without a video (explore107: it changed).
    ``deterministic``: the policy's most likely action (its mean for a Box), not a sample.
    ``episodes``, ``seed`` and ``deterministic`` default to the run's ``eval.*``:
    ``checkpoint="best"`` then replays the evaluation that chose it.

    ``video_view`` None: the game's screen, or the agent's view when the env cannot draw its
    screen (e.g. CartPole without pygame; ``EvalResult.note`` says why); given, that view or a
    one-line error. ``checkpoint``: which one (:func:`checkpoint_params`). ``video_format``:
    mp4 (None: H.264; a GIF, with a note, when imageio-ffmpeg is missing) or gif (either, or
    a view, without ``video``: an :class:`EvalError`, not ignored). ``style``: how
    errors name the arguments (the API's checks them first: :data:`EPISODES`, :data:`SEED`).
    ``max_steps``: agent steps per env before episodes that have not ended are given up (an
    :class:`EvalError`). ``progress``: a line on stderr once it takes more than 2 s."""
    how = [
        named(k, v, style)
        for k, v in (("video_view", video_view), ("video_format", video_format))
        if v
    ]
    if how and not video:
        add = "--video" if style == "cli" else "video=True"
        raise EvalError(f"{how[0]}: says how to film the first episode; add {add}, or leave it out")
    episodes = cfg.eval.episodes if episodes is None else episodes
    seed = cfg.eval.seed if seed is None else seed
    deterministic = cfg.eval.deterministic if deterministic is None else deterministic
    path, version, values, norm = checkpoint_params(run_dir, checkpoint, style, cfg)
    check_registered(cfg, run_dir, style)
    envs = min(episodes, 8)
    returns: list[float] = []
    lengths: list[int] = []
    video_path, ret = None, None  # (ret: the filmed episode's score, None if it was cut)
    paced = Paced("[eval]")

    cap = f" of at most {max_steps:,}" if max_steps != DEFAULT_MAX_STEPS else ""  # (a user's)

    def watch(ended: int, steps: int, part: str = "step") -> None:  # (filmed first: 0)
        paced.update(  # (no percentage while filming, or through a single game: explore107)
            ended / episodes if episodes > 1 and part == "step" else None,
            lambda s: f"{ended} of {episodes} episodes ended, {part} {steps:,}{cap}, {s:.0f}s",
        )

    with ExitStack() as stack:
        stack.enter_context(torch_threads(1))
        if progress:
            stack.callback(paced.close)
        rec = None
        view: VideoView = video_view or "game"
        note = ""
        if video:  # first: an env that cannot draw fails before anything is played
            try:
                rec = make_recording_env(cfg.env, seed, render=view == "game")
            except EnvError as e:
                if video_view is not None:
                    raise _worded(e, style) from None
                said = str(_worded(e, style)).split("; use ")[0].split("; or use ")[0]
                note, view = f"{said}; filmed the agent's view instead", "agent"
                rec = make_recording_env(cfg.env, seed, render=False)
            stack.callback(rec.close)
        vec = stack.enter_context(make_env(cfg.env, seed=seed, num_envs=envs, evaluation=True))
        policy = load_policy(cfg, run_dir, (path, values, norm), vec.obs_shape, vec.action_space)
        if rec is not None:  # env 0's first game, filmed apart: the score is not touched
            out = draft_of(run_dir / f"eval-v{version}{'' if view == 'game' else '-agent'}")
            # env 0's actions: its generator, and its row of a batch as wide as the play's
            # (a network's outputs differ in their last bits with the batch's size: a Box
            # policy's filmed game drifted from env 0's, review87)
            gens = [*draws(seed, 1), *draws(seed + envs, envs - 1)]
            try:
                video_path, ret, length, cut = record_episode(
                    rec,
                    lambda obs: policy.act(np.repeat(obs[None], envs, 0), gens, deterministic)[0],
                    view,
                    out,
                    max_steps,
                    video_format or "mp4",
                    (lambda steps: watch(0, steps, "filming, step")) if progress else None,
                )
            except EnvError as e:  # a screen that fails mid-episode
                raise _worded(e, style) from None
            stack.callback(video_path.unlink, missing_ok=True)  # the draft of a failed eval
            note = "; ".join(x for x in (note, cut) if x)
        returns, lengths = play_episodes(
            vec,
            policy,
            episodes,
            seed,
            max_steps,
            deterministic,
            on_step=(lambda n, t: watch(n, t)) if progress else None,
        )
        if len(returns) < episodes or (video_path is not None and ret is None):
            # (a mean over the episodes that happened to end misleads)
            why = unended(cfg, len(returns), episodes, max_steps, style)
            if video_path is not None and ret is None:  # the filmed one: what it did instead
                why += f"; the filmed episode, cut there: {publish(video_path, '-cut')}"
            raise EvalError(why)
        video_path = publish(video_path) if video_path is not None else None
    video_as = view if video else None
    played = policy.plays_greedy(deterministic)
    filmed = (ret, length) if video_path is not None and ret is not None else None
    scores, steps = tuple(returns), tuple(lengths)
    note = "; ".join(x for x in (note, cut_games(cfg, steps)) if x)
    return EvalResult(
        path, version, scores, steps, seed, played, video_path, video_as, note, filmed
    )


def check_registered(cfg: TrainConfig, run_dir: Path, style: Style) -> None:
    """An id unknown here after the run's ``imports``: most likely one its training script
    registered (the run sent it to its actors; config.yaml cannot hold it)."""
    load_env_code(cfg.env)
    if not registered(cfg.env.id):
        call = f"rltrain.evaluate({str(run_dir)!r})" if style == "cli" else "rltrain.evaluate()"
        raise EnvError(
            f"unknown env id {cfg.env.id!r}: registered by the script that trained the run? "
            f"register it there (gymnasium.register) before {call}, or list the module that "
            f"registers it under imports in {run_dir / 'config.yaml'}"
        )


def _worded(error: EnvError, style: Style) -> EnvError:
    """A recording env's error (:mod:`rltrain.envs.screen` names ``--video-view agent``) as
    ``style`` names the argument."""
    if style == "cli":
        return error
    cli, own = named("video_view", "agent", "cli"), named("video_view", "agent", style)
    return EnvError(str(error).replace(cli, own))


def play_episodes(
    env: VectorEnv,
    policy: Policy,
    episodes: int,
    seed: int,
    max_steps: int,
    deterministic: bool = False,
    stop: Callable[[], bool] | None = None,
    on_step: Callable[[int, int], None] | None = None,
) -> tuple[list[float], list[int]]:
    """Raw scores and lengths of ``episodes`` episodes played in ``env``, each env playing
    its share (env i: ``episodes // n``, one more for the first ``episodes % n``; its actions
    drawn from a generator of its own, seeded ``seed + i``, as its env is), as SB3's
    ``evaluate_policy``: taking the first episodes to end, whichever env they come from,
    would favour short episodes. Fewer when ``max_steps`` vector steps run out first, or
    ``stop()`` turns true (checked each step: another thread ends the play).
    ``on_step(episodes ended, steps)`` after each step."""
    n = env.num_envs
    quota = [episodes // n + (i < episodes % n) for i in range(n)]
    gens = draws(seed, n)
    obs = env.reset(seed=seed)
    returns: list[float] = []
    lengths: list[int] = []
    for t in range(max_steps):
        if stop is not None and stop():
            break
        step = env.step(policy.act(obs, gens, deterministic))
        obs = step.obs
        for ret, length, i in zip(
            step.episode_returns, step.episode_lengths, step.episode_envs, strict=True
        ):
            if quota[i]:
                quota[i] -= 1
                returns.append(ret)
                lengths.append(length)
        if not any(quota):
            break
        if on_step is not None:
            on_step(len(returns), t + 1)
    return returns, lengths


def draws(seed: int, n: int) -> list[torch.Generator]:
    """The generators of ``n`` envs seeded ``seed + i``: env i's action draws."""
    return [torch.Generator().manual_seed((seed + i) % 2**63) for i in range(n)]
