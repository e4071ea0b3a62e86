"""A learner and the server's shards in one process (docs/architecture.md, "Runtimes").

On one machine with one learner (impala, appo), the process runtime runs the learner as a
process of its own, ``rltrain: learner 0``, and the shards live there with it: the model's
parameters are views of the shard's buffer (:meth:`rltrain.rl.learner.Learner.bind`; a CNN
trained channels-last, on a CPU or in bf16, is copied in instead), so a push is the
optimizer's step and a pull copies nothing, and nothing else in the run shares the learner's
interpreter (its GIL) or its CUDA context. The trainer's process only orchestrates: it
reaches the shards through :meth:`LearnerHost.shard` (the runtime's
:class:`~rltrain.runtime.process.HostedServer`), for the actors' pulls, checkpoints and the
guard's look at their health.

The process dies with its shards. The runtime starts it again; its shards then refuse pushes
and pulls (:meth:`restarted`) until the guard restores them from the last restore point,
counting the updates lost, as it restores a lost shard of Ray's (DistBelief's recovery).

Plain Python: the tests build it in one process.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

from rltrain.envs import ActionSpace
from rltrain.faults import ShardFenced
from rltrain.ps.config import OptimizerConfig, ServerConfig
from rltrain.ps.server import LocalServer
from rltrain.records import Params
from rltrain.rl.config import TrainConfig
from rltrain.rl.env_spec import EnvSpec
from rltrain.rl.learner import Learner
from rltrain.rl.obs_slots import ObsSlots
from rltrain.rl.rollout import Rollout, WorkStats

ServerArgs = tuple[
    torch.Tensor, OptimizerConfig, ServerConfig, int, bool, Sequence[int] | None, str
]
""":class:`~rltrain.ps.server.LocalServer`'s arguments: init, optimizer, rule, pushers,
record, sizes, device."""


class LearnerHost:
    """One :class:`Learner` beside the server's shards (a :class:`LocalServer` of its own)."""

    FENCE_WAIT_S = 120.0  # how long a restarted learner waits for the guard's restore

    def __init__(
        self,
        server: ServerArgs,
        cfg: TrainConfig,
        obs_shape: tuple[int, ...],
        actions: ActionSpace | int,
        gpu: bool = False,
        learner_id: int = 0,
        obs_slots: ObsSlots | None = None,
    ) -> None:
        """``obs_slots``: where the rollouts' frames wait (the actors write them there)."""
        self.learner = Learner(cfg, obs_shape, actions, gpu, learner_id)
        self.server = LocalServer(*server)
        self.obs_slots = obs_slots
        self.built = [s.state_dict() for s in self.server.shards]  # a fresh run's restore point
        # every learn on one thread: the process answers its calls on a pool of threads, and
        # glibc gives each thread that allocates its own heap (arena), which keeps what the
        # largest pass on that thread needed: learns on whichever thread was free made the
        # process grow arena by arena over a long run
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="rltrain-learn")

    def learn(self, progress: float, *rollouts: Rollout) -> WorkStats:
        """:meth:`Learner.learn` on the shards beside it (after their restore, if this
        process replaced one that died)."""
        self._await_restore()
        if self.obs_slots is not None:  # the frames where the actors wrote them: no copy
            rollouts = tuple(self.obs_slots.attach(r) for r in rollouts)
        return self._thread.submit(self.learner.learn, self.server, progress, *rollouts).result()

    def interrupt(self) -> None:
        """:meth:`Learner.interrupt`, from a thread that answers the trainer beside the learn."""
        self.learner.interrupt()

    def shard(self, index: int, method: str, *args: Any) -> Any:
        """``method(*args)`` on shard ``index``, for another process: parameters come back on
        the CPU (a GPU tensor does not cross processes as a copy)."""
        out = getattr(self.server.shards[index], method)(*args)
        return _on_cpu(out)

    def health(self) -> list[tuple[int, bool]]:
        """Every shard's (version, fenced), in one request (the guard's poll)."""
        return [s.health() for s in self.server.shards]

    def restarted(self) -> None:
        """This process replaces one that died: the shards hold the initial parameters, not
        the run's, and refuse pushes and pulls until the guard restores them."""
        for s in self.server.shards:
            s.fence()

    def rebuilt(self, restore_epoch: int | None = None) -> None:
        """Restore the shards to the state they were built in (the restore point of a run's
        start, which the trainer reads from no process), starting ``restore_epoch``."""
        for shard, state in zip(self.server.shards, self.built, strict=True):
            shard.load_state_dict(state, restore_epoch)

    def _await_restore(self) -> None:
        deadline = time.monotonic() + self.FENCE_WAIT_S
        while any(fenced for _, fenced in self.health()):
            if time.monotonic() > deadline:
                raise ShardFenced(
                    f"the shards of learner {self.learner.learner_id} were not restored within "
                    f"{self.FENCE_WAIT_S:.0f}s of its restart"
                )
            time.sleep(0.02)


def _on_cpu(out: Any) -> Any:
    """A shard's answer with its parameters on the CPU (pull: Params or None; exchange:
    (PushResult, Params))."""
    if isinstance(out, Params) and out.values.device.type != "cpu":
        return dataclasses.replace(out, values=out.values.cpu())
    if isinstance(out, tuple):
        return tuple(_on_cpu(o) for o in out)
    return out


def learner_process(
    spawn: Callable[..., list[Any]],
    cfg: TrainConfig,
    spec: EnvSpec,
    gpu: bool,
    obs_slots: ObsSlots | None,
) -> Callable[[ServerArgs], Any]:
    """The process runtime's ``start_server(host=...)``: given the shards' arguments, start
    the one learner as a process that holds them (``spawn``: the trainer's, which makes it
    restartable), its threads answering the shard calls beside its ``learn``."""
    learner = (cfg, spec.obs_shape, spec.actions, gpu)
    concurrency = 4 + cfg.actors  # the trainer's calls and each actor's pull at once

    def start(server: ServerArgs) -> Any:
        (remote,) = spawn(
            "learner",
            LearnerHost,
            lambda i: (server, *learner, i, obs_slots),
            own_process=True,
            max_concurrency=concurrency,
        )
        return remote

    return start
