"""`rltrain eval --video`: the filmed episode is a real, scored one, seen as training sees it,
and the video shows the game's screen (or, with --video-view agent, the network's input)."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Iterator
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
import pytest
import torch
from PIL import Image, ImageSequence

import rltrain
from rltrain.cli import main
from rltrain.envs import ChainEnv, EnvConfig, make_env
from rltrain.envs.screen import AtariScreenEnv
from rltrain.errors import ConfigError
from rltrain.rl.eval_args import EvalError
from rltrain.video import Mp4Writer, VideoError

ROOT = Path(__file__).resolve().parents[1]
PONG_FRAMES = 200  # env.max_episode_frames: 50 agent steps, a second or two of play
PAINTED_ID = "rltrain-test/Painted-v0"
FACTORY_ID = "rltrain-test/PaintedByFactory-v0"


class PaintedChain(ChainEnv):
    """rltrain/Chain-v0 that can draw itself: an odd-sized RGB picture of the corridor."""

    metadata: dict[str, Any] = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self, render_mode: str | None = None) -> None:
        super().__init__()
        self.render_mode = render_mode

    def render(self) -> np.ndarray:
        img = np.zeros((21, 4 * self.length + 1, 3), np.uint8)
        img[5:16, 4 * self._pos + 1 : 4 * self._pos + 4] = (250, 200, 0)
        return img


gymnasium.register(PAINTED_ID, entry_point=PaintedChain, max_episode_steps=32)


def make_painted(render_mode: str | None = None) -> PaintedChain:
    """A factory function as an entry point: no metadata until the env is made."""
    return PaintedChain(render_mode)


gymnasium.register(FACTORY_ID, entry_point=make_painted, max_episode_steps=32)


def write_run(run: Path, config: str, **env: Any) -> Path:
    """An untrained run directory as `rltrain train` leaves it (config.yaml, one checkpoint)."""
    from rltrain.checkpoint import save_checkpoint
    from rltrain.config import load_config, to_dict
    from rltrain.rl.config import TrainConfig
    from rltrain.rl.env_spec import initial_params, probe_env
    from rltrain.rl.run.counters import Counters
    from rltrain.rundir import write_config

    cfg = load_config(TrainConfig, ROOT / "configs" / config)
    cfg = dataclasses.replace(cfg, env=dataclasses.replace(cfg.env, **env))
    run.mkdir(parents=True)
    shard = {"param": initial_params(cfg, probe_env(cfg)), "version": 0}
    state = {"shards": [shard], "counters": Counters().state(), "config": to_dict(cfg)}
    save_checkpoint(run, 0, state, keep=1)
    write_config(run, cfg)
    return run


@pytest.fixture(autouse=True)
def one_torch_thread() -> Iterator[None]:
    """Batch-1 forward passes: one thread is fastest, and on a busy machine a second one
    spends ~30 ms a step waiting for a core."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def pong(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("pong") / "run"
    return write_run(run, "pong_a3c.yaml", max_episode_frames=PONG_FRAMES)


def hide_imageio_ffmpeg(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "imageio_ffmpeg", None)  # `import imageio_ffmpeg` fails


@pytest.fixture
def no_ffmpeg(monkeypatch: pytest.MonkeyPatch) -> None:
    """imageio-ffmpeg cannot be imported: videos are GIFs."""
    hide_imageio_ffmpeg(monkeypatch)


@pytest.fixture
def fake_ffmpeg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """imageio-ffmpeg's ffmpeg (``IMAGEIO_FFMPEG_EXE``) replaced by one that lists libx264,
    stores the raw frames piped into it as the output file and its arguments beside it;
    returns that arguments file."""
    pytest.importorskip("imageio_ffmpeg")
    folder = tmp_path / "fake-bin"
    folder.mkdir()
    log = folder / "args.json"
    script = folder / "ffmpeg"
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, pathlib, sys\n"
        "args = sys.argv[1:]\n"
        "if '-encoders' in args:\n"
        "    print(' ------\\n V....D libx264   fake H.264 (codec h264)')\n"
        "    sys.exit(0)\n"
        "if '-' not in args or args[-1] == '-':  # imageio-ffmpeg trying an encoder\n"
        "    sys.exit(0)\n"
        "pathlib.Path(args[-1]).write_bytes(sys.stdin.buffer.read())\n"
        f"pathlib.Path({str(log)!r}).write_text(json.dumps(args))\n"
    )
    script.chmod(0o755)
    monkeypatch.setenv("IMAGEIO_FFMPEG_EXE", str(script))
    return log


def gif_frames(path: Path) -> list[np.ndarray]:
    with Image.open(path) as gif:
        return [np.asarray(f.convert("RGB")) for f in ImageSequence.Iterator(gif)]


def gif_ms(path: Path) -> int:
    """A GIF's playing time (Pillow merges equal neighbouring frames, adding their times)."""
    with Image.open(path) as gif:
        return sum(f.info["duration"] for f in ImageSequence.Iterator(gif))


def eval_video(capsys: pytest.CaptureFixture[str], run: Path, *extra: str) -> str:
    """Run `rltrain eval RUN --episodes 2 --video ...`; its output."""
    assert main(["eval", str(run), "--episodes", "2", "--video", *extra]) == 0
    out = capsys.readouterr().out
    assert "2 episodes, raw score mean" in out
    return out


def test_pong_game_view_is_the_rgb_screen(
    pong: Path, no_ffmpeg: None, capsys: pytest.CaptureFixture[str]
) -> None:
    out = eval_video(capsys, pong)
    video = pong / "eval-v0.gif"
    assert f"video: {video} (game view of the first game, seed 12345: raw score " in out
    assert "note: imageio-ffmpeg is not installed: wrote a GIF instead of an mp4" in out
    assert f"in {PONG_FRAMES // 4} steps)" in out
    frames = gif_frames(video)
    assert gif_ms(video) == 3400  # the first screen, then one a step: 51 at 15 frames/s
    assert {f.shape for f in frames} == {(210, 160, 3)}
    assert (frames[-1][..., 0] != frames[-1][..., 2]).any()  # colour, not gray
    assert not list(pong.glob(".*.part"))


def test_pong_agent_view_is_the_newest_84x84_frame(
    pong: Path, no_ffmpeg: None, capsys: pytest.CaptureFixture[str]
) -> None:
    out = eval_video(capsys, pong, "--video-view", "agent")
    video = pong / "eval-v0-agent.gif"
    assert f"video: {video} (agent view of the first game" in out
    frames = gif_frames(video)
    assert gif_ms(video) == 3400  # 51 frames at 15 frames/s (each 60 or 70 ms)
    assert {f.shape for f in frames} == {(84, 84, 3)}
    assert all((f[..., 0] == f[..., 1]).all() and (f[..., 1] == f[..., 2]).all() for f in frames)


def test_mp4_frames_are_piped_to_ffmpeg(
    pong: Path, fake_ffmpeg: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = eval_video(capsys, pong)
    video = pong / "eval-v0.mp4"
    assert f"video: {video} (game view" in out
    args = json.loads(fake_ffmpeg.read_text())
    assert args[args.index("-s") + 1] == "160x210"
    assert args[args.index("-pix_fmt") + 1] == "rgb24"
    assert args[args.index("-r") + 1] == "15"  # 60 Hz / frame skip 4: real time
    assert "libx264" in args and "yuv420p" in args and "-vf" not in args  # not rescaled
    assert video.stat().st_size == (PONG_FRAMES // 4 + 1) * 210 * 160 * 3


def test_real_ffmpeg_writes_an_h264_mp4(pong: Path, capsys: pytest.CaptureFixture[str]) -> None:
    imageio_ffmpeg = pytest.importorskip("imageio_ffmpeg")
    out = eval_video(capsys, pong)  # (no GIF note; the run's short games are said as cut)
    assert "GIF" not in out and "cut at env.max_episode_frames=200 (50 steps)" in out
    reader = imageio_ffmpeg.read_frames(str(pong / "eval-v0.mp4"))
    meta = next(reader)
    assert meta["codec"].startswith("h264") and meta["size"] == (160, 210)
    assert meta["fps"] == 15
    frames = [np.frombuffer(f, np.uint8).reshape(210, 160, 3) for f in reader]
    assert len(frames) == PONG_FRAMES // 4 + 1
    assert (frames[-1][..., 0].astype(int) - frames[-1][..., 2]).std() > 5  # colour


def test_gymnasium_game_view_is_render_and_odd_sizes_are_padded_for_mp4(
    tmp_path: Path, fake_ffmpeg: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = write_run(tmp_path / "painted", "cartpole_appo.yaml", id=PAINTED_ID)
    assert main(["eval", str(run), "--episodes", "1", "--video"]) == 0
    args = json.loads(fake_ffmpeg.read_text())
    assert args[args.index("-s") + 1] == "34x22"  # 33x21, one edge pixel added to each
    assert args[args.index("-r") + 1] == "10"  # the env's render_fps
    assert (run / "eval-v0.mp4").stat().st_size % (22 * 34 * 3) == 0
    hide_imageio_ffmpeg(monkeypatch)  # now no imageio-ffmpeg: a GIF at the screen's own size
    assert main(["eval", str(run), "--episodes", "1", "--video"]) == 0
    assert {f.shape for f in gif_frames(run / "eval-v0.gif")} == {(21, 33, 3)}


def test_an_env_made_by_a_factory_function_is_filmed_as_it_draws(
    tmp_path: Path, no_ffmpeg: None, capsys: pytest.CaptureFixture[str]
) -> None:
    run = write_run(tmp_path / "factory", "cartpole_appo.yaml", id=FACTORY_ID)
    assert main(["eval", str(run), "--episodes", "1", "--video"]) == 0
    assert "cannot draw" not in capsys.readouterr().out  # the game view, as asked
    assert {f.shape for f in gif_frames(run / "eval-v0.gif")} == {(21, 33, 3)}


def test_cartpole_views(
    tmp_path: Path, no_ffmpeg: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """Agent view: a bar chart of the 4 values. Game view: CartPole's own drawing, which
    needs pygame. Without it, the default falls back to the agent view and says why; asking
    for the game view explicitly is one line saying so, and no file."""
    run = write_run(tmp_path / "cartpole", "cartpole_appo.yaml")
    eval_video(capsys, run, "--video-view", "agent")
    assert {f.shape for f in gif_frames(run / "eval-v0-agent.gif")} == {(64, 64, 3)}
    if find_spec("pygame") is not None:
        eval_video(capsys, run)
        assert {f.shape for f in gif_frames(run / "eval-v0.gif")} == {(400, 600, 3)}
        return
    (run / "eval-v0-agent.gif").unlink()
    out = eval_video(capsys, run)
    assert "note: CartPole-v1 cannot draw its screen" in out and "pygame" in out
    assert "(agent view of the first game" in out and (run / "eval-v0-agent.gif").exists()
    assert main(["eval", str(run), "--episodes", "2", "--video", "--video-view", "game"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("rltrain: error: CartPole-v1 cannot draw its")
    assert "pygame" in err[0] and "--video-view agent" in err[0]
    assert not (run / "eval-v0.gif").exists()


@pytest.mark.parametrize(
    ("config", "deterministic"),
    [("cartpole_appo.yaml", False), ("cartpole_appo.yaml", True), ("pendulum_appo.yaml", False)],
)
def test_a_video_leaves_the_score_as_it_was_and_films_one_of_its_games(
    tmp_path: Path, no_ffmpeg: None, config: str, deterministic: bool
) -> None:
    """explore107: --video changed every game's score (10 episodes: 184.4 sampled, 154.1 with
    the video; 388.4 and 373.5 deterministic): the filmed game took env 0's place, and the
    others played in fewer envs of other seeds, drawing from one generator in another batch."""
    run = write_run(tmp_path / "run", config)  # (Pendulum: a Box policy, review87)
    plain = rltrain.evaluate(run, episodes=10, deterministic=deterministic)
    seen = rltrain.evaluate(
        run, episodes=10, deterministic=deterministic, video=True, video_view="agent"
    )
    assert (seen.returns, seen.lengths) == (plain.returns, plain.lengths)
    assert seen.filmed is not None  # one of the games scored (its sum in float64, theirs in
    score, steps = seen.filmed  # float32: Pendulum's -1186.5118277 against -1186.5118263)
    assert any(
        n == steps and r == pytest.approx(score, rel=1e-6)
        for r, n in zip(plain.returns, plain.lengths, strict=True)
    )
    assert len(set(plain.returns)) > 1 or deterministic  # (the games differ: a real check)


def test_filming_a_pygame_env_prints_nothing_on_stderr(tmp_path: Path) -> None:
    """CartPole draws with pygame: on a machine without a desktop session (no
    XDG_RUNTIME_DIR) SDL's video driver used to print `error: XDG_RUNTIME_DIR is invalid or
    not set in the environment.` on stderr (from C: the real process is run)."""
    import os
    import subprocess

    pytest.importorskip("pygame")
    run = write_run(tmp_path / "cartpole", "cartpole_appo.yaml")
    names = ("XDG_RUNTIME_DIR", "SDL_VIDEODRIVER", "SDL_AUDIODRIVER", "PYGAME_HIDE_SUPPORT_PROMPT")
    env = {k: v for k, v in os.environ.items() if k not in names}
    argv = [sys.executable, "-m", "rltrain.cli", "eval", str(run), "--episodes", "1", "--video"]
    proc = subprocess.run(
        [*argv, "--video-format", "gif"], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0 and proc.stderr == ""
    assert (
        proc.stdout.startswith("CartPole-v1, checkpoint") and "pygame community" not in proc.stdout
    )
    assert {f.shape for f in gif_frames(run / "eval-v0.gif")} == {(400, 600, 3)}


def test_drivers_the_user_chose_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from rltrain.envs.screen import headless_rendering

    monkeypatch.setenv("SDL_VIDEODRIVER", "x11")
    monkeypatch.delenv("SDL_AUDIODRIVER", raising=False)
    headless_rendering()
    assert os.environ["SDL_VIDEODRIVER"] == "x11" and os.environ["SDL_AUDIODRIVER"] == "dummy"


def test_mujoco_draws_through_egl_without_a_display(monkeypatch: pytest.MonkeyPatch) -> None:
    import os
    import sys

    from rltrain.envs.screen import headless_rendering

    for name in ("DISPLAY", "WAYLAND_DISPLAY", "MUJOCO_GL"):
        monkeypatch.delenv(name, raising=False)
    headless_rendering()
    assert os.environ.get("MUJOCO_GL") == ("egl" if sys.platform.startswith("linux") else None)
    monkeypatch.setenv("MUJOCO_GL", "osmesa")  # the user's choice is kept
    headless_rendering()
    assert os.environ["MUJOCO_GL"] == "osmesa"
    monkeypatch.delenv("MUJOCO_GL")
    monkeypatch.setenv("DISPLAY", ":0")  # a desktop: GLFW, MuJoCo's default
    headless_rendering()
    assert "MUJOCO_GL" not in os.environ


@pytest.mark.parametrize(
    ("env_id", "said"),
    [
        ("rltrain/Chain-v0", "rltrain/Chain-v0 cannot draw its screen"),
        # render() raising something other than a gymnasium error (MuJoCo's FatalError
        # without OpenGL): the same fallback, not a traceback
        ("rltrain_test/RenderRaises-v0", "cannot draw its screen (an OpenGL platform library"),
    ],
)
def test_an_env_without_a_screen_films_the_agent_view(
    tmp_path: Path, no_ffmpeg: None, capsys: pytest.CaptureFixture[str], env_id: str, said: str
) -> None:
    import custom_envs  # noqa: F401 - registers RenderRaises here, where eval runs (in-process)

    run = write_run(tmp_path / "r", "cartpole_appo.yaml", id=env_id)
    assert main(["eval", str(run), "--video"]) == 0
    out = capsys.readouterr().out
    assert said in out and "agent view" in out
    assert "use --video-view agent" not in out  # (explore96: advice it had followed already)
    assert (run / "eval-v0-agent.gif").exists()
    assert main(["eval", str(run), "--video", "--video-view", "game"]) == 2
    assert "--video-view agent" in capsys.readouterr().err


def test_agent_view_of_an_image_env_is_its_newest_image_in_colour() -> None:
    """A Gymnasium image env stacked 2 deep ([6, H, W]): the agent view is the newest RGB
    image, not one colour channel; Atari's is the newest gray frame."""
    from rltrain.envs.screen import make_recording_env
    from rltrain.rl.filming import frame_of

    cfg = EnvConfig(id="rltrain_test/ImageCorridor-v0", imports=("custom_envs",), frame_stack=2)
    env = make_recording_env(cfg, seed=0, render=False)
    env.reset()
    obs = env.step(1)[0]
    assert env.channels == 3 and obs.shape == (6, 40, 48)
    frame = frame_of(obs, env.channels)
    np.testing.assert_array_equal(frame, np.moveaxis(obs[3:], 0, -1))
    assert frame.shape == (40, 48, 3) and frame.max() == 255
    env.close()
    stack = np.arange(4 * 84 * 84, dtype=np.uint8).reshape(4, 84, 84)
    np.testing.assert_array_equal(frame_of(stack, 1), stack[-1])


def test_agent_view_of_other_observations_is_a_frame_ffmpeg_takes() -> None:
    """explore118: a float [H, W, C] image in [0, 1] was filmed as a black 64x4 strip, a user's
    stack [k, H, W, C] and a flattened Dict of 12,290 values as bars 196,640 pixels wide,
    which ffmpeg refused."""
    from rltrain.rl.filming import frame_of

    rgb = np.random.default_rng(0).random((64, 64, 3), dtype=np.float32)
    frame = frame_of(rgb, 3)
    assert frame.shape == (64, 64, 3) and frame.dtype == np.uint8
    np.testing.assert_array_equal(frame, (rgb * 255).astype(np.uint8))
    stack = np.zeros((4, 64, 64, 3), np.uint8)
    stack[-1] = 200
    assert frame_of(stack, 3).shape == (64, 64, 3) and frame_of(stack, 3).min() == 200
    flat = frame_of(np.zeros(12_290, np.float32))
    assert flat.shape == (111, 111) and flat.dtype == np.uint8  # (a square of cells)
    assert frame_of(np.zeros(4, np.float32)).shape == (64, 64)  # CartPole's bars, as before


@pytest.mark.parametrize(
    ("env_id", "full"),
    [("ALE/Pong-v5", False), ("ALE/Breakout-v5", False), ("ALE/Breakout-v5", True)],
)
def test_recording_env_plays_the_game_the_evaluation_plays(env_id: str, full: bool) -> None:
    """With sticky actions and random no-ops, as evaluations run: the recording env's
    observations, rewards and episode end equal those of the evaluation's env 0 at that seed
    (training's C++ pipeline), through a game's end (the twin's RGB screen came from another
    stream of draws before, and a video's game was not the one scored without it)."""
    cfg = EnvConfig(id=env_id, sticky_actions=0.25, noop_max=30, max_episode_frames=2400)
    cfg = dataclasses.replace(cfg, full_action_space=full)
    vec = make_env(cfg, seed=3, num_envs=1, evaluation=True)
    rec = AtariScreenEnv(cfg, seed=3)
    assert rec.num_actions == (18 if full else vec.num_actions)
    assert (rec.reset() == vec.reset()[0]).all()
    assert rec.screen().shape == (210, 160, 3)
    screens = {rec.screen().tobytes()}
    for t, action in enumerate(np.random.default_rng(0).integers(0, rec.num_actions, 700)):
        out = vec.step(np.array([action]))
        obs, raw, done = rec.step(int(action))
        assert (raw, done) == (out.reward[0], out.terminated[0] or out.truncated[0]), t
        assert (obs == out.obs[0]).all(), t  # (at the end: both the next game's first)
        screens.add(rec.screen().tobytes())
        if done:
            break
    assert done and len(screens) > 100  # Breakout ends by losing, Pong by the frame limit
    vec.close()
    rec.close()


def test_a_long_or_fast_gif_keeps_a_bounded_share_of_its_frames(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Frames wait in memory until the GIF is written, so there is a cap (and a note); above
    50 fps every k-th frame is kept, as browsers play delays under 20 ms at 100 ms."""
    from rltrain.video import GifWriter

    monkeypatch.setattr(GifWriter, "MAX_FRAMES", 3)
    frame = np.zeros((4, 6), np.uint8)
    with GifWriter(tmp_path / "long.gif", 15) as writer:
        for i in range(5):
            writer.add(frame + 40 * i)
    assert writer.note.startswith("the GIF holds the first 3 of 5 frames")
    assert Image.open(tmp_path / "long.gif").n_frames == 3
    with GifWriter(tmp_path / "fast.gif", 125) as writer:  # MuJoCo's Hopper: every 3rd frame
        for i in range(9):
            writer.add(frame + 20 * i)
    gif = Image.open(tmp_path / "fast.gif")
    assert gif.n_frames == 3 and gif_ms(tmp_path / "fast.gif") == 70 and writer.note == ""
    # (72 ms of play: each frame ends at the hundredth nearest its time, explore107)


def test_eval_of_episodes_that_never_end_is_a_one_line_error(tmp_path: Path) -> None:
    """A mean over the episodes that happened to end would mislead: CartPole cannot fall in
    3 steps."""
    from rltrain.config import load_config
    from rltrain.rl.config import TrainConfig
    from rltrain.rl.evaluate import evaluate

    run = write_run(tmp_path / "run", "cartpole_appo.yaml")
    cfg = load_config(TrainConfig, run / "config.yaml")
    with pytest.raises(EvalError, match=r"^0 of 2 episodes ended in 3 steps \(an env without"):
        evaluate(cfg, run, episodes=2, max_steps=3)
    with pytest.raises(EvalError, match=r"takes\); or allow more: --max-steps N\)$"):
        evaluate(cfg, run, episodes=2, max_steps=3)
    with pytest.raises(EvalError, match=r"or allow more: max_steps=N\)$"):
        rltrain.evaluate(run, episodes=2, max_steps=3)
    with pytest.raises(ConfigError, match=r"^max_steps=0: expected a whole number >= 1$"):
        rltrain.evaluate(run, max_steps=0)


def test_a_failed_eval_leaves_the_last_video_as_it_was(tmp_path: Path, no_ffmpeg: None) -> None:
    """A video is filmed under a draft name and takes its own only when the evaluation
    succeeds: a failed one (the filmed episode never ended) overwrote a good video. The cut
    episode is kept beside it, named so (it was deleted: what the agent did is what a user
    whose episodes never end wants to see)."""
    run = write_run(tmp_path / "run", "cartpole_appo.yaml")
    video = run / "eval-v0-agent.gif"
    good = rltrain.evaluate(run, episodes=1, video=True, video_view="agent")
    assert good.video == video and video.exists()
    before = video.read_bytes()
    cut = run / "eval-v0-agent-cut.gif"
    with pytest.raises(
        EvalError,
        match=f"^0 of 1 episodes ended in 3 steps .*; the filmed episode, cut there: {cut}$",
    ):
        rltrain.evaluate(run, episodes=1, video=True, video_view="agent", max_steps=3)
    assert video.read_bytes() == before
    assert sorted(p.name for p in run.iterdir() if "eval" in p.name) == [cut.name, video.name]


def test_a_video_flag_without_video_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--video-view and --video-format say how to film: without --video they did nothing."""
    run = write_run(tmp_path / "run", "cartpole_appo.yaml")
    assert main(["eval", str(run), "--video-format", "gif"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "rltrain: error: --video-format gif: says how to film the first episode; add --video, "
        "or leave it out"
    )
    with pytest.raises(EvalError, match=r'^video_view="agent": says how .* add video=True'):
        rltrain.evaluate(run, video_view="agent")


def test_an_atari_eval_that_never_ends_names_atari_keys() -> None:
    """env.kwargs.max_episode_steps is refused for Atari: the error names its frames' cap."""
    from rltrain.config import load_config
    from rltrain.rl.config import TrainConfig
    from rltrain.rl.eval_args import unended

    cfg = load_config(TrainConfig, ROOT / "configs" / "pong_appo.yaml")
    line = unended(cfg, 0, 1, 100, "cli")
    assert "env.max_episode_frames" in line and "max_episode_steps" not in line
    assert line.endswith(
        "(allow more steps: --max-steps N; a game here lasts up to 27,000 steps, the run's "
        "env.max_episode_frames / env.frame_skip)"
    )


def test_a_long_eval_shows_its_progress_and_max_steps_caps_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An env whose episodes never end ran 1,000,000 steps per env without a word: the
    progress line (after 2 s; here at once) says how far it is, --max-steps ends it."""
    from rltrain.progress import Paced
    from rltrain.rl import evaluate

    monkeypatch.setattr(evaluate, "Paced", lambda label: Paced(label, quiet=0.0, every=0.0))
    run = write_run(tmp_path / "run", "cartpole_appo.yaml")
    assert main(["eval", str(run), "--episodes", "2", "--max-steps", "5"]) == 2
    err = capsys.readouterr().err
    assert "[eval]   0% 0 of 2 episodes ended, step 1 of at most 5, 0s" in err
    assert err.strip().endswith("or allow more: --max-steps N)")
    # one game: no percentage, which stood at 0% to its end (explore107)
    assert main(["eval", str(run), "--episodes", "1", "--max-steps", "5"]) == 2
    assert "[eval] 0 of 1 episodes ended, step 1 of at most 5, 0s" in capsys.readouterr().err
    assert main(["eval", str(run), "--episodes", "2", "--max-steps", "0"]) == 2
    assert "--max-steps: expected a whole number >= 1, got 0" in capsys.readouterr().err


def test_another_image_size_is_named_not_said_only_not_to_fit(tmp_path: Path) -> None:
    """An Atari checkpoint of another env.image_size (or frame stack) was refused with "does
    not fit the model" alone; the key that differs is named, as for the others."""
    import dataclasses

    from rltrain.checkpoint import CheckpointError
    from rltrain.config import load_config, to_dict
    from rltrain.rl.config import TrainConfig
    from rltrain.rl.eval_args import check_played_as

    cfg = load_config(TrainConfig, ROOT / "configs" / "pong_appo.yaml")
    other = dataclasses.replace(cfg, env=dataclasses.replace(cfg.env, image_size=64))
    ckpt = tmp_path / "brk1" / "checkpoints" / "best.pt"
    with pytest.raises(CheckpointError, match="was trained with env.image_size=64, not the 84"):
        check_played_as(ckpt, to_dict(other), cfg, tmp_path / "img")


def test_an_mp4_of_frames_of_two_sizes_says_their_sizes_and_the_way_out(tmp_path: Path) -> None:
    """explore96: a render() of 35x65 then 33x65 said "frame of (36, 66, 3) in a video of
    (34, 66, 3)": the padded shapes, and no way out."""

    class Encoder:  # imageio_ffmpeg's write_frames: a generator taking frames
        @staticmethod
        def write_frames(*args: object, **kwargs: object) -> Iterator[None]:
            while True:
                yield

    writer = Mp4Writer(tmp_path / "v.mp4", 10, Encoder)  # type: ignore[arg-type]
    writer.add(np.zeros((35, 65, 3), np.uint8))
    with pytest.raises(VideoError) as e:
        writer.add(np.zeros((33, 65, 3), np.uint8))
    assert str(e.value) == (
        "render() gave a frame of 33x65 after frames of 35x65: an mp4's frames all have one "
        "size (a GIF fits them to the first's: video format gif)"
    )


def test_eval_prints_small_scores_to_three_significant_digits() -> None:
    """explore97: returns of -0.1125 printed as "min -0.1, max -0.1"."""
    from rltrain.cli import score

    assert [score(x) for x in (-21.0, 500.0, 0.0, -0.1125, 0.9999, 1e-5)] == [
        "-21.00",
        "500.00",
        "0.00",
        "-0.113",
        "1.00",
        "1e-05",
    ]


def test_an_evaluation_says_which_atari_games_the_time_limit_cut() -> None:
    """explore115: a run with env.max_episode_frames=1000 evaluated to "raw score mean 42.50"
    of games all cut at 250 steps, said as any score."""
    from rltrain.rl.config import StopConfig, TrainConfig
    from rltrain.rl.eval_args import cut_games

    cfg = TrainConfig(
        env=EnvConfig(id="ALE/SpaceInvaders-v5", max_episode_frames=1000),
        stop=StopConfig(max_seconds=1),
    )
    assert cut_games(cfg, [250, 180, 250]) == (
        "2 of 3 games cut at env.max_episode_frames=1,000 (250 steps): their scores are of "
        "part of a game"
    )
    assert cut_games(cfg, [180, 249]) == ""
    cartpole = TrainConfig(env=EnvConfig(id="CartPole-v1"), stop=StopConfig(max_seconds=1))
    assert cut_games(cartpole, [500, 500]) == ""  # (its time limit is the goal)
