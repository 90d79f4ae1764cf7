"""What lets a resolution skip the dependents lookup of a task nothing depends on (memory connector): the task
row's `hasDependents` flag, which a dependent's createTask sets; for rows written before the flag, the marker
row."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from shared import errors
from shared.domain.dependencies import DEPENDENCIES_TABLE, EDGE, LISTED, REQUIREMENTS_TABLE, edge_here, listed_with
from shared.domain.messages import ResolvedCheck
from shared.domain.tasks import NOT_LISTED, TASKS_TABLE, decode_dependents, encode_dependents, task_row
from shared.runtime import Queue
from shared.storage.base import Entity
from shared.storage.memory import MemoryQueues, MemoryTables
from shared.stores.dependencies import MARK
from tests.answers import list_dependents, resolution_messages
from tests.conftest import slugid
from tests.services import memory_service
from tests.unit.helpers import create


class CountingTables(MemoryTables):
    def __init__(self) -> None:
        super().__init__()
        self.dependents_queries = 0
        self.dependents_reads = 0

    async def query(self, table: str, *args: Any, **kwargs: Any) -> Any:
        parameters = args[1] if len(args) > 1 else kwargs.get("parameters") or {}
        # TaskDependency's, or the edges kept in the dependency's own partition
        self.dependents_queries += table == DEPENDENCIES_TABLE or parameters.get("lo") == EDGE
        return await super().query(table, *args, **kwargs)

    async def get(self, table: str, *args: Any, **kwargs: Any) -> Any:
        self.dependents_reads += table == DEPENDENCIES_TABLE
        return await super().get(table, *args, **kwargs)


@pytest.fixture
def tables() -> CountingTables:
    return CountingTables()


async def written_before(service: Queue, task_id: str, prop: str) -> None:
    """The task's row as a version before `prop` existed wrote it (the property gone), and not remembered here."""
    entity = await service.stores.tables.get(TASKS_TABLE, task_id, task_row(task_id))
    assert entity is not None and prop in entity.data
    await service.stores.tables.replace(
        TASKS_TABLE,
        Entity(task_id, task_row(task_id), {k: v for k, v in entity.data.items() if k != prop}, entity.etag),
    )
    service.tasks.known.forget(task_id)


async def complete(service: Queue, task_id: str) -> list[str]:
    """Claim and complete run 0, then run the resolution messages queued; their outcomes."""
    return await complete_run(service, task_id, 0)


async def complete_run(service: Queue, task_id: str, run_id: int) -> list[str]:
    await service.claims.claim(task_id, run_id, "g", "w")
    await service.lifecycle.resolve(task_id, run_id, "completed", "completed")
    outcomes = []
    for queue, message in await resolution_messages(service):
        outcomes.append(await service.resolution.resolve_dependencies(ResolvedCheck.decode(message.json())))
        await service.stores.queues.delete(queue, message)
    return outcomes


async def test_a_task_nothing_depends_on_resolves_without_the_dependents_query(
    service: Queue, tables: CountingTables
) -> None:
    leaf, _ = await create(service, taskGroupId=slugid())  # in a group of its own id, nothing would be left to do
    assert await complete(service, leaf) == ["resolved"]
    assert (tables.dependents_queries, tables.dependents_reads) == (0, 0)  # its row says: no dependents


async def test_a_row_written_before_the_flag_is_told_by_its_marker(service: Queue, tables: CountingTables) -> None:
    leaf, _ = await create(service)
    assert (await service.tasks.load(leaf)).has_dependents is False
    await written_before(service, leaf, "hasDependents")
    assert await complete(service, leaf) == ["resolved"]
    assert (tables.dependents_queries, tables.dependents_reads) == (0, 1)  # the marker's read, no query


async def test_a_task_with_dependents_unblocks_them(service: Queue, tables: CountingTables) -> None:
    root, definition = await create(service)
    dependents = [
        (await create(service, taskQueueId=definition["taskQueueId"], dependencies=[root]))[0] for _ in range(3)
    ]
    # Dependents that keep their list on their row flag the root and write no marker.
    assert await service.stores.tables.get(DEPENDENCIES_TABLE, root, MARK + root) is None
    assert (await service.tasks.load(root)).dependents_here is True
    tables.dependents_reads = 0  # the marker's read just above
    assert (await service.tasks.load(root)).dependents == [(d, "completed") for d in dependents]
    assert await complete(service, root) == ["resolved"]
    assert (tables.dependents_queries, tables.dependents_reads) == (0, 0)  # listed on the row it resolved
    assert [(await service.queries.task(d)).status()["state"] for d in dependents] == ["pending"] * 3
    listed = await list_dependents(service, root, limit=10, continuation=None)
    assert sorted(t["status"]["taskId"] for t in listed["tasks"]) == sorted(dependents)  # not the marker


async def test_a_task_created_before_markers_still_has_its_dependents_found(service: Queue) -> None:
    """A task written without `dependentsMarked`, whose dependent's edge has no marker: the query runs."""
    root, definition = await create(service)
    entity = await service.stores.tables.get(TASKS_TABLE, root, task_row(root))
    assert entity is not None and entity.data["dependentsMarked"] is True
    old = {k: v for k, v in entity.data.items() if k != "hasDependents"}
    await service.stores.tables.replace(
        TASKS_TABLE, Entity(root, task_row(root), {**old, "dependentsMarked": False}, entity.etag)
    )
    service.tasks.known.forget(root)
    dependent, _ = await create(service, taskQueueId=definition["taskQueueId"], dependencies=[root])
    await service.stores.tables.delete(DEPENDENCIES_TABLE, root, MARK + root)
    assert await complete(service, root) == ["resolved"]
    assert (await service.queries.task(dependent)).status()["state"] == "pending"


async def test_a_row_written_before_the_flag_is_flagged_by_a_new_dependent(
    service: Queue, tables: CountingTables
) -> None:
    """A dependency whose row has no flag (written before it existed, its dependents told by markers) gets the
    flag of the edges kept in its partition from a dependent that writes no marker: its resolution then looks
    for its dependents there (and in TaskDependency, where older ones are)."""
    root, definition = await create(service)
    await written_before(service, root, "hasDependents")
    dependent, _ = await create(service, taskQueueId=definition["taskQueueId"], dependencies=[root])
    assert (await service.tasks.load(root)).dependents_here is True
    assert await service.stores.tables.get(DEPENDENCIES_TABLE, root, MARK + root) is None
    assert await complete(service, root) == ["resolved"]
    assert (await service.tasks.load(dependent)).state == "pending"


async def test_a_refused_create_task_leaves_no_marker_or_edge(service: Queue) -> None:
    existing, _ = await create(service)
    missing = slugid()
    with pytest.raises(errors.InputError):
        await create(service, dependencies=[existing, missing])
    for table in (DEPENDENCIES_TABLE, REQUIREMENTS_TABLE):
        page = await service.stores.tables.query(table, "PartitionKey ge @lo", {"lo": ""})
        left = [(e.partition_key, e.row_key) for e in page.entities]
        assert left == [], (table, left)


async def test_a_flag_set_after_the_resolver_read_the_row_makes_its_write_read_again(tables: CountingTables) -> None:
    """Two processes: the one resolving the root starts from the row it remembers (no flag); the other creates a
    dependent meanwhile, flagging the root. The resolution's write fails on the ETag, is decided again on the
    flagged row, and its resolution finds the dependent (listed on that row: no query)."""
    queues = MemoryQueues()
    one = memory_service(tables=tables, queues=queues)
    other = memory_service(tables=tables, queues=queues)
    root, definition = await create(one)
    await one.claims.claim(root, 0, "g", "w")
    assert one.tasks.known.get(root) is not None and one.tasks.known.get(root).has_dependents is False
    dependent, _ = await create(other, taskQueueId=definition["taskQueueId"], dependencies=[root])
    await one.lifecycle.resolve(root, 0, "completed", "completed")
    [(_, message)] = await resolution_messages(one)
    assert await one.resolution.resolve_dependencies(ResolvedCheck.decode(message.json())) == "resolved"
    assert tables.dependents_queries == 0
    assert (await other.tasks.load(dependent)).state == "pending"


async def test_a_resolution_written_before_the_flag_fails_it_and_the_dependent_sees_it(service: Queue) -> None:
    """The dependent read the root unresolved; the root resolved before the flag was written: the flag's write
    fails on the ETag, the root is read again, and the dependent is satisfied by it (not flagged, not waiting)."""
    root, _ = await create(service)
    stale = await service.tasks.load(root)
    await service.claims.claim(root, 0, "g", "w")
    await service.lifecycle.resolve(root, 0, "completed", "completed")
    noted = await service.tasks.note_dependent(stale, lambda t: t.state == "completed")
    assert noted is not None and noted.state == "completed" and noted.has_dependents is False


async def test_a_dependency_that_failed_is_flagged_so_its_rerun_unblocks_the_dependent(service: Queue) -> None:
    """all-completed on a failed task: the dependent waits (the failure does not satisfy it), so the failed task
    is flagged too; rerun and completed, its resolution finds the dependent."""
    root, definition = await create(service)
    await service.claims.claim(root, 0, "g", "w")
    await service.lifecycle.resolve(root, 0, "failed", "failed")
    for queue, message in await resolution_messages(service):
        await service.resolution.resolve_dependencies(ResolvedCheck.decode(message.json()))
        await service.stores.queues.delete(queue, message)
    dependent, _ = await create(service, taskQueueId=definition["taskQueueId"], dependencies=[root])
    assert (await service.tasks.load(root)).dependents_here is True
    assert (await service.tasks.load(dependent)).state == "unscheduled"
    await service.lifecycle.rerun_task(root)
    assert await complete_run(service, root, 1) == ["resolved"]
    assert (await service.tasks.load(dependent)).state == "pending"


async def test_dependents_listed_on_the_row_are_bounded_and_past_the_bound_queried(
    service: Queue, tables: CountingTables
) -> None:
    """Up to LISTED dependents are listed on their dependency's row (each once, with what it requires); the one
    beyond makes the row say `not listed`, and the resolution then queries the edges: every dependent of 270
    (distinct ids, created 30 at a time) is released either way."""
    root, definition = await create(service)
    created: list[str] = []
    for start in range(0, LISTED + 20, 30):
        batch = await asyncio.gather(
            *(
                create(
                    service,
                    taskQueueId=definition["taskQueueId"],
                    dependencies=[root],
                    requires="all-resolved" if n % 2 else "all-completed",
                )
                for n in range(start, min(start + 30, LISTED + 20))
            )
        )
        created += [task_id for task_id, _ in batch]
        row = await service.tasks.load(root)
        if len(created) <= LISTED:
            assert [d for d, _ in row.dependents or []] == created
            assert {r for _, r in row.dependents or []} == {"completed", "resolved"}
    stored = await service.stores.tables.get(TASKS_TABLE, root, task_row(root))
    assert stored is not None and stored.data["dependents"] == NOT_LISTED
    assert (await service.tasks.load(root)).dependents is None
    outcomes = await complete(service, root)
    while more := await resolution_messages(service):  # the next page of dependents, in a message of its own
        for queue, message in more:
            outcomes.append(await service.resolution.resolve_dependencies(ResolvedCheck.decode(message.json())))
            await service.stores.queues.delete(queue, message)
    assert outcomes == ["resolved", "resolved"]
    assert tables.dependents_queries >= 2
    states = {(await service.queries.task(d)).status()["state"] for d in created}
    assert states == {"pending"}


async def test_a_list_survives_every_write_of_its_row_and_an_edge_written_twice_is_listed_once(
    service: Queue, tables: CountingTables
) -> None:
    root, definition = await create(service)
    first, _ = await create(service, taskQueueId=definition["taskQueueId"], dependencies=[root])
    await service.claims.claim(root, 0, "g", "w")  # a replace of the whole row
    row = await service.tasks.load(root)
    assert row.dependents == [(first, "completed")]
    edge = edge_here(root, first, "completed", 1, row.expires)
    assert listed_with(row.dependents, [edge]) == [(first, "completed")]
    assert decode_dependents(encode_dependents([(first, "completed"), (root, "resolved")])) == [
        (first, "completed"),
        (root, "resolved"),
    ]
    await service.lifecycle.resolve(root, 0, "completed", "completed")
    for queue, message in await resolution_messages(service):
        await service.resolution.resolve_dependencies(ResolvedCheck.decode(message.json()))
        await service.stores.queues.delete(queue, message)
    assert tables.dependents_queries == 0
    assert (await service.tasks.load(first)).state == "pending"


async def test_edges_written_before_the_list_existed_are_queried(service: Queue, tables: CountingTables) -> None:
    """A row flagged `dependentsHere` without the `dependents` property (written by an earlier version): not
    listed, so its resolution queries the edges, and a new edge keeps it unlisted."""
    root, definition = await create(service)
    first, _ = await create(service, taskQueueId=definition["taskQueueId"], dependencies=[root])
    await written_before(service, root, "dependents")
    second, _ = await create(service, taskQueueId=definition["taskQueueId"], dependencies=[root])
    assert (await service.tasks.load(root)).dependents is None
    assert await complete(service, root) == ["resolved"]
    assert tables.dependents_queries == 1
    assert [(await service.tasks.load(d)).state for d in (first, second)] == ["pending", "pending"]
