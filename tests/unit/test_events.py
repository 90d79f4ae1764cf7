"""Events on the in-memory connector: what each transition records (exchange, routing key, CC, payload valid
against the official message schema), and the dispatcher's ordering, lease and failure rules."""

from __future__ import annotations

import asyncio
import datetime as dt
from dataclasses import replace

import pytest

from shared import timeutil
from shared.domain.messages import DeadlineCheck
from shared.domain.tasks import TASKS_TABLE
from shared.outbox.fallbacks import DISPATCH_BATCH
from shared.outbox.log import EventLog
from shared.outbox.rows import (
    DISPATCH_QUEUE,
    DispatchRequest,
    Stream,
    cursor_row_key,
    decode_requests,
    encode_requests,
)
from shared.runtime import Queue
from shared.validation import errors_of
from tests.answers import group_events, resolution_messages, task_events
from tests.clock import Clock
from tests.conftest import slugid
from tests.unit.helpers import EVENT_SETTINGS, RecordingPublisher, claim, drain, task_definition

pytestmark = pytest.mark.service(**EVENT_SETTINGS)


async def recorded(service: Queue, task_id: str) -> list[dict]:
    return (await task_events(service, task_id, limit=1000, continuation=None))["events"]


def assert_valid(events: list[dict]) -> None:
    from shared.domain.events import EXCHANGES

    for event in events:
        short = event["exchange"].rsplit("/", 1)[1]
        assert errors_of(EXCHANGES[short], event["payload"]) == [], event


async def test_lifecycle_records_each_exchange_with_taskclusters_routing_key(service: Queue) -> None:
    task_id = slugid()
    definition = task_definition(
        taskQueueId="prov/wt",
        routes=["index.a.b", "notify.email.x@example.com"],
        tags={"kind": "build"},
        schedulerId="sched",
        taskGroupId=task_id,
    )
    await service.creation.create_task(task_id, definition)
    await claim(service, task_id)
    await service.lifecycle.resolve(task_id, 0, "completed", "completed")
    events = await recorded(service, task_id)
    assert [e["exchange"] for e in events] == [
        "exchange/taskcluster-queue/v1/task-defined",
        "exchange/taskcluster-queue/v1/task-pending",
        "exchange/taskcluster-queue/v1/task-running",
        "exchange/taskcluster-queue/v1/task-completed",
    ]
    assert [e["seq"] for e in events] == [1, 2, 3, 4]
    assert [e["routingKey"] for e in events] == [
        f"primary.{task_id}._._._.prov.wt.sched.{task_id}._",
        f"primary.{task_id}.0._._.prov.wt.sched.{task_id}._",
        f"primary.{task_id}.0.wg.w1.prov.wt.sched.{task_id}._",
        f"primary.{task_id}.0.wg.w1.prov.wt.sched.{task_id}._",
    ]
    assert all(e["routes"] == ["route.index.a.b", "route.notify.email.x@example.com"] for e in events)
    assert_valid(events)
    defined, pending, running, completed = (e["payload"] for e in events)
    assert defined["version"] == 1 and defined["task"] == {"tags": {"kind": "build"}}
    assert defined["status"]["state"] == "pending"  # created and scheduled by one write
    assert pending["runId"] == 0 and "workerGroup" not in pending
    assert running["workerGroup"] == "wg" and running["takenUntil"] == running["status"]["runs"][0]["takenUntil"]
    assert completed["status"]["state"] == "completed" and completed["workerId"] == "w1"


async def test_retry_records_exception_then_pending_in_one_change(service: Queue) -> None:
    task_id = slugid()
    await service.creation.create_task(task_id, task_definition(retries=1))
    await claim(service, task_id)
    await service.lifecycle.resolve(task_id, 0, "exception", "worker-shutdown")
    events = await recorded(service, task_id)
    assert [e["exchange"].rsplit("/", 1)[1] for e in events[-2:]] == ["task-exception", "task-pending"]
    exception, pending = events[-2]["payload"], events[-1]["payload"]
    assert exception["runId"] == 0 and exception["workerId"] == "w1"
    assert pending["runId"] == 1 and events[-1]["routingKey"].split(".")[2] == "1"
    assert exception["status"] == pending["status"]  # both describe the state after the change
    assert_valid(events)


async def test_cancel_deadline_rerun_failed_and_priority(service: Queue, clock: Clock) -> None:
    cancelled, failed = slugid(), slugid()
    await service.creation.create_task(cancelled, task_definition())
    await service.lifecycle.cancel_task(cancelled)
    await service.lifecycle.cancel_task(cancelled)  # a repeat changes nothing and records nothing
    await service.creation.create_task(failed, task_definition())
    await service.lifecycle.change_task_priority(failed, "high")
    await claim(service, failed)
    await service.lifecycle.resolve(failed, 0, "failed", "failed")
    await service.lifecycle.rerun_task(failed)
    names = [[e["exchange"].rsplit("/", 1)[1] for e in await recorded(service, t)] for t in (cancelled, failed)]
    assert names[0] == ["task-defined", "task-pending", "task-exception"]
    assert names[1] == [
        "task-defined",
        "task-pending",
        "task-priority-changed",
        "task-running",
        "task-failed",
        "task-pending",
    ]
    changed = (await recorded(service, failed))[2]
    assert changed["payload"]["oldPriority"] == "lowest" and changed["payload"]["newPriority"] == "high"
    assert changed["routingKey"].split(".")[2:5] == ["_", "_", "_"]
    late = slugid()
    await service.creation.create_task(
        late, task_definition(deadline=timeutil.iso(clock.now + dt.timedelta(seconds=5)))
    )
    clock.advance(10)
    task = await service.tasks.load(late)
    assert await service.checks.check_deadline(DeadlineCheck(late, task.deadline)) == "exceeded"
    events = await recorded(service, late)
    assert events[-1]["exchange"].endswith("/task-exception")
    assert events[-1]["payload"]["status"]["runs"][0]["reasonResolved"] == "deadline-exceeded"
    for t in (cancelled, failed, late):
        assert_valid(await recorded(service, t))


async def test_group_events_sealed_resolved_priority(service: Queue) -> None:
    group = slugid()
    task_id = slugid()
    await service.creation.create_task(task_id, task_definition(taskGroupId=group, schedulerId="s1"))
    await service.groups.change_priority(group, "high")
    await service.groups.seal(group)
    await service.groups.seal(group)  # sealing again keeps the first and records nothing
    await claim(service, task_id)
    await service.lifecycle.resolve(task_id, 0, "completed", "completed")
    from shared.domain.messages import ResolvedCheck

    for _, message in await resolution_messages(service):
        await service.resolution.resolve_dependencies(ResolvedCheck.decode(message.json()))
    events = (await group_events(service, group, limit=100, continuation=None))["events"]
    assert [e["exchange"].rsplit("/", 1)[1] for e in events] == [
        "task-group-priority-changed",
        "task-group-sealed",
        "task-group-resolved",
    ]
    assert all(e["routingKey"] == f"primary.{group}.s1._" and e["routes"] == [] for e in events)
    assert events[0]["payload"] == {
        "version": 1,
        "taskGroupId": group,
        "schedulerId": "s1",
        "newPriority": "high",
        "tasksAffected": 1,
    }
    assert events[1]["payload"]["sealed"] == events[2]["payload"]["sealed"]
    assert_valid(events)


@pytest.mark.service(event_bus="none")
async def test_no_bus_records_events_but_asks_no_dispatch(service: Queue) -> None:
    task_id = slugid()
    await service.creation.create_task(task_id, task_definition())
    assert len(await recorded(service, task_id)) == 2
    assert await service.stores.queues.receive(DISPATCH_QUEUE, 32, 30) == []


async def test_dispatch_publishes_each_event_once_in_order(service: Queue) -> None:
    publisher = RecordingPublisher()
    task_id = slugid()
    await service.creation.create_task(task_id, task_definition())
    await claim(service, task_id)
    await service.lifecycle.resolve(task_id, 0, "completed", "completed")
    outcomes = await drain(service, publisher)
    # The first request publishes everything up to its own seq; later ones find theirs done or go on from there.
    assert outcomes[0] == "published"
    # The group named after the task resolved in the task's last transaction: its event comes after the task's.
    assert [e.exchange for e in publisher.published] == [
        "task-defined",
        "task-pending",
        "task-running",
        "task-completed",
        "task-group-resolved",
    ]
    assert [e.message_id for e in publisher.published] == [
        *(f"Tasks/{task_id}/{n}" for n in (1, 2, 3, 4)),
        f"TaskGroups/{task_id}/1",
    ]
    assert await drain(service, publisher) == []


async def test_duplicate_requests_publish_nothing_twice(service: Queue) -> None:
    publisher = RecordingPublisher()
    task_id = slugid()
    await service.creation.create_task(task_id, task_definition())
    request = DispatchRequest(TASKS_TABLE, task_id, 2, timeutil.iso(timeutil.now()))
    assert await service.stores.events.dispatch(request, publisher) == "published"
    assert await service.stores.events.dispatch(request, publisher) == "done"
    assert len(publisher.published) == 2


async def test_concurrent_dispatchers_keep_order(service: Queue) -> None:
    publisher = RecordingPublisher()
    task_id = slugid()
    await service.creation.create_task(task_id, task_definition())
    await claim(service, task_id)
    since = timeutil.iso(timeutil.now())
    requests = [DispatchRequest(TASKS_TABLE, task_id, n, since) for n in (3, 2, 3, 1)]
    await asyncio.gather(*(service.stores.events.dispatch(r, publisher) for r in requests))
    await drain(service, publisher)  # requests put back while the stream was busy
    seqs = [int(e.message_id.rsplit("/", 1)[1]) for e in publisher.published]
    assert seqs == sorted(seqs) and set(seqs) == {1, 2, 3}


async def test_request_ahead_of_its_write_waits_then_drops_when_never_written(service: Queue, clock: Clock) -> None:
    publisher = RecordingPublisher()
    task_id = slugid()
    await service.creation.create_task(task_id, task_definition())
    ahead = DispatchRequest(TASKS_TABLE, task_id, 5, timeutil.iso(clock.now))
    assert await service.stores.events.dispatch(ahead, publisher) == "not-written"
    assert publisher.published == []  # nothing published past a gap, and nothing before the write is known
    clock.advance(1.1)  # put back for QUEUE_HINT_RETRY_DELAY
    requests = [DispatchRequest.decode(m.json()) for m in await service.stores.queues.receive(DISPATCH_QUEUE, 32, 30)]
    assert ahead in requests
    clock.advance(120)  # past QUEUE_HINT_GRACE
    assert await service.stores.events.dispatch(ahead, publisher) == "stale"


async def test_bus_failure_keeps_the_cursor_and_retries_with_backoff(service: Queue, clock: Clock) -> None:
    publisher = RecordingPublisher()
    task_id = slugid()
    await service.creation.create_task(task_id, task_definition())
    await service.stores.queues.receive(DISPATCH_QUEUE, 32, 3600)  # the original request: handled below by hand
    publisher.fail = True
    request = DispatchRequest(TASKS_TABLE, task_id, 2, timeutil.iso(clock.now))
    assert await service.stores.events.dispatch(request, publisher) == "bus-failed"
    assert await service.stores.queues.receive(DISPATCH_QUEUE, 32, 30) == []  # put back with a delay
    clock.advance(1.1)
    [again] = await service.stores.queues.receive(DISPATCH_QUEUE, 32, 30)
    retry = DispatchRequest.decode(again.json())
    assert retry.attempt == 1
    publisher.fail = False
    assert await service.stores.events.dispatch(retry, publisher) == "published"
    assert [e.exchange for e in publisher.published] == ["task-defined", "task-pending"]


async def test_expired_lease_is_taken_over(service: Queue, clock: Clock) -> None:
    publisher = RecordingPublisher()
    task_id = slugid()
    await service.creation.create_task(task_id, task_definition())
    stream = Stream(TASKS_TABLE, task_id)
    # A dispatcher that took the lease and died.
    cursor = await service.stores.tables.get(TASKS_TABLE, task_id, cursor_row_key(stream))
    await service.stores.events.dispatcher.write_cursor(
        stream, 0, timeutil.iso(clock.now + dt.timedelta(seconds=5)), cursor.etag
    )
    request = DispatchRequest(TASKS_TABLE, task_id, 2, timeutil.iso(clock.now))
    assert await service.stores.events.dispatch(request, publisher) == "busy"
    clock.advance(6)
    assert await service.stores.events.dispatch(request, publisher) == "published"
    assert len(publisher.published) == 2


async def test_expiry_forgets_events(service: Queue, clock: Clock) -> None:
    task_id = slugid()
    now = clock.now
    await service.creation.create_task(
        task_id,
        task_definition(
            created=timeutil.iso(now),
            deadline=timeutil.iso(now + dt.timedelta(seconds=10)),
            expires=timeutil.iso(now + dt.timedelta(seconds=20)),
        ),
    )
    await service.groups.seal(task_id)
    clock.advance(3600)
    assert await service.expiry.expire_tasks() == 1
    page = await service.stores.tables.query(TASKS_TABLE, "PartitionKey eq @pk", {"pk": task_id})
    assert page.entities == []  # the task's rows, and its group's (the same partition)


async def test_expiry_deletes_the_events_of_a_change_written_while_it_expires(
    service: Queue, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A change written between expiry's read of the task and its delete (its deadline resolved late) adds an
    event row after the ones expiry deleted: the task's delete, conditional on the row it read, fails, and the
    task is read and deleted again with that row (it outlived the task once, in CI)."""
    task_id = slugid()
    now = clock.now
    await service.creation.create_task(
        task_id,
        task_definition(
            created=timeutil.iso(now),
            deadline=timeutil.iso(now + dt.timedelta(seconds=10)),
            expires=timeutil.iso(now + dt.timedelta(seconds=20)),
        ),
    )
    await service.groups.seal(task_id)
    clock.advance(3600)
    deadlines = service.stores.deadlines
    forget = deadlines.forget
    changed: list[str] = []

    async def forget_then_change(*args: object) -> None:
        await forget(*args)  # type: ignore[arg-type]
        if not changed:  # the first pass only: the change lands between expiry's read and its delete
            task = await service.tasks.load(task_id)
            changed.append(await service.checks.check_deadline(DeadlineCheck(task_id, task.deadline)))

    monkeypatch.setattr(deadlines, "forget", forget_then_change)
    assert await service.expiry.expire_tasks() == 1
    assert changed == ["exceeded"]
    page = await service.stores.tables.query(TASKS_TABLE, "PartitionKey eq @pk", {"pk": task_id})
    assert [e.row_key for e in page.entities] == []


class HostMessage:
    """What the trigger reads of a func.QueueMessage."""

    def __init__(self, request: DispatchRequest | list[DispatchRequest], dequeue_count: int) -> None:
        body = request.encode() if isinstance(request, DispatchRequest) else encode_requests(request)
        self.id, self.dequeue_count, self._body = "m1", dequeue_count, body

    def get_json(self) -> object:
        import json

        return json.loads(self._body)


@pytest.mark.parametrize("dequeue_count", [1, 4])
async def test_dispatch_trigger_never_lets_a_request_reach_the_poison_queue(
    service: Queue, clock: Clock, monkeypatch: pytest.MonkeyPatch, dequeue_count: int
) -> None:
    import functions.events as trigger

    async def broken(request: DispatchRequest, publisher: object) -> str:
        raise RuntimeError("storage hiccup")

    monkeypatch.setattr(service.stores.events, "dispatch", broken)
    monkeypatch.setattr(trigger, "get_queue", lambda: service)
    monkeypatch.setattr(trigger, "get_publisher", lambda: RecordingPublisher())
    request = DispatchRequest(TASKS_TABLE, slugid(), 1, timeutil.iso(clock.now), attempt=2)
    if dequeue_count < trigger.REQUEUE_AFTER:
        with pytest.raises(RuntimeError):  # the host retries it a few times itself
            await trigger.event_dispatch(HostMessage(request, dequeue_count))
        return
    await trigger.event_dispatch(HostMessage(request, dequeue_count))  # handled: not retried, not poisoned
    assert await service.stores.queues.receive(DISPATCH_QUEUE, 32, 30) == []  # put back hidden: 2 ** attempt s
    clock.advance(4.1)
    [again] = [DispatchRequest.decode(m.json()) for m in await service.stores.queues.receive(DISPATCH_QUEUE, 32, 30)]
    assert again == DispatchRequest(request.table, request.key, 1, request.since, attempt=3)


async def test_requests_announced_together_share_a_message(service: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    """A burst of changes (a fan-out's) asks for dispatch in a few messages, each request once; the trigger
    publishes every stream of a batch message."""
    import functions.events as trigger

    task_ids = [slugid() for _ in range(150)]
    await asyncio.gather(*(service.creation.create_task(t, task_definition()) for t in task_ids))
    messages = await service.stores.queues.receive(DISPATCH_QUEUE, 32, 30)
    batches = [decode_requests(m.json()) for m in messages]
    assert 2 <= len(messages) <= len(task_ids) // 2 and max(len(b) for b in batches) <= DISPATCH_BATCH
    requests = [r for batch in batches for r in batch]
    assert sorted(r.key for r in requests) == sorted(task_ids) and {r.seq for r in requests} == {2}

    publisher = RecordingPublisher()
    monkeypatch.setattr(trigger, "get_queue", lambda: service)
    monkeypatch.setattr(trigger, "get_publisher", lambda: publisher)
    for batch in batches:
        await trigger.event_dispatch(HostMessage(batch, 1))
    published = {(e.message_id.split("/")[1], e.exchange) for e in publisher.published}
    assert published == {(t, x) for t in task_ids for x in ("task-defined", "task-pending")}
    assert len(publisher.published) == 2 * len(task_ids)


def test_a_malformed_batch_is_refused() -> None:
    for body in ({"batch": []}, {"batch": "x"}, {"batch": [{"table": "Tasks"}]}):
        with pytest.raises(ValueError):
            decode_requests(body)


async def test_a_failing_stream_of_a_batch_is_put_back_alone(
    service: Queue, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After the host's retries, only the request that keeps failing goes back on the queue; the others of its
    message were published (and a retry of the whole message would have found them done)."""
    import functions.events as trigger

    publisher = RecordingPublisher()
    good, bad = slugid(), slugid()
    for task_id in (good, bad):
        await service.creation.create_task(task_id, task_definition())
    await service.stores.queues.receive(DISPATCH_QUEUE, 32, 30)  # the creates' own requests: not used here
    dispatch = service.stores.events.dispatch

    async def failing_for_bad(request: DispatchRequest, publisher: object) -> str:
        if request.key == bad:
            raise RuntimeError("storage hiccup")
        return await dispatch(request, publisher)  # type: ignore[arg-type]

    monkeypatch.setattr(service.stores.events, "dispatch", failing_for_bad)
    monkeypatch.setattr(trigger, "get_queue", lambda: service)
    monkeypatch.setattr(trigger, "get_publisher", lambda: publisher)
    since = timeutil.iso(clock.now)
    batch = [DispatchRequest(TASKS_TABLE, good, 2, since), DispatchRequest(TASKS_TABLE, bad, 2, since)]
    with pytest.raises(RuntimeError):  # early attempts: the host retries the whole message
        await trigger.event_dispatch(HostMessage(batch, 1))
    await trigger.event_dispatch(HostMessage(batch, trigger.REQUEUE_AFTER))
    assert {e.message_id.split("/")[1] for e in publisher.published} == {good}
    assert len(publisher.published) == 2  # published once, although the message was handled twice
    clock.advance(1.1)  # 2 ** attempt
    [again] = [decode_requests(m.json()) for m in await service.stores.queues.receive(DISPATCH_QUEUE, 32, 30)]
    assert again == [DispatchRequest(TASKS_TABLE, bad, 2, since, attempt=1)]


async def test_the_dispatcher_reads_back_nothing_this_process_wrote(service: Queue) -> None:
    """Event rows this process wrote, and the cursor it last moved, are not read again: a dispatch is its lease
    and its cursor's move."""
    publisher = RecordingPublisher()
    task_id = slugid()
    await service.creation.create_task(task_id, task_definition())
    tables = service.stores.tables
    reads: list[str] = []
    get = tables.get

    async def counted(table: str, partition_key: str, row_key: str):  # type: ignore[no-untyped-def]
        reads.append(row_key)
        return await get(table, partition_key, row_key)

    tables.get = counted  # type: ignore[method-assign]
    request = DispatchRequest(TASKS_TABLE, task_id, 2, timeutil.iso(timeutil.now()))
    assert await service.stores.events.dispatch(request, publisher) == "published"
    await claim(service, task_id)
    assert await service.stores.events.dispatch(replace(request, seq=3), publisher) == "published"
    assert reads == [] and [e.exchange for e in publisher.published] == ["task-defined", "task-pending", "task-running"]


async def test_a_cursor_moved_by_another_process_is_read_again(service: Queue) -> None:
    """The remembered cursor is only a starting point: another process's dispatcher moved it (and published),
    so this one's lease write fails, it reads the cursor, and publishes nothing twice."""
    publisher = RecordingPublisher()
    task_id = slugid()
    await service.creation.create_task(task_id, task_definition())
    other = EventLog(service.stores.tables, service.stores.queues, dispatching=True)  # nothing remembered
    request = DispatchRequest(TASKS_TABLE, task_id, 2, timeutil.iso(timeutil.now()))
    assert await other.dispatch(request, publisher) == "published"
    assert await service.stores.events.dispatch(request, publisher) == "done"
    assert [e.exchange for e in publisher.published] == ["task-defined", "task-pending"]
