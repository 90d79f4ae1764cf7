"""A creation puts no dispatch request where its process publishes what it writes: its answer waits for its
events to be published instead, so a caller that got no answer (the process died between the write and the
publishing) retries, and the retry dispatches them (shared/operations/creation.py, `EventLog.published`)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from shared.domain.eventrows import DISPATCH_QUEUE, decode_requests
from shared.storage.memory import MemoryQueues, MemoryTables
from tests.conftest import slugid
from tests.unit.test_events import RecordingPublisher, task_definition
from tests.unit.test_guarded_resolution import Puts, bodies, process
from tests.unit.test_service import Clock


async def test_a_creation_puts_no_dispatch_request_and_answers_once_its_events_are_published() -> None:
    queues = MemoryQueues()
    publisher = RecordingPublisher()
    service = process(Clock(), MemoryTables(), queues, publisher)
    puts = Puts(queues)
    root, dependent = slugid(), slugid()
    await service.creation.create_task(root, task_definition())
    assert [e.exchange for e in publisher.published] == ["task-defined", "task-pending"]  # before the answer
    await service.creation.create_task(dependent, task_definition(dependencies=[root]))
    assert [e.exchange for e in publisher.published][2:] == ["task-defined"]
    assert [queue for _, queue in puts.calls if queue == DISPATCH_QUEUE] == []
    await service.stores.settled()
    assert bodies(queues, DISPATCH_QUEUE) == []


async def test_a_creation_whose_process_died_before_publishing_is_dispatched_by_the_callers_retry() -> None:
    clock, tables, queues = Clock(), MemoryTables(), MemoryQueues()
    stuck, gate, publishing = RecordingPublisher(), asyncio.Event(), asyncio.Event()
    publish = stuck.publish

    async def hanging(event: Any) -> None:  # the process dies while publishing: nothing it publishes arrives
        publishing.set()
        await gate.wait()
        await publish(event)

    stuck.publish = hanging  # type: ignore[method-assign]
    dying = process(clock, tables, queues, stuck)
    task_id, definition = slugid(), task_definition()
    creating = asyncio.ensure_future(dying.creation.create_task(task_id, dict(definition)))
    await publishing.wait()  # written, not published
    assert not creating.done()  # no answer while its events are not out
    creating.cancel()  # the caller's connection is gone with the process
    assert bodies(queues, DISPATCH_QUEUE) == []  # nothing stands in: the caller's retry will

    publisher = RecordingPublisher()
    other = process(clock, tables, queues, publisher)
    again = await other.creation.create_task(task_id, dict(definition))  # the client's retry, elsewhere
    assert again.task_id == task_id and again.event_seq == 2
    # The dead writer's lease still holds the stream: the retry asked for a dispatch, which runs once it is over.
    requests = [r for body in queues.contents(DISPATCH_QUEUE) for r in decode_requests(json.loads(body))]
    assert [(r.key, r.seq) for r in requests] == [(task_id, 2)]
    clock.advance(6)  # past the lease (5 s)
    assert [await other.stores.events.dispatch(r, publisher) for r in requests] == ["published"]
    assert [e.exchange for e in publisher.published] == ["task-defined", "task-pending"]
    gate.set()  # let the abandoned publishing end (its lease is gone: it cannot move the cursor back)
    await dying.stores.settled()
    await other.stores.settled()


async def test_a_slow_broker_costs_the_answer_a_moment_and_then_the_request_it_goes_without_otherwise() -> None:
    clock, tables, queues = Clock(), MemoryTables(), MemoryQueues()
    slow, gate = RecordingPublisher(), asyncio.Event()
    publish = slow.publish

    async def waiting(event: Any) -> None:
        await gate.wait()
        await publish(event)

    slow.publish = waiting  # type: ignore[method-assign]
    service = process(clock, tables, queues, slow)
    task_id = slugid()
    started = asyncio.get_running_loop().time()
    await service.creation.create_task(task_id, task_definition())
    assert asyncio.get_running_loop().time() - started < 1  # answered after ANSWER_WAIT, not after the publishing
    assert [(r.key, r.seq) for body in queues.contents(DISPATCH_QUEUE)
            for r in decode_requests(json.loads(body))] == [(task_id, 2)]  # the fallback, put instead
    gate.set()
    await service.stores.settled()
    assert [e.exchange for e in slow.published] == ["task-defined", "task-pending"]
    assert bodies(queues, DISPATCH_QUEUE) == []  # settled once published, as any change's fallback
