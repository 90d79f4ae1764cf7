"""A dependent task keeps what it still waits for on its own row (shared/domain/dependencies.py): no requirement
rows, no read after its write; each resolution takes itself out of the list, the last one schedules it. Tasks
written with requirement rows (more than IN_ROW dependencies, or before the change) are still released."""

from __future__ import annotations

import asyncio

import pytest

from shared import errors
from shared.domain.dependencies import ATTACH_AT_ONCE, REQUIREMENTS_TABLE
from shared.domain.messages import RESOLVED_QUEUE, ResolvedCheck
from shared.operations import creation
from shared.runtime import Queue
from tests.answers import claim_work, resolution_messages
from tests.clock import Clock
from tests.conftest import slugid, task_definition
from tests.services import memory_service
from tests.unit.helpers import claim_all, create

pytestmark = pytest.mark.service(hint_grace=5)


async def follow_resolutions(service: Queue) -> int:
    """Run the resolution messages' handler until none is left; how many it ran."""
    ran = 0
    while messages := await resolution_messages(service):
        for _, message in messages:
            await service.resolution.follow_up(ResolvedCheck.decode(message.json()))
            ran += 1
    return ran


CLAIMED: set[str] = set()


async def complete(service: Queue, tq: str, *task_ids: str, state: str = "completed") -> None:
    """Claim what is pending (remembered across calls), then resolve `task_ids` and follow their resolutions."""
    while fresh := [t for t, _ in await claim_all(service, tq)]:
        CLAIMED.update(fresh)
    assert set(task_ids) <= CLAIMED, task_ids
    for task_id in task_ids:
        await service.lifecycle.resolve(task_id, 0, state, state)  # type: ignore[arg-type]
    await follow_resolutions(service)


async def requirement_rows(service: Queue, task_id: str) -> list[str]:
    page = await service.stores.tables.query(REQUIREMENTS_TABLE, "PartitionKey eq @pk", {"pk": task_id})
    return [e.row_key for e in page.entities]


async def test_the_list_is_kept_on_the_row_and_emptied_by_the_resolutions(service: Queue) -> None:
    a, definition = await create(service)
    tq = definition["taskQueueId"]
    b, _ = await create(service, taskQueueId=tq)
    d, _ = await create(service, taskQueueId=tq, dependencies=[a, b, a])
    task = await service.tasks.load(d)
    assert task.waiting == [a, b] and task.state == "unscheduled"
    assert await requirement_rows(service, d) == []
    await complete(service, tq, a)
    task = await service.tasks.load(d)
    assert task.waiting == [b] and task.state == "unscheduled"
    await complete(service, tq, b)
    task = await service.tasks.load(d)
    assert task.waiting == [] and task.state == "pending" and len(task.runs) == 1
    # Every resolution again: nothing changes.
    for dep in (a, b):
        await service.resolution.resolve_dependencies(ResolvedCheck(dep, 0, dep, None, service.stores.now()))
    assert len((await service.tasks.load(d)).runs) == 1


async def test_a_dependency_resolved_before_is_not_waited_for(service: Queue) -> None:
    a, definition = await create(service)
    tq = definition["taskQueueId"]
    b, _ = await create(service, taskQueueId=tq)
    await complete(service, tq, a)
    d, _ = await create(service, taskQueueId=tq, dependencies=[a, b])
    assert (await service.tasks.load(d)).waiting == [b]
    # All satisfied when read: pending at once, in the task's first write (one write, its two events).
    e, _ = await create(service, taskQueueId=tq, dependencies=[a])
    task = await service.tasks.load(e)
    assert task.state == "pending" and task.waiting == [] and task.event_seq == 2


async def test_all_completed_waits_and_all_resolved_does_not(service: Queue) -> None:
    a, definition = await create(service)
    tq = definition["taskQueueId"]
    strict, _ = await create(service, taskQueueId=tq, dependencies=[a])
    lenient, _ = await create(service, taskQueueId=tq, dependencies=[a], requires="all-resolved")
    await complete(service, tq, a, state="failed")
    assert (await service.tasks.load(strict)).state == "unscheduled"
    assert (await service.tasks.load(strict)).waiting == [a]
    assert (await service.tasks.load(lenient)).state == "pending"


async def test_a_self_dependency_waits_for_schedule_task(service: Queue) -> None:
    a, definition = await create(service)
    tq = definition["taskQueueId"]
    d = slugid()
    body = task_definition(taskQueueId=tq, dependencies=[a, d])
    from tests.conftest import schema_defaults

    await service.creation.create_task(d, dict(body, **schema_defaults(body)))
    await complete(service, tq, a)
    task = await service.tasks.load(d)
    assert task.waiting == [d] and task.state == "unscheduled"
    assert (await service.lifecycle.schedule_task(d)).state == "pending"


async def test_tasks_with_requirement_rows_are_still_released(service: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows written before the list was kept on the row (IN_ROW 0 writes them as then): released by the same
    resolutions, beside tasks that keep their list."""
    a, definition = await create(service)
    tq = definition["taskQueueId"]
    b, _ = await create(service, taskQueueId=tq)
    monkeypatch.setattr(creation, "IN_ROW", 0)
    old, _ = await create(service, taskQueueId=tq, dependencies=[a, b])
    monkeypatch.undo()
    new, _ = await create(service, taskQueueId=tq, dependencies=[a, b])
    assert (await service.tasks.load(old)).waiting is None and sorted(await requirement_rows(service, old)) == sorted(
        [a, b]
    )
    assert (await service.tasks.load(new)).waiting == [a, b]
    await complete(service, tq, a)
    assert {(await service.tasks.load(t)).state for t in (old, new)} == {"unscheduled"}
    await complete(service, tq, b)
    assert {(await service.tasks.load(t)).state for t in (old, new)} == {"pending"}


async def test_a_refused_task_leaves_its_group_and_the_group_still_resolves(service: Queue) -> None:
    group = slugid()
    a, definition = await create(service, taskGroupId=group)
    tq = definition["taskQueueId"]
    refused = slugid()
    body = task_definition(taskQueueId=tq, taskGroupId=group, dependencies=[a, slugid()])
    from tests.conftest import schema_defaults

    with pytest.raises(errors.InputError):
        await service.creation.create_task(refused, dict(body, **schema_defaults(body)))
    assert await service.stores.groups.all_members(group) == [a]
    assert not await service.stores.groups.is_active(group, refused)
    assert await service.stores.deps.dependents(a, limit=10, continuation=None, here=True) == ([], None)
    await complete(service, tq, a)
    assert await service.stores.groups.is_active(group, a) is False
    recorded, _ = await service.groups.events(group, limit=100, continuation=None)
    assert recorded[-1][1].exchange.endswith("task-group-resolved")


async def test_a_release_for_a_dependent_never_written_gives_up_after_the_grace(service: Queue, clock: Clock) -> None:
    a, definition = await create(service)
    tq = definition["taskQueueId"]
    await complete(service, tq, a)
    never = slugid()
    check = ResolvedCheck(a, 0, a, None, service.stores.now(), dependent=never)
    assert ResolvedCheck.decode(__import__("json").loads(check.encode())) == check
    assert await service.resolution.follow_up(check) == "not-yet"
    assert (
        len(
            await service.stores.queues.receive(
                RESOLVED_QUEUE,
                32,
                30,
            )
        )
        <= 1
    )  # put back, hidden a while
    clock.advance(6)
    assert await service.resolution.follow_up(check) == "stale"


async def test_fifty_dependents_of_one_build_each_released_once(service: Queue) -> None:
    build, definition = await create(service)
    tq = definition["taskQueueId"]
    image, _ = await create(service, taskQueueId=tq)
    tests = [(await create(service, taskQueueId=tq, dependencies=[build, image]))[0] for _ in range(50)]
    await complete(service, tq, build, image)
    claimed: list[str] = []
    while fresh := await claim_work(service, tq, "g", "w", 32):
        claimed += [c["status"]["taskId"] for c in fresh]
    assert sorted(claimed) == sorted(tests)
    assert [len((await service.tasks.load(t)).runs) for t in tests] == [1] * 50


async def test_a_remembered_dependency_is_proven_by_its_edge_not_read() -> None:
    """The dependency this process remembers: its edge goes in one transaction with its flag, conditional on the
    row remembered, which stands for the read; a row changed elsewhere meanwhile fails that transaction, and the
    dependency is read. The edges of one dependency that come together share a transaction."""
    from shared.domain.tasks import TASKS_TABLE
    from shared.storage.memory import MemoryTables

    class Calls(MemoryTables):
        reads: list[str] = []
        transactions: list[str] = []

        async def get(self, table: str, partition_key: str, row_key: str, *args: object, **kwargs: object):
            if table == TASKS_TABLE:
                self.reads.append(partition_key)
            return await super().get(table, partition_key, row_key, *args, **kwargs)  # type: ignore[arg-type]

        async def commit(self, table: str, ops: list):  # type: ignore[override]
            self.transactions.append(ops[0].entity.partition_key)
            return await super().commit(table, ops)

    tables = Calls()
    service = memory_service(tables=tables)
    root, definition = await create(service)
    tq = definition["taskQueueId"]
    d, _ = await create(service, taskQueueId=tq, dependencies=[root])
    assert root not in tables.reads and (await service.tasks.load(root)).dependents_here is True
    assert (await service.tasks.load(d)).waiting == [root]
    tables.transactions.clear()
    import asyncio

    together = await asyncio.gather(*(create(service, taskQueueId=tq, dependencies=[root]) for _ in range(20)))
    assert 1 <= tables.transactions.count(root) <= 2  # the first alone, those that came meanwhile together
    # Changed by another process (claimed there): the remembered row is stale, the transaction fails, it is read.
    other, _ = await create(service, taskQueueId=tq)
    elsewhere = memory_service(tables=tables, queues=service.stores.queues)
    await claim_all(elsewhere, tq)
    tables.reads.clear()
    e, _ = await create(service, taskQueueId=tq, dependencies=[other])
    assert other in tables.reads
    assert (await service.tasks.load(other)).dependents_here is True and (await service.tasks.load(e)).waiting == [
        other
    ]
    listed, _ = await service.stores.deps.dependents(root, limit=100, continuation=None, here=True, legacy=False)
    assert sorted(t.task_id for t in listed) == sorted([d, *(t for t, _ in together)])


async def test_a_long_list_is_kept_on_the_row_its_edges_written_a_page_at_a_time(
    service: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A summary of 300 test chunks (a large push's fan-in) keeps its list on its row: no requirement rows; its
    300 edge transactions go ATTACH_AT_ONCE at a time, not all at once; the last resolution schedules it."""
    first, definition = await create(service)
    tq = definition["taskQueueId"]
    deps = [first, *[(await create(service, taskQueueId=tq))[0] for _ in range(299)]]
    tables = service.stores.tables
    commit = tables.commit
    in_flight, most = 0, 0

    async def counted(*args: object, **kwargs: object) -> object:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        try:
            await asyncio.sleep(0.001)  # each transaction a round trip, so that they overlap
            return await commit(*args, **kwargs)  # type: ignore[arg-type]
        finally:
            in_flight -= 1

    monkeypatch.setattr(tables, "commit", counted)
    summary, _ = await create(service, taskQueueId=tq, dependencies=deps)
    monkeypatch.undo()
    assert most == ATTACH_AT_ONCE, most
    task = await service.tasks.load(summary)
    assert task.waiting == deps and task.state == "unscheduled"
    assert await requirement_rows(service, summary) == []
    await complete(service, tq, *deps[:-1])
    task = await service.tasks.load(summary)
    assert task.waiting == deps[-1:] and task.state == "unscheduled"
    await complete(service, tq, deps[-1])
    assert (await service.tasks.load(summary)).state == "pending"
