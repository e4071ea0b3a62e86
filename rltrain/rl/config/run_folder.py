"""A run folder's config.yaml, read by the rltrain of today: `rltrain eval`, `--resume`,
`rltrain plot` and the Python API load a run's config from here (:func:`load_run_config`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rltrain.config import ConfigError, from_dict, merge, moved_keys, parse_overrides, read_yaml
from rltrain.envs.user import import_listed
from rltrain.ps.rules import rule_names
from rltrain.rl.algos import algo_names, algo_spec
from rltrain.rl.config.train import TrainConfig

OLDER_RUNS: dict[str, object] = {
    "env.action_map": "clip",
    "dqn.eval_epsilon": 0.0,
    "env.fire_reset": True,
    "dqn.target_tau": 1.0,
}
"""What a run folder's config.yaml means by a key an older rltrain did not write
(:func:`run_yaml`): Box samples were clipped to the bounds; dqn evaluated greedily; Atari
pressed FIRE after each reset; dqn's target network was a copy."""


def run_yaml(path: str | Path) -> dict[str, Any]:
    """A run folder's config.yaml as a dict, in this rltrain's key names; a key of OLDER_RUNS
    it lacks at what the older rltrain that wrote it acted by (it resumes and plays as it was
    trained), and a ``server.k`` that its rule never read (sync, async; refused since) at 0."""
    data = moved_keys(TrainConfig, read_yaml(path))
    for dotted_key, value in OLDER_RUNS.items():
        section, key = dotted_key.split(".")
        if isinstance(part := data.get(section), Mapping) and key not in part:
            data[section] = {**part, key: value}
    if isinstance(s := data.get("server"), Mapping) and s.get("rule") in ("sync", "async"):
        data["server"] = {**s, "k": 0}
    return workers_targeted(data)


def workers_targeted(data: dict[str, Any]) -> dict[str, Any]:
    """A config whose a3c/a2c/ppo workers an older rltrain's fault events targeted as
    ``actor`` (their role until session 84, and the default target), as ``worker``: such a
    run folder was refused by --resume, eval and plot's grouping (review 84)."""
    algo, faults = data.get("algo"), data.get("faults")
    name = algo.get("name") if isinstance(algo, Mapping) else None
    events = faults.get("events") if isinstance(faults, Mapping) else None
    if not isinstance(name, str) or name not in algo_names() or not isinstance(events, list):
        return data
    assert isinstance(faults, Mapping)  # (events came from it)
    if algo_spec(name).split:  # (impala, appo, dqn: actors of their own)
        return data
    moved = [
        {**e, "target": "worker"}
        if isinstance(e, Mapping) and e.get("target", "actor") == "actor"
        else e
        for e in events
    ]
    return {**data, "faults": {**faults, "events": moved}}


def load_run_config(
    cls: type[TrainConfig], path: str | Path, overrides: Sequence[str] = ()
) -> TrainConfig:
    """A run folder's config.yaml (:func:`run_yaml`) plus ``--set`` overrides, validated (as
    :func:`rltrain.config.load_config`'s signature, ``cls`` TrainConfig)."""
    over = parse_overrides(overrides, TrainConfig)
    data = run_yaml(path)
    if not data:  # (every config.yaml a run writes holds every key)
        raise ConfigError(f"{path}: empty; a run's config.yaml holds its whole config")
    merged = merge(data, over, TrainConfig)
    import_listed(merged)  # (what registers its algorithm, before that is looked for)
    name = algo.get("name") if isinstance(algo := merged.get("algo"), Mapping) else None
    if isinstance(name, str) and name not in algo_names():  # (a script's: in no module)
        raise ConfigError(
            f"{path}: algo.name={name!r} is none of this rltrain's ({', '.join(algo_names())}): "
            "your own? name the module that registers it in imports (--set imports=[module])"
        )
    rule = srv.get("rule") if isinstance(srv := merged.get("server"), Mapping) else None
    if isinstance(rule, str) and rule not in rule_names():  # (explore108: as the algorithm's)
        raise ConfigError(
            f"{path}: server.rule={rule!r} is none of this rltrain's ({', '.join(rule_names())})"
            ": your own? name the module that registers it in imports (--set imports=[module]), "
            "or register it before rltrain.evaluate / load_policy (a script's)"
        )
    try:
        return from_dict(TrainConfig, merged)
    except ConfigError as e:  # a value edited in the run's file: the file is named too
        if not over:
            e.args = (f"{path}: {e}",)
        raise
