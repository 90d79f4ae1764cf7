"""Long-delayed checks wait in parking queues that no trigger watches, and the mover brings each to its triggered
queue shortly before it falls due (shared/domain/parking.py). On the memory connector, with a lead of 2 seconds,
on the tests' clock: the memory queues keep its time, so a wait is the clock moved on, not a sleep."""

from __future__ import annotations

import datetime as dt

import pytest

from shared import timeutil, timing
from shared.domain.deadlines import DeadlineBucket
from shared.domain.messages import (
    CLAIM_DUE_QUEUE,
    CLAIM_QUEUE,
    DEADLINE_DUE_QUEUE,
    DEADLINE_QUEUE,
    ClaimCheck,
    ResolvedCheck,
    Shards,
    bucket_of,
)
from shared.domain.parking import due_of
from shared.storage.base import QueueMessage
from shared.storage.memory import MemoryQueues
from shared.stores.parking import CheckQueues
from tests.clock import Clock
from tests.conftest import slugid
from tests.services import create_task, memory_service

LEAD = 2


@pytest.fixture
def checks(queues: MemoryQueues, clock: Clock) -> CheckQueues:
    return CheckQueues(queues, Shards(), LEAD, clock)


def claim_check(clock: Clock, in_seconds: float) -> ClaimCheck:
    return ClaimCheck(slugid(), 0, timeutil.to_ms(clock() + dt.timedelta(seconds=in_seconds)))


async def visible(queues: MemoryQueues, name: str) -> list[QueueMessage]:
    found = await queues.receive(name, 32, 0)
    return list(found)


async def test_a_check_due_later_than_the_lead_is_parked_until_the_lead(
    queues: MemoryQueues, checks: CheckQueues, clock: Clock
):
    far, near = claim_check(clock, LEAD + 1), claim_check(clock, 1)
    assert (await checks.put(CLAIM_QUEUE, far.taskId, far.encode(), far.takenUntil))[0] == CLAIM_QUEUE
    assert (await checks.put(CLAIM_QUEUE, near.taskId, near.encode(), near.takenUntil))[0] == CLAIM_DUE_QUEUE
    assert queues.contents(CLAIM_QUEUE) == [far.encode()] and queues.contents(CLAIM_DUE_QUEUE) == [near.encode()]
    assert await visible(queues, CLAIM_QUEUE) == []  # shows `lead` seconds before it is due, not now
    clock.advance(1)
    assert [m.content for m in await visible(queues, CLAIM_QUEUE)] == [far.encode()]


async def test_the_mover_brings_what_shows_to_the_triggered_queue_with_the_rest_of_its_delay(
    queues: MemoryQueues, checks: CheckQueues, clock: Clock
):
    check = claim_check(clock, LEAD + 1)
    bucket = DeadlineBucket(bucket_of(clock() + dt.timedelta(seconds=LEAD)))  # due in 2-3 s
    await checks.put(CLAIM_QUEUE, check.taskId, check.encode(), check.takenUntil)
    await checks.put(DEADLINE_QUEUE, bucket.bucket, bucket.encode(), due_of({"bucket": bucket.bucket}, clock()))
    assert (await checks.move_due()).moved == 0  # nothing shows yet
    clock.advance(1.95)  # both show; the claim check due in 1.05 s (the mover waits out the 0.05 s fraction)
    moved = await checks.move_due()
    assert (moved.moved, moved.waiting) == (2, 0)
    assert queues.contents(CLAIM_QUEUE) == [] and queues.contents(DEADLINE_QUEUE) == []  # deleted once put
    assert queues.contents(CLAIM_DUE_QUEUE) == [check.encode()] and queues.contents(DEADLINE_DUE_QUEUE) == [
        bucket.encode()
    ]
    assert await visible(queues, CLAIM_DUE_QUEUE) == []  # not before its takenUntil
    clock.advance(2)
    assert [m.content for m in await visible(queues, CLAIM_DUE_QUEUE)] == [check.encode()]


async def test_a_check_that_shows_long_before_it_is_due_waits_again(
    queues: MemoryQueues, checks: CheckQueues, clock: Clock
):
    """A parked message visible far ahead of its time (put visible by hand, a clock far behind) is hidden again
    until the lead, not moved."""
    check = claim_check(clock, 3600)
    await queues.put(CLAIM_QUEUE, check.encode())
    moved = await checks.move_due()
    assert (moved.moved, moved.waiting) == (0, 1)
    assert queues.contents(CLAIM_QUEUE) == [check.encode()] and await visible(queues, CLAIM_QUEUE) == []


async def test_a_resolution_message_or_anything_unreadable_is_moved_at_once(
    queues: MemoryQueues, checks: CheckQueues, clock: Clock
):
    """A claim check a resolution turned into its message (it shows after the grace) is for now; so is a message
    the mover cannot read, which its trigger then refuses as it would have."""
    resolution = ResolvedCheck(slugid(), 0, slugid(), None, clock()).encode()
    for body in (resolution, b"not json", b'{"takenUntil": "soon"}'):
        await queues.put(CLAIM_QUEUE, body)
    assert (await checks.move_due()).moved == 3
    assert len(await visible(queues, CLAIM_DUE_QUEUE)) == 3


async def test_a_mover_that_dies_between_put_and_delete_moves_the_check_twice_harmlessly(
    queues: MemoryQueues, clock: Clock, monkeypatch: pytest.MonkeyPatch
):
    """The parked message shows again and is moved again; the claim check's handler takes the copy for what it is
    (a check of a run already resolved) and the claim expires once."""
    monkeypatch.setattr(timing, "MOVE_VISIBILITY", 1.0)  # how long a message being moved stays hidden
    service = memory_service(queues=queues, clock=clock, park_lead=LEAD, claim_timeout=LEAD + 1)
    checks = service.stores.check_queues
    task_id = await create_task(service)
    await service.claims.claim(task_id, 0, "g", "w")
    assert len(queues.contents(CLAIM_QUEUE)) == 1  # the claim's check, parked
    clock.advance(1)

    async def dies(queue: str, message: QueueMessage) -> None:
        raise ConnectionError("the mover's process died")

    with monkeypatch.context() as patched:
        patched.setattr(queues, "delete", dies)
        with pytest.raises(ConnectionError):
            await checks.move_due()
    clock.advance(1)  # it shows again
    assert (await checks.move_due()).moved == 1
    assert queues.contents(CLAIM_QUEUE) == [] and len(queues.contents(CLAIM_DUE_QUEUE)) == 2
    clock.advance(2)
    outcomes = [
        await service.checks.check_claim(ClaimCheck.decode(m.json()))
        for m in await queues.receive(CLAIM_DUE_QUEUE, 32, 30)
    ]
    assert outcomes == ["expired", "followed-up"]  # the copy finds the run resolved: it only sees to its events
    runs = (await service.queries.task(task_id)).status()["runs"]
    assert [run["reasonResolved"] for run in runs[:1]] == ["claim-expired"] and len(runs) == 2  # retried once


async def test_claim_checks_go_where_the_settings_say_every_process_looks():
    """Whether a task's claim check reference points into the parking queue or the triggered one is decided by the
    claim timeout against the lead, so a resolution turns the check into its message, or deletes it, where it is."""
    for claim_timeout, queue in ((60, CLAIM_QUEUE), (10, CLAIM_DUE_QUEUE)):
        queues = MemoryQueues()
        service = memory_service(queues=queues, claim_timeout=claim_timeout, park_lead=30)
        assert service.tasks.messages.claim_queue("any") == queue
        task_id = await create_task(service)
        await service.claims.claim(task_id, 0, "g", "w")
        assert len(queues.contents(queue)) == 1
        await service.lifecycle.resolve(task_id, 0, "completed", "completed")
        await service.stores.background.settled()
        assert queues.contents(queue) == []  # the spent check deleted where it was


async def test_a_rollback_returns_the_triggered_checks_to_the_parking_queues_visible_when_due(
    queues: MemoryQueues, checks: CheckQueues, clock: Clock
):
    """What 0.2.0, which reads only the parking queues, needs after a rollback (`python -m local_host
    return-checks`): every check of the triggered queues back there, shown when it is due, not before."""
    soon, now_due = claim_check(clock, 1.5), claim_check(clock, 0)
    resolved = ResolvedCheck(slugid(), 0, slugid(), None, clock())
    bucket = DeadlineBucket(bucket_of(clock() + dt.timedelta(seconds=1)))
    for check in (soon, now_due):
        await checks.put(CLAIM_QUEUE, check.taskId, check.encode(), check.takenUntil)
    await queues.put(CLAIM_DUE_QUEUE, resolved.encode())
    await checks.put(DEADLINE_QUEUE, bucket.bucket, bucket.encode(), due_of({"bucket": bucket.bucket}, clock()))
    assert len(queues.contents(CLAIM_DUE_QUEUE)) == 3 and len(queues.contents(DEADLINE_DUE_QUEUE)) == 1

    async def later(seconds: float) -> None:  # a second of the tests' clock
        clock.advance(seconds)

    assert await checks.return_shown() == 2  # what shows now: visible in the parking queue at once
    shown = sorted(m.content for m in await visible(queues, CLAIM_QUEUE))
    assert shown == sorted([now_due.encode(), resolved.encode()])
    assert await checks.return_due(later) == 2  # the rest as it shows, when it is due
    assert queues.contents(CLAIM_DUE_QUEUE) == [] and queues.contents(DEADLINE_DUE_QUEUE) == []
    assert soon.encode() in [m.content for m in await visible(queues, CLAIM_QUEUE)]
    assert [m.content for m in await visible(queues, DEADLINE_QUEUE)] == [bucket.encode()]
