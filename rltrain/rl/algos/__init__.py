"""The algorithms and their mathematics.

* :mod:`~rltrain.rl.algos.base`: what an algorithm is (its spec, loss and estimator
  interfaces, the ``algo`` section) and the registry;
* one module per family, each with its loss, its config sections and its registration:
  :mod:`~rltrain.rl.algos.a3c` (a3c, a2c), :mod:`~rltrain.rl.algos.impala`,
  :mod:`~rltrain.rl.algos.ppo` (ppo, appo), :mod:`~rltrain.rl.algos.dqn` (Gorila);
* the tensor functions they are made of: :mod:`~rltrain.rl.algos.losses`,
  :mod:`~rltrain.rl.algos.estimators` (GAE, V-trace, n-step returns),
  :mod:`~rltrain.rl.algos.distributions` and :mod:`~rltrain.rl.algos.models`.

Importing this package registers the families (torch-free: see :mod:`.base`).
"""

from rltrain.rl.algos import a3c, dqn, impala, ppo  # noqa: F401  (each registers itself)
from rltrain.rl.algos.base import (
    BUILT_IN,
    AlgoConfig,
    AlgoSpec,
    LossBatch,
    PolicyLoss,
    RunSettings,
    ValueEstimator,
    algo_names,
    algo_spec,
    register_algo,
    section_types,
    unregister_algo,
)

__all__ = [
    "BUILT_IN",
    "AlgoConfig",
    "AlgoSpec",
    "LossBatch",
    "PolicyLoss",
    "RunSettings",
    "ValueEstimator",
    "algo_names",
    "algo_spec",
    "register_algo",
    "section_types",
    "unregister_algo",
]
