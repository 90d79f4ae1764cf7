"""The marker that lets a resolution skip the dependents query of a task nothing depends on (memory connector)."""

from __future__ import annotations

from typing import Any

import pytest

from shared import errors
from shared.domain.dependencies import DEPENDENCIES_TABLE, MARK, REQUIREMENTS_TABLE
from shared.domain.messages import ResolvedCheck
from shared.domain.tasks import TASKS_TABLE, task_row
from shared.runtime import Queue
from shared.storage.base import Entity
from shared.storage.memory import MemoryTables
from tests.answers import list_dependents, resolution_messages
from tests.conftest import slugid
from tests.unit.conftest import memory_service
from tests.unit.test_reconciler import create


class CountingTables(MemoryTables):
    def __init__(self) -> None:
        super().__init__()
        self.dependents_queries = 0

    async def query(self, table: str, *args: Any, **kwargs: Any) -> Any:
        self.dependents_queries += table == DEPENDENCIES_TABLE
        return await super().query(table, *args, **kwargs)


@pytest.fixture
def tables() -> CountingTables:
    return CountingTables()


@pytest.fixture
def service(tables: CountingTables) -> Queue:
    return memory_service(tables=tables)


async def complete(service: Queue, task_id: str) -> list[str]:
    """Claim and complete run 0, then run the resolution messages queued; their outcomes."""
    await service.claims.claim(task_id, 0, "g", "w")
    await service.lifecycle.resolve(task_id, 0, "completed", "completed")
    outcomes = []
    for queue, message in await resolution_messages(service):
        outcomes.append(await service.resolution.resolve_dependencies(ResolvedCheck.decode(message.json())))
        await service.stores.queues.delete(queue, message)
    return outcomes


async def test_a_task_nothing_depends_on_resolves_without_the_dependents_query(
        service: Queue, tables: CountingTables) -> None:
    leaf, _ = await create(service)
    assert await complete(service, leaf) == ["resolved"]
    assert tables.dependents_queries == 0


async def test_a_task_with_dependents_unblocks_them(service: Queue, tables: CountingTables) -> None:
    root, definition = await create(service)
    dependents = [(await create(service, taskQueueId=definition["taskQueueId"], dependencies=[root]))[0]
                  for _ in range(3)]
    assert await service.stores.tables.get(DEPENDENCIES_TABLE, root, MARK + root) is not None
    assert await complete(service, root) == ["resolved"]
    assert tables.dependents_queries == 1
    assert [(await service.queries.task(d)).status()["state"] for d in dependents] == ["pending"] * 3
    listed = await list_dependents(service, root, limit=10, continuation=None)
    assert sorted(t["status"]["taskId"] for t in listed["tasks"]) == sorted(dependents)  # not the marker


async def test_a_task_created_before_markers_still_has_its_dependents_found(service: Queue) -> None:
    """A task written without `dependentsMarked`, whose dependent's edge has no marker: the query runs."""
    root, definition = await create(service)
    entity = await service.stores.tables.get(TASKS_TABLE, root, task_row(root))
    assert entity is not None and entity.data["dependentsMarked"] is True
    await service.stores.tables.replace(TASKS_TABLE, Entity(root, task_row(root),
                                                            {**entity.data, "dependentsMarked": False},
                                                     entity.etag))
    dependent, _ = await create(service, taskQueueId=definition["taskQueueId"], dependencies=[root])
    await service.stores.tables.delete(DEPENDENCIES_TABLE, root, MARK + root)
    assert await complete(service, root) == ["resolved"]
    assert (await service.queries.task(dependent)).status()["state"] == "pending"


async def test_a_refused_create_task_leaves_no_marker_or_edge(service: Queue) -> None:
    existing, _ = await create(service)
    missing = slugid()
    with pytest.raises(errors.InputError):
        await create(service, dependencies=[existing, missing])
    for table in (DEPENDENCIES_TABLE, REQUIREMENTS_TABLE):
        page = await service.stores.tables.query(table, "PartitionKey ge @lo", {"lo": ""})
        left = [(e.partition_key, e.row_key) for e in page.entities]
        # The existing task keeps its marker (harmless: it only costs a query); nothing names the missing one.
        assert left == ([(existing, MARK + existing)] if table == DEPENDENCIES_TABLE else []), (table, left)
