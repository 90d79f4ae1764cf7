"""Claim expiry and deadlines, driven by the queue-triggered checks on a host with 1-second claims."""

from __future__ import annotations

import datetime as dt
import time

import pytest

from shared import timeutil
from tests.conftest import expect_error, shards_of, slugid, stores_of, task_definition, task_queue_id, wait_for

WORKER = {"workerGroup": "wg-1", "workerId": "worker-1"}


@pytest.fixture
def fast(fast_host):
    return fast_host.client()


def status_of(queue, task_id):
    return queue.status(task_id)["status"]


def test_expired_claim_is_retried(fast):
    task_id = slugid()
    fast.createTask(task_id, task_definition(retries=1))
    claim = fast.claimTask(task_id, "0", WORKER)
    status = wait_for(lambda: (s := status_of(fast, task_id)) and len(s["runs"]) == 2 and s)
    first, retry = status["runs"]
    assert first["state"] == "exception" and first["reasonResolved"] == "claim-expired"
    assert timeutil.parse(first["resolved"]) >= timeutil.parse(claim["takenUntil"])
    assert retry["state"] == "pending" and retry["reasonCreated"] == "retry"
    assert status["retriesLeft"] == 0
    # The worker that lost its claim is told so.
    expect_error(409, "RequestConflict", fast.reclaimTask, task_id, "0")
    expect_error(409, "RequestConflict", fast.reportCompleted, task_id, "0")
    # The retry is claimable; when it expires too and no retries are left, the task ends in exception.
    fast.claimTask(task_id, "1", WORKER)
    final = wait_for(lambda: (s := status_of(fast, task_id)) and s["state"] == "exception" and s)
    assert len(final["runs"]) == 2 and final["runs"][1]["reasonResolved"] == "claim-expired"
    time.sleep(1.5)
    assert len(status_of(fast, task_id)["runs"]) == 2


@pytest.fixture(scope="module")
def slower(host_factory):
    """2-second claims: reclaims 0.4 s apart keep a run while a round trip under a loaded CI takes up to 1.6 s
    (with 1-second claims, one reclaim came 0.6 s late and was rightly refused)."""
    return host_factory(claim_timeout=2, deadline_delay=0).client()


def test_reclaimed_run_does_not_expire(slower):
    task_id = slugid()
    slower.createTask(task_id, task_definition())
    slower.claimTask(task_id, "0", WORKER)
    for _ in range(7):  # 2.8 s of reclaims: the first claim's check, and later ones, come due while it runs
        time.sleep(0.4)
        slower.reclaimTask(task_id, "0")
    assert status_of(slower, task_id)["state"] == "running"
    assert slower.reportCompleted(task_id, "0")["status"]["state"] == "completed"
    time.sleep(2.5)  # the claim checks of every reclaim come due now: all stale
    status = status_of(slower, task_id)
    assert status["state"] == "completed" and len(status["runs"]) == 1


def _short_deadline(seconds=2):
    now = timeutil.now()
    return {"created": timeutil.iso(now), "deadline": timeutil.iso(now + dt.timedelta(seconds=seconds))}


def test_deadline_resolves_unscheduled_task(fast):
    task_id = slugid()
    fast.createTask(task_id, task_definition(dependencies=[task_id], **_short_deadline()))
    status = wait_for(lambda: (s := status_of(fast, task_id)) and s["runs"] and s)
    assert status["state"] == "exception"
    assert status["runs"][0]["reasonCreated"] == "exception"
    assert status["runs"][0]["reasonResolved"] == "deadline-exceeded"


def test_deadline_resolves_pending_task(fast):
    task_id = slugid()
    fast.createTask(task_id, task_definition(**_short_deadline()))
    status = wait_for(lambda: (s := status_of(fast, task_id)) and s["state"] == "exception" and s)
    assert status["runs"][0]["reasonResolved"] == "deadline-exceeded" and len(status["runs"]) == 1


def test_deadline_resolves_running_task_without_retry(fast):
    task_id = slugid()
    fast.createTask(task_id, task_definition(retries=3, **_short_deadline(3)))
    fast.claimTask(task_id, "0", WORKER)
    fast.reclaimTask(task_id, "0")
    status = wait_for(lambda: (s := status_of(fast, task_id)) and s["state"] == "exception" and s)
    assert status["runs"][-1]["reasonResolved"] == "deadline-exceeded"
    assert status["retriesLeft"] >= 2  # deadline never retries
    expect_error(409, "RequestConflict", fast.rerunTask, task_id)
    expect_error(409, "RequestConflict", fast.cancelTask, task_id)


def test_deadline_leaves_completed_task_alone(fast):
    task_id = slugid()
    fast.createTask(task_id, task_definition(**_short_deadline()))
    fast.claimTask(task_id, "0", WORKER)
    done = fast.reportCompleted(task_id, "0")["status"]
    time.sleep(3)
    assert status_of(fast, task_id) == done


def test_changes_after_the_deadline_are_refused(queue):
    # The default host checks deadlines 60 s late, so these run before the deadline check resolves anything.
    unscheduled, pending = slugid(), slugid()
    queue.createTask(unscheduled, task_definition(dependencies=[unscheduled], **_short_deadline(1)))
    queue.createTask(pending, task_definition(**_short_deadline(1)))
    time.sleep(1.2)
    expect_error(409, "RequestConflict", queue.scheduleTask, unscheduled)
    expect_error(409, "RequestConflict", queue.claimTask, pending, "0", WORKER)
    expect_error(409, "RequestConflict", queue.cancelTask, pending)
    assert status_of(queue, pending)["state"] == "pending"


def test_duplicated_and_stale_check_messages_on_azure_change_nothing(fast, fast_host):
    """Check messages put again by hand (as a duplicate delivery would) leave resolved tasks alone."""
    import asyncio

    from shared.domain.messages import CLAIM_QUEUE, DEADLINE_QUEUE, ClaimCheck, DeadlineCheck

    task_id = slugid()
    definition = task_definition(retries=0)
    fast.createTask(task_id, definition)
    claim = fast.claimTask(task_id, "0", WORKER)
    expired = wait_for(lambda: (s := status_of(fast, task_id)) and s["state"] == "exception" and s)
    completed = slugid()
    fast.createTask(completed, task_definition())
    fast.claimTask(completed, "0", WORKER)
    done = fast.reportCompleted(completed, "0")["status"]

    async def inject():
        tables, queues = stores_of(fast_host.env, "sdk")
        shards = shards_of(fast_host.env)
        try:
            for _ in range(3):
                taken_until = timeutil.parse(claim["takenUntil"])
                await queues.put(shards.check_queue(CLAIM_QUEUE, task_id), ClaimCheck(task_id, 0, taken_until).encode())
                await queues.put(
                    shards.check_queue(DEADLINE_QUEUE, completed),
                    DeadlineCheck(completed, timeutil.parse(done["deadline"])).encode(),
                )
                stranger = slugid()
                await queues.put(
                    shards.check_queue(CLAIM_QUEUE, stranger), ClaimCheck(stranger, 0, taken_until).encode()
                )
        finally:
            await queues.close()
            await tables.close()

    asyncio.run(inject())
    time.sleep(2.5)  # the triggers poll at most every second
    assert status_of(fast, task_id) == expired
    assert status_of(fast, completed) == done
    assert "Traceback" not in fast_host.log()


def test_tasks_sharing_a_deadline_are_resolved_by_its_bucket(fast, fast_host):
    """More tasks than one page of a deadline bucket (100), one deadline: each resolved deadline-exceeded once,
    the bucket's rows all gone, and the deadline queue holding one message for them (not one per task)."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from shared.domain.deadlines import DEADLINES_TABLE
    from shared.domain.expiry import TASK_EXPIRY_TABLE
    from shared.domain.messages import DEADLINE_DUE_QUEUE, DEADLINE_QUEUE
    from shared.storage.base import each_entity

    shards = shards_of(fast_host.env)

    async def deadline_messages() -> int:
        tables, queues = stores_of(fast_host.env)
        try:
            names = [q for base in (DEADLINE_QUEUE, DEADLINE_DUE_QUEUE) for q in shards.check_queues(base)]
            return sum([await queues.approximate_count(q) for q in names])  # parked or not
        finally:
            await queues.close()
            await tables.close()

    before = asyncio.run(deadline_messages())  # other tests' buckets
    shared_deadline = _short_deadline(8)
    tq = task_queue_id()
    tasks = [slugid() for _ in range(130)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda t: fast.createTask(t, task_definition(taskQueueId=tq, **shared_deadline)), tasks))
    # One message for the bucket (one per salted part of it, when sharded), not one per task.
    assert asyncio.run(deadline_messages()) == before + len({shards.salted("", t) for t in tasks})
    wait_for(lambda: all(status_of(fast, t)["state"] == "exception" for t in tasks), timeout=30, interval=0.5)
    for task_id in tasks:
        assert [r["reasonResolved"] for r in status_of(fast, task_id)["runs"]] == ["deadline-exceeded"]

    async def rows_left() -> list[str]:
        tables, queues = stores_of(fast_host.env)
        try:
            page = await tables.query(DEADLINES_TABLE, "PartitionKey ge @lo", {"lo": ""}, limit=1000)
            return [e.row_key for e in page.entities if e.row_key in set(tasks)]
        finally:
            await tables.close()
            await queues.close()

    assert wait_for(lambda: asyncio.run(rows_left()) == [], timeout=10)

    async def entered() -> set[str]:
        tables, queues = stores_of(fast_host.env)
        try:
            return {
                e.row_key async for e in each_entity(tables, TASK_EXPIRY_TABLE, "PartitionKey ge @lo", {"lo": ""})
            } & set(tasks)
        finally:
            await tables.close()
            await queues.close()

    # Each task entered the expiry index as its deadline was checked (createTask wrote no entry of its own).
    assert asyncio.run(entered()) == set(tasks)


def test_a_hosts_clock_offset_is_the_clock_it_judges_and_writes_by(host_factory):
    """QUEUE_CLOCK_OFFSET (tests and the fault campaign: bench.soak --skew): the claim it writes runs from its
    clock, 30 s ahead of this machine's."""
    ahead = host_factory(claim_timeout=60, clock_offset=30).client()
    task_id = slugid()
    ahead.createTask(task_id, task_definition())
    before = timeutil.now()
    taken_until = timeutil.parse(ahead.claimTask(task_id, "0", WORKER)["takenUntil"])
    assert dt.timedelta(seconds=89) < taken_until - before < dt.timedelta(seconds=92)
