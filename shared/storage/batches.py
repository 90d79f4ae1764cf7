"""A queue's messages received a batch at a time, within bounds: what the movers between queues share (parked checks
to their triggers' queues and back, parked dispatch requests to `event-dispatch`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from shared import timing
from shared.storage.base import QueueMessage, QueueStore

RECEIVE_BATCH = 32  # messages one receive takes (Azure's most)


async def batches(
    queues: QueueStore, queue: str, *, max_receives: int, take: int = RECEIVE_BATCH
) -> AsyncIterator[list[QueueMessage]]:
    """What shows in `queue`, `take` messages a receive, each hidden for MOVE_VISIBILITY seconds: until a batch
    comes back short (nothing more shows), `max_receives` were made, or half of MOVE_VISIBILITY has passed (so
    that what was received first is handled before it shows again)."""
    started = time.monotonic()
    for _ in range(max_receives):
        batch = await queues.receive(queue, take, int(timing.MOVE_VISIBILITY))
        yield batch
        if len(batch) < take or time.monotonic() - started >= timing.MOVE_VISIBILITY / 2:
            return


async def until_empty(
    one_pass: Callable[[], Awaitable[int]],
    queues: QueueStore,
    watched: list[str],
    within: float,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> int:
    """Repeat `one_pass` (how many it handled), a second apart, until the `watched` queues hold nothing or `within`
    seconds have passed: how many in all."""
    handled, give_up = 0, time.monotonic() + within
    while True:
        handled += await one_pass()
        left = sum([await queues.approximate_count(q) for q in watched])
        if not left or time.monotonic() > give_up:
            return handled
        await sleep(1.0)
