"""A change's writer publishes its own events right after its write, with the stream's lease written in the
change's own transaction; the dispatch request it put before the write stays the fallback, shown only after the
lease would have run out, and deleted by the writer once it is not needed (a creation puts none: its answer waits
for its publishing, tests/unit/test_creation.py). What it published the process's publication mark
certifies (shared/outbox/marks.py): no cursor write per change."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from typing import Any

import pytest

from shared import timeutil
from shared.domain.messages import ClaimCheck
from shared.domain.tasks import TASKS_TABLE
from shared.outbox.log import EventLog
from shared.outbox.marks import MARK_ROW, MARKS_TABLE
from shared.outbox.rows import DISPATCH_QUEUE, DispatchRequest, Stream, cursor_row_key, decode_requests
from shared.runtime import Queue
from shared.storage.base import TableStore
from shared.storage.memory import MemoryQueues
from tests.clock import Clock
from tests.conftest import slugid
from tests.turns import others_run
from tests.unit.helpers import EVENT_SETTINGS, RecordingPublisher, claim, task_definition


@pytest.fixture
def publisher() -> RecordingPublisher:
    return RecordingPublisher()


pytestmark = pytest.mark.service(**EVENT_SETTINGS)


def requests_left(service: Queue) -> list[DispatchRequest]:
    """The dispatch requests on the queue, shown or not."""
    queues = service.stores.queues
    assert isinstance(queues, MemoryQueues)
    return [r for body in queues.contents(DISPATCH_QUEUE) for r in decode_requests(json.loads(body))]


async def fallback(service: Queue, publisher: RecordingPublisher) -> list[str]:
    """What the requests left on the queue do once they show (after the process that put them died): each
    dispatched by another process; the outcomes."""
    other = another_process(service)
    outcomes = [await other.dispatch(request, publisher) for request in requests_left(service)]
    service.stores.queues.clear(DISPATCH_QUEUE)  # type: ignore[attr-defined]
    return outcomes


def another_process(service: Queue) -> EventLog:
    """An event log on the same storage that remembers nothing (another process's)."""
    return EventLog(
        service.stores.tables,
        service.stores.queues,
        dispatching=True,
        lease_seconds=5,
        clock=service.stores.events.clock,
    )


class CursorWrites:
    """Counts the single-row writes and the reads of dispatch cursors."""

    def __init__(self, service: Queue) -> None:
        tables = service.stores.tables
        self.writes: list[str] = []
        self.reads: list[str] = []
        self.marks: list[int] = []
        replace, get, upsert = tables.replace, tables.get, tables.upsert

        async def counted_replace(table: str, entity: Any) -> Any:
            self.writes.append(entity.row_key)
            return await replace(table, entity)

        async def counted_upsert(table: str, entity: Any) -> Any:
            if table == MARKS_TABLE:
                self.marks.append(entity.data["upTo"])
            return await upsert(table, entity)

        async def counted_get(table: str, partition_key: str, row_key: str) -> Any:
            self.reads.append(row_key)
            return await get(table, partition_key, row_key)

        tables.replace = counted_replace  # type: ignore[method-assign]
        tables.get = counted_get  # type: ignore[method-assign]
        tables.upsert = counted_upsert  # type: ignore[method-assign]


async def test_each_change_is_published_by_its_writer_and_certified_by_the_mark_without_a_cursor_write(
    service: Queue, publisher: RecordingPublisher
) -> None:
    counted = CursorWrites(service)
    task_id = slugid()
    await service.creation.create_task(task_id, task_definition())
    await claim(service, task_id)
    await service.lifecycle.resolve(task_id, 0, "completed", "completed")
    await service.stores.settled()
    assert [e.exchange for e in publisher.published] == [
        "task-defined",
        "task-pending",
        "task-running",
        "task-completed",
        "task-group-resolved",
    ]
    # The lease went with each change's transaction; no write moved the cursor after publishing: the mark
    # (written at most once per interval, here for the three holds of the task and the group's) certifies it.
    assert counted.writes == [] and counted.marks and counted.marks[-1] >= 4
    # The dispatch requests, the fallback, were deleted by the writer once the mark was stored; none was read.
    assert requests_left(service) == []
    assert counted.reads == [] and len(publisher.published) == 5
    # Another process reads the cursor as the mark certifies it: all four published, no lease.
    cursor = await another_process(service).cursor(Stream(TASKS_TABLE, task_id))
    assert (cursor.dispatched, cursor.lease_until) == (4, "")
    stored = await service.stores.tables.get(TASKS_TABLE, task_id, cursor_row_key(Stream(TASKS_TABLE, task_id)))
    assert stored is not None and stored.data["dispatched"] == 3 and stored.data["holdSeq"] == 4


async def mark_of(tables: TableStore, holder: str) -> int:
    entity = await tables.get(MARKS_TABLE, holder, MARK_ROW)
    return int(entity.data["upTo"]) if entity is not None else 0


async def test_until_the_mark_is_written_another_process_waits_for_the_lease(
    service: Queue, publisher: RecordingPublisher
) -> None:
    events = service.stores.events
    events.marks.interval = 0.3  # the second hold's mark waits for the first's write plus this
    first, second = slugid(), slugid()
    await service.creation.create_task(first, task_definition())
    await others_run()  # the first mark's write
    await service.creation.create_task(second, task_definition())
    await others_run()  # published, not yet certified in storage
    assert len(publisher.published) == 4
    other = another_process(service)
    cursor = await other.cursor(Stream(TASKS_TABLE, second))
    assert cursor.dispatched == 0 and cursor.lease_until  # a lease like any other: its dispatch would wait
    await service.stores.settled()  # the mark's next write
    cursor = await other.cursor(Stream(TASKS_TABLE, second))
    assert (cursor.dispatched, cursor.lease_until) == (2, "")
    assert requests_left(service) == [] and len(publisher.published) == 4


async def test_a_hold_whose_transaction_lost_its_answer_is_never_certified(
    service: Queue, publisher: RecordingPublisher, clock: Clock
) -> None:
    """The claim's transaction is stored but its answer lost: its lease may name a hold whose events were not
    published. The mark must never cover it: later holds take a new marks id, and the old mark stops below."""
    events, tables = service.stores.events, service.stores.tables
    task_id = slugid()
    await service.creation.create_task(task_id, task_definition())
    await service.stores.settled()
    holder = events.marks.holder
    commit = tables.commit

    async def lost_answer(table: str, ops: Any) -> Any:
        await commit(table, ops)
        raise ConnectionResetError("the answer was lost")

    tables.commit = lost_answer  # type: ignore[method-assign]
    with pytest.raises(ConnectionResetError):
        await claim(service, task_id)
    tables.commit = commit  # type: ignore[method-assign]
    stream = Stream(TASKS_TABLE, task_id)
    stored = await tables.get(TASKS_TABLE, task_id, cursor_row_key(stream))
    assert stored is not None and stored.data["holder"] == holder and stored.data["holdSeq"] == 3
    # Later holds finish (another task's lifecycle); they are named by a new id, and the old mark stays below.
    later = slugid()
    await service.creation.create_task(later, task_definition())
    await service.stores.settled()
    assert events.marks.holder != holder
    assert await mark_of(tables, holder) < stored.data["holdNo"]
    other = another_process(service)
    assert (await other.cursor(stream)).leased(clock())  # waits for the lease to run out
    clock.advance(6)
    cursor = await other.cursor(stream)
    assert cursor.dispatched == 2 and not cursor.leased(clock())
    # The claim put no dispatch request: its check stands in (put before its transaction, left on the queue).
    # The worker never heard of the claim; the check comes due, expires it, and that change's dispatch publishes
    # task-running first, the dead hold's events being past the cursor.
    assert requests_left(service) == []
    task = await service.tasks.get(task_id)
    assert task is not None and task.runs[0].taken_until is not None
    clock.advance(60)
    assert await service.checks.check_claim(ClaimCheck(task_id, 0, task.runs[0].taken_until)) == "expired"
    await service.stores.settled()
    assert [e.exchange for e in publisher.published if e.routing_key.find(task_id) >= 0] == [
        "task-defined",
        "task-pending",
        "task-running",
        "task-exception",
        "task-pending",
    ]


async def test_a_transaction_answered_lost_although_it_was_its_own_never_has_its_hold_certified(
    service: Queue, publisher: RecordingPublisher, clock: Clock
) -> None:
    """After a lost response, a retried transaction finds its own first attempt applied, but a row a later change
    wrote (a worker claimed the new task at once) makes it look like someone else's: the call answers a lost race
    (shared/storage/lost_responses.py). Its lease row names the hold, so the mark must never cover it, or every
    dispatcher passes over the change's events (the fault campaign lost task-defined so, 1 in 1,300 events)."""
    events, tables = service.stores.events, service.stores.tables
    holder, commit = events.marks.holder, tables.commit

    async def applied_but_answered_lost(table: str, ops: Any) -> Any:
        await commit(table, ops)
        return None

    task_id = slugid()
    tables.commit = applied_but_answered_lost  # type: ignore[method-assign]
    try:
        await service.creation.create_task(task_id, task_definition())  # found stored: answered as a repeat
    finally:
        tables.commit = commit  # type: ignore[method-assign]
    stream = Stream(TASKS_TABLE, task_id)
    stored = await tables.get(TASKS_TABLE, task_id, cursor_row_key(stream))
    assert stored is not None and stored.data["holder"] == holder
    later = slugid()  # later holds finish; the mark stays below the lost one
    await service.creation.create_task(later, task_definition())
    await service.stores.settled()
    assert await mark_of(tables, holder) < stored.data["holdNo"]
    clock.advance(6)  # the lease runs out: another process's dispatch publishes what the writer did not
    other = another_process(service)
    await other.dispatch(DispatchRequest.of(stream, 2, clock()), publisher)
    assert [e.exchange for e in publisher.published if task_id in e.routing_key][:2] == ["task-defined", "task-pending"]


async def test_a_cursor_moved_by_another_process_fails_the_lease_not_the_change(
    service: Queue, publisher: RecordingPublisher
) -> None:
    task_id = slugid()
    await service.creation.create_task(task_id, task_definition())
    await service.stores.settled()
    stream = Stream(TASKS_TABLE, task_id)
    # Another process's dispatcher wrote the cursor since (its ETag changed; nothing left to publish).
    other = EventLog(service.stores.tables, service.stores.queues, dispatching=True)
    stored = await other.cursor(stream)
    assert await other.dispatcher.write_cursor(stream, stored.dispatched, "", stored.etag) is not None
    claimed = await claim(service, task_id)  # the lease's condition fails: written again without it
    assert claimed.run.state == "running"
    await service.stores.settled()
    # Written without a lease, its events are dispatched here at once (a lease and a cursor move).
    assert [e.exchange for e in publisher.published] == ["task-defined", "task-pending", "task-running"]
    assert requests_left(service) == []


async def test_a_bus_refusing_the_writer_leaves_the_events_to_the_dispatch_request(
    service: Queue, publisher: RecordingPublisher
) -> None:
    publisher.fail = True
    task_id = slugid()
    await service.creation.create_task(task_id, task_definition())
    await service.stores.settled()
    assert publisher.published == []
    publisher.fail = False
    # The lease was given up, and the request put back as one of its own, shown after a growing delay.
    [request] = requests_left(service)
    assert request.attempt == 1 and request.seq == 2
    assert await fallback(service, publisher) == ["published"]
    assert [e.exchange for e in publisher.published] == ["task-defined", "task-pending"]


async def test_a_stream_dispatched_here_is_not_held_by_a_writer(service: Queue, publisher: RecordingPublisher) -> None:
    """While a dispatch of the stream is under way in this process, a change of it is written without the
    lease (the dispatch, or its own request, publishes it)."""
    task_id = slugid()
    await service.creation.create_task(task_id, task_definition())
    await service.stores.settled()
    writers = service.stores.events.writers
    stream = Stream(TASKS_TABLE, task_id)
    held = await writers.hold(stream)
    assert held is not None and await writers.hold(stream) is None
    writers.not_written(held)
    assert await writers.hold(stream) is None  # the cursor is not known any more: read again first


async def test_changes_written_while_the_writer_publishes_go_out_with_its_publishing(
    service: Queue, publisher: RecordingPublisher
) -> None:
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
    # Its publishing waits at the gate; its answer waits a moment (then goes with the fallback request).
    await service.creation.create_task(task_id, task_definition())
    await claim(service, task_id)
    await service.lifecycle.resolve(task_id, 0, "completed", "completed")
    gate.set()
    await service.stores.settled()
    # The group's resolution (written with the task's) waited for the task's publishing to end.
    assert [e.exchange for e in publisher.published] == [
        "task-defined",
        "task-pending",
        "task-running",
        "task-completed",
        "task-group-resolved",
    ]
    assert counted.writes == [cursor_row_key(Stream(TASKS_TABLE, task_id))]  # one lease, one move for all four
    assert requests_left(service) == []


async def test_a_request_is_deleted_only_once_the_mark_that_certifies_its_events_is_stored(
    service: Queue, publisher: RecordingPublisher
) -> None:
    """The writer published, but until its mark is stored only this process knows: the request, which would
    bring another process to publish again after the lease if this one died, stays until then."""
    events, tables = service.stores.events, service.stores.tables
    events.marks.interval = 0.3
    group, task_id = slugid(), slugid()
    for member in (slugid(), task_id):  # the group stays open when the task is cancelled
        await service.creation.create_task(member, task_definition(taskGroupId=group))
    await service.stores.settled()
    assert requests_left(service) == []
    upsert = tables.upsert

    async def failing_marks(table: str, entity: Any) -> Any:
        if table == MARKS_TABLE:
            raise ConnectionResetError("storage is down")
        return await upsert(table, entity)

    tables.upsert = failing_marks  # type: ignore[method-assign]
    # A change with a request: the cancel of a pending run puts one beside its resolution message (a task pending
    # at once has none, its hint stands in; a dependent's creation has none, its answer waits instead; a claim
    # has none, its check stands in).
    await service.lifecycle.cancel_task(task_id)
    await service.stores.settled()
    assert [(r.key, r.seq) for r in requests_left(service)] == [(task_id, 3)]  # kept: the mark is not stored
    tables.upsert = upsert  # type: ignore[method-assign]
    await service.creation.create_task(slugid(), task_definition())  # its mark's write stores all
    await service.stores.settled()
    assert await mark_of(tables, events.marks.holder) == 4
    # The request left shows later and finds its events published, as the stored mark now says.
    assert [(r.key, r.seq) for r in requests_left(service)] == [(task_id, 3)]
    assert await fallback(service, publisher) == ["done"] and len(publisher.published) == 7


async def test_a_fallback_request_whose_change_was_never_written_is_dropped_when_it_shows(
    service: Queue, publisher: RecordingPublisher, clock: Clock
) -> None:
    """A request put to show only after the fallback delay, whose change lost its race and was never written: a
    write gives up sooner, so it is dropped at once rather than put back until QUEUE_HINT_GRACE."""
    task_id = slugid()
    await service.creation.create_task(task_id, task_definition())
    await service.stores.settled()
    events = service.stores.events
    since = clock() - dt.timedelta(seconds=events.fallback_delay)
    ahead = DispatchRequest(TASKS_TABLE, task_id, 5, timeutil.iso(since))
    assert await another_process(service).dispatch(ahead, publisher) == "stale"
    assert requests_left(service) == []


async def test_a_change_waits_a_moment_for_the_publishing_of_the_one_before_and_holds_the_stream_itself(
    service: Queue, publisher: RecordingPublisher
) -> None:
    """A worker reporting right after its claim: the claim's publishing is still under way here. The resolution
    waits for it (a moment) and writes its own lease, instead of leaving its events to that publishing, which
    would then write the cursor: no cursor write at all. Fails without the wait (`HOLD_WAIT`)."""
    publish = publisher.publish

    async def slow_publish(event: Any) -> None:
        await asyncio.sleep(0.05)
        await publish(event)

    task_id = slugid()
    await service.creation.create_task(task_id, task_definition())
    await service.stores.settled()
    publisher.publish = slow_publish  # type: ignore[method-assign]
    counted = CursorWrites(service)
    await claim(service, task_id)  # its task-running is being published for 50 ms
    await service.lifecycle.resolve(task_id, 0, "completed", "completed")
    await service.stores.settled()
    assert [e.exchange for e in publisher.published] == [
        "task-defined",
        "task-pending",
        "task-running",
        "task-completed",
        "task-group-resolved",
    ]
    assert counted.writes == []
    assert requests_left(service) == []
