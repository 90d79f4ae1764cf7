"""One dispatch or publishing of a stream at a time in this process: a lock per stream, kept only while used."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from shared.outbox.rows import Stream


class StreamLock:
    """A stream's lock here; dropped when no dispatch holds or awaits it."""

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.users = 0


class StreamLocks:
    """The locks of the streams being dispatched or published here: one entry per stream in use (its users hold
    or await it), none left once they are done, so the table is bounded by the work in progress."""

    def __init__(self) -> None:
        self._locks: dict[Stream, StreamLock] = {}

    def __contains__(self, stream: object) -> bool:
        """Whether the stream is being dispatched or published here (or waited for)."""
        return stream in self._locks

    def __len__(self) -> int:
        return len(self._locks)

    def enter(self, stream: Stream) -> StreamLock:
        """The stream's lock here, counted as used until `leave`."""
        lock = self._locks.get(stream)
        if lock is None:
            lock = self._locks[stream] = StreamLock()
        lock.users += 1
        return lock

    def leave(self, stream: Stream, lock: StreamLock) -> None:
        lock.users -= 1
        if not lock.users and self._locks.get(stream) is lock:
            del self._locks[stream]

    @contextlib.asynccontextmanager
    async def locked(self, stream: Stream) -> AsyncIterator[None]:
        """The stream's lock here, held."""
        lock = self.enter(stream)
        try:
            async with lock.lock:
                yield
        finally:
            self.leave(stream, lock)

    async def quiet(self, stream: Stream) -> None:
        """Returns once no dispatch or publishing of the stream holds its lock here (at that moment)."""
        async with self.locked(stream):
            pass

    async def take(self, stream: Stream) -> StreamLock:
        """The stream's lock, acquired and held until `release` (a writer's hold, across its write)."""
        lock = self.enter(stream)
        await lock.lock.acquire()
        return lock

    def release(self, stream: Stream, lock: StreamLock) -> None:
        lock.lock.release()
        self.leave(stream, lock)
