"""shared/storage/batches.py: the movers' receives stop when a batch comes back short or after their bound, and
`until_empty` repeats a pass until the queues it watches hold nothing, or its time is up."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from shared.storage.batches import batches, until_empty
from shared.storage.memory import MemoryQueues
from tests.clock import Clock

QUEUE = "moved-from"


async def _filled(count: int) -> MemoryQueues:
    queues = MemoryQueues()
    await queues.ensure_queues([QUEUE])
    for i in range(count):
        await queues.put(QUEUE, f"m{i}".encode())
    return queues


@settings(max_examples=40, deadline=None)
@given(count=st.integers(0, 60), take=st.integers(1, 8), max_receives=st.integers(1, 10))
def test_receives_stop_at_a_short_batch_or_their_bound(count: int, take: int, max_receives: int) -> None:
    """However many messages show: at most `max_receives` receives of at most `take` each, and no receive after
    one that came back short."""

    async def run() -> None:
        queues = await _filled(count)
        sizes = [len(batch) async for batch in batches(queues, QUEUE, max_receives=max_receives, take=take)]
        assert 1 <= len(sizes) <= max_receives and all(size <= take for size in sizes)
        assert all(size == take for size in sizes[:-1])  # only the last may be short
        assert sum(sizes) == min(count, max_receives * take)

    asyncio.run(run())


async def test_until_empty_repeats_a_pass_until_nothing_is_left(clock: Clock) -> None:
    queues = await _filled(5)
    passes = []

    async def one_pass() -> int:  # two a pass, as a mover that sees only what shows
        taken = await queues.receive(QUEUE, 2, 30)
        for message in taken:
            await queues.delete(QUEUE, message)
        passes.append(len(taken))
        return len(taken)

    async def later(seconds: float) -> None:
        clock.advance(seconds)

    assert await until_empty(one_pass, queues, [QUEUE], within=60, sleep=later) == 5
    assert passes == [2, 2, 1]
