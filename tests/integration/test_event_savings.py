"""Savings on Azurite and the real RabbitMQ: a change's writer publishes its own events (its lease in the change's
transaction); and a message read before the write of the change that put it (a dispatch request, a pending hint,
a resolution message) waits for the write in flight here instead of reading storage, pausing and reading again.
Each test fails without its feature."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from local_host import azurite as azurite_mod
from shared.bus import create_publisher
from shared.domain.events import EXCHANGES, TASK_EXCHANGES
from shared.domain.messages import CLAIM_QUEUE, ResolvedCheck, pending_queue
from shared.domain.tasks import TASKS_TABLE, task_row
from shared.operations.claims import Claim
from shared.outbox.log import EventLog
from shared.outbox.rows import DISPATCH_QUEUE, Stream, cursor_row_key, decode_requests
from shared.runtime import Queue
from shared.storage.rest import RestQueues, RestTables
from tests.amqp import Listener, broker_reachable, delete_exchanges
from tests.conftest import azurite_of_its_own, schema_defaults, slugid, task_definition
from tests.services import azurite_service
from tests.unit.helpers import dies_after_answering, drain

pytestmark = pytest.mark.skipif(
    not broker_reachable() and not os.environ.get("QUEUE_TEST_REQUIRE_BROKER"),
    reason="no AMQP broker on 127.0.0.1:5672",
)

NAMESPACE = f"test-{uuid.uuid4().hex[:10]}"


class CountingTables(RestTables):
    """RestTables that counts point reads, and holds commits to the Tasks table while `gate` is closed."""

    def __init__(self, connection: str) -> None:
        super().__init__(connection)
        self.reads: list[str] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.held = asyncio.Event()

    async def get(self, table, partition_key, row_key):
        self.reads.append(row_key)
        return await super().get(table, partition_key, row_key)

    async def commit(self, table, ops):
        if table == TASKS_TABLE and not self.gate.is_set():
            self.held.set()
            await self.gate.wait()
        return await super().commit(table, ops)


@pytest.fixture(scope="module", autouse=True)
def _drop_exchanges() -> Iterator[None]:
    yield
    delete_exchanges(NAMESPACE, list(EXCHANGES))


@pytest.fixture(scope="module")
def azurite(tmp_path_factory) -> Iterator[azurite_mod.Azurite]:
    """An Azurite of this module's own: the session's is shared with hosts whose triggers take dispatch requests."""
    with azurite_of_its_own(tmp_path_factory, "event-savings-azurite") as instance:
        yield instance


@pytest.fixture
def listener() -> Iterator[Listener]:
    listening = Listener(NAMESPACE, [(exchange, "#") for exchange in TASK_EXCHANGES])
    yield listening
    listening.close()


def service(connection: str, queues: RestQueues | None = None, **overrides: Any) -> tuple[Queue, CountingTables]:
    tables = CountingTables(connection)
    queue = azurite_service(
        connection,
        tables=tables,
        queues=queues,
        event_bus="amqp",
        pulse_namespace=NAMESPACE,
        resolution_grace=0,  # resolution messages run by hand
        **overrides,
    )
    return queue, tables


async def create(queue: Queue, **overrides: object) -> str:
    task_id = slugid()
    definition = task_definition(**overrides)
    await queue.creation.create_task(task_id, dict(definition, **schema_defaults(definition)))
    return task_id


def test_the_writer_publishes_before_any_dispatch_request_is_handled(azurite, listener):
    task_id = ""

    async def go() -> None:
        nonlocal task_id
        queue, tables = service(azurite.connection_string)
        publisher = create_publisher(queue.stores.settings)
        assert publisher is not None
        queue.stores.events.publisher = publisher
        try:
            # Each change after the previous one's publishing ended (while it runs, a change of the same task
            # leaves its events to that publishing, or to its dispatch request: tests/unit/test_writers.py).
            before = await queue.stores.queues.approximate_count(DISPATCH_QUEUE)
            task_id = await create(queue)
            await queue.stores.settled()
            claimed = await queue.claims.claim(task_id, 0, "wg", "w1")
            assert isinstance(claimed, Claim)
            await queue.stores.settled()
            await queue.lifecycle.resolve(task_id, 0, "completed", "completed")
            await queue.stores.settled()
            # Published by the writers, with no dispatch request handled and no cursor moved: the last lease is
            # stored, and the process's publication mark, stored too, certifies it to a process that knows nothing.
            stream = Stream(TASKS_TABLE, task_id)
            cursor = await tables.get(TASKS_TABLE, task_id, cursor_row_key(stream))
            assert cursor is not None and cursor.data["dispatched"] == 3 and cursor.data["holdSeq"] == 4
            other = EventLog(tables, queue.stores.queues, dispatching=True)
            assert (await other.cursor(stream)).dispatched == 4
            tables.reads.clear()
            # The requests, the fallback, were put to show only later, and deleted by the writer: nothing left.
            assert await queue.stores.queues.approximate_count(DISPATCH_QUEUE) == before
            assert await drain(queue, publisher) == []
            assert tables.reads == []
        finally:
            await publisher.close()
            await queue.stores.close()

    asyncio.run(go())
    got = listener.wait_for(4, lambda m: m.routing_key.split(".")[1] == task_id, timeout=10)
    assert [m.exchange for m in got] == ["task-defined", "task-pending", "task-running", "task-completed"]


def test_a_request_read_before_its_write_waits_for_it_and_reads_nothing(azurite, listener):
    task_id = ""

    async def go() -> None:
        nonlocal task_id
        queue, tables = service(azurite.connection_string)  # no writer's publishing: the request's handler
        publisher = create_publisher(queue.stores.settings)
        assert publisher is not None
        try:
            await create(queue)  # the tables and queues exist; the worker's records are written
            tables.gate.clear()
            task_id = slugid()
            definition = task_definition()
            creating = asyncio.create_task(
                queue.creation.create_task(task_id, dict(definition, **schema_defaults(definition)))
            )
            await tables.held.wait()  # its dispatch request is on the queue; the task is not written
            requests = [
                r
                for m in await queue.stores.queues.receive(DISPATCH_QUEUE, 32, 30)
                for r in decode_requests(m.json())
                if r.key == task_id
            ]
            tables.reads.clear()
            dispatching = asyncio.create_task(queue.stores.events.dispatch(requests[0], publisher))
            await asyncio.sleep(0.1)
            assert not dispatching.done()
            tables.gate.set()
            await creating
            assert await dispatching == "published"
            assert tables.reads == []
        finally:
            await publisher.close()
            await queue.stores.close()

    asyncio.run(go())
    got = listener.wait_for(2, lambda m: m.routing_key.split(".")[1] == task_id, timeout=10)
    assert [m.exchange for m in got] == ["task-defined", "task-pending"]


def test_a_hint_received_before_its_tasks_write_waits_for_it_and_claims_without_a_read(azurite):
    async def go() -> None:
        queue, tables = service(azurite.connection_string)
        try:
            await create(queue)  # the tables and queues exist
            tables.gate.clear()
            task_id = slugid()
            definition = task_definition()
            creating = asyncio.create_task(
                queue.creation.create_task(task_id, dict(definition, **schema_defaults(definition)))
            )
            await tables.held.wait()  # its hint is on the queue; the task is not written
            hints = pending_queue(definition["taskQueueId"], definition.get("priority", "lowest"))
            message = next(
                m for m in await queue.stores.queues.receive(hints, 32, 30) if m.json().get("taskId") == task_id
            )
            tables.reads.clear()
            claiming = asyncio.create_task(queue.work.try_hint(hints, message, "wg", "w1"))
            await asyncio.sleep(0.1)
            assert not claiming.done()  # waits for the write in flight here, rather than read, pause and read
            tables.gate.set()
            await creating
            claimed = await claiming
            assert isinstance(claimed, Claim) and claimed.task.task_id == task_id
            assert task_row(task_id) not in tables.reads
            await queue.stores.settled()
        finally:
            await queue.stores.close()

    asyncio.run(go())


def test_a_resolution_received_before_its_write_waits_for_it_and_reads_no_task(azurite):
    async def go() -> None:
        queue, tables = service(azurite.connection_string)
        try:
            # In a group not named after it (alone in that one, its resolution would need no message).
            task_id = await create(queue, taskGroupId=slugid())
            assert isinstance(await queue.claims.claim(task_id, 0, "wg", "w1"), Claim)
            await queue.stores.settled()
            tables.gate.clear()
            resolving = asyncio.create_task(queue.lifecycle.resolve(task_id, 0, "completed", "completed"))
            await tables.held.wait()  # the claim check is the resolution message now; the task is not written
            message = next(
                m
                for m in await queue.stores.queues.receive(CLAIM_QUEUE, 32, 30)
                if ResolvedCheck.carried_by(m.json()) and m.json().get("taskId") == task_id
            )
            tables.reads.clear()
            following = asyncio.create_task(queue.resolution.resolve_dependencies(ResolvedCheck.decode(message.json())))
            await asyncio.sleep(0.1)
            assert not following.done()
            tables.gate.set()
            await resolving
            assert await following == "resolved"
            assert task_row(task_id) not in tables.reads
            await queue.stores.settled()
        finally:
            await queue.stores.close()

    asyncio.run(go())


class CountingQueues(RestQueues):
    """RestQueues that records the queue of each message put."""

    def __init__(self, connection: str) -> None:
        super().__init__(connection)
        self.puts: list[str] = []

    async def put(self, queue, content, **kwargs):
        self.puts.append(queue)
        return await super().put(queue, content, **kwargs)


def test_a_dependents_creation_puts_no_dispatch_request_and_is_answered_once_its_event_is_out(azurite, listener):
    """Nor does a task pending at once: its hint stands in (docs/events.md)."""
    root = dependent = ""

    async def go() -> None:
        nonlocal root, dependent
        connection = azurite.connection_string
        queues = CountingQueues(connection)
        queue = azurite_service(
            connection, queues=queues, event_bus="amqp", pulse_namespace=NAMESPACE, resolution_grace=0
        )
        publisher = create_publisher(queue.stores.settings)
        assert publisher is not None
        queue.stores.events.publisher = publisher
        try:
            root = await create(queue)
            await queue.stores.settled()
            assert DISPATCH_QUEUE not in queues.puts  # pending at once: its hint stands in
            assert any(queue.startswith("pending-") for queue in queues.puts)
            queues.puts.clear()
            dependent = await create(queue, dependencies=[root])
            await queue.stores.settled()
            assert DISPATCH_QUEUE not in queues.puts
        finally:
            await publisher.close()
            await queue.stores.close()

    asyncio.run(go())
    got = listener.wait_for(1, lambda m: m.routing_key.split(".")[1] == dependent, timeout=10)
    assert [m.exchange for m in got] == ["task-defined"]
    got = listener.wait_for(2, lambda m: m.routing_key.split(".")[1] == root, timeout=10)
    assert [m.exchange for m in got] == ["task-defined", "task-pending"]


def test_a_creator_dying_before_publishing_leaves_its_events_to_the_claim_of_its_hint(azurite, listener):
    """No dispatch request beside a task pending at once: when its process dies between the write and the
    publishing, another process's claimWork (through the hint) publishes task-defined and task-pending first."""
    task_id = ""
    task_queue = f"prov/hinted-{slugid()[:8]}"

    async def go() -> None:
        nonlocal task_id
        connection = azurite.connection_string
        queues = CountingQueues(connection)
        dying, _ = service(connection, queues, event_lease=1)
        other, _ = service(connection, event_lease=1)
        publishers = [create_publisher(dying.stores.settings), create_publisher(other.stores.settings)]
        assert publishers[0] is not None and publishers[1] is not None
        dying.stores.events.publisher, other.stores.events.publisher = publishers
        try:
            dies_after_answering(dying)
            task_id = await create(dying, taskQueueId=task_queue)
            assert DISPATCH_QUEUE not in queues.puts
            await asyncio.sleep(1.2)  # the dead writer's lease
            claimed = await other.work.claim_work(task_queue, "wg", "w1", 1)
            assert [c.task.task_id for c in claimed] == [task_id]
            await other.stores.settled()
        finally:
            for publisher in publishers:
                await publisher.close()
            await dying.stores.close()
            await other.stores.close()

    asyncio.run(go())
    got = listener.wait_for(3, lambda m: m.routing_key.split(".")[1] == task_id, timeout=15)
    assert [m.exchange for m in got] == ["task-defined", "task-pending", "task-running"]
