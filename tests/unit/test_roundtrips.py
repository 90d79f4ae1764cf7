"""Counting a request's storage round trips one after another (shared/roundtrips.py), with the shared work it
waits for: a group commit's write, a shared receive; work after the answer does not count.

On the event loop's fake clock (looptime): a storage call's sleep moves it on without the wall clock, and the
spans are read on it (`roundtrips.now`), so which call ended before another began is the scenario's, not the
machine's."""

from __future__ import annotations

import asyncio

import pytest

from shared import roundtrips, timeutil
from shared.operations.writes.receiving import SharedReceives
from shared.outbox.inflight import Background
from shared.storage.base import Op
from shared.storage.grouped import GroupCommit
from shared.storage.memory import MemoryTables
from tests.unit.helpers import SlowQueues


@pytest.fixture(autouse=True)
def spans_on_the_loops_clock(monkeypatch):
    monkeypatch.setattr(roundtrips, "now", lambda: asyncio.get_running_loop().time())


def test_the_longest_chain_of_calls_one_after_another():
    assert roundtrips.sequential([]) == 0
    assert roundtrips.sequential([(0, 10), (1, 9), (2, 11)]) == 1  # at once
    assert roundtrips.sequential([(0, 10), (10, 20), (5, 15), (20, 30)]) == 3
    assert roundtrips.sequential([(0, 10), (10, 20), (20, 30)], until=15) == 2  # those begun before the answer


async def call(seconds: float = 0.01) -> None:
    """A storage call, as the retry loop records it."""
    started = roundtrips.now()
    await asyncio.sleep(seconds)
    roundtrips.record(started, roundtrips.now())


@pytest.mark.looptime
async def test_a_caller_waiting_behind_a_write_in_flight_counts_it_and_its_own():
    async def go():
        async def write(key: str, items: list[int]) -> None:
            await call(0.02)

        commit: GroupCommit[str, int] = GroupCommit(write, len)

        async def first() -> list[roundtrips.Span]:
            with roundtrips.traced() as spans:
                await commit.add("p", 1)
            return spans

        async def second() -> list[roundtrips.Span]:
            await asyncio.sleep(0.005)  # the first's write is in flight
            with roundtrips.traced() as spans:
                await commit.add("p", 2)
            return spans

        one, two = await asyncio.gather(first(), second())
        assert roundtrips.sequential(one) == 1
        assert roundtrips.sequential(two) == 2  # behind the first's write, then its own

    (await go())


class SlowTables(MemoryTables):
    """Each transaction takes 200 ms and is recorded, as the retry loop records a storage call."""

    async def commit(self, table: str, ops: list[Op]) -> list[str | None] | None:
        started = roundtrips.now()
        await asyncio.sleep(0.2)
        try:
            return await super().commit(table, ops)
        finally:
            roundtrips.record(started, roundtrips.now())


class RecordedQueues(SlowQueues):
    async def receive(self, queue, max_messages, visibility_timeout):
        started = roundtrips.now()
        try:
            return await super().receive(queue, max_messages, visibility_timeout)
        finally:
            roundtrips.record(started, roundtrips.now())


@pytest.mark.looptime
async def test_callers_sharing_a_receive_each_count_it():
    async def go():
        shared = SharedReceives(RecordedQueues())

        async def caller() -> int:
            with roundtrips.traced() as spans:
                await shared.receive("q", 1, 30)
            return len(spans)

        assert await asyncio.gather(caller(), caller()) == [1, 1]

    (await go())


@pytest.mark.looptime
async def test_work_started_for_after_the_answer_is_not_counted():
    async def go():
        background = Background()
        with roundtrips.traced() as spans:
            await call()
            background.start(call())
            await background.settled()
        assert len(spans) == 1

    (await go())


@pytest.mark.looptime
async def test_waits_behind_two_writes_in_flight_in_parallel_count_once():
    """A request whose rows go to two partitions, each with a write in flight when the row comes, the second row
    coming once the first partition's write had ended: its two waits are in parallel branches of its work, not one
    after another; they, its own two writes (at once) and one more call are 3 round trips, not the 4 that counting
    each wait from the row's arrival made (two waits of a fraction of a round trip, apart in time, chained)."""

    async def go():
        gates = {"a": asyncio.Event(), "b": asyncio.Event()}

        async def write(key: str, items: list[int]) -> None:
            started = roundtrips.now()
            if items == [0]:
                await gates[key].wait()  # the earlier write, in flight until its gate opens
            else:
                await asyncio.sleep(0.02)
            roundtrips.record(started, roundtrips.now())

        commit: GroupCommit[str, int] = GroupCommit(write, len)
        earlier = [asyncio.ensure_future(commit.add(key, 0)) for key in ("a", "b")]
        await asyncio.sleep(0.001)
        with roundtrips.traced() as spans:
            first = asyncio.ensure_future(commit.add("a", 1))
            await asyncio.sleep(0.001)
            gates["a"].set()
            await asyncio.sleep(0.002)  # "a"'s earlier write has ended, the request's own is in flight
            second = asyncio.ensure_future(commit.add("b", 2))
            await asyncio.sleep(0.001)
            gates["b"].set()
            await asyncio.gather(first, second)
            await call()
        await asyncio.gather(*earlier)
        assert roundtrips.sequential(spans) == 3

    (await go())


@pytest.mark.looptime
async def test_edges_written_for_later_requests_are_not_the_first_requests_round_trips():
    """The edge writer of a dependency runs as long as edges come; each transaction is counted for the
    createTasks that waited for it, not for the one whose edge started the writer."""

    async def go():
        from shared.operations.writes.edges import DependencyEdges
        from tests.services import memory_service
        from tests.unit.helpers import create

        service = memory_service(tables=SlowTables())
        edges = DependencyEdges(service.tasks)
        root, _ = await create(service)

        async def attach(delay: float) -> list[roundtrips.Span]:
            await asyncio.sleep(delay)
            with roundtrips.traced() as spans:
                await edges.attach(timeutil.slugid(), [root], "completed", timeutil.now())
            return spans

        first, second, third = await asyncio.gather(attach(0), attach(0.05), attach(0.06))
        assert len(first) == 1  # its own transaction only
        assert roundtrips.sequential(second) == roundtrips.sequential(third) == 2  # behind it, then theirs (one)

    (await go())
