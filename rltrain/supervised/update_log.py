"""The log of pushed updates (``server.record``) and `rltrain reapply RUN`: recompute a recorded
bench run's gradients serially, in the order the server received them, and check that the
parameters come out bit for bit the same. (Not the DQN replay memory, :mod:`rltrain.replay`.)

An asynchronous run is not repeatable: which worker's update arrives first, and how stale it
is, depends on timing. With ``server.record`` the shard logs every push (worker, version,
staleness, and the batches behind it: epoch, position and the parameter version each was
computed on) and the bench saves the log with the final parameters to ``record/<mode>.pt``.
Reapplying needs nothing else: the initial parameters and every worker's data follow from the
config. Each gradient is recomputed by a :class:`SupervisedWorker` of the run's own spec (its
model, objective, batches and torch threads) and pushed through a fresh
:class:`ParameterShard` at its logged version, so staleness scaling, barriers and the
optimizer step run the very code they ran in the run. Plain Python, no Ray.
"""

from __future__ import annotations

import dataclasses
import json
import pickle
import typing
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rltrain.checkpoint import damage
from rltrain.config import ConfigError, load_config
from rltrain.errors import RLTrainError
from rltrain.faults import FaultCounters
from rltrain.ps.shard import ParameterShard
from rltrain.records import BatchId, GradUpdate, LoggedStatus, PushRecord
from rltrain.rundir import write_atomic_with
from rltrain.supervised.batches import GradSum
from rltrain.supervised.config import BenchConfig
from rltrain.supervised.datasets import ArrayDataset, SplitDataset
from rltrain.supervised.mode_keys import not_reapplied_why
from rltrain.supervised.modes import ModeTrace, initial_params, shards, worker_specs
from rltrain.supervised.sharding import load_data
from rltrain.supervised.worker import SupervisedWorker

_STATUSES: tuple[LoggedStatus, ...] = typing.get_args(LoggedStatus)  # ("left" last: older
# records read as they were written)
_FORMAT = 1
_LEAVES = 2  # the format of a log that holds a "left" record: an rltrain older than that
# record says "format 2, expected 1" rather than failing on a status it does not know


class CannotReapply(RLTrainError):
    """A run folder or mode that cannot be reapplied; the message says why, in one line."""


@dataclass(frozen=True)
class SavedRecord:
    """One mode's ``record/<mode>.pt``, read back."""

    mode: str
    log: tuple[PushRecord, ...]
    final: torch.Tensor  # [P] the parameters the mode ended with
    faults: FaultCounters
    start: dict | None = None  # the restore point the log begins at (ModeRecord.start)
    data: dict | None = None  # the data the mode trained on (:func:`data_print`)


@dataclass(frozen=True)
class ReapplyResult:
    """What reapplying one mode's log gave."""

    mode: str
    pushes: int
    equal: bool  # torch.equal(reapplied, recorded final parameters)
    max_diff: float  # largest absolute difference (0.0 when equal)
    mismatches: int  # pushes the fresh shard decided otherwise (status or staleness)


# --- the file ------------------------------------------------------------------------------


def record_path(run_dir: Path, mode: str) -> Path:
    return run_dir / "record" / f"{mode}.pt"


_PRINTED = ("train", "test", "crc32")  # what tells one data set from another


def data_print(data: SplitDataset, root: str | Path) -> dict[str, Any]:
    """Where the data was read (``root``, absolute, and the folder or archive its files were
    found in) and what it was: the sizes of its splits and a CRC-32 of its training set, so
    that a reapply reads the same data or says not (and summary.json says what a bench
    trained on: explore100)."""
    train = data.train
    tensors = (
        (train.images, train.labels) if isinstance(train, ArrayDataset) else (train.x, train.y)
    )
    crc = 0
    for t in tensors:
        crc = zlib.crc32(t.contiguous().numpy().tobytes(), crc)
    where = str(Path(root).expanduser().absolute())
    found = None if data.source is None else str(data.source.absolute())
    printed = {"root": where, "folder": found, "train": len(train), "test": len(data.test)}
    if data.validation is not None:
        printed["validation"] = len(data.validation)
    return printed | {"crc32": crc}


def save_record(run_dir: Path, trace: ModeTrace, data: dict[str, Any] | None = None) -> Path:
    """Write ``trace.record`` to ``record/<mode>.pt`` (atomically). The log is stored as two
    int64 tables, which ``torch.load(weights_only=True)`` reads back: pushes [M, 5] (worker,
    version, staleness, status, batches) and their batches [B, 3] (epoch, position, version)."""
    rec = trace.record
    assert rec is not None, f"{trace.mode}: nothing recorded"
    pushes = [
        (p.worker_id, p.version, p.staleness, _STATUSES.index(p.status), len(p.batches))
        for p in rec.log
    ]
    batches = [tuple(b) for p in rec.log for b in p.batches]
    state = {
        "format": _LEAVES if any(p.status == "left" for p in rec.log) else _FORMAT,
        "mode": trace.mode,
        "final": rec.final.detach().clone(),
        "faults": dataclasses.asdict(trace.faults),
        "pushes": torch.tensor(pushes, dtype=torch.int64).reshape(-1, 5),
        "batches": torch.tensor(batches, dtype=torch.int64).reshape(-1, 3),
    }
    if rec.start is not None:
        state["start"] = rec.start
    if data is not None:
        state["data"] = data
    path = record_path(run_dir, trace.mode)
    path.parent.mkdir(exist_ok=True)
    write_atomic_with(path, lambda f: torch.save(state, f))
    return path


def load_record(path: Path) -> SavedRecord:
    """Read a ``record/<mode>.pt`` written by :func:`save_record`."""
    try:
        state = torch.load(path, weights_only=True)
    except Exception as e:  # noqa: BLE001 - a cut or damaged file surfaces as any decoding error
        raise CannotReapply(f"{path}: not a readable record ({damage(path, e)})") from None
    try:
        if not isinstance(state, dict):
            raise TypeError(f"a {type(state).__name__}, not a record")
        if state["format"] not in (_FORMAT, _LEAVES):
            raise ValueError(f"format {state['format']}, expected {_FORMAT} or {_LEAVES}")
        ids = [BatchId(*map(int, row)) for row in state["batches"].tolist()]
        log: list[PushRecord] = []
        at = 0
        for worker, version, staleness, status, n in state["pushes"].tolist():
            batches = tuple(ids[at : at + n])
            log.append(PushRecord(worker, version, staleness, _STATUSES[status], batches))
            at += n
        return SavedRecord(
            state["mode"],
            tuple(log),
            state["final"],
            FaultCounters(**state["faults"]),
            state.get("start"),
            state.get("data"),
        )
    except (OSError, RuntimeError, pickle.UnpicklingError, LookupError, TypeError, ValueError) as e:
        raise CannotReapply(f"{path}: not a readable record ({type(e).__name__}: {e})") from None


# --- planning ------------------------------------------------------------------------------


def read_run(run_dir: Path, only: str | None = None) -> tuple[BenchConfig, list[str], list[str]]:
    """The run's config, the modes to reapply (``only``, or every recorded one) and a note for
    each mode skipped. CannotReapply, with the reason, when nothing can be reapplied."""
    try:
        cfg = load_config(BenchConfig, run_dir / "config.yaml")
    except ConfigError as e:
        from rltrain.yaml_files import read_yaml

        if {"algo", "env"} & set(read_yaml(run_dir / "config.yaml")):  # train's sections
            raise CannotReapply(
                f"{run_dir} is an `rltrain train` run; reapply takes an `rltrain bench` run "
                "recorded with server.record=true"
            ) from None
        hint = ""
        if str(e).startswith("modes["):  # a rule the bench's script registered, not here
            hint = "; a rule registered by your own module needs that module in imports"
        raise CannotReapply(f"{run_dir}: its config.yaml does not load ({e}){hint}") from None
    if not cfg.server.record:  # (what else a recorded run needs: explore114, review89)
        also = {"model.stages=1": cfg.model.stages > 1, "seeds=1": cfg.seeds > 1}
        also["server.shards=1"] = cfg.server.shards != 1
        sets = "".join(f" --set {k}" for k, v in also.items() if v)
        raise CannotReapply(
            f"{run_dir}: not recorded (server.record was false); run `rltrain bench` with "
            f"--set server.record=true{sets}"
        )
    if only is not None:
        if only not in cfg.modes:
            raise CannotReapply(
                f"{run_dir}: mode {only} was not run (modes: {', '.join(cfg.modes)})"
            )
        why_not = not_reapplied_why(only)
        if why_not:
            raise CannotReapply(f"{only} cannot be reapplied: {why_not}")
    todo: list[str] = []
    notes: list[str] = []
    finished = finished_modes(run_dir)
    for mode in [only] if only else cfg.modes:
        why = not_reapplied_why(mode) or None
        if why is None and not record_path(run_dir, mode).is_file():
            if mode in finished:  # written as it finished: moved or deleted since
                raise CannotReapply(
                    f"{mode}: no {record_path(run_dir, mode)}, though the mode finished "
                    "(summary.json); it was moved or deleted"
                )
            why = f"no {record_path(run_dir, mode)} (the mode did not finish)"
        if why is not None:
            notes.append(f"{mode}: not reapplied: {why}")
        else:
            todo.append(mode)
    if not todo:
        raise CannotReapply(f"{run_dir}: nothing to reapply; {'; '.join(notes)}")
    return cfg, todo, notes


def finished_modes(run_dir: Path) -> set[str]:
    """The modes summary.json has results of (none where it is missing or unreadable)."""
    try:
        results = json.loads((run_dir / "summary.json").read_text()).get("results")
        return {r["mode"] for r in results if isinstance(r, dict) and "mode" in r}
    except (OSError, ValueError, AttributeError, TypeError):
        return set()


# --- reapplying ---------------------------------------------------------------------------


def reapply_run(run_dir: Path, only: str | None = None) -> bool:
    """`rltrain reapply RUN [--mode M]`: reapply every recorded mode (or ``only``), printing a
    line for each; whether every one came out equal, each push decided as logged."""
    cfg, modes, notes = read_run(run_dir, only)
    for note in notes:
        print(f"reapply {note}")
    recorded = load_record(record_path(run_dir, modes[0])).data
    cfg = recorded_root(cfg, recorded)
    data = load_recorded_data(cfg, recorded)
    equal = True
    for mode in modes:
        r = reapply_mode(cfg, data, run_dir, mode)
        verdict = "equal" if r.equal else f"DIFFERENT (max |diff| {r.max_diff:.3g})"
        off = ""
        if r.mismatches:  # (a log it could not follow fails even where the parameters agree)
            off = f"; but {r.mismatches} pushes decided otherwise than logged: NOT FOLLOWED"
        print(f"reapply {mode}: {r.pushes} pushes; final parameters {verdict} (torch.equal){off}")
        equal = equal and r.equal and not r.mismatches
    return equal


def recorded_root(cfg: BenchConfig, recorded: dict | None) -> BenchConfig:
    """``cfg`` reading its data at the root the run read it at (absolute in the record): a
    relative data.root is the run's working folder's, not this one's. explore100: only the
    driver's check read it there, the replayed workers this folder's data (a false
    DIFFERENT). A record without it (an older rltrain's) is reapplied from that folder."""
    if recorded is None or not Path(recorded["root"]).is_dir():
        return cfg
    return dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, root=recorded["root"]))


def load_recorded_data(cfg: BenchConfig, recorded: dict | None) -> SplitDataset:
    """The data a recorded run trained on, read at its :func:`recorded_root` and checked
    against its print (sizes and CRC; the folder it was found in may have moved)."""
    cfg = recorded_root(cfg, recorded)
    root = cfg.data.root
    data = load_data(cfg.data)
    if recorded is None:
        return data
    now = data_print(data, root)
    if any(now[k] != recorded.get(k) for k in _PRINTED):
        raise CannotReapply(
            f"the {cfg.data.dataset} at {root} ({now['train']} training samples, CRC-32 "
            f"{now['crc32']:08x}) is not the data the run trained on ({recorded['train']}, "
            f"{recorded['crc32']:08x}); reapply reads the very samples the run read"
        )
    return data


def reapply_mode(cfg: BenchConfig, data: SplitDataset, run_dir: Path, mode: str) -> ReapplyResult:
    """Reapply ``record/<mode>.pt`` and compare with its final parameters."""
    saved = load_record(record_path(run_dir, mode))
    # a restore is followed from the restore point the log begins at (a restarted shard's)
    lost = saved.faults.left_barrier + (saved.faults.shard_restores if saved.start is None else 0)
    if lost:
        raise CannotReapply(
            f"{mode}: the run restored its shard or went on without a lost worker ({lost} "
            "times), which the log does not follow"
        )
    params, mismatches = reapply_log(cfg, data, mode, saved.log, saved.start)
    equal = torch.equal(params, saved.final)  # False for another shape too
    pushes = sum(1 for p in saved.log if p.status != "left")
    return ReapplyResult(mode, pushes, equal, _max_diff(params, saved.final), mismatches)


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    if a.shape != b.shape:
        return float("inf")
    return float((a.double() - b.double()).abs().max()) if a.numel() else 0.0


def reapply_log(
    cfg: BenchConfig,
    data: SplitDataset,
    mode: str,
    log: Sequence[PushRecord],
    start: dict | None = None,
) -> tuple[torch.Tensor, int]:
    """Push the logged updates again, one after the other: each batch's gradient recomputed
    on the parameters of its logged version, by the worker that computed it; from the
    initial parameters, or from ``start`` (the restore point a restored shard's log begins
    at: the parameters after a restore are the point's plus the updates logged after it).

    Returns the final parameters [P] and how many pushes the shard decided otherwise than
    the log says (status or staleness; 0 when the shard followed the run).
    """
    specs = worker_specs(cfg, mode, data, cfg.workers)
    specs = [dataclasses.replace(s, faults=()) for s in specs]  # no injected stragglers
    server = dataclasses.replace(specs[0].server, record=False)
    last_use = {b.version: i for i, p in enumerate(log) for b in p.batches}
    saved_threads = torch.get_num_threads()
    try:
        # each worker's shard of the data read and checked (load_recorded_data), not read
        # again from cfg.data.root
        parts = [src.cut(data.train) for src in shards(cfg, cfg.workers)]
        workers = [SupervisedWorker(s, part) for s, part in zip(specs, parts, strict=True)]
        shard = ParameterShard(initial_params(cfg, data), cfg.optimizer, server, cfg.workers)
        if start is not None:
            shard.load_state_dict(start)
        # parameters by version, while a later push needs them
        held = {shard.version: _pulled(shard)}
        mismatches = 0
        for i, rec in enumerate(log):
            if not 0 <= rec.worker_id < len(workers) or not (rec.batches or rec.status == "left"):
                raise CannotReapply(f"{mode}: push {i} names no batches or an unknown worker")
            if rec.status == "left":  # a worker the barriers stopped waiting for, here as then
                shard.leave(rec.worker_id)
            elif rec.status == "dropped" and any(b.version not in held for b in rec.batches):
                continue  # computed before the restore, and dropped for it: it changed nothing
            else:
                # torch threads as in each process: a float reduction's result depends on them
                _set_threads(specs[rec.worker_id].threads)
                update = _recompute(workers[rec.worker_id], rec, held, mode, i)
                _set_threads(1)  # the shard's process (runtime.wire.WireShard)
                result = shard.push(update)
                mismatches += (result.status, result.staleness) != (rec.status, rec.staleness)
            for b in rec.batches:
                if last_use[b.version] == i:
                    held.pop(b.version, None)
            if last_use.get(shard.version, -1) > i and shard.version not in held:
                held[shard.version] = _pulled(shard)
        return _pulled(shard), mismatches
    finally:
        torch.set_num_threads(saved_threads)


def _pulled(shard: ParameterShard) -> torch.Tensor:
    """The shard's parameters (a pull without ``newer_than`` always returns them)."""
    params = shard.pull()
    assert params is not None
    return params.values


def _recompute(
    worker: SupervisedWorker, rec: PushRecord, held: dict[int, torch.Tensor], mode: str, i: int
) -> GradUpdate:
    """The update of one logged push, summed as the worker summed it (:class:`GradSum`)."""
    acc, loss = GradSum(), 0.0
    for b in rec.batches:
        if b.version not in held:
            raise CannotReapply(
                f"{mode}: push {i} used parameters of version {b.version}, which reapplying "
                "never reached"
            )
        grad, loss, samples = worker.gradient(held[b.version], b)
        acc.add(grad, samples, b)
    return acc.to_update(rec.worker_id, rec.version, loss)


def _set_threads(n: int) -> None:
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
