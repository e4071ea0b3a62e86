"""rltrain: distributed RL and supervised training through a sharded parameter server.

The Python API (:mod:`rltrain.api`), imported on first use so that ``import rltrain`` stays
light for Ray's worker processes::

    import rltrain
    run = rltrain.train("configs/cartpole_appo.yaml", env__id="Acrobot-v1")
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the API's own types for a type checker (the lazy import below hid them:
    # `rltrain.trian(...)` passed mypy --strict, explore102)
    from rltrain.api import (
        BenchFailed,
        BenchResult,
        Config,
        PlotResult,
        RunResult,
        TrainFailed,
        bench,
        evaluate,
        load_policy,
        make_env,
        plot_runs,
        train,
    )

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "Config",
    "RunResult",
    "BenchResult",
    "train",
    "bench",
    "evaluate",
    "load_policy",
    "make_env",
    "plot_runs",
    "PlotResult",
    "TrainFailed",
    "BenchFailed",
]
API = tuple(__all__[1:])
"""The API's names, imported from :mod:`rltrain.api` on first use."""


if not TYPE_CHECKING:  # (a type checker sees the imports above, and no other names)

    def __getattr__(name: str) -> Any:
        if name in API:
            from rltrain.signals import interrupts_held

            with interrupts_held():  # (the first use imports torch: seconds, Ctrl-C likely)
                import torch._dynamo  # noqa: F401  (torch.optim's first step imports it)

                from rltrain import api
            globals().update({n: getattr(api, n) for n in API})  # (imported once: no more here)
            return getattr(api, name)
        raise AttributeError(f"module 'rltrain' has no attribute {name!r}")

    def __dir__() -> list[str]:  # (explore106: tab completion hid train and bench)
        return sorted({*globals(), *API})
