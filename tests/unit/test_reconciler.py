"""The reconciler on the memory connector: each lost message is repaired once, and a healthy queue is left alone."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

import pytest

from shared import faults, timeutil
from shared.domain.groups import ACTIVE, GROUP_STREAMS, GROUPS_TABLE
from shared.domain.messages import (
    CLAIM_QUEUE,
    DEADLINE_QUEUE,
    RESOLVED_QUEUE,
    ResolvedCheck,
    pending_queue,
    poison_queue,
)
from shared.domain.queue_runs import TASK_QUEUE_RUNS_TABLE
from shared.maintenance.invariants import audit
from shared.maintenance.reconciler import Report
from shared.operations.claims import ClaimRefusal
from shared.outbox.rows import Stream
from shared.runtime import Queue
from shared.storage.base import Entity
from shared.storage.keys import encode_key
from tests.answers import claim_work, resolution_messages
from tests.clock import Clock
from tests.conftest import slugid
from tests.services import memory_service
from tests.unit.helpers import GRACE, claim_all, create, memory_queues

pytestmark = pytest.mark.service(reconcile_grace=GRACE, rehint_after=600)


async def reconcile(service: Queue) -> Report:
    return await service.reconciler.run()


async def test_nothing_to_repair_in_a_healthy_queue(service: Queue, clock: Clock) -> None:
    task_id, definition = await create(service)
    assert (await reconcile(service)).repairs == {}  # younger than the grace period: not even looked at
    clock.advance(GRACE + 1)
    report = await reconcile(service)
    assert report.checked >= 1 and report.repairs == {} and report.failures == 0
    assert await claim_all(service, definition["taskQueueId"]) == [(task_id, 0)]
    assert (await audit(service.stores)).violations == []


async def test_a_lost_hint_is_put_again_once(service: Queue, clock: Clock) -> None:
    task_id, definition = await create(service)
    tq = definition["taskQueueId"]
    assert memory_queues(service).clear(pending_queue(tq, "lowest")) == 1
    clock.advance(GRACE + 1)
    reports = await asyncio.gather(reconcile(service), reconcile(service))  # two reconcilers at once
    assert sum(r.repairs["hint-lost"] for r in reports) >= 1
    assert await claim_all(service, tq) == [(task_id, 0)]
    assert await claim_all(service, tq) == []  # a second hint, if both repaired, claims nothing
    assert (await reconcile(service)).repairs == {}  # claimed now: nothing left to repair


async def test_a_long_wait_renews_the_hint_and_keeps_the_first(service: Queue, clock: Clock) -> None:
    first, definition = await create(service)
    tq = definition["taskQueueId"]
    second, _ = await create(service, taskQueueId=tq)
    clock.advance(601)
    assert (await reconcile(service)).repairs == {"hint-renewed": 2}
    status = await service.tasks.load(first)
    assert len(status.runs[0].hint_ids()) == 2
    clock.advance(60)
    assert (await reconcile(service)).repairs == {}  # the next renewal waits twice as long
    # The first hints claim, in their order; the renewed ones are stale and dropped.
    assert await claim_all(service, tq) == [(first, 0), (second, 0)]
    assert await claim_all(service, tq) == []
    assert await service.stores.queues.approximate_count(pending_queue(tq, "lowest")) == 0


async def test_a_hint_a_poller_hid_for_days_is_renewed_after_a_claims_timeout(service: Queue, clock: Clock) -> None:
    """A poll URL's GET may set `visibilitytimeout` up to 7 days: the hint it took is hidden, not lost (the queue
    still counts it). Once the run waited a claim's timeout (or rehint_after, if smaller) with nothing visible in
    its queue, it is hinted again; a queue whose messages are visible is left to hint-renewed."""
    service = memory_service(clock=clock, reconcile_grace=GRACE, rehint_after=600, claim_timeout=300)
    task_id, definition = await create(service)
    tq = definition["taskQueueId"]
    queue = pending_queue(tq, "lowest")
    hidden = await service.stores.queues.receive(queue, 32, 7 * 24 * 3600)  # what a hostile poll does
    assert len(hidden) == 1 and await service.stores.queues.approximate_count(queue) == 1
    clock.advance(GRACE + 1)
    assert (await reconcile(service)).repairs == {}  # not yet a claim's timeout
    clock.advance(300)
    assert (await reconcile(service)).repairs == {"hint-hidden": 1}
    assert await claim_all(service, tq) == [(task_id, 0)]
    clock.advance(100)
    assert (await reconcile(service)).repairs == {}  # claimed: nothing to repair


async def test_a_lost_claim_check_expires_the_claim(service: Queue, clock: Clock) -> None:
    task_id, definition = await create(service)
    assert await claim_all(service, definition["taskQueueId"]) == [(task_id, 0)]
    memory_queues(service).clear(CLAIM_QUEUE)
    clock.advance(60 + GRACE - 5)
    assert (await reconcile(service)).repairs == {}  # takenUntil passed, but not by the grace period yet
    clock.advance(10)
    assert (await reconcile(service)).repairs == {"claim-expired": 1}
    task = await service.tasks.load(task_id)
    assert [(r.state, r.reason_resolved) for r in task.runs] == [("exception", "claim-expired"), ("pending", None)]
    assert await claim_all(service, definition["taskQueueId"]) == [(task_id, 1)]


async def test_a_lost_deadline_check_resolves_the_task(service: Queue, clock: Clock) -> None:
    now = timeutil.now()
    task_id, _ = await create(service, deadline=timeutil.iso(now + dt.timedelta(seconds=30)))
    memory_queues(service).clear(DEADLINE_QUEUE)
    clock.advance(30 + GRACE + 1)
    assert (await reconcile(service)).repairs == {"deadline-exceeded": 1}
    task = await service.tasks.load(task_id)
    assert (task.state, task.runs[-1].reason_resolved) == ("exception", "deadline-exceeded")


async def test_a_lost_resolution_is_run_again(service: Queue, clock: Clock) -> None:
    root, definition = await create(service)
    tq = definition["taskQueueId"]
    dependents = [(await create(service, taskQueueId=tq, taskGroupId=root, dependencies=[root]))[0] for _ in range(3)]
    await claim_all(service, tq)
    await service.lifecycle.resolve(root, 0, "completed", "completed")
    # Lost: the resolution message (the root's claim check, turned into it).
    assert memory_queues(service).clear(RESOLVED_QUEUE) + memory_queues(service).clear(CLAIM_QUEUE) == 1
    clock.advance(GRACE + 1)
    report = await reconcile(service)
    assert report.repairs["resolution"] == 1
    assert sorted(t for t, _ in await claim_all(service, tq)) == sorted(dependents)
    assert await service.stores.tables.get(GROUPS_TABLE, root, ACTIVE + root) is None


async def test_a_resolution_lost_after_its_group_step_releases_dependents(service: Queue, clock: Clock) -> None:
    """The group step of the resolution ran (the root left the active set), the dependents' part did not."""
    root, definition = await create(service)
    tq = definition["taskQueueId"]
    single, _ = await create(service, taskQueueId=tq, dependencies=[root])
    other, _ = await create(service, taskQueueId=tq)
    double, _ = await create(service, taskQueueId=tq, dependencies=[root, other])
    await claim_all(service, tq)
    await service.lifecycle.resolve(root, 0, "completed", "completed")
    memory_queues(service).clear(RESOLVED_QUEUE)
    memory_queues(service).clear(CLAIM_QUEUE)
    await service.stores.groups.resolve_member(root, root)
    clock.advance(GRACE + 1)
    report = await reconcile(service)
    assert report.repairs["dependency"] == 2 and report.repairs["unblocked"] == 1
    assert [t for t, _ in await claim_all(service, tq)] == [single]
    assert (await service.tasks.load(double)).waiting == [other]  # still waits for the other one


async def test_all_completed_dependent_of_a_failure_is_not_released(service: Queue, clock: Clock) -> None:
    root, definition = await create(service)
    tq = definition["taskQueueId"]
    dependent, _ = await create(service, taskQueueId=tq, dependencies=[root])
    await claim_all(service, tq)
    await service.lifecycle.resolve(root, 0, "failed", "failed")
    memory_queues(service).clear(RESOLVED_QUEUE)
    memory_queues(service).clear(CLAIM_QUEUE)
    await service.stores.groups.resolve_member(root, root)
    clock.advance(GRACE + 1)
    assert (await reconcile(service)).repairs == {}
    assert not (await service.tasks.load(dependent)).runs


async def test_a_member_whose_task_was_never_written_leaves_the_group(service: Queue, clock: Clock) -> None:
    task_id, definition = await create(service)
    group = definition.get("taskGroupId", task_id)
    ghost = slugid()  # createTask joined the group, then died before writing the task
    expires = (await service.tasks.load(task_id)).expires
    await service.stores.groups.join(
        group, "-", ghost, expires, clock.now, await service.stores.groups.check_joinable(group, "-")
    )
    await claim_all(service, definition["taskQueueId"])
    await service.lifecycle.resolve(task_id, 0, "completed", "completed")
    await service.resolution.resolve_dependencies(ResolvedCheck(task_id, 0, group, None, clock.now))
    events = [
        e.exchange
        for _, e in (await service.stores.events.list(Stream(GROUP_STREAMS, group), limit=10, continuation=None))[0]
    ]
    assert "task-group-resolved" not in events  # the ghost keeps the group unresolved
    clock.advance(GRACE + 1)
    assert (await reconcile(service)).repairs == {"phantom-member": 1}
    assert await service.stores.tables.get(GROUPS_TABLE, group, ACTIVE + ghost) is None
    assert (await audit(service.stores)).violations == []


async def test_a_stale_index_row_is_deleted(service: Queue, clock: Clock) -> None:
    task_id, definition = await create(service)
    tq = definition["taskQueueId"]
    await claim_all(service, tq)
    await service.lifecycle.resolve(task_id, 0, "completed", "completed")
    await service.stores.settled()  # the index row's deletion, which the request does not wait for
    # A crash after the resolution's write, before the index row's deletion:
    await service.stores.tables.upsert(
        TASK_QUEUE_RUNS_TABLE,
        Entity(encode_key(tq), task_id, {"state": "running", "runId": 0, "since": timeutil.iso(clock.now)}),
    )
    assert (await service.queries.task_queue_counts(tq)).claimed == 1
    clock.advance(GRACE + 1)
    assert (await reconcile(service)).repairs["run-index"] == 1
    assert (await service.queries.task_queue_counts(tq)).claimed == 0


async def test_poison_messages_are_reported_and_run_again(
    service: Queue, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    root, definition = await create(service)
    tq = definition["taskQueueId"]
    dependent, _ = await create(service, taskQueueId=tq, dependencies=[root])
    await claim_all(service, tq)
    await service.lifecycle.resolve(root, 0, "completed", "completed")
    [(queue, message)] = await resolution_messages(service, 0)
    poison = poison_queue(queue)
    await service.stores.queues.put(poison, message.content)  # what the host does after maxDequeueCount failures
    await service.stores.queues.delete(queue, message)
    await service.stores.queues.put(poison_queue(CLAIM_QUEUE), b"not json")

    faults.arm("resolve-dependencies:raise")  # the bug is still there: the message stays, reported again
    try:
        report = await reconcile(service)
    finally:
        faults.arm("")
    assert report.poison == 2 and report.failures == 1 and report.repairs == {"poison": 1}  # the malformed one
    assert await service.stores.queues.approximate_count(poison) == 1
    assert f"poison message in {poison}" in caplog.text  # the claim queue's: a claim check turned resolution

    clock.advance(GRACE + 1)
    memory_queues(service)._queues[poison][0].visible_at = timeutil.now()  # its hiding time is over
    report = await reconcile(service)
    assert report.repairs["poison"] == 1 and report.failures == 0
    assert await service.stores.queues.approximate_count(poison) == 0
    assert await claim_all(service, tq) == [(dependent, 0)]


async def test_a_renewed_hint_from_before_a_claim_cannot_claim_again(service: Queue, clock: Clock) -> None:
    first, definition = await create(service)
    tq = definition["taskQueueId"]
    await create(service, taskQueueId=tq)
    clock.advance(601)
    await reconcile(service)
    claims = await asyncio.gather(*(claim_work(service, tq, "g", f"w{i}", 1) for i in range(4)))
    claimed = [(c["status"]["taskId"], c["runId"]) for batch in claims for c in batch]
    assert len(claimed) == len(set(claimed)) == 2
    task = await service.tasks.load(first)
    assert await service.claims.claim(first, 0, "g", "other", task.runs[0].hint_id) is ClaimRefusal.CONFLICT


async def test_a_poisoned_dispatch_batch_goes_back_whole_with_its_attempts_counted_afresh(
    service: Queue, clock: Clock
) -> None:
    from shared.domain.tasks import TASKS_TABLE
    from shared.outbox.rows import DISPATCH_QUEUE, DispatchRequest, decode_requests, encode_requests

    since = timeutil.iso(clock.now)
    batch = [
        DispatchRequest(TASKS_TABLE, slugid(), 2, since, attempt=3),
        DispatchRequest(TASKS_TABLE, slugid(), 4, since, attempt=1),
    ]
    await service.stores.queues.put(poison_queue(DISPATCH_QUEUE), encode_requests(batch))
    report = await reconcile(service)
    assert report.repairs == {"poison": 1}
    [message] = await service.stores.queues.receive(DISPATCH_QUEUE, 32, 30)
    assert decode_requests(message.json()) == [DispatchRequest(r.table, r.key, r.seq, r.since) for r in batch]


async def test_a_scan_that_runs_out_of_time_goes_on_where_it_stopped(
    service: Queue, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A table too large for one pass's budget is still walked whole, over several passes: the next pass starts
    at the page where the last one stopped, not at the first again."""
    from shared.maintenance import reconciler as module

    created = [(await create(service, taskGroupId=slugid()))[0] for _ in range(5)]
    clock.advance(GRACE + 1)
    monkeypatch.setattr(module, "PAGE", 2)
    # Each page of the active rows takes a second; the budget lets a pass read two pages (4 of the 5 rows).
    now = [0.0]
    monkeypatch.setattr(module.time, "monotonic", lambda: now[0])
    active_since = service.stores.groups.active_since

    seen: list[str] = []

    async def slow_page(*args: Any, **kwargs: Any) -> Any:
        now[0] += 1
        items, token = await active_since(*args, **kwargs)
        seen.extend(task_id for _, task_id in items)
        return items, token

    monkeypatch.setattr(service.stores.groups, "active_since", slow_page)
    service.reconciler.settings = service.reconciler.settings.model_copy(update={"reconcile_budget": 1.5})
    first = await reconcile(service)
    assert (len(seen), first.complete) == (4, False)
    second = await reconcile(service)
    assert second.complete and len(seen) == 5  # the fifth; from the first page again, it would read 4 more
    assert sorted(seen) == sorted(created)
