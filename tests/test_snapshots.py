"""The bench's parameter snapshots (rltrain.supervised.modes.Snapshotter): bounded in number
whatever ``eval.every_seconds`` asks."""

from __future__ import annotations

import io

import torch

from rltrain.progress import Progress
from rltrain.records import Params, ServerStats
from rltrain.supervised.modes import MAX_SNAPSHOTS, Snapshotter, thinned


class _Server:
    """A server whose version goes up by one at every pull."""

    def __init__(self) -> None:
        self.version = 0

    def pull(self) -> Params:
        self.version += 1
        return Params(self.version, torch.zeros(3))

    def stats(self) -> ServerStats:
        return ServerStats(self.version, self.version, 0, 0, self.version, 0)


def test_snapshots_are_thinned_and_spaced_out_not_kept_without_end() -> None:
    """A tiny every_seconds took 750 snapshots in 2 s (1.1 GB) and an evaluation of them that
    had not ended after 699 s: at MAX_SNAPSHOTS, every other one goes and the interval doubles;
    the first (the initial parameters) and the newest stay."""
    out = io.StringIO()
    snapper = Snapshotter(_Server(), 0.001, 10.0, Progress("[t]", stream=out))  # type: ignore[arg-type]
    for _ in range(3 * MAX_SNAPSHOTS):
        snapper.take()
    versions = [s.stats.version for s in snapper.snaps]
    assert len(versions) < MAX_SNAPSHOTS and versions == sorted(versions)
    assert versions[0] == 1 and versions[-1] == 3 * MAX_SNAPSHOTS
    assert snapper.every == 0.001 * 2**5  # thinned at the 256th, 383rd, 510th, 637th, 764th
    assert f"{MAX_SNAPSHOTS} snapshots: half kept" in out.getvalue()


def test_thinned_keeps_the_first_and_the_newest() -> None:
    assert thinned(list(range(6))) == [0, 1, 3, 5]
    assert thinned(list(range(5))) == [0, 2, 4]


def test_a_ctrl_c_in_the_evaluation_cuts_it_to_a_few_snapshots_the_last_included() -> None:
    """The bench's first Ctrl-C waits for the mode's evaluation (it has trained and keeps its
    results): from then on, HURRIED more snapshots, spread to the last, not all of them."""
    from rltrain.supervised.evaluation import HURRIED, _order

    calls = [0]

    def hurry() -> bool:  # a Ctrl-C as the third snapshot is scored
        calls[0] += 1
        return calls[0] >= 3

    order = list(_order(200, hurry))
    assert order[:3] == [0, 1, 2] and order[-1] == 199 and len(order) == 3 + HURRIED
    assert order == sorted(set(order))
    assert list(_order(6, lambda: True)) == [0, 1, 2, 3, 4, 5]  # fewer left than HURRIED
    assert list(_order(4, lambda: False)) == [0, 1, 2, 3]


def test_the_line_at_the_budgets_end_is_always_said_once() -> None:
    """A log's lines are seconds apart: hogwild's last said 50% at 6 s of a 12 s budget, and
    its end went unsaid."""
    out = io.StringIO()
    snapper = Snapshotter(_Server(), 0.001, 0.05, Progress("[t]", stream=out))  # type: ignore[arg-type]
    snapper.take()  # (the first line: said)
    snapper.t0 -= 0.1  # the budget has passed
    snapper.take()
    snapper.take()
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and lines[-1].startswith("[t] 100%")


def test_the_line_at_the_budgets_end_is_not_read_as_the_result() -> None:
    """explore100: "100%  4s  samples 1,536" then the result line, of 1,664 samples (the
    steps in flight at the budget's end): two counts for one mode, the last line not the
    result. It is labelled as the budget's end, the result to follow."""
    out = io.StringIO()
    snapper = Snapshotter(_Server(), 0.001, 0.05, Progress("[t]", stream=out))  # type: ignore[arg-type]
    snapper.take()
    snapper.t0 -= 0.1  # the budget has passed
    snapper.take()
    first, last = out.getvalue().splitlines()
    assert "budget reached" not in first
    assert last.startswith("[t] 100% budget reached: ") and "samples 2  " in last
    assert last.endswith("; the result, with the steps in flight, follows")
