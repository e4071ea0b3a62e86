"""What rltrain says of an env's Atari protocol: the run's first lines' ``env:`` line, and
the marks in config.yaml of the Atari-only keys an env that is not Atari never reads."""

from __future__ import annotations

from rltrain.envs.atari import ATARI_ONLY, is_atari, sticky_actions
from rltrain.envs.config import EnvConfig


def mark_unused(text: str, cfg: EnvConfig) -> str:
    """config.yaml's ``text`` with each Atari-only key of its ``env:`` section marked unused
    where the env is not run as Atari (explore110: a CartPole run's file said ``clip_rewards:
    true``, and a reader took its rewards for clipped). The keys stay, as written: a comment
    changes nothing a --resume reads."""
    if is_atari(cfg.id, cfg.wrappers):
        return text
    lines, inside = [], False
    for line in text.splitlines():
        if not line.startswith(" "):
            inside = line == "env:"
        elif inside and not line.startswith("   ") and line.split(":")[0].strip() in ATARI_ONLY:
            line = f"{line.split('  # ')[0]}  # Atari only: unused by {cfg.id}"  # (once)
        lines.append(line)
    return "\n".join(lines) + "\n"


def protocol_line(cfg: EnvConfig) -> str:
    """The run's first lines' ``env:`` line for an Atari id: the protocol it plays under, which
    a v4 id and a v5 id (sticky actions), or env.* keys, change (explore115: only config.yaml
    and TensorBoard said it); "" for other envs."""
    if not is_atari(cfg.id, cfg.wrappers):
        return ""
    life = "ends a" if cfg.episodic_life else "ends no"
    clip = "clipped to [-1, 1]" if cfg.clip_rewards else "raw"
    acts = "all 18 actions" if cfg.full_action_space else "the game's own actions"
    return (
        f"env: {cfg.id} under the Atari protocol: sticky actions {sticky_actions(cfg):g}, frame "
        f"skip {cfg.frame_skip} (max-pooled), {cfg.frame_stack} stacked {cfg.image_size}x"
        f"{cfg.image_size} grayscale frames, up to {cfg.noop_max} no-op starts, "
        f"{'FIRE at each reset, ' if cfg.fire_reset else ''}"
        f"{acts}, games cut at {cfg.max_episode_frames:,} frames; training rewards {clip}, "
        f"a lost life {life} training episode (evaluations play whole games at the raw score)"
    )
