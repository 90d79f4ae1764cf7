"""What the unit tier's tests share: tasks created, claimed and run through the operations, a publisher that
records, processes on one storage, stores that count or hold their calls. A test module imports from here, never
from another test module."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from collections.abc import Coroutine
from typing import Any

from local_host.triggers import QueueOptions, QueueTriggerRunner
from shared import timeutil
from shared.domain.events import Event
from shared.operations.claims import Claim
from shared.outbox.rows import DISPATCH_QUEUE, Publisher, PublishError, decode_requests
from shared.runtime import Queue
from shared.storage.base import Received
from shared.storage.memory import MemoryQueues, MemoryTables
from tests.answers import claim_work
from tests.clock import Clock
from tests.conftest import schema_defaults
from tests.conftest import task_definition as bare_definition
from tests.services import create_task, memory_service


class RecordingPublisher:
    """A bus that records what it is given, in order; `fail` makes it refuse."""

    def __init__(self) -> None:
        self.published: list[Event] = []
        self.fail = False

    async def publish(self, event: Event) -> None:
        if self.fail:
            raise PublishError("bus down")
        await asyncio.sleep(0)
        self.published.append(event)

    async def close(self) -> None:
        pass


def task_definition(**overrides: object) -> dict:
    """A definition as the service gets it: with the schema's defaults filled in."""
    definition = bare_definition(**overrides)
    return dict(definition, **schema_defaults(definition))


# Resolutions left to their messages, run by hand; the queues on the tests' clock (a delay is moved past).
EVENT_SETTINGS = {"event_bus": "amqp", "event_lease": 5}


async def claim(service: Queue, task_id: str) -> Claim:
    result = await service.claims.claim(task_id, 0, "wg", "w1")
    assert isinstance(result, Claim)
    return result


async def drain(service: Queue, publisher: Publisher) -> list[str]:
    """Run the dispatcher over every visible dispatch request; the outcomes."""
    outcomes = []
    for message in await service.stores.queues.receive(DISPATCH_QUEUE, 32, 30):
        for request in decode_requests(message.json()):
            outcomes.append(await service.stores.events.dispatch(request, publisher))
        await service.stores.queues.delete(DISPATCH_QUEUE, message)
    return outcomes


GRACE = 60  # the reconciler's grace in its tests (seconds a change is left to finish before it is repaired)


def memory_queues(service: Queue) -> MemoryQueues:
    assert isinstance(service.stores.queues, MemoryQueues)
    return service.stores.queues


async def create(service: Queue, **overrides: object) -> tuple[str, dict]:
    """A task created straight through the operations: its id, and its definition as given (without defaults)."""
    definition = bare_definition(**overrides)
    return await create_task(service, **definition), definition


async def claim_all(service: Queue, tq: str) -> list[tuple[str, int]]:
    claimed = await claim_work(service, tq, "g", "w", 32)
    return [(c["status"]["taskId"], c["runId"]) for c in claimed]


CONTAINER = "artifacts"  # the blob container of the artifact tests' memory blobs


# Short artifact and expiry settings.
ARTIFACT_SETTINGS = {"claim_timeout": 600, "expiry_delay": 0, "artifact_exception_window": 60}


async def running_task(service, **overrides):
    """A task created and its first run claimed: its id."""
    task_id = await create_task(service, **overrides)
    await service.claims.claim(task_id, 0, "g", "w")
    return task_id


def expires(clock, days=1):
    return timeutil.iso(clock() + dt.timedelta(days=days))


class SlowQueues(MemoryQueues):
    """Receives take a moment (as over a network) and are counted; `failing` makes them raise; `gate`, when
    set, holds each receive in flight until it opens (so a test's callers surely come while one is)."""

    def __init__(self) -> None:
        super().__init__()
        self.receives: list[int] = []  # how many messages each receive asked for
        self.released = 0
        self.failing = False
        self.gate: asyncio.Event | None = None
        self.held = asyncio.Event()  # a receive waits at the gate

    async def receive(self, queue: str, max_messages: int, visibility_timeout: int) -> Received:
        self.receives.append(max_messages)
        await asyncio.sleep(0.01)
        if self.gate is not None:
            self.held.set()
            await self.gate.wait()
        if self.failing:
            raise ConnectionError("storage unreachable")
        return await super().receive(queue, max_messages, visibility_timeout)

    async def release(self, queue, message, visible_in):
        self.released += 1
        return await super().release(queue, message, visible_in)


# A process that publishes its own events and resolves what follows a resolution itself, as the host does; its
# publication marks at production's interval (a process that dies at once has not written one yet).
PROCESS_SETTINGS = {"event_bus": "amqp", "event_lease": 5, "resolution_grace": 10, "event_mark_interval": 0.2}


def process(clock: Clock, tables: MemoryTables, queues: MemoryQueues, publisher: RecordingPublisher) -> Queue:
    """Another such process over the given storage (the `service` fixture is the first)."""
    queue = memory_service(tables=tables, queues=queues, clock=clock, **PROCESS_SETTINGS)
    queue.stores.events.publisher = publisher
    return queue


def another_process(clock: Clock, storage: tuple[MemoryTables, MemoryQueues]) -> tuple[Queue, RecordingPublisher]:
    """A second process on the same storage (the one the worker's next call reaches), and what it publishes."""
    publisher = RecordingPublisher()
    return process(clock, *storage, publisher), publisher


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


async def create_member(service: Queue, group: str, *dependencies: str) -> str:
    """A task of `group` that depends on `dependencies`: its id."""
    return await create_task(service, taskGroupId=group, dependencies=list(dependencies))


async def run(service: Queue, task_id: str, outcome: str) -> None:
    """Claim the task's pending run and resolve it `outcome` (completed or failed)."""
    task = await service.tasks.load(task_id)
    assert task.state == "pending", (task_id, task.state)
    await service.claims.claim(task_id, task.last_run_id, "g", "w")
    await service.lifecycle.resolve(task_id, task.last_run_id, outcome, outcome)
    await service.stores.background.settled()


async def states(service: Queue, *task_ids: str) -> list[str]:
    await service.stores.background.settled()
    return [(await service.tasks.load(t)).state for t in task_ids]


class Gated(RecordingPublisher):
    """A publisher whose publishing waits at a gate (a dying process's, or a busy broker's)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate, self.publishing = asyncio.Event(), asyncio.Event()

    async def publish(self, event: Any) -> None:
        self.publishing.set()
        await self.gate.wait()
        await super().publish(event)


class CountingQueues:
    """Counts receive calls of a real store."""

    def __init__(self, inner):
        self.inner, self.calls = inner, 0

    async def receive(self, *args, **kwargs):
        self.calls += 1
        return await self.inner.receive(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def check_back_off(inner, queue="q", scale=1.0):
    """`scale`: the trigger's shortest interval and every wait here, times this (the count of polls stays)."""
    from local_host import triggers

    async def go():
        store = CountingQueues(inner)
        options = QueueOptions(max_polling_interval=0.4 * scale)
        runner = QueueTriggerRunner("f", queue, lambda msg: None, "msg", store, options)
        stop = asyncio.Event()
        task = asyncio.create_task(runner.run(stop))
        await asyncio.sleep(2.0 * scale)
        idle_polls = store.calls
        await store.put(queue, b"{}")
        await asyncio.sleep(0.6 * scale)
        stop.set()
        await task
        await inner.close()
        return idle_polls, runner.processed

    shortest = triggers.MIN_POLLING_INTERVAL
    triggers.MIN_POLLING_INTERVAL = shortest * scale
    try:
        idle_polls, processed = asyncio.run(go())
    finally:
        triggers.MIN_POLLING_INTERVAL = shortest
    # Without back-off 2 s of 0.1 s polls would be 20; with it: 0.1, 0.2, 0.4, 0.4, ... about 7.
    assert 3 <= idle_polls <= 10, idle_polls
    assert processed == 1
