"""Work in flight in this process: writes, by the partition they write (`InFlight`), and work started after a
change was written that its request does not wait for (`Background`).

A change puts its guarding message (a dispatch request, a resolution message, a pending hint) before it writes,
and the message's reader often runs in the same process a few milliseconds later, before the write is done. It
would read storage, find the change not written, pause and read again. Instead, a reader that finds the
partition's write in flight here waits for it to end (bounded) and then looks at what the write left in this
process's memory. A write elsewhere is not known here: the reader reads storage as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import Coroutine, Iterator
from typing import Any

from shared import roundtrips, timing


class InFlight:
    def __init__(self) -> None:
        self._writes: dict[tuple[str, str], tuple[asyncio.Event, int]] = {}

    @contextlib.contextmanager
    def writing(self, table: str, key: str) -> Iterator[None]:
        """Around a write of partition `key` of `table` and the messages put before it (nests)."""
        slot = (table, key)
        done, count = self._writes.get(slot) or (asyncio.Event(), 0)
        self._writes[slot] = (done, count + 1)
        try:
            yield
        finally:
            done, count = self._writes[slot]
            if count == 1:
                del self._writes[slot]
                done.set()
            else:
                self._writes[slot] = (done, count - 1)

    def busy(self, table: str, key: str) -> bool:
        return (table, key) in self._writes

    async def settled(self, table: str, key: str) -> bool:
        """Wait until no write of the partition is in flight in this process (at most IN_FLIGHT_WAIT); whether one
        was."""
        entry = self._writes.get((table, key))
        if entry is None:
            return False
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timing.IN_FLIGHT_WAIT):
                await entry[0].wait()
        return True


class Background:
    """Work a request starts after its change is written and does not wait for (a consumed hint's delete, a
    resolution's tidying, the writer's publishing of its events): each is best effort, made good otherwise if it
    never runs. Kept referenced until done, so that none is dropped unfinished; `settled` waits for them."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()

    def start(self, work: Coroutine[Any, Any, None]) -> None:
        # Not on the path of the request that started it: its storage calls are not that request's round trips.
        context = contextvars.copy_context()
        context.run(roundtrips.untraced)
        task = asyncio.get_running_loop().create_task(work, context=context)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def settled(self) -> None:
        """Wait for the work started so far, and what it started (tests; a process about to stop)."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
