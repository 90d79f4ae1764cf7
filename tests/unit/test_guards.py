"""A running run's resolution turns its claim check into the resolution message (one queue call where a put and
a delete were two), falls back to a message of its own, and never leaves a claim without a check."""

from __future__ import annotations

import pytest

from shared import faults
from shared.domain.messages import CLAIM_QUEUE, RESOLVED_QUEUE, ResolvedCheck
from shared.runtime import Queue
from shared.storage.base import QueueMessage
from shared.storage.memory import MemoryQueues
from tests.answers import resolution_messages
from tests.clock import Clock
from tests.conftest import slugid
from tests.services import memory_service
from tests.unit.helpers import GRACE, claim_all, create, memory_queues

pytestmark = pytest.mark.service(reconcile_grace=GRACE)


def contents(service: Queue, queue: str) -> list[bytes]:
    return memory_queues(service).contents(queue)


async def test_the_claim_check_becomes_the_resolution_message(service: Queue) -> None:
    task_id, definition = await create(service, taskGroupId=slugid())  # not alone in a group of its id
    await claim_all(service, definition["taskQueueId"])
    assert len(contents(service, CLAIM_QUEUE)) == 1
    await service.lifecycle.resolve(task_id, 0, "completed", "completed")
    await service.stores.settled()
    assert contents(service, RESOLVED_QUEUE) == []
    [(queue, message)] = await resolution_messages(service)
    assert queue == CLAIM_QUEUE and len(contents(service, CLAIM_QUEUE)) == 1  # the check itself, not a second one
    assert await service.resolution.resolve_dependencies(ResolvedCheck.decode(message.json())) == "resolved"


async def test_a_check_received_meanwhile_leaves_the_resolution_to_a_message_of_its_own(service: Queue) -> None:
    task_id, definition = await create(service, taskGroupId=slugid())  # not alone in a group of its id
    await claim_all(service, definition["taskQueueId"])
    [message_id, pop_receipt] = (await service.tasks.load(task_id)).checks["claim"]
    # Its handler took it (its takenUntil came): the pop receipt the task kept no longer fits.
    assert (
        await service.stores.queues.release(
            CLAIM_QUEUE, QueueMessage(message_id, pop_receipt, b"", 0, service.stores.now()), 600
        )
        is not None
    )
    await service.lifecycle.resolve(task_id, 0, "completed", "completed")
    [(queue, _)] = await resolution_messages(service)
    assert queue == RESOLVED_QUEUE


async def test_a_resolution_that_was_never_written_leaves_the_claim_a_check(service: Queue, clock: Clock) -> None:
    """A crash between the check's update and the resolution's write: the message finds the run still running;
    once it is dropped as stale, a claim check is put again, so the claim still expires."""
    task_id, definition = await create(service)
    await claim_all(service, definition["taskQueueId"])
    task = await service.tasks.load(task_id)
    guards = service.tasks.guards()
    task.runs[0].resolve("completed", "completed", guards.now)
    await guards.resolved(task)  # the update, and then no write
    [(_, message)] = await resolution_messages(service, 0)
    clock.advance(GRACE + 1)
    assert await service.resolution.resolve_dependencies(ResolvedCheck.decode(message.json())) == "stale"
    await service.stores.queues.delete(CLAIM_QUEUE, message)
    checks = [
        m
        for m in contents(service, CLAIM_QUEUE)
        if not ResolvedCheck.carried_by(QueueMessage("", "", m, 0, clock.now).json())
    ]
    assert len(checks) == 1  # the running claim has its check again


async def test_the_resolving_process_resolves_the_dependents_itself_and_deletes_the_message(clock: Clock) -> None:
    """With a resolution grace, the message is hidden while the process that resolved the task unblocks its
    dependents after the answer; then the message is gone, and no trigger had to receive it."""
    service = memory_service(clock=clock, resolution_grace=10)
    root, definition = await create(service)
    tq = definition["taskQueueId"]
    dependent, _ = await create(service, taskQueueId=tq, dependencies=[root])
    await claim_all(service, tq)
    await service.lifecycle.resolve(root, 0, "completed", "completed")
    await service.stores.settled()
    assert (await service.tasks.load(dependent)).state == "pending"
    assert contents(service, CLAIM_QUEUE) == contents(service, RESOLVED_QUEUE) == []  # deleted, never received


async def test_a_resolution_that_fails_here_is_left_to_its_message(clock: Clock) -> None:
    """The resolving process's own attempt fails (a bug, storage): a resolution message takes over from the claim
    check that stood in (deleted), hidden for the grace, and its handler unblocks the dependent afterwards."""
    service = memory_service(clock=clock, queues=MemoryQueues(clock), resolution_grace=1)
    root, definition = await create(service)
    tq = definition["taskQueueId"]
    dependent, _ = await create(service, taskQueueId=tq, dependencies=[root])
    await claim_all(service, tq)
    faults.arm("resolve-dependencies:raise")
    try:
        await service.lifecycle.resolve(root, 0, "completed", "completed")
        await service.stores.settled()
    finally:
        faults.arm("")
    assert (await service.tasks.load(dependent)).state == "unscheduled"
    assert await resolution_messages(service) == []  # hidden for the grace
    clock.advance(1.1)
    [(queue, message)] = await resolution_messages(service)
    assert queue == RESOLVED_QUEUE and contents(service, CLAIM_QUEUE) == []
    assert await service.resolution.resolve_dependencies(ResolvedCheck.decode(message.json())) == "resolved"
    assert (await service.tasks.load(dependent)).state == "pending"
