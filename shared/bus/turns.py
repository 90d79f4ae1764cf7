"""How many publishes a process has waiting on the bus at once.

A burst of changes (a build's completion makes its 300 tests pending; 32 builds finish together in a push of
10,000 tasks) starts thousands of publishes together. Sent all at once, they wait on the broker's confirmations
together, the last ones longer than the publish timeout: each that times out is published again later through
its dispatch request (a lease and a cursor write more), and, worse, a timeout reads as a dead connection.
Taking turns, the same burst drains at the bus's rate, and the timeout measures the bus, not the line before it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

PUBLISHES_IN_FLIGHT = 256  # publishes awaiting the bus's confirmation at once (a broker confirms ~5,000/s here)


class Turns:
    """At most `limit` publishes under way at once; the others wait their turn here. Also tells whether the bus
    confirmed anything since a moment (`confirmed_since`): a timeout while others were confirmed is a slow bus,
    not a broken connection."""

    def __init__(self, limit: int = PUBLISHES_IN_FLIGHT) -> None:
        if limit < 1:
            raise ValueError("limit must be at least 1")
        self.limit = limit
        self.in_flight = 0
        self.most = 0  # the most publishes ever under way at once (tests, benchmarks)
        self._free = asyncio.Semaphore(limit)
        self._confirmed = 0.0  # time.monotonic() of the last confirmation

    @contextlib.asynccontextmanager
    async def turn(self) -> AsyncIterator[float]:
        """Hold a turn for one publish; yields when it started (time.monotonic())."""
        async with self._free:
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
            try:
                yield time.monotonic()
            finally:
                self.in_flight -= 1

    def confirmed(self) -> None:
        self._confirmed = time.monotonic()

    def confirmed_since(self, started: float) -> bool:
        return self._confirmed > started

    def broken(self, failure: BaseException, started: float) -> bool:
        """Whether a publish's failure says its connection is broken: any failure but a timeout while the bus
        confirmed other publishes (a slow bus, not a gone one)."""
        return not (isinstance(failure, TimeoutError) and self.confirmed_since(started))
