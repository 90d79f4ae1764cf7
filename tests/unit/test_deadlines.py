"""Deadline buckets on the memory connector: one message per second of deadlines, each task checked once."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from shared import timeutil
from shared.domain import deadlines
from shared.domain.deadlines import DEADLINES_TABLE, DeadlineBucket, bucket_of
from shared.domain.messages import DEADLINE_QUEUE, DeadlineCheck
from shared.runtime import Queue
from shared.storage.memory import MemoryQueues
from tests.unit.conftest import memory_service
from tests.unit.test_reconciler import create, memory_queues
from tests.unit.test_service import Clock


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def service(clock: Clock) -> Queue:
    return memory_service(clock=clock, deadline_delay=2)


def queued(service: Queue) -> list[dict]:
    return [json.loads(body) for body in memory_queues(service).contents(DEADLINE_QUEUE)]


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
    assert sorted(m["bucket"] for m in queued(service)) == sorted([due, service.stores.deadlines.bucket(
        other, clock.now + dt.timedelta(seconds=60))])
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


async def test_a_large_bucket_is_checked_a_page_per_message(service: Queue, clock: Clock,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(deadlines, "PAGE", 4)
    deadline = timeutil.iso(clock.now + dt.timedelta(seconds=30))
    tasks = [(await create(service, deadline=deadline))[0] for _ in range(10)]
    clock.advance(33)
    outcomes, pending = [], queued(service)
    while pending:  # each message hands the next page to a new one before checking its own
        memory_queues(service).clear(DEADLINE_QUEUE)
        outcomes += [await service.checks.check_deadlines(message) for message in pending]
        pending = queued(service)
    assert outcomes == ["checked 4", "checked 4", "checked 2"]
    assert {(await service.queries.task(t)).status()["state"] for t in tasks} == {"exception"}
    assert await rows(service) == []


async def test_a_failed_check_keeps_its_row_for_the_retry(service: Queue, clock: Clock,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
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


async def test_a_lost_put_is_not_remembered(service: Queue, clock: Clock,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
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
