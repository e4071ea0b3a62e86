"""One policy that acts for every actor: their observations batched into one forward pass.

With ``runtime.inference: server`` (``auto`` on a GPU learner's machine), the actors of
impala and appo step their environments only. Each group of observations goes to the
*policy worker*, a process of its own on the process runtime (a thread on the thread
runtime), which runs the policy on its device for whatever observations are waiting, from
every actor at once (IMPALA's dynamic batching, Espeholt et al. 2018; Sample Factory's policy
workers, Petrenko et al. 2020).

Actors and the policy worker meet in :class:`ActSlots`: shared tensors allocated once, one
slot per actor, and semaphores. An actor posts a request for its observations; the policy
worker writes the actions, the behaviour logits and the version into the slot and posts the
actor's reply. Nothing is pickled, so an actor's step waits for the forward pass, not for
pickling its request and the reply. Where the run's rollouts are built in shared memory
(:class:`rltrain.rl.obs_slots.ObsSlots`, given to the slots as ``frames``), the actor has
already written the observations there, where the learner will read them: the request
names their place and the policy worker reads them in place, so each frame crosses the
processes once (issue 36). Otherwise the actor copies them into its slot.

The policy takes the server's parameters by version: once a learner's batch of updates has
been applied since those it holds (``ppo.epochs`` x ``ppo.minibatches`` versions for
ppo/appo, one for impala), which is as far as an actor's own copy lags with
``server.n_fetch: 1``. Pulling at every version would copy the 6.8 MB Nature CNN as often
as the learner steps. Its rollouts then carry the oldest version
that acted in them; V-trace and PPO's ratio to the learner's batch-start policy correct for
the lag as for an actor's own copy.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
import torch

from rltrain.envs import ActionSpace, env_groups
from rltrain.faults import PeerLost
from rltrain.rl.actor import load_params, policy_builder
from rltrain.rl.algos.distributions import distribution
from rltrain.rl.algos.models import parameters_to_come
from rltrain.rl.algos.torsos import to_device
from rltrain.rl.config import TrainConfig
from rltrain.rl.device import tf32_on
from rltrain.rl.obs_slots import ObsSlots

Acted = tuple[torch.Tensor, torch.Tensor, int]
"""Actions [B] (or [B, n]), the behaviour logits [B, A] (CPU) and the version that acted."""


class Semaphore(Protocol):
    """``threading.Semaphore`` or a process runtime's (``multiprocessing``) semaphore."""

    def acquire(self, block: bool = True, timeout: float | None = None) -> bool: ...
    def release(self) -> None: ...


# the columns of ActSlots.meta, one row per actor
ROWS, ASKED, ANSWERED, VERSION, AT = range(5)
IN_SLOT = -1
"""``meta[i, AT]`` when the observations are in the actor's slot, not in ``frames``."""
PHASES = ("wait", "inference", "pull")
"""The policy worker's phases (:mod:`rltrain.perf`): ``ActSlots.seconds``, in this order."""


class ActSlots:
    """The shared buffers between the actors and the policy worker, allocated once.

    Slot ``i`` (actor ``i``) holds up to ``rows`` observations, their actions and logits, and
    ``meta[i]``: the rows in use, the request's number (``asked``), the number of the last
    request answered, the version that acted, and where the observations are: ``IN_SLOT``,
    or their first element's index in ``frames`` (the run's :class:`~rltrain.rl.obs_slots.
    ObsSlots`, where the actor wrote them for the learner). Requests are numbered rather
    than flagged, so that a restarted policy worker answers exactly the requests left
    unanswered, and an actor can tell a stale reply's wake-up from its own.

    ``semaphore(0)`` makes a semaphore: the process runtime's cross the processes (they are
    given to the processes when these start, with the buffers); ``threading.Semaphore`` on
    the thread runtime and in tests.
    """

    def __init__(
        self,
        actors: int,
        rows: int,
        obs_shape: tuple[int, ...],
        obs_dtype: torch.dtype,
        actions: ActionSpace | int,
        semaphore: Callable[[int], Semaphore],
        frames: ObsSlots | None = None,
    ) -> None:
        space = actions if isinstance(actions, ActionSpace) else ActionSpace(actions)
        self.frames = frames
        action_shape: tuple[int, ...] = (space.n,) if space.vector else ()
        action_dtype = torch.float32 if space.continuous else torch.int64
        self.rows = rows
        self.obs = torch.zeros(actors, rows, *obs_shape, dtype=obs_dtype).share_memory_()
        self.actions = torch.zeros(actors, rows, *action_shape, dtype=action_dtype)
        self.actions.share_memory_()
        self.logits = torch.zeros(actors, rows, space.params).share_memory_()  # [N, rows, A]
        self.meta = torch.zeros(actors, AT + 1, dtype=torch.int64).share_memory_()
        # [0]: the reward scale of the parameters acting (NaN: none yet); [1]: 1 once the run
        # has stopped
        self.control = torch.tensor([math.nan, 0.0], dtype=torch.float64).share_memory_()
        # seconds the policy worker (all its incarnations) spent in each of PHASES
        self.seconds = torch.zeros(len(PHASES), dtype=torch.float64).share_memory_()
        # the server's version after the last learn the trainer saw (-1: none yet), so that
        # the policy worker learns of new weights without asking the server (:meth:`learned`)
        self.versions = torch.full((1,), -1, dtype=torch.int64).share_memory_()
        # the policy worker's heartbeat: one more per turn of its loop (at least every
        # half second), which the trainer's hang watch reads (rltrain.rl.run.hangs)
        self.beats = torch.zeros(1, dtype=torch.int64).share_memory_()
        self.request = semaphore(0)  # one release per request (and one to wake it to stop)
        self.reply = [semaphore(0) for _ in range(actors)]

    @classmethod
    def for_run(
        cls,
        cfg: TrainConfig,
        obs_shape: tuple[int, ...],
        obs_dtype: str,
        actions: ActionSpace | int,
        semaphore: Callable[[int], Semaphore],
        frames: ObsSlots | None = None,
    ) -> ActSlots:
        """A slot for each of ``cfg.actors``, as large as an actor's largest env group;
        ``frames``: the run's observation slots, which the actors' requests may point into."""
        rows = math.ceil(cfg.env.num_envs / env_groups(cfg.env))
        dtype = torch.from_numpy(np.zeros(0, dtype=obs_dtype)).dtype
        return cls(cfg.actors, rows, obs_shape, dtype, actions, semaphore, frames)

    def __len__(self) -> int:
        return len(self.reply)

    def client(self, actor: int) -> ActClient:
        return ActClient(self, actor)

    def stop(self) -> None:
        """End the policy worker's :meth:`PolicyWorker.serve` (the run is over)."""
        self.control[1] = 1.0
        self.request.release()

    @property
    def stopped(self) -> bool:
        return bool(self.control.numpy()[1] != 0)

    def beat(self) -> int:
        """The policy worker's heartbeat count: it stops moving when the worker hangs."""
        return int(self.beats[0])

    def waits(self, actor: int) -> bool:
        """Whether ``actor`` has asked for actions not yet answered (it waits on the worker)."""
        return bool(self.meta[actor, ASKED] != self.meta[actor, ANSWERED])

    def learned(self, version: int) -> None:
        """A learner's learn returned with the server at ``version`` (the trainer tells, as
        each learn returns): the policy worker reads it here instead of asking the server's
        version every ``LOOK_S`` (100 requests a second, each through the trainer to the
        learner's process, whose interpreter lock its learning shares)."""
        self.versions[0] = version

    def phases(self) -> dict[str, float]:
        """``policy/<phase>`` -> seconds so far (the trainer logs the deltas: perf/time)."""
        return {f"policy/{k}": float(v) for k, v in zip(PHASES, self.seconds.tolist(), strict=True)}


class ActClient:
    """An actor's end of its slot: :meth:`act` as :class:`rltrain.rl.actor.Policy` wants it."""

    PATIENCE_S = 1.0  # how often a waiting actor looks whether the run has stopped

    def __init__(self, slots: ActSlots, actor: int) -> None:
        self.slots, self.actor = slots, actor
        self.obs, self.meta = slots.obs[actor], slots.meta[actor].numpy()  # views
        self.actions, self.logits = slots.actions[actor], slots.logits[actor]
        self.request, self.reply = slots.request, slots.reply[actor]

    def __getstate__(self) -> tuple[ActSlots, int]:  # the slots travel; the views are remade
        return self.slots, self.actor

    def __setstate__(self, state: tuple[ActSlots, int]) -> None:
        self.__init__(*state)  # type: ignore[misc]

    def act(self, obs: torch.Tensor, at: int | None = None) -> Acted:
        """Sampled actions, logits [B, A] and the version that acted, for ``obs`` [B, *obs].
        ``at``: where the actor wrote ``obs`` in the run's observation slots (``slots.frames``,
        :meth:`~rltrain.rl.obs_slots.Columns.at`); the policy worker then reads the rows
        there, and the act copies none."""
        n, slots, meta = len(obs), self.slots, self.meta
        if n > slots.rows or obs.shape[1:] != self.obs.shape[1:]:
            raise ValueError(
                f"actor {self.actor}: observations of shape {tuple(obs.shape)} do not fit its "
                f"slot of {slots.rows} x {tuple(self.obs.shape[1:])}"
            )
        if at is None or slots.frames is None:
            self.obs[:n].copy_(obs)  # (no shared rollout slots: the frames' one crossing)
            at = IN_SLOT
        asked = int(meta[ASKED]) + 1
        meta[ROWS] = n
        meta[AT] = at
        meta[ASKED] = asked  # written before the release below, read after its acquire
        self.request.release()
        while True:
            if self.reply.acquire(True, self.PATIENCE_S):
                if meta[ANSWERED] == asked:
                    break
                continue  # the wake-up of a request a policy worker answered twice (restart)
            if slots.stopped:
                raise RuntimeError(f"actor {self.actor}: the policy worker has stopped")
        return self.actions[:n].clone(), self.logits[:n].clone(), int(meta[VERSION])

    def reward_scale(self) -> float | None:
        """1 / std of the discounted return, of the parameters acting now (reward scaling);
        None while they know no returns."""
        scale = float(self.slots.control[0])
        return None if math.isnan(scale) else scale


class BatchedPolicy:
    """The acting policy on ``device``: parameters taken from the server by version, one
    forward pass for the rows of many actors."""

    def __init__(
        self,
        cfg: TrainConfig,
        obs_shape: tuple[int, ...],
        actions: ActionSpace | int,
        device: str | torch.device = "cpu",
        versions: torch.Tensor | None = None,
    ) -> None:
        """``versions``: where the trainer posts the server's version after each learn
        (:attr:`ActSlots.versions`); None: the server is asked."""
        self.device = tf32_on(torch.device(device))
        self.versions = None if versions is None else versions.numpy()
        with parameters_to_come():  # pulled before it acts
            self.model = policy_builder(cfg)(cfg.model.kind, obs_shape, actions, cfg.model.hidden)
        to_device(self.model, self.device, cfg.model.precision)
        self.model.eval()
        self.dist = distribution(actions)
        self.stride = cfg.algo_spec.pushes(cfg)
        self.params: Any = None  # Params of the version acting
        self.generator = torch.Generator().manual_seed(cfg.seed + 104729)
        self.batches = 0  # forward passes run
        self.rows = 0  # observations acted on (rows / batches: how well the actors coincide)
        self._next_look = 0.0

    @torch.inference_mode()
    def act(self, obs: list[torch.Tensor]) -> list[Acted]:
        """Each caller's actions and logits, from one forward pass over their rows."""
        sizes = [len(o) for o in obs]
        x = torch.cat(obs).to(self.device, non_blocking=True)
        logits = self.model.act_params(x)  # [sum B, A]
        logits = logits.float().cpu()
        actions = self.dist.sample(logits, self.generator)  # [sum B] or [sum B, n]
        version = self.params.version if self.params is not None else -1
        self.batches += 1
        self.rows += sum(sizes)
        return [
            (a, lg, version)
            for a, lg in zip(actions.split(sizes), logits.split(sizes), strict=True)
        ]

    LOOK_S = 0.01  # the server is asked its version at most this often: a request to
    # another process costs about 0.3 ms, a forward pass for a few actors less

    def refresh(self, server: Any) -> bool:
        """Take the server's newest parameters once ``stride`` versions newer than those held
        (a version number first: a cheap look, at most every ``LOOK_S``); True if they
        changed."""
        now = time.monotonic()
        if self.params is not None:
            if now < self._next_look:
                return False
            self._next_look = now + self.LOOK_S
            try:
                return self._take(server)
            except PeerLost:  # the shards are being restored: act with the weights held
                return False
        return self._take(server)

    def _take(self, server: Any) -> bool:
        if self.params is not None and self.stride > 1:
            ahead = self._newest(server) - self.params.version
            if 0 <= ahead < self.stride:  # (behind: the shards were restored, take theirs)
                return False
        p = server.pull(self.params)
        if p is self.params:
            return False
        load_params(self.model, p, self.device)
        self.model.set_norm(p.norm)
        self.params = p
        return True

    def _newest(self, server: Any) -> int:
        """The server's version: as posted after the last learn, else as the server says."""
        if self.versions is not None and self.versions[0] >= 0:
            return int(self.versions[0])
        health = server.health()
        versions = [h[0] for h in health if h is not None]
        return min(versions) if versions else self.params.version

    def reward_scale(self) -> float | None:
        norm = None if self.params is None else self.params.norm
        return None if norm is None else norm.reward_scale()


def nan_for_none(scale: float | None) -> float:
    """A reward scale as ``ActSlots.control[0]`` holds it: NaN for none yet."""
    return math.nan if scale is None else scale


class PolicyWorker:
    """Acts for every actor through :class:`ActSlots` (a process of its own on the process
    runtime, ``rltrain: policy 0``; a thread on the thread runtime). Plain Python."""

    def __init__(
        self,
        cfg: TrainConfig,
        obs_shape: tuple[int, ...],
        actions: ActionSpace | int,
        slots: ActSlots,
        device: str = "cpu",
    ) -> None:
        torch.set_num_threads(cfg.runtime.threads_per_worker)
        self.policy = BatchedPolicy(cfg, obs_shape, actions, device, slots.versions)
        self.slots = slots
        # numpy views of the shared buffers: an element read or a row written costs about a
        # microsecond, a tensor's indexing ten
        self.meta, self.control = slots.meta.numpy(), slots.control.numpy()
        self.obs = list(slots.obs.unbind())  # slot i's observations [rows, *obs]
        self.actions, self.logits = slots.actions.numpy(), slots.logits.numpy()
        self.frames = slots.frames  # a request's rows start at its meta[i, AT] there

    def serve(self, server: Any) -> dict[str, int]:
        """Answer the actors' requests until the slots are stopped; returns how many forward
        passes ran and the rows they acted on. Requests left unanswered by a policy worker
        that died are answered first."""
        slots, policy, meta, control = self.slots, self.policy, self.meta, self.control
        seconds = slots.seconds.numpy()  # per PHASES: this process adds to it
        WAIT, INFERENCE, PULL = range(len(PHASES))  # noqa: N806 - PHASES' indices

        def lap(phase: int, start: float) -> float:  # the time since start is phase's
            now = time.perf_counter()
            seconds[phase] += now - start
            return now

        policy.refresh(server)
        control[0] = nan_for_none(policy.reward_scale())
        beats = slots.beats.numpy()
        t = time.perf_counter()
        while control[1] == 0:  # not stopped
            beats[0] += 1
            waiting = np.flatnonzero(meta[:, ASKED] != meta[:, ANSWERED])
            if len(waiting) == 0:
                slots.request.acquire(True, 0.5)
                continue
            while slots.request.acquire(False):
                pass  # every request posted so far is seen by the look above or the next
            t = lap(WAIT, t)
            if policy.refresh(server):
                control[0] = nan_for_none(policy.reward_scale())
            t = lap(PULL, t)
            self._answer(waiting.tolist())
            t = lap(INFERENCE, t)
        return {"batches": policy.batches, "rows": policy.rows}

    def _rows(self, actor: int, n: int, at: int) -> torch.Tensor:
        """Request ``actor``'s ``n`` observations: in its slot, or where it wrote them for the
        learner (a view: the forward pass reads them once, into its batch). A request left by
        an actor that died may point into a rollout slot lent again since: its answer goes to
        the dead actor's act slot, which its restarted process does not read."""
        if at == IN_SLOT or self.frames is None:
            return self.obs[actor][:n]
        return self.frames.rows(at, n)

    def interrupt(self) -> None:
        """End :meth:`serve` from another thread (the thread runtime's stop)."""
        self.slots.stop()

    def _answer(self, waiting: list[int]) -> None:
        meta, reply = self.meta, self.slots.reply
        asked = meta[waiting, ASKED].tolist()
        sizes = meta[waiting, ROWS].tolist()
        where = meta[waiting, AT].tolist()
        obs = [self._rows(i, n, at) for i, n, at in zip(waiting, sizes, where, strict=True)]
        acted = self.policy.act(obs)
        for i, n, a, (actions, logits, version) in zip(waiting, sizes, asked, acted, strict=True):
            self.actions[i, :n] = actions.numpy()
            self.logits[i, :n] = logits.numpy()
            meta[i, VERSION] = version
            meta[i, ANSWERED] = a  # after the outputs: the actor reads them once it sees this
            reply[i].release()
