"""The checks of a train config across its sections, one concern each; a section checks its
own keys in its ``__post_init__``. Each raises ValueError with one line naming the keys."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rltrain.ps.config import ServerConfig, check_momentum_correction

if TYPE_CHECKING:
    from rltrain.rl.config import TrainConfig

BENCH_ONLY_SERVER = ("n_push", "pipeline", "average_every")
"""ServerConfig keys the supervised workers use and rltrain train's do not."""


def check_stop(cfg: TrainConfig) -> None:
    s = cfg.stop
    if s.eval_mean_return is not None and not cfg.eval.every_steps:
        raise ValueError(
            "stop.eval_mean_return: needs evaluations during training; set eval.every_steps"
        )
    if (s.mean_return, s.eval_mean_return) == (None, None) and not (
        s.max_seconds or s.max_env_steps
    ):
        raise ValueError("stop: set mean_return, eval_mean_return, max_seconds or max_env_steps")


def check_server(cfg: TrainConfig) -> None:
    """What the server's rule and keys can do for rltrain train's pushers."""
    server = cfg.server
    pushers = cfg.learners if cfg.algo_spec.split else cfg.actors
    if pushers and server.k > pushers:  # (0: actors auto, checked once sized)
        raise ValueError(f"server.k={server.k} exceeds the {pushers} pushing workers")
    if server.update_rule.supervised_only:
        raise ValueError(
            f"server.rule={server.rule}: rltrain bench only (rltrain train's workers "
            "and learners push gradients); use sync, soft_sync or async"
        )
    for key in BENCH_ONLY_SERVER:  # accepted silently, they would do nothing here
        value = getattr(server, key)
        if value != getattr(ServerConfig(), key):
            raise ValueError(
                f"server.{key}={value}: rltrain bench only (rltrain train's workers and "
                "learners push every gradient as it is made)"
            )
    if server.n_fetch > 1 and not cfg.algo_spec.split:
        raise ValueError(
            f"server.n_fetch={server.n_fetch}: impala/appo/dqn actors only; "
            f"{cfg.algo.name} workers get the parameters back with each push"
        )
    check_momentum_correction(cfg.optimizer, server)
    if server.record:
        raise ValueError(
            "server.record=true: only rltrain bench records and reapplies its updates (a "
            "training run's data comes from environments, which cannot be read again)"
        )


def check_algo(cfg: TrainConfig) -> None:
    """What the algorithm's spec allows: learners on one GPU each, normalisation, and the
    fault events' targets among its processes."""
    if cfg.learner_gpus > 1:  # the learner computes on cuda:0; more would sit idle
        raise ValueError(
            f"learner_gpus={cfg.learner_gpus:g}: a learner computes on one GPU, so give "
            "it a share of one (0 to 1); to use more GPUs, set learners to their number"
        )
    name, spec = cfg.algo.name, cfg.algo_spec
    if not spec.normalizes and cfg.normalize.obs == "always":
        raise ValueError(
            f"normalize.obs=always: not supported with algo.name={name}; use auto or never"
        )
    if not spec.normalizes and cfg.normalize.reward:
        raise ValueError(f"normalize.reward=true: not supported with algo.name={name}")
    cfg.faults.check_targets(
        {
            "actor": cfg.actors or None,  # auto: checked once sized
            "learner": cfg.learners if spec.split else 0,  # separate learner processes
            "shard": cfg.server.shards,
            # the policy worker: with runtime.inference=server (auto: known once placed)
            "policy": {"server": 1, "actor": 0}.get(cfg.runtime.inference),
        }
    )


def check_batches(cfg: TrainConfig) -> None:
    """ppo/appo: each minibatch holds one sample at least. A batch is a worker's rollout
    (rollout_length x num_envs: every actor steps env.num_envs, known here), or a learner's
    impala.learner_batch rollouts; more minibatches than samples would push fewer gradients
    than ppo.minibatches says, one sample each."""
    spec, p = cfg.algo_spec, cfg.ppo
    if not spec.clipped:
        return
    parts = [("algo.rollout_length", cfg.algo.rollout_length), ("env.num_envs", cfg.env.num_envs)]
    if spec.layout == "actor_learner":
        parts.append(("impala.learner_batch", cfg.impala.learner_batch))
    samples = 1
    for _, n in parts:
        samples *= n
    if p.minibatches > samples:
        how = " x ".join(f"{key} {n}" for key, n in parts)
        raise ValueError(
            f"ppo.minibatches={p.minibatches}: exceeds the {samples} samples of each batch "
            f"({how}); use at most {samples}"
        )


def check_replay(cfg: TrainConfig) -> None:
    """dqn: a replay shard holds at least the block of transitions an actor sends at once,
    and the memory at least the transitions the learners wait for."""
    if not cfg.algo_spec.q_network:
        return
    block = cfg.env.num_envs * cfg.algo.rollout_length
    if cfg.replay.capacity < block:
        raise ValueError(
            f"replay.capacity={cfg.replay.capacity}: must be at least {block} (env.num_envs "
            f"{cfg.env.num_envs} x algo.rollout_length {cfg.algo.rollout_length}: the "
            "transitions of one block an actor sends to a shard)"
        )
    held = cfg.replay.capacity * cfg.replay.shards
    if cfg.dqn.learning_starts > held:
        raise ValueError(
            f"dqn.learning_starts={cfg.dqn.learning_starts}: more than the replay memory holds "
            f"({held}: replay.capacity {cfg.replay.capacity} x replay.shards "
            f"{cfg.replay.shards}), so learning would never start"
        )


def check_schedule(cfg: TrainConfig) -> None:
    sched, stop = cfg.schedule, cfg.stop
    if (sched.lr_end is not None or sched.entropy_end is not None) and not (
        sched.steps or stop.max_env_steps
    ):
        raise ValueError(
            "schedule: lr_end/entropy_end need a horizon: set schedule.steps or stop.max_env_steps"
        )
    horizon = sched.steps or stop.max_env_steps
    if sched.start and horizon and sched.start >= horizon:
        raise ValueError(
            f"schedule.start={sched.start}: must be below the schedules' end "
            f"({horizon}: schedule.steps, else stop.max_env_steps)"
        )


def check_local(cfg: TrainConfig) -> None:
    """What ``runtime.backend: local`` (every process a thread of this one) and ``process``
    (processes of this machine) cannot do. (A learner targeted by faults.events on the
    process runtime that is a thread of the trainer's, several learners or dqn's, is skipped
    with a note, so that one fault plan runs on every runtime.)"""
    b = cfg.runtime.backend
    if b in ("local", "process") and cfg.runtime.address:
        raise ValueError(
            f"runtime.backend={b} runs on this machine: it joins no Ray cluster "
            f"(address {cfg.runtime.address!r}); use backend ray or auto with --address"
        )
    if cfg.faults.events and b == "local":
        raise ValueError(
            "runtime.backend=local: faults.events need processes to kill and pause; use backend "
            "process or ray"
        )
