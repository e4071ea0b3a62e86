"""The process runtime (``runtime.backend: process``, what ``auto`` picks on one machine).

Actors, workers, the policy worker, the evaluator and the one learner of impala and appo run
as OS processes, forked by a forkserver that has imported torch, the envs and the algorithms
once. The shards live in that learner's process (:mod:`~rltrain.runtime.process.hosted`);
otherwise (several learners, dqn's) the shards, the replay and the learners (as threads,
:mod:`rltrain.runtime.local`) stay in the trainer's. Sample Factory's layout for one machine
(Petrenko et al. 2020). Calls, results and server requests are pickled small over two pipes
per child; their tensors go through reused shared-memory slots
(:mod:`~rltrain.runtime.process.shm`).

Faults are those of Ray's runtime, with the same counters and messages: a dead child is
restarted with its constructor's arguments (``faults.max_restarts``), its call in flight
fails with :class:`~rltrain.faults.ProcessLost`, and the pool reports it back once it is up;
``faults.events`` kill and pause the children. A fault aimed at a learner thread, or at a
shard of the trainer's, is skipped and said so. Imports neither Ray nor what starts it.

Its modules: :mod:`~rltrain.runtime.process.remote` (the trainer's side: the names of the
contract), :mod:`~rltrain.runtime.process.child` (a child's side),
:mod:`~rltrain.runtime.process.forkstart` and :mod:`~rltrain.runtime.process.forkserver` (the
forkserver, started before torch is imported), :mod:`~rltrain.runtime.process.shm`,
:mod:`~rltrain.runtime.process.hosted` (the learner's process with its shards),
:mod:`~rltrain.runtime.process.faults` and :mod:`~rltrain.runtime.process.stages`.
"""

from __future__ import annotations

import importlib
from typing import Any

# The names load on first use (PEP 562): `rltrain train` imports forkstart, in this package,
# before torch, to start the forkserver beside its own imports.
HOME = f"{__name__}.remote"


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(HOME), name)
    globals()[name] = value  # once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *dir(importlib.import_module(HOME))})
