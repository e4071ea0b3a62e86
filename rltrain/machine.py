"""The machine a run ran on, as its summary.json keeps it: figures of speed compare only on one
kind of machine, torch build and load (explore106: a bench's speeds swung 13x with the load of
a run beside it, and nothing in the run folder said on what machine, torch or load it ran)."""

from __future__ import annotations

import os
import platform
from typing import Any


def usable_cores() -> int:
    """The cores this process may run on (a container's or taskset's limit, not the host's)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return cores or 1


def machine() -> dict[str, Any]:
    """rltrain's, Python's and torch's versions, the CUDA build and its devices (counted, not
    opened: no CUDA context in the driver), the CPU's model, the cores usable and the load
    average of the last minute, as the summary is written."""
    import torch

    from rltrain import __version__

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return {
        "rltrain": __version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cuda_devices": torch.cuda.device_count() if torch.version.cuda else 0,
        "cpu": cpu_model(),
        "cores": usable_cores(),
        "load_1min": None if load is None else round(load, 2),
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
