"""The one driver loop: results and faults go to the plan's hooks; refill and tick each round."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rltrain.driver import drive


@dataclass
class FakeDone:
    remote: str
    value: Any = None
    error: BaseException | None = None
    revived: bool = False


class FakeCalls:
    def __init__(self, rounds: list[list[FakeDone]]) -> None:
        self.rounds = rounds

    def wait(self, timeout: float) -> list[FakeDone]:
        return self.rounds.pop(0) if self.rounds else []


class RecordingPlan:
    def __init__(self, calls: FakeCalls) -> None:
        self.calls = calls
        self.log: list[str] = []

    def start(self) -> None:
        self.log.append("start")

    def on_result(self, done: FakeDone) -> None:
        self.log.append(f"result {done.remote}={done.value}")

    def on_fault(self, done: FakeDone) -> None:
        self.log.append(f"fault {done.remote}" + (" back" if done.revived else ""))

    def refill(self) -> None:
        self.log.append("refill")

    def keep_going(self) -> bool:
        return bool(self.calls.rounds)

    def wait_s(self) -> float:
        return 0.0

    def tick(self) -> None:
        self.log.append("tick")


def test_results_and_faults_reach_their_hooks_in_rounds() -> None:
    calls = FakeCalls(
        [
            [FakeDone("a", 1), FakeDone("b", error=RuntimeError("died"))],
            [FakeDone("b", revived=True)],
        ]
    )
    plan = RecordingPlan(calls)
    drive(calls, plan)
    assert plan.log == [
        "start",
        "result a=1",
        "fault b",
        "refill",
        "tick",
        "fault b back",
        "refill",
        "tick",
    ]


def test_every_rl_algorithm_and_the_bench_have_a_plan() -> None:
    from rltrain.rl.algos import algo_names, algo_spec
    from rltrain.rl.run.plans import plan_of
    from rltrain.supervised.bench import BenchPlan

    layouts = {algo_spec(name).layout for name in algo_names()}
    assert layouts == {"worker", "actor_learner", "replay"}
    for plan in [*(plan_of(layout) for layout in layouts), BenchPlan]:
        for hook in ("start", "on_result", "on_fault", "refill", "keep_going", "wait_s", "tick"):
            assert callable(getattr(plan, hook))


def test_a_lockstep_rounds_results_are_taken_in_the_workers_order() -> None:
    """explore85: identical sync runs (bit for bit the same training) logged their episodes in
    the order the workers' calls arrived, so at different steps, with different means (115.70
    vs 114.55) and stops. A round's results are taken in as it ends, worker 0's first."""
    from types import SimpleNamespace

    from rltrain.driver import Done
    from rltrain.rl.run.plans import WorkerPlan

    absorbed: list[str] = []
    given: list[Any] = []
    plan = object.__new__(WorkerPlan)  # (its hooks alone: no processes, no server)
    plan.host = SimpleNamespace(absorb=absorbed.append, stopped_by="")  # type: ignore[assignment]
    plan.pool = SimpleNamespace(calls=1)
    plan.lockstep, plan.idle, plan.landed = True, [], []
    plan._give = given.append  # type: ignore[method-assign]
    w0, w1 = SimpleNamespace(index=0), SimpleNamespace(index=1)
    plan.on_result(Done(w1, value="w1's"))
    plan.refill()
    assert absorbed == [] and given == []  # mid-round: worker 0's call is in flight
    plan.pool.calls = 0
    plan.on_result(Done(w0, value="w0's"))
    plan.refill()
    assert absorbed == ["w0's", "w1's"] and given == [w1, w0]  # then the next round
    plan.pool.calls = 1
    plan.on_result(Done(w1, value="cut"))
    plan.flush()  # a fault ended the run mid-round: what landed still counts, once
    plan.flush()
    assert absorbed[-1] == "cut" and absorbed.count("cut") == 1
    plan.lockstep = False  # a3c: each as it comes, and given its next call at once
    plan.on_result(Done(w1, value="again"))
    assert absorbed[-1] == "again"
