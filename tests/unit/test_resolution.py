"""The resolution of a running run, guarded by the run's claim check (shared/operations/writes/repository.py):
nothing is put before its write; the check, as it is, is deleted once the events are published and what follows is done
(dependents released and Index written before the answer, group left after it); a process that dies before
answering leaves it to the worker's retry of its report, one that dies after to the check, which follows the
resolution up, publishing its events and resolving what depends on it. The claim's own `task-running` is guarded
by the same check: a claim puts no dispatch request either."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from shared import timing
from shared.domain.messages import CLAIM_QUEUE, RESOLVED_QUEUE, ClaimCheck, ResolvedCheck
from shared.outbox.rows import DISPATCH_QUEUE, decode_requests
from shared.runtime import Queue
from shared.storage.memory import MemoryQueues, MemoryTables
from tests.clock import Clock
from tests.conftest import slugid
from tests.unit.helpers import (
    PROCESS_SETTINGS,
    Puts,
    RecordingPublisher,
    another_process,
    bodies,
    claim,
    dies_after_answering,
    task_definition,
)

pytestmark = pytest.mark.service(**PROCESS_SETTINGS)


@pytest.fixture
def publisher() -> RecordingPublisher:
    return RecordingPublisher()


@pytest.fixture
def storage(tables: MemoryTables, queues: MemoryQueues) -> tuple[MemoryTables, MemoryQueues]:
    return tables, queues


async def test_a_sole_resolution_puts_nothing_before_its_write_and_its_check_goes_once_published(
    service: Queue, storage: tuple[MemoryTables, MemoryQueues], publisher: RecordingPublisher
) -> None:
    _, queues = storage
    task_id = slugid()
    await service.creation.create_task(task_id, task_definition())
    await claim(service, task_id)
    await service.stores.settled()
    puts = Puts(queues)
    await service.lifecycle.resolve(task_id, 0, "completed", "completed")
    assert puts.calls == []  # no dispatch request, no resolution message: the claim check stands in
    assert len(bodies(queues, CLAIM_QUEUE)) == 1  # until the events are out
    await service.stores.settled()
    assert [e.exchange for e in publisher.published][-2:] == ["task-completed", "task-group-resolved"]
    assert bodies(queues, CLAIM_QUEUE) == [] and bodies(queues, DISPATCH_QUEUE) == []


async def test_a_process_dying_after_a_sole_resolution_leaves_it_to_the_claim_check(
    service: Queue, clock: Clock, storage: tuple[MemoryTables, MemoryQueues], publisher: RecordingPublisher
) -> None:
    _, queues = storage
    task_id = slugid()
    await service.creation.create_task(task_id, task_definition())
    claimed = await claim(service, task_id)
    await service.stores.settled()
    dies_after_answering(service)
    await service.lifecycle.resolve(task_id, 0, "completed", "completed")
    assert "task-completed" not in [e.exchange for e in publisher.published]
    [check] = bodies(queues, CLAIM_QUEUE)
    assert not ResolvedCheck.carried_by(check)  # the claim check as it was put
    clock.advance(61)  # its takenUntil, and the dead writer's lease (5 s) long over
    other, other_publisher = another_process(clock, storage)
    assert claimed.run.taken_until is not None
    assert await other.checks.check_claim(ClaimCheck(task_id, 0, claimed.run.taken_until)) == "followed-up"
    await other.stores.settled()
    assert [e.exchange for e in other_publisher.published] == ["task-completed", "task-group-resolved"]
    # The group was resolved in the task's own transaction: not announced a second time.
    group = await other.stores.groups.get(task_id)
    assert group is not None and group.event_seq == 1


async def claimed_root_with_dependent(service: Queue) -> tuple[str, str]:
    """A root task claimed, with a dependent waiting on it: its resolution leaves something to follow."""
    root, dependent = slugid(), slugid()
    await service.creation.create_task(root, task_definition())
    await service.creation.create_task(dependent, task_definition(dependencies=[root]))
    await claim(service, root)
    await service.stores.settled()
    return root, dependent


async def test_a_resolution_with_dependents_releases_them_before_its_answer_and_keeps_its_check_as_it_is(
    service: Queue, storage: tuple[MemoryTables, MemoryQueues], publisher: RecordingPublisher
) -> None:
    _, queues = storage
    root, dependent = await claimed_root_with_dependent(service)
    puts = Puts(queues)
    await service.lifecycle.resolve(root, 0, "completed", "completed")
    # Nothing put or changed for the root (no resolution message, no update of its check): what was put is the
    # dependent's release (its pending hint; its events' dispatch request), done before the answer.
    assert all(not queue.startswith(("claim", "task-resolved")) for _, queue in puts.calls)
    # The dependent's release puts its pending hint and no dispatch request: the root's check stands in for its
    # events too.
    assert [queue for _, queue in puts.calls if not queue.startswith("pending")] == []
    assert len(puts.calls) == 1
    assert (await service.queries.task(dependent)).status()["state"] == "pending"
    [check] = bodies(queues, CLAIM_QUEUE)
    assert not ResolvedCheck.carried_by(check)  # the claim check as it was put stands in meanwhile
    await service.stores.settled()
    assert bodies(queues, CLAIM_QUEUE) == [] and bodies(queues, RESOLVED_QUEUE) == []  # followed up: deleted
    assert bodies(queues, DISPATCH_QUEUE) == []
    assert "task-completed" in [e.exchange for e in publisher.published]
    assert [e.exchange for e in publisher.published if dependent in e.routing_key] == ["task-defined", "task-pending"]
    assert (await service.stores.groups.get(root)) is not None


async def test_a_process_dying_after_releasing_leaves_the_dependents_events_to_the_claim_check(
    service: Queue, clock: Clock, storage: tuple[MemoryTables, MemoryQueues], publisher: RecordingPublisher
) -> None:
    """The dependent is released (and the report answered), and the process dies before publishing its
    task-pending: the root's check, which stood in for it, comes due, and its follow-up dispatches it."""
    _, queues = storage
    root, dependent = await claimed_root_with_dependent(service)
    claimed = await service.tasks.load(root)
    dies_after_answering(service)
    await service.lifecycle.resolve(root, 0, "completed", "completed")
    assert (await service.queries.task(dependent)).status()["state"] == "pending"
    assert "task-pending" not in [e.exchange for e in publisher.published if dependent in e.routing_key]
    assert bodies(queues, DISPATCH_QUEUE) == []  # no request: only the check stands in
    clock.advance(61)  # the root's takenUntil, and the dead writers' leases
    other, other_publisher = another_process(clock, storage)
    assert claimed.taken_until is not None
    assert await other.checks.check_claim(ClaimCheck(root, 0, claimed.taken_until)) == "followed-up"
    await other.stores.settled()
    assert [e.exchange for e in other_publisher.published if dependent in e.routing_key] == ["task-pending"]
    assert "task-completed" in [e.exchange for e in other_publisher.published if root in e.routing_key]


async def test_a_process_dying_after_answering_leaves_the_group_to_the_claim_check(
    service: Queue, clock: Clock, storage: tuple[MemoryTables, MemoryQueues], publisher: RecordingPublisher
) -> None:
    _, queues = storage
    root, dependent = await claimed_root_with_dependent(service)
    claimed = await service.tasks.load(root)
    dies_after_answering(service)
    await service.lifecycle.resolve(root, 0, "completed", "completed")
    assert (await service.queries.task(dependent)).status()["state"] == "pending"  # released before the answer
    [check] = bodies(queues, CLAIM_QUEUE)
    assert not ResolvedCheck.carried_by(check)
    clock.advance(61)  # its takenUntil, and the dead writer's lease
    other, other_publisher = another_process(clock, storage)
    assert claimed.taken_until is not None
    assert await other.checks.check_claim(ClaimCheck(root, 0, claimed.taken_until)) == "followed-up"
    await other.stores.settled()
    # The root's events, then its group's resolution once the root left its active set (the dependent is still in
    # it: the group is not resolved yet).
    root_events = [e.exchange for e in other_publisher.published if root in e.routing_key]
    assert root_events[0] == "task-completed"
    assert not await other.stores.groups.is_active(root, root)


async def test_a_process_dying_before_answering_leaves_it_to_the_workers_retry_of_its_report(
    service: Queue, clock: Clock, storage: tuple[MemoryTables, MemoryQueues], publisher: RecordingPublisher
) -> None:
    """Written, then the process dies while it releases the dependents: no answer. The worker retries the report
    (here, on another process): a repeat, followed up there before its answer."""
    root, dependent = await claimed_root_with_dependent(service)
    resolution = service.resolution
    stalled = asyncio.Event()

    async def stuck(*args: Any, **kwargs: Any) -> str:
        stalled.set()
        await asyncio.Event().wait()  # never
        return "resolved"

    resolution.resolve_dependencies = stuck  # type: ignore[method-assign]
    reporting = asyncio.create_task(service.lifecycle.resolve(root, 0, "completed", "completed"))
    await stalled.wait()
    dies_after_answering(service)
    reporting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reporting
    assert (await service.queries.task(root)).status()["state"] == "completed"
    assert (await service.queries.task(dependent)).status()["state"] == "unscheduled"
    clock.advance(5)  # the dead writer's lease
    other, other_publisher = another_process(clock, storage)
    await other.lifecycle.resolve(root, 0, "completed", "completed")  # the retry: a repeat
    assert (await other.queries.task(dependent)).status()["state"] == "pending"
    await other.stores.settled()
    assert "task-completed" in [e.exchange for e in other_publisher.published if root in e.routing_key]


async def test_a_slow_release_gets_a_resolution_message_before_the_answer_deleted_once_done(
    service: Queue, storage: tuple[MemoryTables, MemoryQueues], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, queues = storage
    root, dependent = await claimed_root_with_dependent(service)
    monkeypatch.setattr(timing, "FOLLOW_WAIT", 0)  # every release is too slow for the answer to wait
    await service.lifecycle.resolve(root, 0, "completed", "completed")
    [message] = bodies(queues, RESOLVED_QUEUE)
    assert ResolvedCheck.decode(message).taskId == root  # stands in, should the process die now
    await service.stores.settled()
    assert (await service.queries.task(dependent)).status()["state"] == "pending"
    assert bodies(queues, RESOLVED_QUEUE) == [] and bodies(queues, CLAIM_QUEUE) == []


async def test_a_failed_follow_up_hands_over_to_a_resolution_message(
    service: Queue, clock: Clock, storage: tuple[MemoryTables, MemoryQueues]
) -> None:
    _, queues = storage
    root, _ = await claimed_root_with_dependent(service)
    resolution = service.resolution
    group_step = resolution.resolve_group_member

    async def failing(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("storage down")

    resolution.resolve_group_member = failing  # type: ignore[method-assign]
    await service.lifecycle.resolve(root, 0, "completed", "completed")
    await service.stores.settled()
    [message] = bodies(queues, RESOLVED_QUEUE)  # takes over from the check, which is deleted
    assert bodies(queues, CLAIM_QUEUE) == []
    resolution.resolve_group_member = group_step  # type: ignore[method-assign]
    clock.advance(10)
    assert await service.resolution.follow_up(ResolvedCheck.decode(message)) == "resolved"
    assert not await service.stores.groups.is_active(root, root)


async def test_the_resolution_messages_handler_decides_on_the_stored_task_not_a_remembered_one(
    service: Queue, clock: Clock, storage: tuple[MemoryTables, MemoryQueues]
) -> None:
    """The process that handles the resolution message remembers the task running (it read it before the
    resolution, as a host that served the claim does): its events are dispatched all the same. Fails when the
    handler decides on the remembered row (the soak's `events-dispatched` violation)."""
    _, queues = storage
    root, _ = await claimed_root_with_dependent(service)
    other, other_publisher = another_process(clock, storage)
    remembered = await other.tasks.get(root)
    assert remembered is not None and remembered.state == "running"
    dies_after_answering(service)
    await service.lifecycle.resolve(root, 0, "completed", "completed")
    [message] = bodies(queues, CLAIM_QUEUE)
    clock.advance(61)  # its takenUntil, and the dead writer's lease
    assert await other.checks.check_claim(ClaimCheck.decode(message)) == "followed-up"
    await other.stores.settled()
    assert "task-completed" in [e.exchange for e in other_publisher.published if root in e.routing_key]


async def test_a_claim_puts_no_dispatch_request_its_check_stands_in(
    service: Queue, storage: tuple[MemoryTables, MemoryQueues], publisher: RecordingPublisher
) -> None:
    _, queues = storage
    task_id = slugid()
    await service.creation.create_task(task_id, task_definition())
    await service.stores.settled()
    puts = Puts(queues)
    await claim(service, task_id)
    assert puts.calls == [("put", CLAIM_QUEUE)]  # the check, and no request beside it
    await service.stores.settled()
    assert [e.exchange for e in publisher.published] == ["task-defined", "task-pending", "task-running"]
    assert len(bodies(queues, CLAIM_QUEUE)) == 1 and bodies(queues, DISPATCH_QUEUE) == []  # the check stays


async def test_a_process_dying_after_a_claim_leaves_task_running_to_the_runs_next_change(
    service: Queue, clock: Clock, storage: tuple[MemoryTables, MemoryQueues], publisher: RecordingPublisher
) -> None:
    """The claim is written and answered, and the process dies before publishing task-running. The worker reports
    through another process (after the dead writer's lease): that change's dispatch publishes task-running first."""
    _, queues = storage
    task_id = slugid()
    await service.creation.create_task(task_id, task_definition())
    await service.stores.settled()
    dies_after_answering(service)
    await claim(service, task_id)
    assert "task-running" not in [e.exchange for e in publisher.published]
    assert bodies(queues, DISPATCH_QUEUE) == []
    clock.advance(6)  # the dead writer's lease (5 s)
    other, other_publisher = another_process(clock, storage)
    await other.lifecycle.resolve(task_id, 0, "completed", "completed")
    await other.stores.settled()
    assert [e.exchange for e in other_publisher.published] == ["task-running", "task-completed", "task-group-resolved"]
    assert bodies(queues, CLAIM_QUEUE) == [] and bodies(queues, DISPATCH_QUEUE) == []


async def test_a_claims_event_the_bus_refused_gets_a_request_of_its_own(
    service: Queue, clock: Clock, storage: tuple[MemoryTables, MemoryQueues], publisher: RecordingPublisher
) -> None:
    _, queues = storage
    task_id = slugid()
    await service.creation.create_task(task_id, task_definition())
    await service.stores.settled()
    publisher.fail = True
    await claim(service, task_id)
    await service.stores.settled()
    # A request of its own, as for a refused dispatch, to show after a delay (the claim put none before).
    [request] = [r for body in queues.contents(DISPATCH_QUEUE) for r in decode_requests(json.loads(body))]
    assert (request.key, request.seq) == (task_id, 3)
    assert len(bodies(queues, CLAIM_QUEUE)) == 1  # the check, as it was
    publisher.fail = False
    clock.advance(6)  # and the lease, which the refused publishing gave up anyway
    other, other_publisher = another_process(clock, storage)
    assert await other.stores.events.dispatch(request, other_publisher) == "published"
    assert [e.exchange for e in other_publisher.published] == ["task-running"]
