"""matplotlib when it is there: a chart is a by-product of a run, never the reason to lose one.

A bare box (a GPU machine with PyTorch and no matplotlib, say) still gets every table, JSON
and event file; the charts are skipped with one line that says how to get them.
"""

from __future__ import annotations

from types import ModuleType

NO_MATPLOTLIB = "no chart: matplotlib is not installed (pip install matplotlib)"


def pyplot() -> ModuleType | None:
    """``matplotlib.pyplot`` on the Agg backend (files, no display), or None without
    matplotlib."""
    try:
        import matplotlib
    except ModuleNotFoundError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
