"""How a created task's events are published (shared/operations/creation.py). A task created to wait for
dependencies puts no dispatch request where its process publishes what it writes: its answer waits for its event to
be published instead, so a caller that got no answer (the process died between the write and the publishing)
retries, and the retry dispatches it (`EventLog.published`). A task pending at once puts none either: its pending
hint, put before its write as ever, stands in (TaskRepository.guarded_by_hint). Should the process die between the
write and the publishing, the change the hint leads to (the claim) publishes the task's events first, in order from
the cursor; a task nothing claims is dispatched by the reconciler's pass; a bus that refuses the events gets a
request of their own."""

from __future__ import annotations

import asyncio
import json

from shared import timing
from shared.domain.messages import pending_queue
from shared.outbox.rows import DISPATCH_QUEUE, DispatchRequest, decode_requests
from shared.storage.memory import MemoryQueues, MemoryTables
from tests.clock import Clock
from tests.conftest import slugid
from tests.unit.helpers import (
    Gated,
    Puts,
    RecordingPublisher,
    another_process,
    bodies,
    claim,
    dies_after_answering,
    process,
    task_definition,
)


def requests(queues: MemoryQueues) -> list[DispatchRequest]:
    return [r for body in queues.contents(DISPATCH_QUEUE) for r in decode_requests(json.loads(body))]


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


TASK_QUEUE = "prov/hinted"


async def created_by_a_dying_process() -> tuple[Clock, MemoryTables, MemoryQueues, str]:
    """A task pending at once, written by a process that dies before publishing its events (nothing it publishes
    arrives, no request put); the storage, its clock and the taskId."""
    clock, tables, queues, publisher = Clock(), MemoryTables(), MemoryQueues(), RecordingPublisher()
    service = process(clock, tables, queues, publisher)
    dies_after_answering(service)
    task_id = slugid()
    await service.creation.create_task(task_id, task_definition(taskQueueId=TASK_QUEUE))
    assert publisher.published == [] and bodies(queues, DISPATCH_QUEUE) == []
    return clock, tables, queues, task_id


async def test_a_task_pending_at_once_puts_its_hint_and_no_dispatch_request() -> None:
    queues, publisher = MemoryQueues(), RecordingPublisher()
    service = process(Clock(), MemoryTables(), queues, publisher)
    task_id = slugid()
    puts = Puts(queues)
    await service.creation.create_task(task_id, task_definition(taskQueueId=TASK_QUEUE))
    assert [
        queue
        for _, queue in puts.calls
        if queue != pending_queue(TASK_QUEUE, "lowest") and not queue.startswith("task-deadlines")
    ] == []  # the hint (and its deadline bucket's message)
    assert ("put", pending_queue(TASK_QUEUE, "lowest")) in puts.calls
    await service.stores.settled()
    assert [e.exchange for e in publisher.published] == ["task-defined", "task-pending"]
    assert bodies(queues, DISPATCH_QUEUE) == []
    assert len(queues.contents(pending_queue(TASK_QUEUE, "lowest"))) == 1  # the hint stays for its claimer


async def test_a_process_dying_before_publishing_leaves_the_events_to_the_claim_its_hint_leads_to() -> None:
    clock, tables, queues, task_id = await created_by_a_dying_process()
    clock.advance(6)  # the dead writer's lease (5 s)
    other, other_publisher = another_process(clock, (tables, queues))
    claimed = await other.work.claim_work(TASK_QUEUE, "wg", "w1", 1)  # through the hint
    assert [c.task.task_id for c in claimed] == [task_id]
    await other.stores.settled()
    assert [e.exchange for e in other_publisher.published] == ["task-defined", "task-pending", "task-running"]


async def test_a_polling_workers_claim_publishes_them_too() -> None:
    clock, tables, queues, task_id = await created_by_a_dying_process()
    clock.advance(6)
    other, other_publisher = another_process(clock, (tables, queues))
    await claim(other, task_id)  # claimTask: a worker that took the hint through its SAS URL
    await other.stores.settled()
    assert [e.exchange for e in other_publisher.published] == ["task-defined", "task-pending", "task-running"]


async def test_a_task_nothing_claims_is_dispatched_by_the_reconcilers_pass() -> None:
    clock, tables, queues, task_id = await created_by_a_dying_process()
    other, other_publisher = another_process(clock, (tables, queues))
    clock.advance(other.stores.settings.reconcile_grace + 1)
    report = await other.reconciler.run()
    assert report.repairs.get("events") == 1
    [request] = requests(queues)
    assert (request.key, request.seq) == (task_id, 2)
    assert await other.stores.events.dispatch(request, other_publisher) == "published"
    assert [e.exchange for e in other_publisher.published] == ["task-defined", "task-pending"]


async def test_events_the_bus_refused_get_a_request_of_their_own() -> None:
    queues, publisher = MemoryQueues(), RecordingPublisher()
    service = process(Clock(), MemoryTables(), queues, publisher)
    publisher.fail = True
    task_id = slugid()
    await service.creation.create_task(task_id, task_definition(taskQueueId=TASK_QUEUE))
    await service.stores.settled()
    assert [(r.key, r.seq) for r in requests(queues)] == [(task_id, 2)]
