"""Elastic workers: ``faults.events`` add / remove, with the barriers re-counting N (the
bench's server modes, :mod:`rltrain.supervised.bench`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from rltrain.faults import FaultEvent
from rltrain.supervised.worker import WorkerSpec


class Elastic:
    """Workers added and removed mid-run (``faults.events`` add / remove): Downpour's model
    replicas come and go, and the barrier rules re-count N."""

    def __init__(
        self,
        specs: list[WorkerSpec],
        spawn: Callable[[WorkerSpec, int], Any],
        guard: Any,
        procs: dict[str, list[Any]],
        say: Callable[[str], None],
        free_cpus: Callable[[], float],
        need_cpus: float,
    ) -> None:
        # membership changes go through the guard: a shard restored later is told them again
        self.specs, self.spawn, self.guard, self.procs, self.say = specs, spawn, guard, procs, say
        self.free_cpus, self.need_cpus = free_cpus, need_cpus
        self.removed: set[int] = set()

    def apply(self, e: FaultEvent) -> Any:
        """Carry out one event; returns a new worker to give work to (add), else None."""
        live = [w for w in self.procs["worker"] if w.index not in self.removed]
        if e.action == "remove":
            target = next((w for w in live if w.index == e.index), None)
            if target is None or len(live) == 1:
                why = "the last one" if target else "not there"
                self.say(f"skipped remove worker {e.index}: {why}")
                return None
            # it ends its run after this step and reports; then no barrier waits for it
            self.removed.add(target.index)
            target.call("stop")
            self.say(f"removed worker {e.index}: {len(live) - 1} workers")
            return None
        free = self.free_cpus()
        if free + 1e-9 < self.need_cpus:  # it would wait for a CPU, and the mode with it
            self.say(
                f"skipped add worker: {free:g} CPUs free, a worker reserves "
                f"runtime.worker_cpus={self.need_cpus:g} (remove one first, or add a node)"
            )
            return None
        new_id = max(w.index for w in self.procs["worker"]) + 1
        base = self.specs[e.index]
        spec = dataclasses.replace(base, worker_id=new_id, seed=base.seed - base.worker_id + new_id)
        self.guard.join(new_id)
        worker = self.spawn(spec, e.index)
        self.procs["worker"].append(worker)
        self.say(f"added worker {new_id} (on worker {e.index}'s data): {len(live) + 1} workers")
        return worker

    def stopped(self, index: int) -> None:
        """A worker's run returned: if it was removed, barriers stop counting it."""
        if index in self.removed:
            self.guard.leave(index)
            for w in self.procs["worker"]:
                if w.index == index:
                    w.kill()  # its CPUs are free for a worker added later
