"""The machine a run ran on, as its summary.json keeps it: figures of speed compare only on one
kind of machine, torch build and load (explore106: a bench's speeds swung 13x with the load of
a run beside it, and nothing in the run folder said on what machine, torch or load it ran)."""

from __future__ import annotations

import os
import platform
import time
from typing import Any


def usable_cores() -> int:
    """The cores this process may run on (a container's or taskset's limit, not the host's)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return cores or 1


_load_at_start: list[float | None] = [None]
_started_at: list[float | None] = [None]


def load_now() -> float | None:
    """The load average of the last minute (None where the platform has none)."""
    return round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None


def mark_start() -> None:
    """Keep the load as a command starts, before its own processes add theirs (review87: at
    the end, four workers of an idle 2-core box showed a load of about 4)."""
    _load_at_start[0] = load_now()
    _started_at[0] = time.time()


def started_at() -> float:
    """The Unix time :func:`mark_start` marked (now, where nothing marked it)."""
    return _started_at[0] if _started_at[0] is not None else time.time()


def machine() -> dict[str, Any]:
    """rltrain's, Python's and torch's versions, the CUDA build and its devices (counted, not
    opened: no CUDA context in the driver), the CPU's model, the cores usable, and the load
    average of the last minute as the command started (:func:`mark_start`: what ran beside
    it) and as the summary is written (its own processes' too)."""
    import torch

    from rltrain import __version__

    return {
        "rltrain": __version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cuda_devices": torch.cuda.device_count() if torch.version.cuda else 0,
        "cpu": cpu_model(),
        "cores": usable_cores(),
        "load_1min_at_start": _load_at_start[0],
        "load_1min_at_end": load_now(),
    }


def cpu_model() -> str:
    """The CPU's model name (Linux's /proc/cpuinfo), else what the platform says."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
