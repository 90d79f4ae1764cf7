"""Storage round trips one after another on the API's paths, on Azurite through the lean REST client
(shared/roundtrips.py counts them as the API does for each request): what latency to a far storage service
multiplies. Each test fails if a call on its path goes one after another where it went at once."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator

import pytest

from shared import roundtrips
from shared.bus import create_publisher
from shared.domain.events import EXCHANGES
from shared.runtime import Queue
from tests.amqp import broker_reachable, delete_exchanges
from tests.conftest import schema_defaults, slugid, task_definition, task_queue_id
from tests.services import azurite_service

# The counts are read off the calls' start and end times (shared/roundtrips.py): on a loaded machine, calls issued
# at once can start after one another ended and count as sequential (CI saw 5 for 4 and 4 for 3, once each in three
# runs). A count that is wrong fails its reruns too.
pytestmark = pytest.mark.flaky(reruns=2)

NAMESPACE = f"test-{uuid.uuid4().hex[:10]}"


def service(connection: str, *, bus: bool = False) -> Queue:
    """A queue on Azurite; `bus`: publishing to the local RabbitMQ, as the benchmark's host does."""
    queue = azurite_service(connection, **({"event_bus": "amqp", "pulse_namespace": NAMESPACE} if bus else {}))
    if bus:
        queue.stores.events.publisher = create_publisher(queue.stores.settings)
    return queue


async def close(queue: Queue) -> None:
    await queue.stores.close()
    if queue.stores.events.publisher is not None:
        await queue.stores.events.publisher.close()


@pytest.fixture(scope="module", autouse=True)
def _drop_exchanges() -> Iterator[None]:
    yield
    if broker_reachable():
        delete_exchanges(NAMESPACE, list(EXCHANGES))


async def counted(work):
    """Run `work()` traced: its result and its storage round trips one after another."""
    with roundtrips.traced() as spans:
        result = await work()
    return result, roundtrips.sequential(spans)


@pytest.mark.parametrize("bus", [False, True], ids=["no-bus", "amqp"])
def test_create_claim_and_report_round_trips(azurite, bus: bool):
    if bus and not broker_reachable() and not os.environ.get("QUEUE_TEST_REQUIRE_BROKER"):
        pytest.skip("no AMQP broker on 127.0.0.1:5672")

    async def go():
        queue = service(azurite.connection_string, bus=bus)
        try:
            tq = task_queue_id()
            warm_up = slugid()  # the first task of a process and task queue creates queues on the way
            definition = task_definition(taskQueueId=tq)
            await queue.creation.create_task(warm_up, dict(definition, **schema_defaults(definition)))
            await queue.work.claim_work(tq, "g", "w", 1)
            await queue.stores.settled()
            task_id = slugid()
            _, creating = await counted(
                lambda: queue.creation.create_task(task_id, dict(definition, **schema_defaults(definition)))
            )
            assert creating == 2  # the guards at once (hint, index and deadline rows, dispatch request); the task
            claims, claiming = await counted(lambda: queue.work.claim_work(tq, "g", "w", 1))
            assert [c.task.task_id for c in claims] == [task_id]
            assert claiming == 3  # the receive; the claim check and index row at once; the claim
            # A worker runs its task between claim and report: the claim's events are published by then. (A report
            # within milliseconds of the claim waits a moment for that publishing, shared/outbox/log.py hold,
            # so its write can go after the claim check's conversion rather than beside it.)
            await queue.stores.settled()
            _, reporting = await counted(lambda: queue.lifecycle.resolve(task_id, 0, "completed", "completed"))
            assert reporting == 1  # the resolution alone: its run's claim check stands in for what follows
            # A task something depends on: its dependents are released before the answer (the worker's retry of
            # its report stands in should the process die first), its claim check left as it is.
            root, dependent = slugid(), slugid()
            await queue.creation.create_task(root, dict(definition, **schema_defaults(definition)))
            child = task_definition(taskQueueId=tq, dependencies=[root])
            await queue.creation.create_task(dependent, dict(child, **schema_defaults(child)))
            [claim] = await queue.work.claim_work(tq, "g", "w", 1)
            assert claim.task.task_id == root
            await queue.stores.settled()  # as above: the task runs
            _, reporting = await counted(lambda: queue.lifecycle.resolve(root, 0, "completed", "completed"))
            # The resolution; then the dependent's release: its hint and index row with its events' dispatch
            # request, all at once; its write.
            assert reporting == 3
            assert (await queue.queries.task(dependent)).status()["state"] == "pending"  # released by the answer
        finally:
            await close(queue)

    asyncio.run(go())


def test_create_task_with_dependencies_round_trips(azurite, monkeypatch):
    """A task in a group that exists, waiting for tasks that have not resolved: its edges (each proving its
    dependency's state), index rows and group membership at once; the task. Two, for 2 dependencies as for 100
    (one more per further 100); three when a dependency is not remembered (read first) or when they are all
    satisfied already (the pending hint before the task). The group row is held known throughout: on a loaded CI
    machine, releasing 250 dependents took longer than GROUP_STALE_SECONDS, and the last creation read the group
    first (4 trips), which is the group cache's age, not the write path this counts."""
    from shared import timing

    monkeypatch.setattr(timing, "GROUP_STALE_SECONDS", 3600.0)

    async def go():
        queue = service(azurite.connection_string)
        try:
            tq = task_queue_id()
            group = slugid()
            decision = task_definition(taskQueueId=tq, taskGroupId=group)
            await queue.creation.create_task(group, dict(decision, **schema_defaults(decision)))

            async def create(dependencies: list[str]) -> tuple[str, int]:
                task_id = slugid()
                body = task_definition(taskQueueId=tq, taskGroupId=group, dependencies=dependencies)
                task, trips = await counted(
                    lambda: queue.creation.create_task(task_id, dict(body, **schema_defaults(body)))
                )
                return task.task_id, trips

            builds = [(await create([group]))[0] for _ in range(100)]
            first, trips = await create(builds[:2])
            assert trips == 2  # the edges (proving the dependencies this process remembers); the task
            _, trips = await create(builds[:2])
            assert trips == 2
            _, trips = await create(builds)
            assert trips == 2
            # A summary of 250 tests: its edges a page of 100 at a time, then the task; kept on its row.
            tests = builds + [(await create(builds[:1]))[0] for _ in range(150)]  # the group keeps 100 dependents
            summary, trips = await create(tests)
            assert trips == 4
            assert (await queue.tasks.load(summary)).waiting == tests
            assert (await queue.tasks.load(first)).waiting == builds[:2]
            for build in builds[:2]:
                queue.tasks.known.forget(build)
            _, trips = await create(builds[:2])
            assert trips == 3  # not remembered here (another instance wrote them): read first
            [claim] = await queue.work.claim_work(tq, "g", "w", 1)
            await queue.lifecycle.resolve(claim.task.task_id, 0, "completed", "completed")
            await queue.stores.settled()
            task_id, trips = await create([group])
            assert trips == 3  # all satisfied: the pending hint before the task
            assert (await queue.tasks.load(task_id)).state == "pending"
        finally:
            await close(queue)

    asyncio.run(go())


def test_a_first_claim_work_receives_the_seven_priority_queues_in_one_round_trip(azurite):
    """A worker's first claimWork in a process, for a task another process created: the seven pending queues at
    once, the worker's quarantine read beside them and its record written beside the claim; the task's row is
    read (it is not remembered here)."""

    async def go():
        queue = service(azurite.connection_string)
        other = service(azurite.connection_string)
        try:
            await queue.stores.ready()  # once per process: its tables and queues, at once
            tq = task_queue_id()
            definition = task_definition(taskQueueId=tq, priority="low")  # the sixth of seven queues
            task_id = slugid()
            await other.creation.create_task(task_id, dict(definition, **schema_defaults(definition)))
            claims, claiming = await counted(lambda: queue.work.claim_work(tq, "g", "w", 1))
            assert [c.task.task_id for c in claims] == [task_id]
            assert claiming == 4  # the receives; the task's row; the claim check and index row; the claim
        finally:
            await asyncio.gather(close(queue), close(other))

    asyncio.run(go())
