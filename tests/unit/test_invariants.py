"""The audit (shared/maintenance/invariants.py) finds each kind of broken state it names, and nothing in a
healthy one: rows removed or left behind by hand on the memory connector."""

from __future__ import annotations

from shared.domain.groups import ACTIVE, GROUPS_TABLE
from shared.domain.queue_runs import TASK_QUEUE_RUNS_TABLE
from shared.maintenance.invariants import audit
from shared.runtime import Queue
from tests.unit.helpers import create


async def found(service: Queue, *, settled: bool) -> list[tuple[str, str]]:
    return [(v.invariant, v.task_id) for v in (await audit(service.stores, settled=settled)).violations]


async def test_a_healthy_graph_has_no_violation(service: Queue) -> None:
    root, _ = await create(service)
    await create(service, dependencies=[root], taskGroupId=root)
    assert await found(service, settled=False) == []


async def test_an_unresolved_task_missing_from_its_groups_active_set(service: Queue) -> None:
    task_id, _ = await create(service)  # its own group, by default
    assert await service.stores.tables.delete(GROUPS_TABLE, task_id, ACTIVE + task_id)
    assert await found(service, settled=False) == [("group-active", task_id)]


async def test_a_pending_run_missing_from_its_task_queues_run_index(service: Queue) -> None:
    task_id, definition = await create(service)
    partition = service.stores.queue_runs.runs_partition(definition["taskQueueId"], task_id)
    assert await service.stores.tables.delete(TASK_QUEUE_RUNS_TABLE, partition, task_id)
    assert await found(service, settled=False) == [("run-index", task_id)]


async def test_a_dependent_still_waiting_for_a_resolved_dependency(service: Queue) -> None:
    # The unit tier leaves a resolution's dependents to its message, which nobody runs here: the dependent stays
    # waiting, which the settled audit reports (and the unsettled one, run while messages may be in flight, not).
    root, _ = await create(service)
    dependent, _ = await create(service, dependencies=[root], requires="all-resolved", taskGroupId=root)
    await service.lifecycle.cancel_task(root)
    assert ("dependents-released", dependent) in await found(service, settled=True)
    assert ("dependents-released", dependent) not in await found(service, settled=False)
