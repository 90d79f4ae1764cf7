"""While the event bus refuses (shared/outbox/outage.py): refused dispatches retried from the triggered queue a few
times, then parked where no trigger counts them; the mover lets a few through while the bus refuses and all once
it accepts; the processes share what they saw of the bus; the reconciler announces nothing meanwhile; and parking
loses no request, whatever the bus does."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared import timeutil
from shared.domain.tasks import TASKS_TABLE
from shared.outbox import outage
from shared.outbox.outage import BUS_TABLE, PARK_AFTER, PROBES, BusMarks
from shared.outbox.rows import DISPATCH_PARKED_QUEUE, DISPATCH_QUEUE, DispatchRequest, decode_requests
from shared.runtime import Queue
from shared.storage.memory import MemoryQueues, MemoryTables
from tests.clock import Clock
from tests.conftest import slugid
from tests.services import create_task, memory_service
from tests.unit.helpers import RecordingPublisher

pytestmark = pytest.mark.service(event_bus="amqp", event_lease=5, reconcile_grace=60)


async def requests_in(service: Queue, queue: str) -> list[DispatchRequest]:
    """The requests visible in `queue`, taken off it."""
    found = []
    while batch := await service.stores.queues.receive(queue, 32, 30):
        for message in batch:
            found += decode_requests(message.json())
            await service.stores.queues.delete(queue, message)
    return found


async def move(service: Queue) -> int:
    """The mover's tick (move_due_checks): what it brought back."""
    events = service.stores.events
    return (await events.parked.move(refusing=await events.bus.refusing())).moved


async def test_a_refused_dispatch_is_retried_in_the_triggered_queue_then_parked(service: Queue, clock: Clock) -> None:
    publisher = RecordingPublisher()
    publisher.fail = True
    task_id = await create_task(service)
    [request] = await requests_in(service, DISPATCH_QUEUE)
    where = []
    for delay in (1, 2, 4, 8, 16, 32, 60, 60):
        assert await service.stores.events.dispatch(request, publisher) == "bus-failed"
        assert await requests_in(service, DISPATCH_QUEUE) == await requests_in(service, DISPATCH_PARKED_QUEUE) == []
        clock.advance(delay + 0.1)  # shown once its delay is over
        triggered, parked = (
            await requests_in(service, DISPATCH_QUEUE),
            await requests_in(service, DISPATCH_PARKED_QUEUE),
        )
        where.append("parked" if parked else "triggered")
        [request] = triggered + parked
        assert request.key == task_id
    assert (
        PARK_AFTER == 3 and where == ["triggered"] * 3 + ["parked"] * 5
    )  # three retries the trigger sees, then parked


async def test_the_mover_lets_probes_through_while_the_bus_refuses_and_the_rest_once_it_accepts(
    service: Queue, clock: Clock
) -> None:
    events = service.stores.events
    for i in range(3 * PROBES):
        request = DispatchRequest(TASKS_TABLE, f"task{i}", 1, timeutil.iso(clock.now), attempt=5)
        await service.stores.queues.put(DISPATCH_PARKED_QUEUE, request.encode())
    await events.bus.refused()
    assert await move(service) == PROBES
    assert len(await requests_in(service, DISPATCH_QUEUE)) == PROBES
    await events.bus.accepted(after_parking=True)  # a probe got through
    assert await move(service) == 2 * PROBES
    assert len(await requests_in(service, DISPATCH_QUEUE)) == 2 * PROBES
    assert await requests_in(service, DISPATCH_PARKED_QUEUE) == []


@pytest.mark.service(event_bus="amqp", check_shards=3)
async def test_a_parked_request_goes_back_to_its_own_shard(service: Queue, clock: Clock) -> None:
    stores = service.stores
    keys = [slugid() for _ in range(12)]
    for key in keys:
        request = DispatchRequest(TASKS_TABLE, key, 1, timeutil.iso(clock.now), attempt=5)
        await stores.queues.put(stores.shards.check_queue(DISPATCH_PARKED_QUEUE, key), request.encode())
    assert await move(service) == len(keys)
    for queue in stores.shards.check_queues(DISPATCH_QUEUE):
        for request in await requests_in(service, queue):
            assert stores.shards.check_queue(DISPATCH_QUEUE, request.key) == queue


async def test_the_processes_share_what_they_saw_of_the_bus(clock: Clock) -> None:
    tables = MemoryTables()
    await tables.ensure_tables([BUS_TABLE])
    writes = []
    upsert = tables.upsert

    async def counted(table, entity):  # type: ignore[no-untyped-def]
        writes.append(entity.row_key)
        return await upsert(table, entity)

    tables.upsert = counted  # type: ignore[method-assign]
    a, b, c = (BusMarks(tables, clock) for _ in range(3))
    assert not await a.refusing()  # nobody saw anything
    await a.refused()
    await a.refused()  # within MARK_EVERY: not written again
    assert writes == ["refused"]
    assert await b.refusing()
    await b.accepted()  # b never saw a refusal: its ordinary publishing writes nothing
    assert writes == ["refused"]
    clock.advance(1)
    await b.accepted(after_parking=True)  # a parked request went through: the bus accepts
    assert await c.refusing() is False and writes == ["refused", "accepted"]
    assert await b.refusing() is False
    clock.advance(outage.READ_EVERY)
    await a.refused()  # still within MARK_EVERY of its last write: a's own view only
    assert await a.refusing() and not await c.refusing()
    clock.advance(outage.MARK_EVERY)
    await a.refused()
    clock.advance(outage.READ_EVERY)
    assert await c.refusing()
    clock.advance(outage.REFUSAL_LASTS.total_seconds())  # nobody has seen a refusal since: taken as accepting
    assert not await c.refusing()


async def test_the_reconciler_announces_no_stream_while_the_bus_refuses(service: Queue, clock: Clock) -> None:
    await create_task(service)
    await requests_in(service, DISPATCH_QUEUE)  # lost: the reconciler's to repair
    clock.advance(61)
    await service.stores.events.bus.refused()
    report = await service.reconciler.run()
    assert "events" not in report.repairs and await requests_in(service, DISPATCH_QUEUE) == []
    await service.stores.events.bus.accepted(after_parking=True)
    assert (await service.reconciler.run()).repairs["events"] == 1
    assert len(await requests_in(service, DISPATCH_QUEUE)) == 1


# Each step: whether the bus accepts, tasks created, seconds until the mover's next tick.
STEPS = st.lists(st.tuples(st.booleans(), st.integers(0, 3), st.sampled_from([1, 5, 20, 70])), min_size=1, max_size=12)


@settings(max_examples=40, deadline=None)
@given(steps=STEPS)
def test_parking_loses_no_request_whatever_the_bus_does(steps: list[tuple[bool, int, float]]) -> None:
    """Every task's events reach the bus, in order, once it accepts again, however it refused and accepted
    meanwhile; and while the processes see it refuse, a tick brings back no more than PROBES."""
    asyncio.run(_run(steps))


async def _run(steps: list[tuple[bool, int, float]]) -> None:
    clock = Clock(timeutil.now().replace(microsecond=500_000))
    service = memory_service(clock=clock, queues=MemoryQueues(clock), event_bus="amqp", event_lease=5)
    publisher = RecordingPublisher()
    events = service.stores.events
    created: list[str] = []

    async def drain() -> None:  # the trigger: every visible request dispatched, its message deleted
        for request in await requests_in(service, DISPATCH_QUEUE):
            await events.dispatch(request, publisher)

    for accepts, tasks, seconds in steps:
        publisher.fail = not accepts
        created += [await create_task(service) for _ in range(tasks)]
        await drain()
        clock.advance(seconds)
        refusing = await events.bus.refusing()
        moved = (await events.parked.move(refusing=refusing)).moved
        assert not refusing or moved <= PROBES
    publisher.fail = False
    for _ in range(12):  # the bus accepts from now on: a minute a tick, until nothing is left
        await drain()
        clock.advance(61)
        await move(service)
    await drain()
    queues = service.stores.queues
    assert await queues.approximate_count(DISPATCH_QUEUE) == await queues.approximate_count(DISPATCH_PARKED_QUEUE) == 0
    for task_id in created:
        exchanges = [e.exchange for e in publisher.published if e.payload["status"]["taskId"] == task_id]
        assert exchanges[:2] == ["task-defined", "task-pending"] and set(exchanges) == {"task-defined", "task-pending"}


async def test_a_rollback_brings_every_parked_request_back_to_the_triggered_queue(service: Queue, clock: Clock) -> None:
    """What 0.2.0, which does not read the parked queue, needs after a rollback (`python -m local_host
    return-checks`): every parked request in `event-dispatch`, those still hidden as they show."""
    for i, delay in enumerate((0, 5, 60)):
        request = DispatchRequest(TASKS_TABLE, f"task{i}", 1, timeutil.iso(clock.now), attempt=5)
        await service.stores.queues.put(DISPATCH_PARKED_QUEUE, request.encode(), visible_in=delay)
    await service.stores.events.bus.refused()  # the bus's state does not hold a rollback back

    async def later(seconds: float) -> None:  # a second of the tests' clock
        clock.advance(seconds)

    assert await service.stores.events.parked.return_all(within=120, sleep=later) == 3
    assert sorted(r.key for r in await requests_in(service, DISPATCH_QUEUE)) == ["task0", "task1", "task2"]


async def test_the_timer_moves_parked_checks_and_parked_requests_in_one_tick(
    service: Queue, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """move_due_checks, as the host runs it: a parked request comes back beside a claim check that falls due."""
    import functions.triggers as trigger
    from shared.domain.messages import CLAIM_DUE_QUEUE, CLAIM_QUEUE, ClaimCheck

    monkeypatch.setattr(trigger, "get_queue", lambda: service)
    request = DispatchRequest(TASKS_TABLE, slugid(), 1, timeutil.iso(clock.now), attempt=5)
    await service.stores.queues.put(DISPATCH_PARKED_QUEUE, request.encode())
    check = ClaimCheck(slugid(), 0, timeutil.to_ms(clock.now + dt.timedelta(seconds=2)))
    await service.stores.check_queues.put(CLAIM_QUEUE, check.taskId, check.encode(), check.takenUntil, parked=True)
    await trigger.move_due_checks(None)  # type: ignore[arg-type]
    assert await requests_in(service, DISPATCH_QUEUE) == [request]
    clock.advance(2.1)
    assert [m.content for m in await service.stores.queues.receive(CLAIM_DUE_QUEUE, 32, 30)] == [check.encode()]


async def test_a_tick_makes_at_most_moves_per_tick_receives_of_a_parked_queue(
    service: Queue, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bound of one tick's work on a backlog: MOVES_PER_TICK receives of a batch each; the next tick goes on."""
    monkeypatch.setattr(outage, "MOVES_PER_TICK", 2)
    for i in range(100):
        request = DispatchRequest(TASKS_TABLE, f"task{i}", 1, timeutil.iso(clock.now), attempt=5)
        await service.stores.queues.put(DISPATCH_PARKED_QUEUE, request.encode())
    done = await service.stores.events.parked.move(refusing=False)
    assert (done.receives, done.moved) == (2, 64)
    assert (await service.stores.events.parked.move(refusing=False)).moved == 36


async def test_the_timer_moves_the_checks_when_the_bus_marks_cannot_be_read(
    service: Queue, clock: Clock, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A failure of the parked requests' side is raised after the checks' side has ended and said what it moved."""
    import functions.triggers as trigger
    from shared.domain.messages import CLAIM_DUE_QUEUE, CLAIM_QUEUE, ClaimCheck

    async def unreadable() -> bool:
        raise ConnectionError("EventBus unreachable")

    monkeypatch.setattr(trigger, "get_queue", lambda: service)
    monkeypatch.setattr(service.stores.events.bus, "refusing", unreadable)
    check = ClaimCheck(slugid(), 0, timeutil.to_ms(clock.now + dt.timedelta(seconds=2)))
    await service.stores.check_queues.put(CLAIM_QUEUE, check.taskId, check.encode(), check.takenUntil, parked=True)
    with caplog.at_level("INFO"), pytest.raises(ConnectionError):
        await trigger.move_due_checks(None)  # type: ignore[arg-type]
    assert any(getattr(r, "event", None) == "checks-moved" for r in caplog.records)
    clock.advance(2.1)
    assert [m.content for m in await service.stores.queues.receive(CLAIM_DUE_QUEUE, 32, 30)] == [check.encode()]
