"""The dispatcher: publish a stream's events after its cursor, in order, under a short lease on the cursor.

A dispatch request names a stream and the event its change reached. The dispatcher takes the lease (a
conditional write of the cursor), publishes the events after the cursor up to that one, and those after it that
this process wrote, then moves the cursor, giving the lease up. A writer's lease that its publishing ended
exactly where it said is not moved: this process's publication mark certifies it (shared/outbox/marks.py).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from shared import faults, metrics, timeutil, timing
from shared.logs import fields
from shared.outbox.locks import StreamLock
from shared.outbox.marks import Hold
from shared.outbox.parts import Parts
from shared.outbox.rows import (
    DISPATCH_QUEUE,
    Cursor,
    DispatchRequest,
    Publisher,
    PublishError,
    Stream,
    cursor_entity,
    cursor_row_key,
    event_of,
    event_row_key,
)
from shared.storage.base import Entity, Op

log = logging.getLogger("queue.events")

DispatchOutcome = Literal["done", "published", "bus-failed", "busy", "not-written", "stale"]


@dataclass
class Held:
    """A change's hold on its stream (shared/outbox/writers.py): the lease row to write with it, and the lock
    here; the lease names `hold`, which this process's publication mark certifies once events up to `seq` are
    published."""

    stream: Stream
    lock: StreamLock
    op: Op
    dispatched: int
    hold: Hold
    seq: int


class Dispatcher:
    def __init__(
        self,
        parts: Parts,
        *,
        retry_delay: int,
        grace_seconds: float,
        dispatch_queue: Callable[[str], str],
        fallback_delay: Callable[[], int],
    ) -> None:
        self.parts, self.memory, self.marks = parts, parts.memory, parts.marks
        self.retry_delay, self.grace_seconds = retry_delay, grace_seconds
        self.dispatch_queue, self.fallback_delay = dispatch_queue, fallback_delay

    async def cursor(self, stream: Stream) -> Cursor:
        """The stream's cursor as stored, or as its writer's publication mark certifies it."""
        cursor = Cursor.of(await self.parts.tables.get(stream.storage, stream.key, cursor_row_key(stream)))
        if cursor.hold is not None and await self.marks.covers(cursor.hold):
            return cursor.certified()
        return cursor

    async def write_cursor(self, stream: Stream, dispatched: int, lease_until: str, etag: str | None) -> str | None:
        """Write the cursor conditionally (insert when new); its new ETag, or None when someone else moved it."""
        entity = cursor_entity(stream, dispatched, lease_until, etag)
        tables = self.parts.tables
        stored = await (tables.replace if etag else tables.insert)(stream.storage, entity)
        if stored is None:
            self.memory.cursors.pop(stream)
            return None
        self.memory.cursors.put(stream, Cursor(dispatched, lease_until, stored.etag))
        return stored.etag

    async def _event_row(self, stream: Stream, seq: int) -> Entity | None:
        known = self.memory.event(stream, seq)
        if known is not None:
            return known
        return await self.parts.tables.get(stream.storage, stream.key, event_row_key(stream, seq))

    async def dispatch(self, request: DispatchRequest, publisher: Publisher) -> DispatchOutcome:
        """Publish the stream's events up to `request.seq` that are not published yet; an outcome word.

        Dispatches of one stream in this process go one after another: the second finds the cursor the first
        moved (remembered, not read) and, as the first publishes every event after its own that this process
        wrote, usually finds its own published already."""
        stream, locks = request.stream, self.parts.locks
        if not self.memory.knows_event(stream, request.seq):
            # Announced here and being written? Its writer may hold the stream and publish: wait for it first.
            await self.parts.in_flight.settled(stream.table, stream.key)
        if stream in locks:  # a writer here publishing the stream (or another dispatch of it): let it end
            await locks.quiet(stream)
        if await self.certified_here(request):
            return "done"
        async with locks.locked(stream):
            return await self._dispatch(request, publisher)

    async def certified_here(self, request: DispatchRequest) -> bool:
        """Whether a writer here published the request's events, and this process's stored mark certifies them
        (waited for, without the stream's lock, which the next change's writer may want). Until the mark is
        stored, the request is what repairs this process's death: it is not done before."""
        cursor = self.memory.cursor(request.stream)
        clock = self.parts.clock
        if cursor is None or cursor.hold is None or cursor.dispatched < request.seq or cursor.leased(clock()):
            return False
        return await self.marks.stored(cursor.hold)

    async def _dispatch(self, request: DispatchRequest, publisher: Publisher) -> DispatchOutcome:
        stream = request.stream
        waiting: DispatchOutcome = "busy"
        now = self.parts.clock()
        for pause in (*timing.EVENT_SETTLE_PAUSES, None):
            if not self.memory.knows_event(stream, request.seq):
                # Announced here and being written? Then wait for the write, which leaves its rows in memory.
                await self.parts.in_flight.settled(stream.table, stream.key)
            now = self.parts.clock()
            cursor = await self._starting_cursor(stream, now)
            if cursor.dispatched >= request.seq:
                return "done"
            if cursor.leased(now):
                waiting = "busy"  # another dispatcher is publishing this stream; it may publish ours too
            elif (last := await self._event_row(stream, request.seq)) is None:
                waiting = "not-written"  # the change is about to be written, or never will be
            else:
                lease = await self.write_cursor(stream, cursor.dispatched, self.parts.lease_until(now), cursor.etag)
                if lease is not None:
                    return await self._publish(request, cursor.dispatched, lease, last, publisher)
                waiting = "busy"
            if pause is not None:
                await asyncio.sleep(pause)
        if waiting == "not-written" and self._never_written(request, now):
            log.warning(
                "dropping a dispatch request whose change was never written",
                extra=fields(taskId=stream.key, queue=DISPATCH_QUEUE),
            )
            return "stale"
        await self.parts.queues.put(self.dispatch_queue(stream.key), request.encode(), visible_in=self.retry_delay)
        return waiting

    async def _starting_cursor(self, stream: Stream, now: dt.datetime) -> Cursor:
        """Where this process wrote the cursor last, when a dispatch of its own moved it or a writer's publishing
        that this process's stored mark certifies (the events before are published: a cursor only moves forward;
        the lease write checks that it is still the stored one); the stored cursor otherwise."""
        remembered = self.memory.cursor(stream)
        if (
            remembered is not None
            and not remembered.leased(now)
            and (remembered.hold is None or self.marks.covers_here(remembered.hold))
        ):
            return remembered
        return await self.cursor(stream)

    def _never_written(self, request: DispatchRequest, now: dt.datetime) -> bool:
        """A change not written this long after its request was put never will be: a write gives up sooner than
        the fallback delay (after which a request shows that a publishing process put), or than the grace."""
        waited = now - timeutil.parse(request.since)
        return waited > dt.timedelta(seconds=min(self.grace_seconds, self.fallback_delay() - 1))

    async def _publish(
        self, request: DispatchRequest, dispatched: int, lease: str, last: Entity, publisher: Publisher
    ) -> DispatchOutcome:
        """Publish events `dispatched + 1` .. `request.seq` (the last one, `last`, already read) in order, and
        those after it that this process wrote (their own requests then find them published)."""
        stream = request.stream
        earlier = await asyncio.gather(*(self._event_row(stream, s) for s in range(dispatched + 1, request.seq)))
        failure = await self.publish_rows(stream, dispatched, lease, [*earlier, last], publisher)
        if failure is None:
            if request.attempt:  # a retry went through: the bus accepts again, parked requests may come back
                await self.parts.bus.accepted(after_parking=True)
            return "published"
        delay = await self.parts.fallbacks.retry_later(request)
        log.warning(
            "event bus refused an event (%s); retrying in %d s",
            failure,
            delay,
            extra=fields(taskId=stream.key, queue=DISPATCH_QUEUE),
        )
        return "bus-failed"

    async def publish_rows(
        self,
        stream: Stream,
        dispatched: int,
        lease: str,
        rows: Sequence[Entity | None],
        publisher: Publisher,
        held: Held | None = None,
    ) -> PublishError | None:
        """Publish `rows` (events `dispatched + 1` ...) and then the later ones this process wrote, in order, those
        written while it published too (their changes found the stream held), holding the lease (ETag `lease`);
        move the cursor past what was published, giving up the lease. The bus's refusal, if it refused.

        A writer's lease (`held`) published exactly up to its `seq` is not moved: the publication mark certifies
        it (shared/outbox/marks.py), one write a moment for all of this process's streams."""
        done = dispatched
        failure: PublishError | None = None
        batch: Sequence[Entity | None] = [*rows, *self.memory.written_after(stream, dispatched + len(rows))]
        try:
            while batch:
                for row in batch:
                    await _publish_row(stream, done + 1, row, publisher)
                    done += 1
                batch = self.memory.written_after(stream, done)
        except PublishError as exc:
            failure = exc
        finally:
            if failure is None and held is not None and done == held.seq and self.marks.may_cover(held.hold):
                self.memory.cursors.put(stream, Cursor(done, "", lease, held.hold, done))
                self.marks.finished(held.hold)
            else:
                await self._move_cursor(stream, done, lease, held)
        if failure is not None:
            await self.parts.bus.refused()
        elif done > dispatched:  # the bus took what was sent (told only after a refusal this process saw)
            await self.parts.bus.accepted()
        return failure

    async def _move_cursor(self, stream: Stream, done: int, lease: str, held: Held | None) -> None:
        """Move the cursor past what was published and give up the lease (unless it ran out and was taken)."""
        try:
            moved = await self.write_cursor(stream, done, "", lease)
        except BaseException:
            if held is not None:  # the row may still name the hold, which must then stay uncovered
                self.marks.unknown(held.hold)
            raise
        if held is not None:
            self.marks.finished(held.hold)  # no row names it any more
        if moved is None:
            log.warning("dispatch lease of %s lost while publishing", stream.label, extra=fields(taskId=stream.key))


async def _publish_row(stream: Stream, seq: int, row: Entity | None, publisher: Publisher) -> None:
    """Publish event `seq` of the stream, and record how long after its change it went out."""
    if row is None:  # cannot happen: rows are written in one transaction with contiguous numbers
        raise RuntimeError(f"event {seq} of {stream.label} is missing")
    faults.point("dispatch-before-publish")
    event = event_of(stream.table, row)
    await publisher.publish(event)
    faults.point("dispatch-after-publish")
    if event.time:
        lag = (timeutil.now() - timeutil.parse(event.time)).total_seconds()
        metrics.DISPATCH_LAG.record(max(0.0, lag), {"exchange": event.exchange})
