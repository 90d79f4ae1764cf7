"""Receives shared by the claimWork calls of one process, their wake-up on a new pending run, and index rows
deleted a partition at a time (shared.operations.writes.receiving, shared.storage.grouped)."""

from __future__ import annotations

import asyncio
import time

import pytest

from shared.domain.messages import pending_queue
from shared.operations.writes.receiving import SharedReceives
from shared.operations.writes.stores import EmptyPendingQueues
from shared.storage.base import Entity, Received
from shared.storage.grouped import GroupedUpserts
from shared.storage.memory import MemoryQueues, MemoryTables
from tests.clock import Ticks
from tests.conftest import schema_defaults, slugid, task_definition, task_queue_id
from tests.services import memory_service
from tests.turns import others_run
from tests.unit.helpers import SlowQueues


async def _fill(queues: MemoryQueues, count: int) -> None:
    for i in range(count):
        await queues.put("q", str(i).encode())


async def test_callers_waiting_together_share_a_receive_and_each_message_goes_to_one():
    async def go():
        queues = SlowQueues()
        await _fill(queues, 20)
        shared = SharedReceives(queues)
        answers = await asyncio.gather(*(shared.receive("q", 4, 30) for _ in range(8)))
        got = [m.content for answer in answers for m in answer]
        assert sorted(got) == sorted(str(i).encode() for i in range(20))  # each message once
        assert all(len(answer) <= 4 for answer in answers)
        assert queues.receives == [32]  # eight callers at once: one receive for all of them
        # Callers that come while a receive is in flight wait for the next one, together.
        await _fill(queues, 7)
        queues.gate = asyncio.Event()
        first = asyncio.ensure_future(shared.receive("q", 1, 30))
        await queues.held.wait()
        others = asyncio.gather(*(shared.receive("q", 2, 30) for _ in range(3)))
        await others_run()  # they are waiting
        queues.gate.set()
        later = [await first, *await others]
        assert queues.receives == [32, 1, 6] and [len(answer) for answer in later] == [1, 2, 2, 2]

    (await go())


async def test_callers_that_come_while_a_receive_finds_the_queue_empty_get_its_answer():
    async def go():
        queues = SlowQueues()
        shared = SharedReceives(queues)
        queues.gate = asyncio.Event()
        first = asyncio.ensure_future(shared.receive("q", 1, 30))
        await queues.held.wait()
        others = asyncio.gather(*(shared.receive("q", 2, 30) for _ in range(3)))
        await others_run()  # they are waiting
        queues.gate.set()
        answers = [await first, *await others]
        assert queues.receives == [1]  # one receive: it found nothing, so the others are told the same
        assert [list(answer) for answer in answers] == [[]] * 4
        assert len({answer.sent_at for answer in answers}) == 1  # when that receive was sent, for each caller

    (await go())


async def test_a_receive_asks_for_at_most_32_messages():
    async def go():
        queues = SlowQueues()
        shared = SharedReceives(queues)
        await asyncio.gather(*(shared.receive("q", 10, 30) for _ in range(8)))
        assert max(queues.receives) <= 32 and len(queues.receives) < 8

    (await go())


async def test_a_failed_receive_fails_every_caller_that_shared_it():
    async def go():
        queues = SlowQueues()
        queues.failing = True
        shared = SharedReceives(queues)
        results = await asyncio.gather(*(shared.receive("q", 1, 30) for _ in range(3)), return_exceptions=True)
        assert all(isinstance(r, ConnectionError) for r in results)
        queues.failing = False  # and the next callers are served again
        await _fill(queues, 1)
        assert len(await shared.receive("q", 1, 30)) == 1

    (await go())


async def test_the_share_of_a_caller_that_gave_up_goes_back_to_the_queue():
    async def go():
        queues = SlowQueues()
        await _fill(queues, 2)
        shared = SharedReceives(queues)
        first = asyncio.ensure_future(shared.receive("q", 1, 30))
        gone = asyncio.ensure_future(shared.receive("q", 1, 30))
        await asyncio.sleep(0)
        gone.cancel()
        assert len(await first) == 1
        await others_run()  # a share taken for the cancelled caller goes back
        assert queues.released <= 1
        # Whatever the cancelled caller's receive took is visible again: the second message is still there.
        assert len(await shared.receive("q", 1, 30)) == 1

    (await go())


async def test_a_waiting_claim_work_wakes_when_this_process_writes_a_pending_run():
    async def go():
        service = memory_service(claim_work_wait=60, claim_work_poll_interval=30, pending_empty_ttl=0)
        tq = task_queue_id()
        waiting = asyncio.ensure_future(service.work.claim_work(tq, "g", "w", 1))
        await others_run()  # it found nothing and waits (its next poll is 30 s away)
        definition = task_definition(taskQueueId=tq)
        task_id = slugid()
        await service.creation.create_task(task_id, dict(definition, **schema_defaults(definition)))
        claims = await asyncio.wait_for(waiting, 5)  # woken by the write, not by the poll
        assert [c.task.task_id for c in claims] == [task_id]

    (await go())


async def test_index_rows_deleted_together_go_in_one_transaction_and_a_missing_one_does_not_fail_it():
    async def go():
        tables = MemoryTables()
        await tables.ensure_tables(["Index"])
        grouped = GroupedUpserts(tables)
        transactions: list[int] = []
        transact = tables.transact

        async def counted(table, ops):
            transactions.append(len(ops))
            return await transact(table, ops)

        tables.transact = counted  # type: ignore[method-assign]
        await asyncio.gather(*(grouped.upsert("Index", Entity("p", f"r{i}", {"n": i})) for i in range(5)))
        await asyncio.gather(
            grouped.delete("Index", "p", "r0"),
            grouped.delete("Index", "p", "r1"),
            grouped.delete("Index", "p", "gone"),
            grouped.upsert("Index", Entity("p", "r9", {})),
        )
        rows = sorted(
            e.row_key for e in (await tables.query("Index", "PartitionKey eq @pk", {"pk": "p"}, limit=100)).entities
        )
        assert rows == ["r2", "r3", "r4", "r9"]
        assert transactions and max(transactions) > 1

    (await go())


@pytest.mark.parametrize("wanted", [0, 1, 32, 40])
async def test_each_caller_gets_at_most_what_it_asked_for(wanted):
    async def go():
        queues = SlowQueues()
        await _fill(queues, 50)
        got = await SharedReceives(queues).receive("q", wanted, 30)
        assert len(got) == max(1, min(wanted, 32))

    (await go())


def test_an_empty_receive_sent_before_a_hint_was_put_here_does_not_skip_the_queue():
    empty = EmptyPendingQueues(ttl=60)
    sent_at = time.monotonic()
    empty.filled("q")  # a hint put while that receive was in flight
    empty.received("q", 0, sent_at)
    assert not empty.skipped("q")  # the hint may be there: the next poll receives
    empty.received("q", 0, time.monotonic())
    assert empty.skipped("q")  # a receive sent after the put found it empty: skipped for the TTL


class TimedQueues(SlowQueues):
    """SlowQueues that also note when each receive began and ended, and of which queue."""

    def __init__(self) -> None:
        super().__init__()
        self.spans: list[tuple[str, float, float]] = []

    async def receive(self, queue: str, max_messages: int, visibility_timeout: int) -> Received:
        started = time.monotonic()
        try:
            return await super().receive(queue, max_messages, visibility_timeout)
        finally:
            self.spans.append((queue, started, time.monotonic()))


async def _create(service, task_queue, priority):
    definition = task_definition(taskQueueId=task_queue, priority=priority)
    task_id = slugid()
    await service.creation.create_task(task_id, dict(definition, **schema_defaults(definition)))
    return task_id


def _pollers(queues: TimedQueues, tables: MemoryTables, ticks: Ticks):
    """Two processes on the same storage: `worker` claims, `other` creates (so that `worker` does not know of the
    hints it puts), both finding a queue empty skipped for 50 ms of `ticks` only."""

    def process():
        return memory_service(tables=tables, queues=queues, ticks=ticks, pending_empty_ttl=0.05)

    return process(), process()


def _at_once(spans: list[tuple[str, float, float]]) -> bool:
    first_end = min(end for _, _, end in spans)
    return all(start < first_end for _, start, _ in spans)  # every receive began before one ended


async def test_claim_work_receives_the_queues_that_are_probably_empty_together_with_the_next():
    """The seven priority queues, never received here or found empty before, are received at once (one round
    trip), not one after another; fails if they are received in turn."""

    async def go():
        queues, tables, ticks = TimedQueues(), MemoryTables(), Ticks(step=1e-6)
        worker, other = _pollers(queues, tables, ticks)
        tq = task_queue_id()
        assert await worker.work.claim_work(tq, "g", "w", 1) == []  # finds all seven empty
        assert len(queues.spans) == 7 and _at_once(queues.spans)
        ticks.advance(0.05)  # they are no longer skipped
        task_id = await _create(other, tq, "lowest")
        queues.spans.clear()
        [claim] = await worker.work.claim_work(tq, "g", "w", 1)
        assert claim.task.task_id == task_id
        assert len(queues.spans) == 7 and _at_once(queues.spans)
        # The lowest queue got a hint: the next call receives it first, alone (the others are skipped a while).
        await _create(other, tq, "lowest")
        queues.spans.clear()
        assert len(await worker.work.claim_work(tq, "g", "w", 1)) == 1
        assert [queue for queue, _, _ in queues.spans] == [pending_queue(tq, "lowest")]

    (await go())


async def test_hints_of_a_higher_priority_found_together_go_first_and_the_lower_ones_go_back():
    async def go():
        queues, tables, ticks = TimedQueues(), MemoryTables(), Ticks(step=1e-6)
        worker, other = _pollers(queues, tables, ticks)
        tq = task_queue_id()
        assert await worker.work.claim_work(tq, "g", "w", 1) == []
        ticks.advance(0.05)  # they are no longer skipped
        low = await _create(other, tq, "lowest")
        high = await _create(other, tq, "high")
        [claim] = await worker.work.claim_work(tq, "g", "w", 1)
        assert claim.task.task_id == high  # highest priority first, as when received in turn
        await worker.stores.settled()  # the lower hint, received along, was given back at once
        assert queues.released == 1
        [claim] = await worker.work.claim_work(tq, "g", "w", 1)
        assert claim.task.task_id == low  # not hidden for the hint visibility: claimed at the next call

    (await go())
