"""A change's writer publishes its own events right after its write, with the stream's lease written in the
change's own transaction; the dispatch request it put before the write stays the fallback."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from shared.domain.eventlog import EventLog
from shared.domain.eventrows import Stream, cursor_row_key
from shared.domain.tasks import TASKS_TABLE
from shared.runtime import Queue
from tests.conftest import slugid
from tests.unit.test_events import RecordingPublisher, claim, drain, make_service, task_definition
from tests.unit.test_service import Clock


@pytest.fixture
def publisher() -> RecordingPublisher:
    return RecordingPublisher()


@pytest.fixture
def service(publisher: RecordingPublisher) -> Queue:
    queue = make_service(Clock())
    queue.stores.events.publisher = publisher
    return queue


class CursorWrites:
    """Counts the single-row writes and the reads of dispatch cursors."""

    def __init__(self, service: Queue) -> None:
        tables = service.stores.tables
        self.writes: list[str] = []
        self.reads: list[str] = []
        replace, get = tables.replace, tables.get

        async def counted_replace(table: str, entity: Any) -> Any:
            self.writes.append(entity.row_key)
            return await replace(table, entity)

        async def counted_get(table: str, partition_key: str, row_key: str) -> Any:
            self.reads.append(row_key)
            return await get(table, partition_key, row_key)

        tables.replace = counted_replace  # type: ignore[method-assign]
        tables.get = counted_get  # type: ignore[method-assign]


async def test_each_change_is_published_by_its_writer_with_one_cursor_write(
        service: Queue, publisher: RecordingPublisher) -> None:
    counted = CursorWrites(service)
    task_id = slugid()
    await service.creation.create_task(task_id, task_definition())
    await claim(service, task_id)
    await service.lifecycle.resolve(task_id, 0, "completed", "completed")
    await service.stores.settled()
    assert [e.exchange for e in publisher.published] == ["task-defined", "task-pending", "task-running",
                                                         "task-completed"]
    # The lease went with each change's transaction; after publishing, one write moves the cursor.
    cursor = cursor_row_key(Stream(TASKS_TABLE, task_id))
    assert counted.writes == [cursor, cursor, cursor]
    # The dispatch requests, the fallback, find everything published without reading anything.
    assert set(await drain(service, publisher)) == {"done"}
    assert counted.reads == [] and len(publisher.published) == 4


async def test_a_cursor_moved_by_another_process_fails_the_lease_not_the_change(
        service: Queue, publisher: RecordingPublisher) -> None:
    task_id = slugid()
    await service.creation.create_task(task_id, task_definition())
    await service.stores.settled()
    stream = Stream(TASKS_TABLE, task_id)
    # Another process's dispatcher wrote the cursor since (its ETag changed; nothing left to publish).
    other = EventLog(service.stores.tables, service.stores.queues, dispatching=True)
    stored = await other.cursor(stream)
    assert await other._write_cursor(stream, stored.dispatched, "", stored.etag) is not None
    claimed = await claim(service, task_id)  # the lease's condition fails: written again without it
    assert claimed.run.state == "running"
    await service.stores.settled()
    assert [e.exchange for e in publisher.published] == ["task-defined", "task-pending"]
    assert "published" in await drain(service, publisher)  # the fallback publishes task-running
    assert [e.exchange for e in publisher.published] == ["task-defined", "task-pending", "task-running"]


async def test_a_bus_refusing_the_writer_leaves_the_events_to_the_dispatch_request(
        service: Queue, publisher: RecordingPublisher) -> None:
    publisher.fail = True
    task_id = slugid()
    await service.creation.create_task(task_id, task_definition())
    await service.stores.settled()
    assert publisher.published == []
    publisher.fail = False
    assert "published" in await drain(service, publisher)  # the lease was given up
    assert [e.exchange for e in publisher.published] == ["task-defined", "task-pending"]


async def test_a_stream_dispatched_here_is_not_held_by_a_writer(service: Queue, publisher: RecordingPublisher) -> None:
    """While a dispatch of the stream is under way in this process, a change of it is written without the
    lease (the dispatch, or its own request, publishes it)."""
    task_id = slugid()
    await service.creation.create_task(task_id, task_definition())
    await service.stores.settled()
    events = service.stores.events
    stream = Stream(TASKS_TABLE, task_id)
    held = await events.hold(stream)
    assert held is not None and await events.hold(stream) is None
    events.not_written(held)
    assert await events.hold(stream) is None  # the cursor is not known any more: read again first


async def test_changes_written_while_the_writer_publishes_go_out_with_its_publishing(
        service: Queue, publisher: RecordingPublisher) -> None:
    """A change that finds the stream held by another writer's publishing here writes no lease; that publishing
    takes its events too before giving up the lease."""
    gate = asyncio.Event()
    publish = publisher.publish

    async def slow_publish(event: Any) -> None:
        await gate.wait()
        await publish(event)

    publisher.publish = slow_publish  # type: ignore[method-assign]
    counted = CursorWrites(service)
    task_id = slugid()
    await service.creation.create_task(task_id, task_definition())  # its publishing waits at the gate
    await claim(service, task_id)
    await service.lifecycle.resolve(task_id, 0, "completed", "completed")
    gate.set()
    await service.stores.settled()
    assert [e.exchange for e in publisher.published] == ["task-defined", "task-pending", "task-running",
                                                         "task-completed"]
    assert counted.writes == [cursor_row_key(Stream(TASKS_TABLE, task_id))]  # one lease, one move for all four
    assert set(await drain(service, publisher)) == {"done"}
