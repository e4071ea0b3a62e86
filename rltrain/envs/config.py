"""Config of the environments an actor runs: which game, how many copies, and the Atari protocol.

The Atari defaults are the standard protocol: the frame pipeline of Mnih et al. (2015) (frame
skip 4 with a max over the last two frames, 84x84 grayscale, a stack of 4, up to 30 no-op starts,
reward clipping to the sign for training) with the sticky actions of Machado et al. (2018)
(repeat_action_probability 0.25, the ALE v5 default; 0 for the v4 ids) instead of
deterministic emulation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rltrain.config import spec

ACTION_MAPS = ("affine", "tanh", "clip")
"""``env.action_map``'s values (:meth:`rltrain.envs.base.ActionSpace.to_env`)."""


@dataclass(frozen=True)
class EnvConfig:
    """The environments of one actor: a vector of `num_envs` copies of the game `id`."""

    id: str = "CartPole-v1"
    """Gymnasium id (e.g. CartPole-v1, rltrain/Chain-v0), or an Atari game as ALE/<Game>-v5
    (e.g. ALE/Pong-v5) or <Game>NoFrameskip-v4, which run in ale-py's C++ vector env with the
    protocol below (the NoFrameskip ids without env.wrappers: with them, a Gymnasium env).
    Gymnasium's module:EnvId form (mypkg.envs:MyEnv-v0) adds the module to imports."""
    imports: tuple[str, ...] = field(default=(), metadata={"derived": True})
    """The run's top-level ``imports`` (a train config sets it; ``env.imports`` in a config or
    ``--set`` is read as ``imports``): imported before an env is made."""
    registration: bytes | None = field(
        default=None, metadata={"derived": True}, repr=False, compare=False
    )
    """The id's ``gymnasium.register`` in the process that started the run, pickled for the
    processes that never ran it (:func:`rltrain.envs.user.ship_registration`)."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of gymnasium.make(id, ...) for each env, e.g. {max_episode_steps: 200};
    for ALE/<Game>-v5 ids only thread_affinity_offset of ale-py's AtariVectorEnv (the rest of
    its arguments are the protocol: the env.* fields). ``--set env.kwargs.KEY=V`` sets one key
    beside the file's; ``--set env.kwargs={...}`` replaces them all (``{}``: none)."""
    wrappers: tuple[str, ...] = ()
    """Gymnasium wrappers applied to each env in order, as module:Class (or any callable
    env -> env), e.g. [gymnasium.wrappers:ClipAction], or with keyword arguments (Python
    literals) as module:Class(name=value, ...), quoted in YAML, e.g.
    ["gymnasium.wrappers:RescaleAction(min_action=-1, max_action=1)"]. Gymnasium ids only.
    Observations that are not a Box after them are flattened into one float vector (discrete
    parts one-hot)."""
    num_envs: int = field(default=8, metadata=spec(ge=1))
    """Environments per actor, stepped together as one vector."""
    frame_skip: int = field(default=4, metadata=spec(ge=1))
    """Atari: emulator frames per agent step (the action is repeated; the last two frames are
    max-pooled, Mnih et al. 2015)."""
    frame_stack: int = field(default=4, metadata=spec(ge=1))
    """Frames stacked into one observation, so that the network sees motion: Atari's processed
    frames; for a Gymnasium image env ([H, W, C] or [C, H, W] uint8 of 1 or 3 channels, e.g.
    CarRacing) its last frame_stack images concatenated on the channel axis ([frame_stack x C,
    H, W]). Vector observations, and images of other channel counts (an env's own stack), are
    not stacked. 1 = a single frame."""
    noop_max: int = field(default=30, metadata=spec(ge=0))
    """Atari: a random number (up to this) of no-op actions at each episode start (0 = none)."""
    sticky_actions: float | None = field(default=None, metadata=spec(ge=0, lt=1))
    """Atari: probability that the emulator repeats the previous action instead of the chosen
    one (repeat_action_probability, Machado et al. 2018). null: the id's own, written into
    the run's config.yaml: 0.25 for ALE/<Game>-v5 (and the v0 ids), 0 for <Game>NoFrameskip-v4.
    0 is the v4 ids' protocol, and EnvPool's default even for its "-v5" ids, so of most
    published fast-Pong results (rl_games, CleanRL's EnvPool runs)."""
    full_action_space: bool = False
    """Atari: ale-py's full action set (Machado et al. 2018's recommendation for comparisons
    across games): all 18 joystick actions in all but a few games (Skiing and LostLuggage: 9)
    instead of the game's minimal set (Pong: 6, Breakout: 4, the v5 ids' default). Kept on
    resume: it sizes the policy's head."""
    action_map: str = field(default="affine", metadata=spec(choices=ACTION_MAPS))
    """Box actions: how the policy's Gaussian sample u reaches the env, on the dimensions with
    finite bounds. affine: the policy acts in [-1, 1], mapped linearly onto [low, high] (u
    clipped to [-1, 1] first; RLlib's normalize_actions); tanh: low + (tanh(u) + 1) (high -
    low) / 2 (SAC's squashing, its log-probability with the change of variables); clip: u
    clipped to [low, high] (what runs made before this key existed do: their config.yaml
    lacks it and reads as clip). Unbounded dimensions take u. Discrete actions: unused."""
    fire_reset: bool = True
    """Atari: press FIRE at each game's start, in the games whose action set has it: the
    DQN-era protocol (Mnih et al. 2015's code, OpenAI Baselines' FireResetEnv, SB3, CleanRL),
    which most published Atari numbers use. false: Machado et al. (2018)'s advice, the agent
    learns to start a game itself. At a game's start only: with episodic_life the agent serves
    after a lost life itself, where Baselines' and SB3's wrappers press FIRE again."""
    clip_rewards: bool = True
    """Atari, training only: reward = sign(game reward). Evaluation and the reported episode
    returns always use the raw game score."""
    episodic_life: bool = False
    """Atari, training only: a lost life is a terminal for the learner while the game goes on;
    episode returns still cover the whole game (until game over). No FIRE follows a lost life
    (fire_reset is at a game's start): in Breakout the agent learns to serve again."""
    image_size: int = field(default=84, metadata=spec(ge=8))
    """Atari: observation frames are resized to image_size x image_size (grayscale). Under 36
    the Nature CNN cannot take them, and model.kind=auto gives the MLP (said at the start)."""
    max_episode_frames: int = field(default=108000, metadata=spec(ge=1))
    """Atari: emulator frames after which an episode is truncated (108000 = 30 minutes of play,
    27000 agent steps at frame_skip 4). Gymnasium ids keep their own registered time limit."""
    groups: int = field(default=0, metadata=spec(ge=0, auto=True))
    """Groups an actor steps its num_envs in, in turn: while one group's games run in ale-py's
    C++ threads the policy acts on the next (double-buffered sampling, as Sample Factory).
    0 or auto: 2 for Atari when each actor has 2 cores or more or its policy runs in the policy
    worker (runtime.inference=server), else 1 (an actor that holds every core gains nothing by
    overlapping); 1 for Gymnasium ids (they step in the actor's own thread, so there is
    nothing to overlap). Auto is capped at num_envs. The envs are split as evenly as they
    go; more groups than num_envs are refused."""
    num_threads: int = field(default=0, metadata=spec(ge=0, auto=True))
    """Atari: C++ threads of the vector env (0 or auto: one per env, capped by the number of
    cores)."""

    def __post_init__(self) -> None:
        # numpy scalars (a sweep's np.arange) become plain values: config.yaml is plain YAML
        plain = {k: _plain(v) for k, v in self.kwargs.items()}
        object.__setattr__(self, "kwargs", plain)
        if self.max_episode_frames < self.frame_skip:  # every step its own episode: no score
            raise ValueError(
                f"max_episode_frames={self.max_episode_frames} is below frame_skip="
                f"{self.frame_skip}: every agent step would end its episode; allowed: "
                f"{self.frame_skip} or more (108000 = 30 minutes of play)"
            )


def _plain(value: Any) -> Any:
    if getattr(value, "shape", None) == () and hasattr(value, "item"):
        return value.item()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_plain(v) for v in value)
    return value
