"""The configuration of ``rltrain train``, in one place: the run's sections and their checks
and the checks across them (:mod:`.train`), a run folder's config.yaml (:mod:`.run_folder`),
the sections of the network, schedules, stop, checkpoints and evaluations (:mod:`.sections`).
The algorithms' own sections (``ppo``, ``impala``, ``dqn``, ``replay``, and those of
algorithms a user registers) are defined beside their losses in :mod:`rltrain.rl.algos`; a
config reads them from there.
"""

from rltrain.rl.algos import AlgoConfig
from rltrain.rl.algos.dqn import DQNConfig, ReplayConfig
from rltrain.rl.algos.impala import ImpalaConfig
from rltrain.rl.algos.ppo import PPOConfig
from rltrain.rl.config.run_folder import load_run_config, run_yaml
from rltrain.rl.config.sections import (
    CheckpointConfig,
    EvalConfig,
    ModelConfig,
    NormalizeConfig,
    ScheduleConfig,
    StopConfig,
)
from rltrain.rl.config.train import (
    BENCH_ONLY_SERVER,
    TrainConfig,
    server_settings,
    waits_at_barrier,
)

__all__ = [
    "BENCH_ONLY_SERVER",
    "AlgoConfig",
    "CheckpointConfig",
    "DQNConfig",
    "EvalConfig",
    "ImpalaConfig",
    "ModelConfig",
    "NormalizeConfig",
    "PPOConfig",
    "ReplayConfig",
    "ScheduleConfig",
    "StopConfig",
    "TrainConfig",
    "load_run_config",
    "run_yaml",
    "server_settings",
    "waits_at_barrier",
]
