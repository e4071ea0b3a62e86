"""Which modes of ``rltrain bench`` read which server options: one set to another value than
its default that no mode in ``modes`` reads is refused, not ignored (``--set modes=[sync]``
with ``server.k=4``, soft_sync's K, compared nothing and said nothing)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from rltrain.machine import usable_cores
from rltrain.ps.config import ServerConfig
from rltrain.ps.rules import rule_named, rule_names
from rltrain.supervised.models import PARAM_LAYERS
from rltrain.supervised.toys import TOY_PROBLEMS

PIPELINE_MODES = ("sync", "async")
"""The modes that run a model split into ``model.stages`` (pipeline parallelism)."""
ASYNC_WORKERS = ("async", "async_scale", "async_drop", "hogwild")
"""The modes whose workers push every ``n_push`` and pull every ``n_fetch`` steps (Hogwild's
run Downpour's loop on the shared model: they were refused as unread there)."""
PIPELINED = ASYNC_WORKERS[:3]
"""The modes whose pushes overlap the next step (``pipeline``; Hogwild's have nothing to
overlap: shared memory)."""


NOT_REAPPLIED = {
    "baseline": "it has no parameter server (a single-process loop): nothing was recorded",
    "hogwild": "its workers update shared memory lock-free inside a step, so no order of "
    "the updates exists to follow",
    "sandblaster": "its coordinator runs L-BFGS over the shards; no pushes were recorded",
    "allreduce": "it has no parameter server: the workers all-reduce among themselves",
}
"""Modes that ``rltrain reapply`` refuses, and why (besides rules that push no gradients)."""


def not_reapplied_why(mode: str) -> str:
    """Why ``mode``'s log cannot be reapplied ("" = it can): a mode without a logged server,
    or a rule whose workers push no gradients (average: parameters after local steps)."""
    if mode in NOT_REAPPLIED:
        return NOT_REAPPLIED[mode]
    if mode in rule_names() and not rule_named(mode).records_gradients:
        return "its workers push parameters after local optimizer steps, not gradients"
    return ""


def _drops(modes: tuple[str, ...], server: ServerConfig) -> bool:
    return "async_drop" in modes or ("async" in modes and server.staleness == "drop")


READERS: dict[str, tuple[str, Callable[[tuple[str, ...], ServerConfig], bool]]] = {
    "k": ("soft_sync", lambda modes, _: "soft_sync" in modes),
    "average_every": ("average", lambda modes, _: "average" in modes),
    "n_push": (", ".join(ASYNC_WORKERS), lambda m, _: bool(set(m) & {*ASYNC_WORKERS})),
    "n_fetch": (", ".join(ASYNC_WORKERS), lambda m, _: bool(set(m) & {*ASYNC_WORKERS})),
    "pipeline": (", ".join(PIPELINED), lambda m, _: bool(set(m) & {*PIPELINED})),
    "staleness": ("async (async_scale, async_drop set their own)", lambda m, _: "async" in m),
    "max_staleness": ("async_drop, or async with server.staleness=drop", _drops),
    "record": (
        "the server modes that push gradients (rltrain reapply follows their pushes)",
        lambda m, _: any(not not_reapplied_why(mode) for mode in m),
    ),
}
"""Option -> (the modes that read it, as the error names them; whether ``modes`` does)."""


def check_read(
    modes: tuple[str, ...], builtin: tuple[str, ...], server: ServerConfig, stages: int
) -> None:
    """Refuse a server option that no mode in ``modes`` reads (ValueError), and a split model
    (``model.stages``) without a mode that splits it. ``builtin``: the modes rltrain defines;
    a rule registered by the user may read any server option: a run with one is not checked."""
    if stages > 1 and set(modes) <= {"baseline"}:  # (baseline alone: unsplit; other modes
        # than these: check_pipeline names them)
        raise ValueError(
            f"model.stages={stages}: splits the model of the modes {', '.join(PIPELINE_MODES)}, "
            f"and modes has neither ({', '.join(modes)}); add one, or set model.stages=1"
        )
    if any(m not in builtin for m in modes):
        return
    for key, (readers, reads) in READERS.items():
        value: Any = getattr(server, key)
        if value == getattr(ServerConfig, key) or reads(modes, server):
            continue
        shown = str(value).lower() if isinstance(value, bool) else value
        raise ValueError(
            f"server.{key}={shown}: read by {readers} only, and modes has none of them "
            f"({', '.join(modes)}); add one to modes, or leave server.{key} at its default "
            f"({str(getattr(ServerConfig, key)).lower()})"
        )


def check_unread_parts(cfg: Any) -> None:
    """Refuse (ValueError) a key of a part that nothing in the run reads, set to another value
    than its default: ``sandblaster.*`` without mode sandblaster, ``baseline_threads`` without
    the baseline, ``model.micro_batches`` of an unsplit model, ``model.synthetic_hidden``
    without synthetic gradients, ``data.toy.*`` on an image dataset (each ran and said
    nothing). ``cfg``: a BenchConfig."""
    model, defaults = cfg.model, type(cfg.model)()
    unread = {
        "model.micro_batches": (model.micro_batches, defaults.micro_batches, model.stages == 1),
        **{
            f"model.synthetic_{k}": (
                getattr(model, f"synthetic_{k}"),
                getattr(defaults, f"synthetic_{k}"),
                model.synthetic == "none",
            )
            for k in ("hidden", "lr")
        },
        "baseline_threads": (cfg.baseline_threads, 0, "baseline" not in cfg.modes),
    }
    sandblaster = "sandblaster" not in cfg.modes
    for f in dataclasses.fields(cfg.sandblaster):
        key = f"sandblaster.{f.name}"
        unread[key] = (getattr(cfg.sandblaster, f.name), f.default, sandblaster)
    toy = cfg.data.dataset in TOY_PROBLEMS
    only = {"noise": "toy_quadratic", "l2": "toy_logistic"}  # (review 81: read by one toy)
    for f in dataclasses.fields(cfg.data.toy):  # (explore94: each ran and said nothing)
        idle = cfg.data.dataset != only[f.name] if f.name in only else not toy
        unread[f"data.toy.{f.name}"] = (getattr(cfg.data.toy, f.name), f.default, idle)
    needs = {
        "model.micro_batches": "model.stages >= 2",
        "model.synthetic_hidden": "model.synthetic dni or cdni",
        "model.synthetic_lr": "model.synthetic dni or cdni",
        "baseline_threads": "mode baseline in modes",
        **{f"data.toy.{k}": f"data.dataset={toy}" for k, toy in only.items()},
    }
    toys = f"a toy problem ({', '.join(TOY_PROBLEMS)})"
    for key, (value, default, idle) in unread.items():
        if idle and value != default:
            why = needs.get(
                key, toys if key.startswith("data.toy.") else "mode sandblaster in modes"
            )
            raise ValueError(
                f"{key}={_shown(value)}: read only with {why}, which this run has not; leave "
                f"{key} at its default ({_shown(default)}), or run with {why}"
            )


def _shown(value: Any) -> str:
    """A value as --set writes it (a list in brackets)."""
    return f"[{', '.join(map(str, value))}]" if isinstance(value, tuple) else str(value)


RUN_HERE = ("baseline", "hogwild")
"""Modes that run on the bench's own machine, not on a Ray cluster (a plain loop; workers
that share one model's memory)."""


def start_notes(cfg: Any) -> list[str]:
    """Lines ``rltrain bench`` says at its start about modes that run as another does:
    soft_sync waiting for all N (K = N: no backup worker; one worker's N - 1 is raised to 1)
    steps as sync does, and gave sync's very results without a word; and targets of the other
    kind than the dataset's (explore94: they ran and said nothing; said, not refused, as a
    config file switched to a toy problem by --set keeps its accuracy targets)."""
    notes = []
    ev, evals = cfg.eval, type(cfg.eval)()
    if cfg.data.dataset in TOY_PROBLEMS and ev.targets != evals.targets:
        notes.append(
            f"note: eval.targets={_shown(ev.targets)} is not read: {cfg.data.dataset} is judged "
            f"by its distance to the optimum, eval.distance_targets={_shown(ev.distance_targets)}"
        )
    elif cfg.data.dataset not in TOY_PROBLEMS and ev.distance_targets != evals.distance_targets:
        notes.append(
            f"note: eval.distance_targets={_shown(ev.distance_targets)} is not read (the toy "
            f"problems'): {cfg.data.dataset} is judged by its test accuracy, "
            f"eval.targets={_shown(ev.targets)}"
        )
    here = [m for m in cfg.modes if m in RUN_HERE]
    if cfg.runtime.address and here:  # (explore99: hogwild ran here, the cluster unsaid)
        notes.append(
            f"note: mode{'s' * (len(here) > 1)} {', '.join(here)} run{'s' * (len(here) == 1)} "
            f"on this machine, not on the cluster at {cfg.runtime.address} (baseline is the "
            "plain loop the others are compared with; hogwild's workers share one model's memory)"
        )
    if set(cfg.modes) - {"baseline"} and not cfg.runtime.address:  # (explore106)
        stages = cfg.model.stages if set(cfg.modes) & set(PIPELINE_MODES) else 1
        procs = cfg.workers * stages  # (each stage a process of its own)
        if procs * cfg.runtime.threads_per_worker > (cores := usable_cores()):
            each = f"{cfg.workers} workers" + (f" x {stages} stages" if stages > 1 else "")
            notes.append(
                f"note: {each} x {cfg.runtime.threads_per_worker} thread(s) on {cores} cores: "
                "they take turns, so samples/s measures the cores as much as the rule "
                "(summary.json's machine: the cores and the load)"
            )
    if "soft_sync" in cfg.modes:
        n = cfg.workers
        k = rule_named("soft_sync").aggregate_count(cfg.server, n)
        if k == n:
            why = f"server.k={k}" if cfg.server.k else "N - 1 of 1 worker, raised to 1"
            fix = f"set server.k below {n}" if n > 1 else "set workers >= 2"
            notes.append(
                f"note: soft_sync waits for K = {k} of {n} workers ({why}): no backup worker, "
                f"so it steps as sync does; {fix}"
            )
    return notes


def check_pipeline(cfg: Any) -> None:
    """What model parallelism (``model.stages``) runs with, in a :class:`BenchConfig` ``cfg``;
    the rest is refused, not ignored."""
    pipe, srv = cfg.model, cfg.server
    if pipe.synthetic != "none" and pipe.stages == 1:
        raise ValueError(
            f"model.synthetic={pipe.synthetic}: needs model.stages >= 2 (it decouples the "
            "stages of a split model); set model.stages, or model.synthetic=none"
        )
    if pipe.synthetic_delay != 2 and pipe.synthetic == "none":
        raise ValueError(
            f"model.synthetic_delay={pipe.synthetic_delay}: needs model.synthetic dni or "
            "cdni (GPipe's stages wait for the true gradient); set model.synthetic, or "
            "leave model.synthetic_delay at 2"
        )
    if pipe.link_ms and pipe.stages == 1:
        raise ValueError(
            f"model.link_ms={pipe.link_ms:g}: needs model.stages >= 2 (the link is between "
            "stages); set model.stages, or model.link_ms=0"
        )
    if pipe.stages == 1:
        return
    head = f"model.stages={pipe.stages}"
    other = [m for m in cfg.modes if m not in (*PIPELINE_MODES, "baseline")]
    if other:
        them = "them" if len(other) > 1 else "it"
        raise ValueError(
            f"{head}: runs the modes {', '.join(PIPELINE_MODES)} (and baseline, unsplit, "
            f"as the reference), not {', '.join(other)}; leave {them} out of modes, or set "
            "model.stages=1"
        )
    name = pipe.name
    if name == "auto":  # as build_model resolves it for the dataset's inputs
        toy, colour = cfg.data.dataset in TOY_PROBLEMS, cfg.data.dataset == "cifar10"
        name = "linear" if toy else "resnet" if colour else "cnn"
    if pipe.stages > PARAM_LAYERS[name]:
        deep = name == "linear" and cfg.data.dataset != "toy_logistic"  # (it takes linear only)
        deep &= pipe.stages <= PARAM_LAYERS["deep_linear"]  # (one it could cut: review89)
        raise ValueError(
            f"{head}: model {name} has {PARAM_LAYERS[name]} layer(s) with parameters to "
            f"cut; allowed: 1 to {PARAM_LAYERS[name]}"
            + ("; model.name=deep_linear is the same map in 3 layers" if deep else "")
        )
    if pipe.micro_batches > cfg.batch_size:
        raise ValueError(
            f"model.micro_batches={pipe.micro_batches} exceeds batch_size="
            f"{cfg.batch_size}: each micro-batch needs a sample"
        )
    needs = {  # what each must be, and whether it is not
        "server.shards=1": srv.shards != 1,  # one shard per stage
        "server.staleness=none": srv.staleness != "none",  # each stage's shard decides
        "server.n_push=1 server.n_fetch=1": srv.n_push != 1 or srv.n_fetch != 1,
        "server.compression=none": srv.compression != "none",
        "server.record=false": srv.record,
        "warm_start.seconds=0": cfg.warm_start.seconds > 0,
        "faults.events=[]": bool(cfg.faults.events),
    }
    if any(needs.values()):
        named = ", ".join(k for k, v in needs.items() if v)
        raise ValueError(
            f"{head}: needs {named} (the server has one shard per stage, every stage "
            "pushing each step, and a lost stage stops the mode)"
        )


def replicas_text(cfg: Any) -> str:
    """The workers and how each replica's model is split, for a title: ``4 workers`` or ``1
    worker of 2 stages with synthetic gradients (DNI, delay 2)`` (explore114: a DNI run, a
    GPipe run and an unsplit one had the same title)."""
    n, m = cfg.workers, cfg.model
    text = f"{n} worker{'s' * (n != 1)}"
    if m.stages == 1:
        return text
    how = {"none": "the exact backward (GPipe)", "dni": "synthetic gradients (DNI"}
    how["cdni"] = "label-conditioned synthetic gradients (cDNI"
    delay = f", delay {m.synthetic_delay})" if m.synthetic != "none" else ""
    return f"{text} of {m.stages} stages{' each' * (n != 1)} with {how[m.synthetic]}{delay}"
