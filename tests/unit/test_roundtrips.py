"""Counting a request's storage round trips one after another (shared/roundtrips.py), with the shared work it
waits for: a group commit's write, a shared receive; work after the answer does not count."""

from __future__ import annotations

import asyncio
import time

from shared import roundtrips
from shared.domain.inflight import Background
from shared.operations.receiving import SharedReceives
from shared.storage.grouped import GroupCommit
from tests.unit.test_receiving import SlowQueues


def test_the_longest_chain_of_calls_one_after_another():
    assert roundtrips.sequential([]) == 0
    assert roundtrips.sequential([(0, 10), (1, 9), (2, 11)]) == 1  # at once
    assert roundtrips.sequential([(0, 10), (10, 20), (5, 15), (20, 30)]) == 3
    assert roundtrips.sequential([(0, 10), (10, 20), (20, 30)], until=15) == 2  # those begun before the answer


async def call(seconds: float = 0.01) -> None:
    """A storage call, as the retry loop records it."""
    started = time.monotonic()
    await asyncio.sleep(seconds)
    roundtrips.record(started, time.monotonic())


def test_a_caller_waiting_behind_a_write_in_flight_counts_it_and_its_own():
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
    asyncio.run(go())


class RecordedQueues(SlowQueues):
    async def receive(self, queue, max_messages, visibility_timeout):
        started = time.monotonic()
        try:
            return await super().receive(queue, max_messages, visibility_timeout)
        finally:
            roundtrips.record(started, time.monotonic())


def test_callers_sharing_a_receive_each_count_it():
    async def go():
        shared = SharedReceives(RecordedQueues())

        async def caller() -> int:
            with roundtrips.traced() as spans:
                await shared.receive("q", 1, 30)
            return len(spans)
        assert await asyncio.gather(caller(), caller()) == [1, 1]
    asyncio.run(go())


def test_work_started_for_after_the_answer_is_not_counted():
    async def go():
        background = Background()
        with roundtrips.traced() as spans:
            await call()
            background.start(call())
            await background.settled()
        assert len(spans) == 1
    asyncio.run(go())
