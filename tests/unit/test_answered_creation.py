"""A task created to wait for dependencies puts no dispatch request where its process publishes what it writes:
its answer waits for its event to be published instead, so a caller that got no answer (the process died
between the write and the publishing) retries, and the retry dispatches it (shared/operations/creation.py,
`EventLog.published`). A task pending at once keeps its request."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from shared import timing
from shared.outbox.rows import DISPATCH_QUEUE, DispatchRequest, decode_requests
from shared.storage.memory import MemoryQueues, MemoryTables
from tests.clock import Clock
from tests.conftest import slugid
from tests.unit.test_events import RecordingPublisher, task_definition
from tests.unit.test_guarded_resolution import Puts, bodies, process


def requests(queues: MemoryQueues) -> list[DispatchRequest]:
    return [r for body in queues.contents(DISPATCH_QUEUE) for r in decode_requests(json.loads(body))]


class Gated(RecordingPublisher):
    """A publisher whose publishing waits at a gate (a dying process's, or a busy broker's)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate, self.publishing = asyncio.Event(), asyncio.Event()

    async def publish(self, event: Any) -> None:
        self.publishing.set()
        await self.gate.wait()
        await super().publish(event)


async def test_a_dependent_puts_no_dispatch_request_and_is_answered_once_its_event_is_published() -> None:
    queues = MemoryQueues()
    publisher = RecordingPublisher()
    service = process(Clock(), MemoryTables(), queues, publisher)
    root, dependent = slugid(), slugid()
    await service.creation.create_task(root, task_definition())
    puts = Puts(queues)
    await service.creation.create_task(dependent, task_definition(dependencies=[root]))
    assert [e.exchange for e in publisher.published if e.payload["status"]["taskId"] == dependent] == [
        "task-defined"
    ]  # before the answer
    assert [queue for _, queue in puts.calls if queue == DISPATCH_QUEUE] == []
    await service.stores.settled()
    assert bodies(queues, DISPATCH_QUEUE) == []  # the root's request (pending at once: it keeps one) settled


async def test_a_creation_whose_process_died_before_publishing_is_dispatched_by_the_callers_retry() -> None:
    clock, tables, queues = Clock(), MemoryTables(), MemoryQueues()
    publisher = RecordingPublisher()
    other = process(clock, tables, queues, publisher)
    root = slugid()
    await other.creation.create_task(root, task_definition())
    await other.stores.settled()
    stuck = Gated()  # the process dies while publishing: nothing it publishes arrives
    dying = process(clock, tables, queues, stuck)
    task_id, definition = slugid(), task_definition(dependencies=[root])
    creating = asyncio.ensure_future(dying.creation.create_task(task_id, dict(definition)))
    await stuck.publishing.wait()  # written, not published
    assert not creating.done()  # no answer while its event is not out
    creating.cancel()  # the caller's connection is gone with the process
    assert requests(queues) == []  # nothing stands in: the caller's retry will

    again = await other.creation.create_task(task_id, dict(definition))  # the client's retry, elsewhere
    assert again.task_id == task_id and again.event_seq == 1
    # The dead writer's lease still holds the stream: the retry asked for a dispatch, which runs once it is over.
    left = requests(queues)
    assert [(r.key, r.seq) for r in left] == [(task_id, 1)]
    clock.advance(6)  # past the lease (5 s)
    assert [await other.stores.events.dispatch(r, publisher) for r in left] == ["published"]
    assert [e.exchange for e in publisher.published][2:] == ["task-defined"]
    stuck.gate.set()  # let the abandoned publishing end (its lease is gone: it cannot move the cursor back)
    await dying.stores.settled()
    await other.stores.settled()


async def test_a_slow_broker_costs_the_answer_a_moment_and_then_the_request_it_goes_without_otherwise() -> None:
    clock, tables, queues = Clock(), MemoryTables(), MemoryQueues()
    root = slugid()
    await process(clock, tables, queues, RecordingPublisher()).creation.create_task(root, task_definition())
    slow = Gated()
    service = process(clock, tables, queues, slow)
    queues.clear(DISPATCH_QUEUE)
    task_id = slugid()
    started = asyncio.get_running_loop().time()
    await service.creation.create_task(task_id, task_definition(dependencies=[root]))
    assert asyncio.get_running_loop().time() - started < 1  # answered after ANSWER_WAIT, not after the publishing
    assert [(r.key, r.seq) for r in requests(queues)] == [(task_id, 1)]  # the fallback, put instead
    slow.gate.set()
    await service.stores.settled()
    assert [e.exchange for e in slow.published] == ["task-defined"]
    assert requests(queues) == []  # settled once published, as any change's fallback


async def test_while_publishing_lags_a_dependent_puts_its_request_beside_its_write_and_waits_for_nothing() -> None:
    """Once the writers' publishing takes longer than EventLog's PUBLISH_KEEPING_UP (smoothed), a dependent goes
    with a dispatch request as any change does: no wait after its write, no request put after it. Fails if the
    creation waits for its publishing whatever the broker's pace."""
    clock, tables, queues = Clock(), MemoryTables(), MemoryQueues()
    root = slugid()
    await process(clock, tables, queues, RecordingPublisher()).creation.create_task(root, task_definition())
    slow = Gated()
    service = process(clock, tables, queues, slow)
    events = service.stores.events
    assert events.answers_after_publishing
    events.publishing_seconds = 1.0  # as after publishings that took a second each
    assert not events.answers_after_publishing
    queues.clear(DISPATCH_QUEUE)
    puts = Puts(queues)
    task_id = slugid()
    started = asyncio.get_running_loop().time()
    await service.creation.create_task(task_id, task_definition(dependencies=[root]))
    assert asyncio.get_running_loop().time() - started < timing.ANSWER_WAIT  # no wait for the gated publishing
    assert [(r.key, r.seq) for r in requests(queues)] == [(task_id, 1)]
    assert [queue for _, queue in puts.calls if queue == DISPATCH_QUEUE] == [DISPATCH_QUEUE]  # one, before the write
    slow.gate.set()
    await service.stores.settled()
    assert [e.exchange for e in slow.published] == ["task-defined"]
    assert requests(queues) == []
    assert events.publishing_seconds < 1.0  # each publishing moves the average towards its own duration
