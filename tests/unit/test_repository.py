"""The unit of work is one loop for every change; a change that resolves a run hands it the resolution's steps
(shared/operations/resolution/steps.py). One that does not is refused before anything is written: without those
steps nothing would follow the resolution (no resolution message, no dependents released)."""

from __future__ import annotations

import pytest

from shared.domain.tasks import Run, Task
from shared.operations.writes.repository import Before, ResolutionWithoutItsSteps, Unchanged
from shared.runtime import Queue
from tests.clock import Clock
from tests.unit.helpers import claim_all, create


async def test_a_resolution_without_its_steps_is_refused_and_writes_nothing(service: Queue, clock: Clock) -> None:
    task_id, definition = await create(service)
    await claim_all(service, definition["taskQueueId"])
    stored = await service.tasks.load(task_id)

    async def complete(task: Task) -> Unchanged | None:
        task.runs[-1].resolve("completed", "completed", clock())
        task.emit("task-completed", 0)
        return None

    with pytest.raises(ResolutionWithoutItsSteps):
        await service.tasks.modify(task_id, complete)
    service.tasks.known.forget(task_id)
    after = await service.tasks.load(task_id)
    assert after.etag == stored.etag and after.state == "running"


async def test_a_run_resolved_and_retried_needs_the_steps_too(service: Queue, clock: Clock) -> None:
    """The task goes on (a retry), but the run it had resolved: its live logs are sealed by those steps."""
    task_id, definition = await create(service)
    await claim_all(service, definition["taskQueueId"])

    async def retried(task: Task) -> Unchanged | None:
        task.runs[-1].resolve("exception", "worker-shutdown", clock())
        task.runs.append(Run("pending", "retry", clock()))
        return None

    with pytest.raises(ResolutionWithoutItsSteps):
        await service.tasks.modify(task_id, retried)
    assert (await service.lifecycle.resolve(task_id, 0, "exception", "worker-shutdown")).state == "pending"


async def test_what_a_change_resolves_is_told_from_the_task_before_it(service: Queue, clock: Clock) -> None:
    task_id, definition = await create(service)
    pending = await service.tasks.load(task_id)
    before = Before.of(pending)
    assert not before.resolves_a_run(pending)  # nothing changed
    pending.runs[-1].resolve("exception", "canceled", clock())
    assert before.resolving(pending) and before.resolves_a_run(pending)
    await claim_all(service, definition["taskQueueId"])
    await service.lifecycle.resolve(task_id, 0, "failed", "failed")
    failed = await service.tasks.load(task_id)
    rerun = Before.of(failed)
    failed.runs.append(Run("pending", "rerun", clock()))
    assert not rerun.resolving(failed) and not rerun.resolves_a_run(failed)  # a rerun resolves nothing


async def test_changes_that_resolve_go_through_with_their_steps(service: Queue) -> None:
    """cancelTask (a pending run) and a report (a running one) resolve through the same loop, steps handed."""
    cancelled, _ = await create(service)
    assert (await service.lifecycle.cancel_task(cancelled)).state == "exception"
    task_id, definition = await create(service)
    await claim_all(service, definition["taskQueueId"])
    assert (await service.lifecycle.resolve(task_id, 0, "completed", "completed")).state == "completed"
