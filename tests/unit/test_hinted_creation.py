"""A task pending at once puts no dispatch request where its process publishes what it writes: its pending hint,
put before its write as ever, stands in (shared/operations/creation.py, TaskRepository.guarded_by_hint). Should
the process die between the write and the publishing, the change the hint leads to (the claim) publishes the
task's events first, in order from the cursor; a task nothing claims is dispatched by the reconciler's pass; a
bus that refuses the events gets a request of their own."""

from __future__ import annotations

import json

from shared.domain.messages import pending_queue
from shared.outbox.rows import DISPATCH_QUEUE, DispatchRequest, decode_requests
from shared.storage.memory import MemoryQueues, MemoryTables
from tests.clock import Clock
from tests.conftest import slugid
from tests.unit.test_events import RecordingPublisher, claim, task_definition
from tests.unit.test_guarded_resolution import Puts, another_process, bodies, dies_after_answering, process

TASK_QUEUE = "prov/hinted"


def requests(queues: MemoryQueues) -> list[DispatchRequest]:
    return [r for body in queues.contents(DISPATCH_QUEUE) for r in decode_requests(json.loads(body))]


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
