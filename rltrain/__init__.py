"""rltrain: distributed RL and supervised training through a sharded parameter server.

The Python API (:mod:`rltrain.api`), imported on first use so that ``import rltrain`` stays
light for Ray's worker processes::

    import rltrain
    run = rltrain.train("configs/cartpole_appo.yaml", env__id="Acrobot-v1")
"""

from typing import Any

__version__ = "0.1.0"

API = (
    "Config",
    "RunResult",
    "BenchResult",
    "train",
    "bench",
    "evaluate",
    "load_policy",
    "make_env",
    "TrainFailed",
    "BenchFailed",
)
__all__ = ["__version__", *API]


def __getattr__(name: str) -> Any:
    if name in API:
        from rltrain import api

        return getattr(api, name)
    raise AttributeError(f"module 'rltrain' has no attribute {name!r}")
