"""The simulation of bench/costs.py (the worker cost model of docs/worker-pools.md): whatever the day, each policy
runs every task once, never more workers than its limit, and a pool that starts from zero makes the first task wait
at least a worker's start."""

from __future__ import annotations

import math

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from bench.costs import Outcome, Pool, Task, firefox_day

DAYS = st.builds(firefox_day, st.integers(1, 4), st.integers(1, 30), st.floats(0.5, 20), st.integers(0, 2**16))


@settings(max_examples=40, deadline=None)
@given(DAYS, st.integers(1, 20), st.floats(1, 60))
def test_every_task_runs_once_within_the_limit(tasks: list[Task], most: int, start: float) -> None:
    assume(tasks)
    jobs = Pool(start, 60.0, lambda want, have, busy: max(0, min(want, most) - have), ask_every=30.0)
    vms = Pool(start, 900.0, lambda want, have, busy: max(0, min(want, most - have)))
    for pool in (jobs, vms):
        outcome = pool.run(tasks, Outcome("p"))
        assert len(outcome.waits) == len(tasks)
        assert outcome.waits[0] >= start - 1e-9  # the first waited for a worker to start; later ones may not
        assert outcome.peak <= most
        assert math.isclose(outcome.busy, sum(t.runs for t in tasks))
        assert outcome.billed >= outcome.busy + outcome.idle - 1e-6  # every second billed, started or idle too


def test_always_on_workers_take_tasks_at_once_when_enough_are_idle() -> None:
    tasks = [Task(100.0, 50.0), Task(100.0, 50.0)]
    outcome = Pool(0.0, math.inf, lambda want, have, busy: 0).run(tasks, Outcome("always"), initial=2)
    assert outcome.waits == [0.0, 0.0] and outcome.started == 2
