"""The pipeline mode of ``rltrain bench`` (``model.stages`` > 1): each data-parallel replica a
lead and K stage processes, over a server whose shards are cut at the stage boundaries. On
Ray the lead is a process of its own and Ray passes activations and gradients between the
stages; on the process runtime the lead is a thread of the bench's process, which relays them
(:mod:`rltrain.runtime.process.stages`). The stages are
:class:`~rltrain.supervised.pipeline.PipelineStage` (GPipe's exact backward) or, with
``model.synthetic``, :class:`~rltrain.supervised.synthetic.SyntheticStage` before the last
(synthetic gradients)."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from rltrain.faults import FaultCounters
from rltrain.progress import Progress
from rltrain.supervised.config import BenchConfig
from rltrain.supervised.datasets import SplitDataset
from rltrain.supervised.modes import (
    ModeTrace,
    Snapshotter,
    finish_trace,
    initial_params,
    input_shape,
    shards,
    worker_specs,
)
from rltrain.supervised.pipeline import PipelineStage, plan_stages, stage_sizes
from rltrain.supervised.replica import GPipe, PipelineWorker
from rltrain.supervised.synthetic import Decoupled, SyntheticStage
from rltrain.supervised.worker import WorkerSpec


def stage_args(
    cfg: BenchConfig,
    spec: WorkerSpec,
    shape: tuple[int, ...],
    cuts: list[int],
    s: int,
    link: float = 0.0,
) -> tuple[Any, ...]:
    """The class and arguments of stage ``s``: a synthetic-gradient stage before the last
    with ``model.synthetic`` dni or cdni, else GPipe's; ``link``: the seconds it waits
    before each send (the runtime's :func:`stage_link`)."""
    if cfg.model.synthetic == "none" or s == len(cuts) - 2:
        return (PipelineStage, spec, shape, cuts, s, link)
    m = cfg.model
    return (
        SyntheticStage,
        spec,
        shape,
        cuts,
        s,
        link,
        m.synthetic == "cdni",
        m.synthetic_hidden,
        m.synthetic_lr,
    )


def schedule(cfg: BenchConfig) -> Decoupled | GPipe:
    """A replica's schedule: GPipe's, or synthetic gradients paid ``model.synthetic_delay``
    batches late."""
    if cfg.model.synthetic == "none":
        return GPipe()
    return Decoupled(delay=cfg.model.synthetic_delay)


def run_pipeline_mode(
    cfg: BenchConfig, mode: str, data: SplitDataset, progress: Progress, runtime: Any
) -> ModeTrace:
    """``workers`` replicas of ``model.stages`` stage processes each, over a server whose
    shards are cut at the stage boundaries; snapshots of the whole model as the other modes.
    ``runtime``: the backend's module (:func:`rltrain.runtime.backend`)."""
    begin = time.time()
    k, micro = cfg.model.stages, cfg.model.micro_batches
    link = cfg.model.link_ms / 1000  # each hop's latency between stages
    specs = worker_specs(cfg, mode, data, cfg.workers)
    shape = input_shape(data)
    cuts = plan_stages(specs[0], shape, k)
    sizes = stage_sizes(specs[0], shape, cuts)
    server = dataclasses.replace(specs[0].server, shards=k)
    server = runtime.start_server(
        initial_params(cfg, data), cfg.optimizer, server, cfg.workers, cfg.runtime, sizes=sizes
    )
    procs: list[Any] = list(runtime.server_processes(server))
    try:
        replicas = []
        for spec, source in zip(specs, shards(cfg, cfg.workers), strict=True):
            stages = [
                runtime.Remote(
                    *stage_args(cfg, spec, shape, cuts, s, runtime.stage_link(link)),
                    role="worker",
                    index=spec.worker_id,
                    num_cpus=cfg.runtime.worker_cpus,
                    max_restarts=cfg.faults.max_restarts,  # the lead reconnects it
                )
                for s in range(k)
            ]
            # the replica's lead only cuts batches and issues calls: no CPU reserved
            lead = runtime.stage_lead(
                PipelineWorker,
                spec,
                source,
                runtime.stages_of(stages, link),
                micro,
                schedule(cfg),
                index=spec.worker_id,
            )
            procs += [*stages, lead]
            replicas.append(lead)
        runtime.wait_up(procs, progress.note)  # data loaded, models built: start-up
        how = "" if cfg.model.synthetic == "none" else f", {cfg.model.synthetic} gradients"
        progress.note(
            f"{cfg.workers} replica(s) x {k} stages (parameters {', '.join(map(str, sizes))}), "
            f"{micro} micro-batches per batch{how}"
        )
        parts = [server.part(s) for s in range(k)]
        t0 = time.time()
        deadline = t0 + cfg.budget.max_seconds if cfg.budget.max_seconds else None
        snapper = Snapshotter(server, cfg.eval.every_seconds, cfg.budget.max_seconds, progress)
        snapper.take()  # w0, before any replica runs
        pending = [lead.call("run", parts, t0, deadline) for lead in replicas]
        calls = list(pending)
        while pending:
            done = runtime.wait_any(pending, snapper.due_in())
            for c in done:  # a lost stage fails its replica's call: stop the mode at once
                runtime.result(c)
            pending = [c for c in pending if c not in done]
            if snapper.due_in() == 0:
                snapper.take()
        reports = [runtime.result(c) for c in calls]
        snapper.take()  # the final parameters
    finally:
        for r in procs:
            r.kill()
    restarts, lost = sum(r.restarts for r in reports), sum(r.lost_batches for r in reports)
    faults = FaultCounters(worker_restarts=restarts, lost_calls=lost)
    return finish_trace(mode, begin, snapper, reports, faults)
