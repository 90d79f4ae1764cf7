"""Deadline buckets on the memory connector: one message per second of deadlines, each task checked once."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from shared import timeutil
from shared.domain.deadlines import DEADLINES_TABLE, DeadlineBucket
from shared.domain.expiry import TASK_EXPIRY_TABLE
from shared.domain.messages import DEADLINE_DUE_QUEUE, DEADLINE_QUEUE, DeadlineCheck, bucket_of
from shared.maintenance.invariants import audit
from shared.runtime import Queue
from shared.storage.base import Entity, Page
from shared.storage.keys import decode_continuation, encode_continuation
from shared.storage.memory import MemoryQueues, MemoryTables
from shared.stores import deadlines
from tests.clock import Clock
from tests.services import memory_service
from tests.unit.helpers import create, memory_queues

pytestmark = pytest.mark.service(deadline_delay=2)


def queued(service: Queue) -> list[dict]:
    """The deadline messages waiting: parked, or in the triggered queue (a bucket's next page goes there)."""
    queues = memory_queues(service)
    return [json.loads(body) for name in (DEADLINE_QUEUE, DEADLINE_DUE_QUEUE) for body in queues.contents(name)]


async def rows(service: Queue) -> list[str]:
    page = await service.stores.tables.query(DEADLINES_TABLE, "PartitionKey ge @lo", {"lo": ""})
    return [e.row_key for e in page.entities]


def test_a_bucket_is_the_second_a_deadline_comes_due_rounded_up() -> None:
    assert bucket_of(dt.datetime(2026, 11, 22, 10, 0, 5, tzinfo=dt.UTC)) == "2026-11-22T10:00:05"
    assert bucket_of(dt.datetime(2026, 11, 22, 10, 0, 5, 1000, tzinfo=dt.UTC)) == "2026-11-22T10:00:06"
    with pytest.raises(ValueError, match="malformed deadline message"):
        DeadlineBucket.decode({"bucket": "tomorrow"})


async def test_tasks_sharing_a_deadline_share_one_message(service: Queue, clock: Clock) -> None:
    deadline = timeutil.iso(clock.now + dt.timedelta(seconds=30))
    tasks = [(await create(service, deadline=deadline))[0] for _ in range(5)]
    other, _ = await create(service, deadline=timeutil.iso(clock.now + dt.timedelta(seconds=60)))
    due = bucket_of(timeutil.parse(deadline) + dt.timedelta(seconds=2))  # deadline_delay
    assert sorted(m["bucket"] for m in queued(service)) == sorted(
        [due, service.stores.deadlines.bucket(other, clock.now + dt.timedelta(seconds=60))]
    )
    assert sorted(await rows(service)) == sorted([*tasks, other])
    # None of them has a check of its own to delete when it resolves.
    for task_id in tasks:
        assert "deadline" not in (await service.tasks.load(task_id)).checks


async def test_a_due_bucket_resolves_its_unresolved_tasks_once(service: Queue, clock: Clock) -> None:
    deadline = timeutil.iso(clock.now + dt.timedelta(seconds=30))
    waiting = [(await create(service, deadline=deadline))[0] for _ in range(3)]
    done, _ = await create(service, deadline=deadline)
    await service.claims.claim(done, 0, "g", "w")
    await service.lifecycle.resolve(done, 0, "completed", "completed")
    [message] = queued(service)
    assert await service.checks.check_deadlines(message) == "early"  # not due yet: put back
    assert len(queued(service)) == 2
    clock.advance(33)
    assert await service.checks.check_deadlines(message) == "checked 4"
    for task_id in waiting:
        status = (await service.queries.task(task_id)).status()
        assert [r["reasonResolved"] for r in status["runs"]] == ["deadline-exceeded"]
    assert (await service.queries.task(done)).status()["state"] == "completed"
    assert await rows(service) == []
    # The duplicate (the early one's put-back) finds nothing left to do.
    assert await service.checks.check_deadlines(message) == "checked 0"


async def test_a_large_bucket_is_checked_a_page_per_message(
    service: Queue, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(deadlines, "PAGE", 4)
    deadline = timeutil.iso(clock.now + dt.timedelta(seconds=30))
    tasks = [(await create(service, deadline=deadline))[0] for _ in range(10)]
    clock.advance(33)
    outcomes, pending = [], queued(service)
    while pending:  # each message hands the next page to a new one before checking its own
        memory_queues(service).clear(DEADLINE_QUEUE)
        memory_queues(service).clear(DEADLINE_DUE_QUEUE)
        outcomes += [await service.checks.check_deadlines(message) for message in pending]
        pending = queued(service)
    assert outcomes == ["checked 4", "checked 4", "checked 2"]
    assert {(await service.queries.task(t)).status()["state"] for t in tasks} == {"exception"}
    assert await rows(service) == []


async def test_a_failed_check_keeps_its_row_for_the_retry(
    service: Queue, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    deadline = timeutil.iso(clock.now + dt.timedelta(seconds=30))
    first, _ = await create(service, deadline=deadline)
    second, _ = await create(service, deadline=deadline)
    [message] = queued(service)
    clock.advance(33)
    real = service.checks.check_deadline

    async def failing(check: DeadlineCheck) -> str:
        if check.taskId == first:
            raise RuntimeError("storage hiccup")
        return await real(check)

    monkeypatch.setattr(service.checks, "check_deadline", failing)
    with pytest.raises(RuntimeError, match="storage hiccup"):
        await service.checks.check_deadlines(message)
    assert await rows(service) == [first]
    monkeypatch.setattr(service.checks, "check_deadline", real)
    assert await service.checks.check_deadlines(message) == "checked 1"  # the queue's retry of the message
    assert {(await service.queries.task(t)).status()["state"] for t in (first, second)} == {"exception"}


async def test_a_check_queued_per_task_before_buckets_still_works(service: Queue, clock: Clock) -> None:
    task_id, definition = await create(service)
    clock.advance(3700)
    old = DeadlineCheck(task_id, timeutil.parse(definition["deadline"]))
    assert await service.checks.check_deadlines(json.loads(old.encode())) == "exceeded"


async def test_a_lost_put_is_not_remembered(service: Queue, clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bucket message whose put failed is put again by the next task of that bucket (the failed createTask
    answered an error and wrote no task)."""
    deadline = timeutil.iso(clock.now + dt.timedelta(seconds=30))
    real_put = MemoryQueues.put

    async def failing_put(self: MemoryQueues, queue: str, content: bytes, **kwargs: int) -> object:
        if queue == DEADLINE_QUEUE:
            raise OSError("connection reset")
        return await real_put(self, queue, content, **kwargs)

    monkeypatch.setattr(MemoryQueues, "put", failing_put)
    with pytest.raises(OSError):
        await create(service, deadline=deadline)
    monkeypatch.setattr(MemoryQueues, "put", real_put)
    task_id, _ = await create(service, deadline=deadline)
    assert len(queued(service)) == 1
    assert task_id in await rows(service)


async def test_rerun_indexes_the_deadline_again(service: Queue, clock: Clock) -> None:
    """A task resolved by a check queued per task (before buckets) has no row; rerunning it adds one."""
    task_id, _ = await create(service)
    deadline = (await service.tasks.load(task_id)).deadline
    await service.stores.tables.delete(DEADLINES_TABLE, service.stores.deadlines.bucket(task_id, deadline), task_id)
    await service.lifecycle.cancel_task(task_id)
    await service.lifecycle.rerun_task(task_id)
    assert await rows(service) == [task_id]


async def entries(service: Queue) -> dict[str, str]:
    """The expiry index: taskId -> the hour partition it is in."""
    page = await service.stores.tables.query(TASK_EXPIRY_TABLE, "PartitionKey ge @lo", {"lo": ""})
    return {e.row_key: e.partition_key for e in page.entities}


async def test_a_task_enters_the_expiry_index_when_its_deadline_is_checked(service: Queue, clock: Clock) -> None:
    """createTask writes no expiry entry: the deadline row carries `expires`, and the bucket's check enters each
    task it checked, resolved or not, a transaction per hour, before it deletes the rows."""
    deadline = clock.now + dt.timedelta(seconds=30)
    expires = clock.now + dt.timedelta(days=2)
    waiting = [
        (await create(service, deadline=timeutil.iso(deadline), expires=timeutil.iso(expires)))[0] for _ in range(3)
    ]
    done, _ = await create(service, deadline=timeutil.iso(deadline), expires=timeutil.iso(expires))
    await service.claims.claim(done, 0, "g", "w")
    await service.lifecycle.resolve(done, 0, "completed", "completed")
    assert await entries(service) == {}
    page = await service.stores.tables.query(DEADLINES_TABLE, "PartitionKey ge @lo", {"lo": ""})
    assert {e.data["expires"] for e in page.entities} == {timeutil.iso(expires)}
    [message] = queued(service)
    clock.advance(33)
    tables = service.stores.tables
    transactions: list[str] = []
    real_transact = tables.transact

    async def counted(table: str, ops: list) -> bool:
        transactions.append(table)
        return await real_transact(table, ops)

    tables.transact = counted  # type: ignore[method-assign]
    assert await service.checks.check_deadlines(message) == "checked 4"
    hour = timeutil.iso(expires)[:13]
    assert await entries(service) == {t: hour for t in [*waiting, done]}
    assert transactions.count(TASK_EXPIRY_TABLE) == 1
    assert await rows(service) == []


async def test_a_task_not_found_is_entered_too(service: Queue, clock: Clock) -> None:
    """A row whose task is not there (its createTask refused after the row, or still under way) is entered as well
    (a task written after all then expires; the expiry timer drops the entry of one that never came); a row
    written before rows carried `expires` (its entry written by createTask then) goes as before."""
    deadline = clock.now + dt.timedelta(seconds=30)
    kept, _ = await create(service, deadline=timeutil.iso(deadline))
    await service.stores.deadlines.add("never-written-task-id", deadline, deadline + dt.timedelta(days=1))
    bucket = service.stores.deadlines.bucket("older-task-id", deadline)
    await service.stores.tables.upsert(
        DEADLINES_TABLE, Entity(bucket, "older-task-id", {"deadline": timeutil.iso(deadline)})
    )
    clock.advance(33)
    assert await service.checks.check_deadlines({"bucket": bucket}) == "checked 3"
    assert set(await entries(service)) == {kept, "never-written-task-id"}
    assert await rows(service) == []
    clock.advance(86400 + 3600)
    assert await service.expiry.expire_tasks() == 1  # the entry of no task, dropped
    assert set(await entries(service)) == {kept}  # expiring in a year


async def test_an_entry_not_written_keeps_the_rows_for_the_retry(
    service: Queue, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    deadline = timeutil.iso(clock.now + dt.timedelta(seconds=30))
    tasks = {(await create(service, deadline=deadline))[0] for _ in range(3)}
    [message] = queued(service)
    clock.advance(33)
    real = service.stores.expiry.add_all

    async def failing(found: list) -> None:
        raise OSError("connection reset")

    monkeypatch.setattr(service.stores.expiry, "add_all", failing)
    with pytest.raises(OSError):
        await service.checks.check_deadlines(message)
    assert set(await rows(service)) == tasks and await entries(service) == {}
    monkeypatch.setattr(service.stores.expiry, "add_all", real)
    assert await service.checks.check_deadlines(message) == "checked 3"  # the queue's retry: already resolved
    assert set(await entries(service)) == tasks and await rows(service) == []


async def test_tasks_whose_bucket_message_was_lost_still_expire(clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    """The expiry timer takes deadline rows past their task's `expires` as entries (the bucket's message was
    lost): 250 tasks, read 100 at a time, all deleted with their rows; tasks not yet expired are left."""
    service = memory_service(clock=clock, deadline_delay=2, expiry_delay=0)
    deadline = clock.now + dt.timedelta(seconds=30)
    expiring = {
        (
            await create(
                service, deadline=timeutil.iso(deadline), expires=timeutil.iso(deadline + dt.timedelta(minutes=5))
            )
        )[0]
        for _ in range(250)
    }
    later, _ = await create(
        service, deadline=timeutil.iso(deadline), expires=timeutil.iso(deadline + dt.timedelta(days=1))
    )
    memory_queues(service).clear(DEADLINE_QUEUE)  # lost
    reads: list[int] = []
    real_expired = service.stores.deadlines.expired

    async def counted(cutoff: dt.datetime, limit: int) -> list[tuple[str, str]]:
        found = await real_expired(cutoff, limit)
        reads.append(len(found))
        return found

    monkeypatch.setattr(service.stores.deadlines, "expired", counted)
    clock.advance(3600)
    assert await service.expiry.expire_tasks(batch=100) == 250
    assert reads == [100, 100, 50, 0]
    assert await rows(service) == [later]
    for task_id in expiring:
        assert await service.tasks.get(task_id) is None
    assert (await service.queries.task(later)).status()["state"] == "pending"


async def test_rerun_keeps_expires_on_the_row(service: Queue, clock: Clock) -> None:
    expires = clock.now + dt.timedelta(days=3)
    task_id, _ = await create(service, expires=timeutil.iso(expires))
    await service.lifecycle.cancel_task(task_id)
    await service.lifecycle.rerun_task(task_id)
    page = await service.stores.tables.query(DEADLINES_TABLE, "PartitionKey ge @lo", {"lo": ""})
    assert [(e.row_key, e.data["expires"]) for e in page.entities] == [(task_id, timeutil.iso(expires))]


async def test_the_audit_finds_a_task_that_would_never_expire(service: Queue, clock: Clock) -> None:
    deadline = clock.now + dt.timedelta(seconds=30)
    checked, _ = await create(service, deadline=timeutil.iso(deadline))
    lost, _ = await create(service, deadline=timeutil.iso(deadline + dt.timedelta(hours=1)))
    [message, _] = sorted(queued(service), key=lambda m: m["bucket"])
    clock.advance(33)
    assert await service.checks.check_deadlines(message) == "checked 1"
    assert (await audit(service.stores, settled=False)).violations == []  # one by its entry, one by its row
    await service.stores.deadlines.forget(lost, deadline + dt.timedelta(hours=1))
    assert [(v.invariant, v.task_id) for v in (await audit(service.stores, settled=False)).violations] == [
        ("expiry-indexed", lost)
    ]
    assert checked


async def test_a_create_held_up_past_its_bucket_check_still_expires(
    service: Queue, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """createTask writes the deadline row, stalls past the deadline (its bucket checked meanwhile: no task yet),
    then writes the task: the entry made for a task not found is what expires it."""
    deadline = clock.now + dt.timedelta(seconds=30)
    expires = deadline + dt.timedelta(hours=1)
    real_write = service.tasks.write
    checked: list[str] = []

    async def stalled(task, **kwargs):  # type: ignore[no-untyped-def]
        clock.advance(33)
        [message] = queued(service)
        checked.append(await service.checks.check_deadlines(message))
        return await real_write(task, **kwargs)

    monkeypatch.setattr(service.tasks, "write", stalled)
    task_id, _ = await create(service, deadline=timeutil.iso(deadline), expires=timeutil.iso(expires))
    monkeypatch.setattr(service.tasks, "write", real_write)
    assert checked == ["checked 1"] and set(await entries(service)) == {task_id}
    assert await rows(service) == []
    assert (await audit(service.stores, settled=False)).violations == []
    clock.advance(2 * 3600)
    assert await service.expiry.expire_tasks() == 1
    assert await service.tasks.get(task_id) is None and await entries(service) == {}


class PartitionPages(MemoryTables):
    """Azure's way with a query over many partitions: a page ends where a partition does, empty or not."""

    async def query(
        self, table: str, filter: str, parameters: dict, *, limit: int | None = None, continuation: str | None = None
    ) -> Page:
        if table != DEADLINES_TABLE:
            return await super().query(table, filter, parameters, limit=limit, continuation=continuation)
        every = (await super().query(table, "PartitionKey ge @lo", {"lo": ""})).entities
        if continuation:
            after = decode_continuation(continuation)
            every = [e for e in every if (e.partition_key, e.row_key) >= (after[0], after[1] or "")]
        if not every:
            return Page([], None)
        first = every[0].partition_key
        rest = [e for e in every if e.partition_key != first]
        matched = {(e.partition_key, e.row_key) for e in (await super().query(table, filter, parameters)).entities}
        page = [e for e in every if e.partition_key == first and (e.partition_key, e.row_key) in matched]
        return Page(page[:limit], encode_continuation(rest[0].partition_key, rest[0].row_key) if rest else None)


async def test_rows_past_expires_are_reached_behind_many_lost_buckets(
    clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """60 lost buckets whose tasks expire in a year, each ending a page of the expiry timer's look, and behind
    them a task past its `expires`: each look reads PAGES_READ pages and the next goes on from there."""
    monkeypatch.setattr(deadlines, "PAGES_READ", 20)
    tables = PartitionPages()
    service = memory_service(tables=tables, clock=clock, deadline_delay=2, expiry_delay=0)
    start = clock.now
    for i in range(60):
        await create(service, deadline=timeutil.iso(start + dt.timedelta(seconds=10 + i)))
    target, _ = await create(
        service,
        deadline=timeutil.iso(start + dt.timedelta(seconds=100)),
        expires=timeutil.iso(start + dt.timedelta(minutes=10)),
    )
    memory_queues(service).clear(DEADLINE_QUEUE)  # lost
    clock.advance(3600)
    assert [await service.expiry.expire_tasks() for _ in range(4)] == [0, 0, 0, 1]
    left = await MemoryTables.query(tables, DEADLINES_TABLE, "PartitionKey ge @lo", {"lo": ""})
    assert await service.tasks.get(target) is None and len(left.entities) == 60
