"""A message this process put before its write (a dispatch request, a resolution message, a pending hint), read
here while the write is in flight: the reader waits for the write and reads nothing back from storage."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from shared import timeutil
from shared.domain.groups import GROUP_STREAMS
from shared.domain.messages import CLAIM_QUEUE, ResolvedCheck
from shared.domain.tasks import TASKS_TABLE, task_row
from shared.operations.claims import Claim
from shared.outbox.inflight import InFlight
from shared.outbox.rows import DISPATCH_QUEUE, DispatchRequest, decode_requests
from shared.runtime import Queue
from tests.conftest import slugid
from tests.turns import others_run
from tests.unit.helpers import EVENT_SETTINGS, RecordingPublisher, claim, task_definition

pytestmark = pytest.mark.service(**EVENT_SETTINGS)


class Storage:
    """Counts the reads of the service's tables, and holds commits to the Tasks table while `gate` is closed."""

    def __init__(self, service: Queue) -> None:
        self.tables = service.stores.tables
        self.reads: list[str] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.held = asyncio.Event()  # a commit is waiting at the gate
        get, commit = self.tables.get, self.tables.commit

        async def counted_get(table: str, partition_key: str, row_key: str) -> Any:
            self.reads.append(row_key)
            return await get(table, partition_key, row_key)

        async def gated_commit(table: str, ops: Any) -> Any:
            if table == TASKS_TABLE and not self.gate.is_set():
                self.held.set()
                await self.gate.wait()
            return await commit(table, ops)

        self.tables.get = counted_get  # type: ignore[method-assign]
        self.tables.commit = gated_commit  # type: ignore[method-assign]


async def dispatch_requests(service: Queue) -> list[DispatchRequest]:
    messages = await service.stores.queues.receive(DISPATCH_QUEUE, 32, 30)
    return [r for m in messages for r in decode_requests(m.json())]


async def test_writes_nest_and_readers_wait_for_the_outermost() -> None:
    in_flight = InFlight()
    assert not in_flight.busy("T", "k") and await in_flight.settled("T", "k") is False
    order: list[str] = []

    async def reader() -> None:
        assert await in_flight.settled("T", "k") is True
        order.append("read")

    with in_flight.writing("T", "k"):
        with in_flight.writing("T", "k"):
            waiting = asyncio.create_task(reader())
            await others_run()
        await others_run()
        order.append("written")
    await waiting
    assert order == ["written", "read"] and not in_flight.busy("T", "k")


async def test_a_dispatch_request_read_before_its_write_waits_for_it_and_reads_nothing(service: Queue) -> None:
    storage, publisher = Storage(service), RecordingPublisher()
    storage.gate.clear()
    task_id = slugid()
    creating = asyncio.create_task(service.creation.create_task(task_id, task_definition()))
    await storage.held.wait()  # announced (the request is on the queue), not written
    [request] = await dispatch_requests(service)
    dispatching = asyncio.create_task(service.stores.events.dispatch(request, publisher))
    await others_run()
    assert not dispatching.done() and publisher.published == []
    storage.gate.set()
    await creating
    assert await dispatching == "published"
    assert [e.exchange for e in publisher.published] == ["task-defined", "task-pending"]
    assert storage.reads == []


async def test_dispatches_of_one_stream_in_one_process_share_one_lease(service: Queue) -> None:
    """The second waits for the first, which publishes every event this process wrote: one lease and one move
    of the cursor for both, and nothing read."""
    publisher = RecordingPublisher()
    task_id = slugid()
    await service.creation.create_task(task_id, task_definition())
    await claim(service, task_id)
    await dispatch_requests(service)  # handled here by hand
    storage = Storage(service)
    replace = storage.tables.replace
    cursor_writes: list[str] = []

    async def counted_replace(table: str, entity: Any) -> Any:
        cursor_writes.append(entity.row_key)
        return await replace(table, entity)

    storage.tables.replace = counted_replace  # type: ignore[method-assign]
    since = timeutil.iso(timeutil.now())
    outcomes = await asyncio.gather(
        *(service.stores.events.dispatch(DispatchRequest(TASKS_TABLE, task_id, n, since), publisher) for n in (2, 3))
    )
    assert outcomes == ["published", "done"]
    assert [e.exchange for e in publisher.published] == ["task-defined", "task-pending", "task-running"]
    assert len(cursor_writes) == 2 and storage.reads == []


async def test_a_resolution_message_read_before_its_write_waits_for_it(service: Queue) -> None:
    task_id = slugid()
    # In a group not named after it (alone in that one, the resolution would need no message).
    await service.creation.create_task(task_id, task_definition(taskGroupId=slugid()))
    claimed = await claim(service, task_id)
    assert isinstance(claimed, Claim)
    storage = Storage(service)
    storage.gate.clear()
    resolving = asyncio.create_task(service.lifecycle.resolve(task_id, 0, "completed", "completed"))
    await storage.held.wait()  # the claim check is the resolution message now; the resolution is not written
    [message] = await service.stores.queues.receive(CLAIM_QUEUE, 1, 30)
    handling = asyncio.create_task(service.resolution.resolve_dependencies(ResolvedCheck.decode(message.json())))
    await others_run()
    assert not handling.done()
    storage.gate.set()
    await resolving
    assert await handling == "resolved"
    assert task_row(task_id) not in storage.reads


async def test_the_dispatch_request_goes_out_with_the_other_guards_not_after_them(service: Queue) -> None:
    """createTask, a claim and a resolution put their dispatch request at once with their guard messages (one
    round trip before the write, not two): here each guard is held until the request is on the queue."""
    queues = service.stores.queues
    put, update = queues.put, queues.release
    requested = asyncio.Event()

    async def guard_put(queue: str, content: bytes, **kwargs: Any) -> Any:
        if queue == DISPATCH_QUEUE:
            requested.set()
        else:
            await asyncio.wait_for(requested.wait(), 1)
        return await put(queue, content, **kwargs)

    async def guard_update(*args: Any, **kwargs: Any) -> Any:
        await asyncio.wait_for(requested.wait(), 1)
        return await update(*args, **kwargs)

    queues.put = guard_put  # type: ignore[method-assign]
    queues.release = guard_update  # type: ignore[method-assign]
    task_id = slugid()
    await service.creation.create_task(task_id, task_definition())
    requested.clear()
    await claim(service, task_id)
    requested.clear()
    await service.lifecycle.resolve(task_id, 0, "completed", "completed")
    # The task's three changes; its resolution also resolves its group (the group's first event, in the same
    # transaction, announced at once with the task's).
    assert sorted((r.table, r.seq) for r in await dispatch_requests(service)) == [
        (GROUP_STREAMS, 1),
        (TASKS_TABLE, 2),
        (TASKS_TABLE, 3),
        (TASKS_TABLE, 4),
    ]
