"""The resolution of a running run, guarded by the run's claim check (shared/operations/repository.py): nothing is
put before its write; the check is deleted once the events are published (and, where more follows, once the
resolution message it became is resolved too); a process that dies first leaves the check to follow the
resolution up, publishing its events and resolving what depends on it."""

from __future__ import annotations

import json
from collections.abc import Coroutine
from typing import Any

import pytest

from shared.domain.eventrows import DISPATCH_QUEUE
from shared.domain.messages import CLAIM_QUEUE, RESOLVED_QUEUE, ClaimCheck, ResolvedCheck
from shared.runtime import Queue, build_queue
from shared.settings import load_settings
from shared.storage.base import QueueMessage
from shared.storage.memory import MemoryQueues, MemoryTables
from tests.conftest import slugid
from tests.unit.test_events import RecordingPublisher, claim, task_definition
from tests.unit.test_service import Clock


def process(clock: Clock, tables: MemoryTables, queues: MemoryQueues, publisher: RecordingPublisher) -> Queue:
    """A process that publishes its own events and resolves what follows a resolution itself, as the host does."""
    settings = load_settings(storage="memory", root_access_token="x" * 30, claim_timeout=60, deadline_delay=0,
                             hint_grace=60, claim_work_wait=0, event_bus="amqp", event_lease=5,
                             resolution_grace=10)
    queue = build_queue(settings, tables, queues, clock=clock)
    queue.stores.events.publisher = publisher
    return queue


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def storage() -> tuple[MemoryTables, MemoryQueues]:
    return MemoryTables(), MemoryQueues()


@pytest.fixture
def publisher() -> RecordingPublisher:
    return RecordingPublisher()


@pytest.fixture
def service(clock: Clock, storage: tuple[MemoryTables, MemoryQueues], publisher: RecordingPublisher) -> Queue:
    return process(clock, *storage, publisher)


class Puts:
    """The queue calls that put or change a message, in order: (kind, queue)."""

    def __init__(self, queues: MemoryQueues) -> None:
        self.calls: list[tuple[str, str]] = []
        put, release = queues.put, queues.release

        async def counted_put(queue: str, content: bytes, **kwargs: Any) -> Any:
            self.calls.append(("put", queue))
            return await put(queue, content, **kwargs)

        async def counted_release(queue: str, message: Any, visible_in: int, **kwargs: Any) -> Any:
            self.calls.append(("release", queue))
            return await release(queue, message, visible_in, **kwargs)

        queues.put = counted_put  # type: ignore[method-assign]
        queues.release = counted_release  # type: ignore[method-assign]


def dies_after_answering(service: Queue) -> None:
    """From now on nothing runs after an answer (publishing, tidying, resolving here): as if the process died."""
    def dropped(work: Coroutine[Any, Any, None]) -> None:
        work.close()
    service.stores.background.start = dropped  # type: ignore[method-assign]


def bodies(queues: MemoryQueues, queue: str) -> list[dict[str, Any]]:
    return [json.loads(body) for body in queues.contents(queue)]


async def test_a_sole_resolution_puts_nothing_before_its_write_and_its_check_goes_once_published(
        service: Queue, storage: tuple[MemoryTables, MemoryQueues], publisher: RecordingPublisher) -> None:
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
        service: Queue, clock: Clock, storage: tuple[MemoryTables, MemoryQueues],
        publisher: RecordingPublisher) -> None:
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
    other_publisher = RecordingPublisher()
    other = process(clock, *storage, other_publisher)
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


async def test_a_resolution_with_dependents_turns_the_check_into_its_message_beside_the_write(
        service: Queue, storage: tuple[MemoryTables, MemoryQueues], publisher: RecordingPublisher) -> None:
    _, queues = storage
    root, dependent = await claimed_root_with_dependent(service)
    puts = Puts(queues)
    await service.lifecycle.resolve(root, 0, "completed", "completed")
    assert puts.calls == [("release", CLAIM_QUEUE)]  # the check became the resolution message; nothing else
    [message] = bodies(queues, CLAIM_QUEUE)
    assert ResolvedCheck.carried_by(message)
    await service.stores.settled()
    # Deleted once the dependent was scheduled here and the events were published.
    assert bodies(queues, CLAIM_QUEUE) == []
    assert (await service.queries.task(dependent)).status()["state"] == "pending"
    assert "task-completed" in [e.exchange for e in publisher.published]


async def test_a_process_dying_after_a_resolution_with_dependents_leaves_it_to_the_resolution_message(
        service: Queue, clock: Clock, storage: tuple[MemoryTables, MemoryQueues],
        publisher: RecordingPublisher) -> None:
    _, queues = storage
    root, dependent = await claimed_root_with_dependent(service)
    dies_after_answering(service)
    await service.lifecycle.resolve(root, 0, "completed", "completed")
    [message] = bodies(queues, CLAIM_QUEUE)
    clock.advance(10)  # its grace, and the dead writer's lease
    other_publisher = RecordingPublisher()
    other = process(clock, *storage, other_publisher)
    assert await other.resolution.follow_up(ResolvedCheck.decode(message)) == "resolved"
    await other.stores.settled()
    assert (await other.queries.task(dependent)).status()["state"] == "pending"
    # The root's events first, then its group's resolution (the group named after it).
    root_events = [e.exchange for e in other_publisher.published if root in e.routing_key]
    assert root_events == ["task-completed", "task-group-resolved"]


async def test_a_check_received_meanwhile_gets_a_resolution_message_of_its_own_after_the_write(
        service: Queue, clock: Clock, storage: tuple[MemoryTables, MemoryQueues]) -> None:
    _, queues = storage
    root, dependent = slugid(), slugid()
    await service.creation.create_task(root, task_definition())
    await service.creation.create_task(dependent, task_definition(dependencies=[root]))
    claimed = await claim(service, root)
    await service.stores.settled()
    message_id, pop_receipt = claimed.task.checks["claim"]
    # Its handler has it (say, an early delivery): the pop receipt the task keeps is no longer the message's.
    assert await queues.release(CLAIM_QUEUE, QueueMessage(message_id, pop_receipt, b"", 0, clock()), 60)
    await service.lifecycle.resolve(root, 0, "completed", "completed")
    [message] = bodies(queues, RESOLVED_QUEUE)
    assert ResolvedCheck.decode(message).taskId == root
    await service.stores.settled()
    assert bodies(queues, RESOLVED_QUEUE) == []  # resolved here, published: deleted
    assert (await service.queries.task(dependent)).status()["state"] == "pending"


async def test_the_resolution_messages_handler_decides_on_the_stored_task_not_a_remembered_one(
        service: Queue, clock: Clock, storage: tuple[MemoryTables, MemoryQueues]) -> None:
    """The process that handles the resolution message remembers the task running (it read it before the
    resolution, as a host that served the claim does): its events are dispatched all the same. Fails when the
    handler decides on the remembered row (the soak's `events-dispatched` violation)."""
    _, queues = storage
    root, _ = await claimed_root_with_dependent(service)
    other_publisher = RecordingPublisher()
    other = process(clock, *storage, other_publisher)
    remembered = await other.tasks.get(root)
    assert remembered is not None and remembered.state == "running"
    dies_after_answering(service)
    await service.lifecycle.resolve(root, 0, "completed", "completed")
    [message] = bodies(queues, CLAIM_QUEUE)
    clock.advance(10)  # its grace, and the dead writer's lease
    assert await other.resolution.follow_up(ResolvedCheck.decode(message)) == "resolved"
    await other.stores.settled()
    assert "task-completed" in [e.exchange for e in other_publisher.published if root in e.routing_key]
