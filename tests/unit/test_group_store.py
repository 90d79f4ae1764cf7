"""A task that is alone in the group named after it (the default taskGroupId) keeps that group in its own partition
(memory connector): the group is created in the task's creation transaction and resolved in its resolution's, with
no resolution message when nothing depends on the task; a second member, or a group that existed first, falls back
to the group's own transactions."""

from __future__ import annotations

from typing import Any

import pytest

from shared import errors
from shared.domain.groups import ACTIVE, GROUPS_TABLE, group_row
from shared.domain.messages import CLAIM_QUEUE, RESOLVED_QUEUE, ResolvedCheck
from shared.domain.tasks import TASKS_TABLE
from shared.runtime import Queue
from shared.storage.base import Op
from shared.storage.memory import MemoryQueues, MemoryTables
from tests.answers import resolution_messages
from tests.conftest import slugid
from tests.services import memory_service
from tests.unit.helpers import claim, task_definition


class CountingTables(MemoryTables):
    """Records each transaction as (table, partition, the kinds and row-key prefixes of its rows)."""

    def __init__(self) -> None:
        super().__init__()
        self.commits: list[tuple[str, str, list[str]]] = []

    async def commit(self, table: str, ops: list[Op]) -> list[str | None] | None:
        self.commits.append(
            (table, ops[0].entity.partition_key, [f"{op.kind} {op.entity.row_key.split(':')[0]}" for op in ops])
        )
        return await super().commit(table, ops)


class CountingQueues(MemoryQueues):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, str]] = []

    async def put(self, queue: str, content: bytes, **kwargs: Any) -> Any:
        self.calls.append(("put", queue))
        return await super().put(queue, content, **kwargs)

    async def release(self, queue: str, *args: Any, **kwargs: Any) -> Any:
        self.calls.append(("update", queue))
        return await super().release(queue, *args, **kwargs)

    async def delete(self, queue: str, *args: Any, **kwargs: Any) -> Any:
        self.calls.append(("delete", queue))
        return await super().delete(queue, *args, **kwargs)


@pytest.fixture
def tables() -> CountingTables:
    return CountingTables()


@pytest.fixture
def queues() -> CountingQueues:
    return CountingQueues()


async def group_events(service: Queue, group: str) -> list[str]:
    events, _ = await service.groups.events(group, limit=100, continuation=None)
    return [e.exchange for _, e in events]


async def test_its_group_is_created_and_resolved_in_the_tasks_own_transactions(
    service: Queue, tables: CountingTables, queues: CountingQueues
) -> None:
    task_id = slugid()
    await service.creation.create_task(task_id, task_definition())
    # One transaction: the task, its events and cursor, and the group's row, cursor, member and active rows.
    [(table, partition, rows)] = tables.commits
    assert (table, partition) == (TASKS_TABLE, task_id)
    assert {"insert task", "insert group", "upsert m", "upsert a", "upsert group-events"} <= set(rows)
    group = await service.groups.get(task_id)
    assert group.sole == task_id
    await claim(service, task_id)
    tables.commits.clear()
    queues.calls.clear()
    await service.lifecycle.resolve(task_id, 0, "completed", "completed")
    await service.stores.settled()
    # The resolution's transaction resolved the group too: its row, its event, the active row's delete.
    [(table, partition, rows)] = tables.commits
    assert (table, partition) == (TASKS_TABLE, task_id)
    assert {"replace task", "replace group", "upsert group-event", "delete a"} <= set(rows)
    assert await service.stores.tables.get(GROUPS_TABLE, task_id, ACTIVE + task_id) is None
    assert await group_events(service, task_id) == ["task-group-resolved"]
    # Nothing is left for a resolution message: none was put, and the claim check was deleted, not updated.
    assert ("delete", CLAIM_QUEUE) in queues.calls
    assert not [c for c in queues.calls if c[1] in (CLAIM_QUEUE, RESOLVED_QUEUE) and c[0] != "delete"]
    assert await resolution_messages(service, 0) == []


async def test_a_second_member_joining_meanwhile_keeps_the_group_open(
    tables: CountingTables, queues: CountingQueues
) -> None:
    service = memory_service(tables=tables, queues=queues)
    other = memory_service(tables=tables, queues=queues)  # another process: the first one's group row is stale
    first, second = slugid(), slugid()
    await service.creation.create_task(first, task_definition())
    await other.creation.create_task(second, task_definition(taskGroupId=first))
    await claim(service, first)
    await service.lifecycle.resolve(first, 0, "completed", "completed")
    assert (await service.tasks.load(first)).state == "completed"
    # The group row's condition failed the first try; the second left the group to the resolution message.
    assert await service.stores.tables.get(GROUPS_TABLE, first, ACTIVE + first) is not None
    [_] = await resolution_messages(service, 0)
    assert await group_events(service, first) == []
    assert (await service.groups.get(first)).sole == ""


async def test_a_task_named_after_a_group_that_exists_joins_it(tables: CountingTables, queues: CountingQueues) -> None:
    service = memory_service(tables=tables, queues=queues)
    other = memory_service(tables=tables, queues=queues)  # knows nothing of the group
    named, member = slugid(), slugid()
    await service.creation.create_task(member, task_definition(taskGroupId=named))
    await other.creation.create_task(named, task_definition())
    assert sorted(await service.stores.groups.all_members(named)) == sorted([named, member])
    assert (await service.groups.get(named)).sole == ""


async def test_a_task_refused_by_the_group_that_exists_writes_nothing(
    tables: CountingTables, queues: CountingQueues
) -> None:
    service = memory_service(tables=tables, queues=queues)
    other = memory_service(tables=tables, queues=queues)
    named, member = slugid(), slugid()
    await service.creation.create_task(member, task_definition(taskGroupId=named, schedulerId="one"))
    with pytest.raises(errors.RequestConflict):
        await other.creation.create_task(named, task_definition(schedulerId="two"))
    assert await other.tasks.get(named) is None
    assert await service.stores.groups.all_members(named) == [member]
    group = await service.stores.tables.get(GROUPS_TABLE, named, group_row(named))
    assert group is not None and group.data["schedulerId"] == "one"


async def test_a_rerun_resolves_again_through_the_resolution_message(service: Queue, tables: CountingTables) -> None:
    """The first resolution took the task out of its group's active set; a rerun does not put it back (as in
    Taskcluster, the group resolves again when the rerun resolves): the rerun's resolution leaves the group to the
    message, whose handler announces it."""
    task_id = slugid()
    await service.creation.create_task(task_id, task_definition())
    await claim(service, task_id)
    await service.lifecycle.resolve(task_id, 0, "completed", "completed")
    await service.lifecycle.rerun_task(task_id)
    await service.claims.claim(task_id, 1, "wg", "w1")
    tables.commits.clear()
    await service.lifecycle.resolve(task_id, 1, "completed", "completed")
    assert [rows for _, _, rows in tables.commits if "replace group" in rows] == []  # not tried with the group
    [(_, message)] = await resolution_messages(service, 0)
    assert await service.resolution.resolve_dependencies(ResolvedCheck.decode(message.json())) == "resolved"
    assert await group_events(service, task_id) == ["task-group-resolved", "task-group-resolved"]


async def test_a_try_with_the_group_that_fails_is_not_repeated(service: Queue, tables: CountingTables) -> None:
    """Should the group's rows fail the transaction for a reason the group row does not show (its active row
    gone), the resolution is written without them on the next try, not tried with them again and again."""
    task_id = slugid()
    await service.creation.create_task(task_id, task_definition())
    await claim(service, task_id)
    await service.stores.tables.delete(GROUPS_TABLE, task_id, ACTIVE + task_id)
    tables.commits.clear()
    await service.lifecycle.resolve(task_id, 0, "completed", "completed")
    assert (await service.tasks.load(task_id)).state == "completed"
    assert ["replace group" in rows for _, _, rows in tables.commits] == [True, False]
    assert len(await resolution_messages(service, 0)) == 1


async def test_a_process_that_does_not_know_the_group_leaves_it_to_the_resolution_message(
    tables: CountingTables, queues: CountingQueues
) -> None:
    """Reading the group row first would put one more round trip before the resolution's write: a process that
    has not read or written the group resolves the task alone, and the message's handler resolves the group."""
    service = memory_service(tables=tables, queues=queues)
    other = memory_service(tables=tables, queues=queues)
    task_id = slugid()
    await service.creation.create_task(task_id, task_definition())
    await claim(other, task_id)
    tables.commits.clear()
    await other.lifecycle.resolve(task_id, 0, "completed", "completed")
    assert [rows for _, _, rows in tables.commits if "replace group" in rows] == []
    [(_, message)] = await resolution_messages(other, 0)
    assert await other.resolution.resolve_dependencies(ResolvedCheck.decode(message.json())) == "resolved"
    assert await group_events(other, task_id) == ["task-group-resolved"]
