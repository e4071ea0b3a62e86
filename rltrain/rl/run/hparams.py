"""TensorBoard's HPARAMS tab for ``rltrain train``: each run's settings beside its metrics, so
that runs of other settings (sync against async, another learning rate, seeds) compare in one
table and one parallel-coordinates view (explore110: no run wrote any).

The settings are the config keys whose values differ from rltrain's defaults (what the config
file and ``--set`` chose: a Pong run has about 40), and always the env, the algorithm, the
update rule the server ran (ppo's barrier: sync whatever server.rule says), the actors and
the seed. Each run writes only its own settings (a session-start summary): TensorBoard then
lists the union of every run's keys as columns, a blank where a run kept the default, and
every scalar as a metric. An experiment summary per run would name the columns, and
TensorBoard takes the first it finds for all runs, hiding the keys only other runs set
(review88, explore111: async, scale and drop runs read as one rule).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from torch.utils.tensorboard.summary import hparams

from rltrain.config import dump_yaml, to_dict
from rltrain.config_keys import flat_keys
from rltrain.rl.config import server_settings

ALWAYS = ("env.id", "algo.name", "server.rule", "actors", "learners", "seed")
"""Keys every run shows, default or not: what tells runs apart at a glance."""


def defaults_of(cfg: Any) -> Any:
    """``cfg`` with every field at its default (no checks run: a config without a stop is
    no run, but its defaults are what a key is compared with)."""
    out = object.__new__(type(cfg))
    for f in dataclasses.fields(cfg):
        if f.default is not dataclasses.MISSING:
            value = f.default
        elif f.default_factory is not dataclasses.MISSING:
            value = f.default_factory()
        else:
            value = getattr(cfg, f.name)
        object.__setattr__(out, f.name, value)
    return out


def hparam_values(cfg: Any) -> dict[str, bool | int | float | str]:
    """The run's settings for the table: keys that differ from the defaults, and
    :data:`ALWAYS`; values TensorBoard takes (a list or None as its text)."""
    mine, base = flat_keys(to_dict(cfg)), flat_keys(to_dict(defaults_of(cfg)))
    mine["server.rule"] = server_settings(cfg).rule  # (the rule run: ppo's is a barrier)
    keys = [k for k in mine if k in ALWAYS or base.get(k, object()) != mine[k]]
    return {k: _value(mine[k]) for k in sorted(keys)}


def _value(v: Any) -> int | float | str:
    """A number as it is; anything else (a bool: TensorBoard shows 0 or 1) as its text."""
    return v if isinstance(v, int | float) and not isinstance(v, bool) else str(v)


def write_settings(writer: Any, cfg: Any, protocol: dict[str, Any], step: int = 0) -> None:
    """A session's settings into ``writer`` at its first ``step`` (each session's: a resume's
    ``--set`` may have changed one, and one step for all hid the earlier sessions' in the
    TEXT tab: explore110): the config as text (``config``), the env's protocol as a table
    (``env/protocol``), and the HPARAMS tab's settings (TensorBoard keeps the first
    session's: one summary per tag)."""
    writer.add_text("config", "```\n" + dump_yaml(cfg) + "```", step)
    proto = "\n".join(f"| {k} | {v} |" for k, v in protocol.items())
    writer.add_text("env/protocol", "| key | value |\n|---|---|\n" + proto, step)
    _, start, _ = hparams(hparam_values(cfg), {})  # (no experiment: see the module's note)
    writer.file_writer.add_summary(start)
