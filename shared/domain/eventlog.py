"""The event log (a transactional outbox) and its dispatcher.

Recording: an event is a row in the same table partition as the entity whose change it describes, written in
the same transaction as that change, so a change is never stored without its events or the other way round.
A *stream* is such a partition's log: a task's (Tasks table, PartitionKey = taskId) or a task group's (its rows
are in the Tasks table too, PartitionKey = taskGroupId, tagged `group-`: a group named after its task shares that
task's partition, and a transaction may then hold both streams' rows). The entity keeps the stream's last
sequence number (`eventSeq`); its events are the rows `event:<seq>:<key>` (seq from 1, contiguous), and
`events:<key>` is the dispatch cursor.

Dispatching (when an event bus is configured): before a change is written, a message naming the stream and the
sequence number the change will reach is put on the `event-dispatch` queue. The queue-triggered dispatcher
takes a short lease on the stream's cursor, publishes the events after the cursor up to that number in order,
and moves the cursor. Usually the change's writer got there first: its transaction took the lease (`hold`), and
it published right after the write, so the message finds nothing left to do; its process's publication mark
(shared/domain/publishmarks.py), not a cursor move, then says so. Hence:
- at least once: a crash after the write leaves the message, which is delivered again; a broker that is down
  makes the dispatcher put the message back with a growing delay (never to the poison queue);
- in order per stream: one dispatcher at a time per stream (the lease), in sequence order;
- duplicates: a crash between publishing and moving the cursor publishes those events again, in order.
A message that arrives before its change is written waits a moment and is put back; one whose change never
got written (the write lost a race, or the process died) is dropped once old.

A change whose caller is answered only once its events are published (a dependent's createTask: `published`) needs
no request: should this process die first, the caller gets no answer and retries, and the retry asks for the
dispatch (`ensure_dispatched`); a bus that refuses them, or is slow, gets a request then.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import math
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from shared import faults, metrics, timeutil, timing
from shared.bounded import Bounded, text_weight
from shared.domain.eventrows import (
    DISPATCH_QUEUE,
    Cursor,
    DispatchRequest,
    Publisher,
    PublishError,
    Stream,
    cursor_entity,
    cursor_row_key,
    encode_requests,
    event_of,
    event_row_key,
    seq_of,
)
from shared.domain.events import Event
from shared.domain.inflight import Background, InFlight
from shared.domain.publishmarks import Hold, PublicationMarks
from shared.logs import fields
from shared.storage.base import Entity, Op, QueueMessage, QueueStore, TableStore, delete_all
from shared.storage.grouped import GroupCommit

log = logging.getLogger("queue.events")

DISPATCH_BATCH = 100  # requests in one message: about 12 KB of JSON (a queue message holds 64 KB)
Helds = list["Held"]  # (aliases: EventLog's method `list` hides the builtin inside the class)
Seqs = list[int]  # event numbers
Ops = list[Op]
ETags = list[str | None]
DispatchOutcome = Literal["done", "published", "bus-failed", "busy", "not-written", "stale"]
REMEMBERED_EVENTS = 20_000  # event rows this process wrote, for its dispatcher (a few MB)
REMEMBERED_EVENTS_BYTES = 32 * 1024 * 1024  # ... at most, whatever their size
REMEMBERED_CURSORS = 10_000
REMEMBERED_REQUESTS = 10_000  # streams with fallback requests not settled yet


class _StreamLock:
    """One dispatch of a stream at a time in this process; dropped when no dispatch holds or awaits it."""

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.users = 0


@dataclass
class Fallback:
    """A message that stands in for this process should it die before it publishes some streams' events: a
    dispatch message put to show only later, or a message put before a change for other reasons that is also its
    events' fallback (`EventLog.guarded_by`: a claim check, a resolution message). Deleted once none of its parts
    is open: each stream's events published and settled here, and whatever else it waits for (`done_with`)."""

    message: QueueMessage
    open: int
    queue: str = DISPATCH_QUEUE


@dataclass
class Held:
    """A change's hold on its stream (EventLog.hold): the lease row to write with it, and the lock here; the
    lease names `hold`, which this process's publication mark certifies once events up to `seq` are published."""

    stream: Stream
    lock: _StreamLock
    op: Op
    dispatched: int
    hold: Hold
    seq: int


class EventLog:
    def __init__(
        self,
        tables: TableStore,
        queues: QueueStore,
        *,
        dispatching: bool,
        lease_seconds: float = 30,
        retry_delay: int = 1,
        grace_seconds: float = 60,
        max_backoff: int = 60,
        clock: Any = timeutil.now,
        background: Background | None = None,
        mark_interval: float = 0.2,
        dispatch_queue: Callable[[str], str] = lambda key: DISPATCH_QUEUE,
    ) -> None:
        self.tables, self.queues = tables, queues
        self.dispatch_queue = dispatch_queue  # the dispatch queue (shard) of a stream's key
        self.dispatching = dispatching
        self.lease_seconds, self.retry_delay = lease_seconds, retry_delay
        self.grace_seconds, self.max_backoff = grace_seconds, max_backoff
        self.clock = clock
        self._announced: GroupCommit[tuple[str, bool], DispatchRequest] = GroupCommit(
            self._put_requests, lambda waiting: min(len(waiting), DISPATCH_BATCH)
        )
        # Requests put to show only later (their changes' writers publish here), per stream: (seq, its message).
        self._requested: dict[Stream, list[tuple[int, Fallback]]] = {}
        # What this process wrote lately, so that its dispatcher need not read it back: event rows (immutable
        # once written) and the cursors it wrote, with their ETags. A cursor remembered is a starting point: the
        # lease is written conditionally on its ETag (a cursor moved elsewhere fails it, and is read); and since a
        # cursor only moves forward, the events up to where this process moved it are published, whoever moved
        # it since.
        self._events: Bounded[tuple[str, str, int], Entity] = Bounded(
            REMEMBERED_EVENTS, max_bytes=REMEMBERED_EVENTS_BYTES, weigh=lambda key, row: text_weight(row.data)
        )
        self._cursors: Bounded[Stream, Cursor] = Bounded(REMEMBERED_CURSORS)
        self._locks: dict[Stream, _StreamLock] = {}  # streams being dispatched in this process
        self.in_flight = InFlight()  # changes announced here and being written (their writers register)
        self.publisher: Publisher | None = None  # when set (a bus is configured), a change's writer publishes
        self.background = background or Background()  # where the writer's publishing runs
        self.marks = PublicationMarks(tables, interval=mark_interval, background=self.background)
        self.publishing_seconds = 0.0  # how long a writer's publishing here took, from its write (smoothed)

    def recorded(self, stream: Stream, ops: list[Op], etags: list[str | None]) -> None:
        """A transaction that held these rows of the stream is written, and left these ETags: its event rows are
        remembered, and a cursor it reset (a new entity's) with its ETag."""
        cursor_key = cursor_row_key(stream)
        for op, etag in zip(ops, etags, strict=False):
            if stream.holds(op.entity):
                self._events.put((stream.table, stream.key, seq_of(op.entity)), op.entity)
            elif op.entity.row_key == cursor_key:
                if etag is None:
                    self._cursors.pop(stream)
                else:
                    self._cursors.put(stream, replace(Cursor.of(op.entity), etag=etag))

    # --- recording -----------------------------------------------------------------------------------------

    async def announce(self, stream: Stream, seq: int, *, now: bool = False) -> None:
        """Before a change that records events up to `seq` is written: ask for their dispatch. Returns once the
        request is on the queue; requests announced while another put is in flight share the next message (a
        fan-out's thousand changes: tens of messages, not a thousand, to put, receive and delete).

        Where this process publishes (a publisher is set), the change's events are dispatched here right after
        its write (by its writer, or `_dispatch_here`), so the request is only the fallback should this process
        die first: it shows after `fallback_delay`, and this process deletes its message once each of its
        requests is settled (`_settled`); no dispatcher receives it. `now`: show it at once (the reconciler)."""
        if self.dispatching:
            later = self.publisher is not None and not now
            request = DispatchRequest(stream.table, stream.key, seq, timeutil.iso(self.clock()))
            await self._announced.add((self.dispatch_queue(stream.key), later), request)

    @property
    def fallback_delay(self) -> int:
        """Seconds before a request put as a fallback shows: after the lease of a writer that died ran out."""
        return math.ceil(self.lease_seconds + self.marks.longest_wait)

    async def _put_requests(self, key: tuple[str, bool], requests: list[DispatchRequest]) -> None:
        queue, later = key
        if not later:
            await self.queues.put(queue, encode_requests(requests))
            return
        message = Fallback(
            await self.queues.put(queue, encode_requests(requests), visible_in=self.fallback_delay), len(requests)
        )
        for request in requests:
            self._requested.setdefault(request.stream, []).append((request.seq, message))
        self._forget_requests()

    def _settled(self, stream: Stream, up_to: int) -> None:
        """The stream's events up to `up_to` are published, and the cursor or this process's stored mark says so
        (or a request of its own was put back for them): the fallback requests for them are not needed, and a
        message whose requests all are not is deleted."""
        for seq, message in self._requested.get(stream, ()):
            if seq <= up_to:
                self.done_with(message)
        left = [(seq, message) for seq, message in self._requested.pop(stream, ()) if seq > up_to]
        if left:
            self._requested[stream] = left

    def done_with(self, fallback: Fallback) -> None:
        """One part of `fallback` is done; the message is deleted once none is open."""
        fallback.open -= 1
        if fallback.open == 0:
            self.background.start(self._delete_request(fallback))

    async def _delete_request(self, fallback: Fallback) -> None:
        try:
            await self.queues.delete(fallback.queue, fallback.message)
        except Exception:  # it shows after its delay, and its handler finds its work done
            log.info("deleting a settled fallback message failed", exc_info=True, extra=fields(queue=fallback.queue))

    @property
    def published_by_writers(self) -> bool:
        """Whether the events of the changes this process writes are published by it (a publisher here), or not at
        all (no bus)."""
        return not self.dispatching or self.publisher is not None

    def guarded_by(
        self,
        queue: str,
        message: QueueMessage,
        streams: Sequence[tuple[Stream, int]],
        *,
        also: int = 0,
        keep: bool = False,
    ) -> Fallback:
        """A change was written whose events, up to the given sequence numbers of `streams`, a message put before
        it stands in for, should this process die before publishing them (its claim check, or the resolution
        message that check became): no dispatch request was put for them. The message is deleted once this process
        has published and settled them, and `also` more parts are `done_with`; never, when it is to be `keep`t (a
        claim's check, which expires the claim later). Its handler, if it comes to it, asks for their dispatch
        (`ensure_dispatched`). A bus that refuses them gets requests of their own (`_after_publishing`)."""
        if not self.dispatching:
            streams = []  # no bus: no events to wait for
        fallback = Fallback(message, len(streams) + also + 1 + int(keep), queue)
        for stream, seq in streams:
            self._requested.setdefault(stream, []).append((seq, fallback))
        self._forget_requests()
        self.done_with(fallback)  # the registration's own part: deleted now if nothing is open
        return fallback

    def also_guarded_by(self, fallback: Fallback, stream: Stream, seq: int) -> None:
        """Another change written with no dispatch request, whose events up to `seq` `fallback` (from
        `guarded_by`, still open) also stands in for: a resolution's claim check, for the dependents it released.
        The message is deleted only once these are published and settled too."""
        if not self.dispatching:
            return
        fallback.open += 1
        self._requested.setdefault(stream, []).append((seq, fallback))
        self._forget_requests()

    def _forget_requests(self) -> None:
        while len(self._requested) > REMEMBERED_REQUESTS:  # forgotten: its message shows, and is handled then
            del self._requested[next(iter(self._requested))]

    @property
    def answers_after_publishing(self) -> bool:
        """Whether a change may go without a dispatch request when its answer waits for its publishing here
        (`published`): this process publishes what it writes, and keeps up (timing.PUBLISH_KEEPING_UP). Read it once
        per change: it may change between its guards and its answer."""
        return self.dispatching and self.publisher is not None and self.publishing_seconds < timing.PUBLISH_KEEPING_UP

    async def published(self, stream: Stream, seq: int) -> None:
        """A change this process wrote, with events up to `seq`, for which no dispatch request was put: its caller
        is answered once they are published, so a caller that got no answer (this process died) retries, and the
        retry asks for their dispatch (`ensure_dispatched`). Waits for the writer's publishing here, at most
        timing.ANSWER_WAIT: still publishing then, the change's fallback request is put after all, as for any change
        (settled once the publishing ends); ended without publishing them (the bus refused), a request is put to
        show after the first of the growing delays of a refused dispatch (`retry_later`)."""
        if not self.dispatching or seq <= 0:
            return
        try:
            await asyncio.wait_for(self._quiet(stream), timing.ANSWER_WAIT)
        except TimeoutError:
            await self.announce(stream, seq)
            self.background.start(self._settle_when_quiet(stream, seq))
            return
        cursor = self._cursors.get(stream)
        if cursor is None or cursor.dispatched < seq:
            await self.retry_later(DispatchRequest(stream.table, stream.key, seq, timeutil.iso(self.clock())))

    async def _settle_when_quiet(self, stream: Stream, seq: int) -> None:
        """The request `published` put while the writer was still publishing: settled as `_after_publishing` would
        have, had it been put before (a refusal leaves it to show, and its handler to publish)."""
        await self._quiet(stream)
        cursor = self._cursors.get(stream)
        if cursor is None or cursor.dispatched < seq or cursor.leased(self.clock()):
            return
        if cursor.hold is None or await self.marks.stored(cursor.hold):
            self._settled(stream, cursor.dispatched)

    async def ensure_dispatched(self, stream: Stream, seq: int) -> None:
        """The handler of a message that stood in for a process's publishing (`guarded_by`): the stream's events up
        to `seq` are published, here when this process publishes (a lease a dead writer left is waited out through
        a request put back), by a dispatch request otherwise."""
        if seq <= 0:
            return
        publisher = self.publisher
        if publisher is None or not self.dispatching:
            await self.announce(stream, seq, now=True)
            return
        await self.dispatch(DispatchRequest(stream.table, stream.key, seq, timeutil.iso(self.clock())), publisher)

    async def list(
        self, stream: Stream, *, limit: int, continuation: str | None
    ) -> tuple[list[tuple[int, Event]], str | None]:
        prefix = stream.event_prefix  # ";" sorts right after its last ":"
        page = await self.tables.query(
            stream.storage,
            "PartitionKey eq @pk and RowKey ge @lo and RowKey lt @hi",
            {"pk": stream.key, "lo": prefix, "hi": prefix[:-1] + ";"},
            limit=limit,
            continuation=continuation,
        )
        return [(seq_of(e), event_of(stream.table, e)) for e in page.entities], page.continuation

    async def forget(self, stream: Stream, last_seq: int) -> None:
        """Delete a stream's events and cursor (its entity is expiring)."""
        self._cursors.pop(stream)
        for seq in range(1, last_seq + 1):
            self._events.pop((stream.table, stream.key, seq))
        keys = [(stream.key, event_row_key(stream, s)) for s in range(1, last_seq + 1)]
        await delete_all(self.tables, stream.storage, [*keys, (stream.key, cursor_row_key(stream))])

    # --- dispatching ---------------------------------------------------------------------------------------

    async def cursor(self, stream: Stream) -> Cursor:
        """The stream's cursor as stored, or as its writer's publication mark certifies it."""
        cursor = Cursor.of(await self.tables.get(stream.storage, stream.key, cursor_row_key(stream)))
        if cursor.hold is not None and await self.marks.covers(cursor.hold):
            return cursor.certified()
        return cursor

    async def _write_cursor(self, stream: Stream, dispatched: int, lease_until: str, etag: str | None) -> str | None:
        """Write the cursor conditionally (insert when new); its new ETag, or None when someone else moved it."""
        entity = cursor_entity(stream, dispatched, lease_until, etag)
        stored = await (self.tables.replace if etag else self.tables.insert)(stream.storage, entity)
        if stored is None:
            self._cursors.pop(stream)
            return None
        self._cursors.put(stream, Cursor(dispatched, lease_until, stored.etag))
        return stored.etag

    async def _event_row(self, stream: Stream, seq: int) -> Entity | None:
        known = self._events.get((stream.table, stream.key, seq))
        if known is not None:
            return known
        return await self.tables.get(stream.storage, stream.key, event_row_key(stream, seq))

    async def dispatch(self, request: DispatchRequest, publisher: Publisher) -> DispatchOutcome:
        """Publish the stream's events up to `request.seq` that are not published yet; an outcome word.

        Dispatches of one stream in this process go one after another: the second finds the cursor the first
        moved (remembered, not read) and, as the first publishes every event after its own that this process
        wrote, usually finds its own published already."""
        stream = request.stream
        if (stream.table, stream.key, request.seq) not in self._events:
            # Announced here and being written? Its writer may hold the stream and publish: wait for it first.
            await self.in_flight.settled(stream.table, stream.key)
        if stream in self._locks:  # a writer here publishing the stream (or another dispatch of it): let it end
            async with self._locked(stream):
                pass
        if await self._certified_here(request):
            return "done"
        async with self._locked(stream):
            return await self._dispatch(request, publisher)

    async def _quiet(self, stream: Stream) -> None:
        """Returns once no dispatch or publishing of the stream holds its lock here (at that moment)."""
        async with self._locked(stream):
            pass

    @contextlib.asynccontextmanager
    async def _locked(self, stream: Stream) -> AsyncIterator[None]:
        """The stream's lock here, held."""
        lock = self._enter(stream)
        try:
            async with lock.lock:
                yield
        finally:
            self._leave(stream, lock)

    async def _certified_here(self, request: DispatchRequest) -> bool:
        """Whether a writer here published the request's events, and this process's stored mark certifies them
        (waited for, without the stream's lock, which the next change's writer may want). Until the mark is
        stored, the request is what repairs this process's death: it is not done before."""
        cursor = self._cursors.get(request.stream)
        if cursor is None or cursor.hold is None or cursor.dispatched < request.seq or cursor.leased(self.clock()):
            return False
        return await self.marks.stored(cursor.hold)

    def _enter(self, stream: Stream) -> _StreamLock:
        """The stream's lock here, counted as used until `_leave`."""
        lock = self._locks.get(stream)
        if lock is None:
            lock = self._locks[stream] = _StreamLock()
        lock.users += 1
        return lock

    def _leave(self, stream: Stream, lock: _StreamLock) -> None:
        lock.users -= 1
        if not lock.users and self._locks.get(stream) is lock:
            del self._locks[stream]

    async def _dispatch(self, request: DispatchRequest, publisher: Publisher) -> DispatchOutcome:
        stream = request.stream
        waiting: DispatchOutcome = "busy"
        now = self.clock()
        for pause in (*timing.EVENT_SETTLE_PAUSES, None):
            if (stream.table, stream.key, request.seq) not in self._events:
                # Announced here and being written? Then wait for the write, which leaves its rows in memory.
                await self.in_flight.settled(stream.table, stream.key)
            now = self.clock()
            remembered = self._cursors.get(stream)
            if (
                remembered is not None
                and not remembered.leased(now)
                and (remembered.hold is None or self.marks.covers_here(remembered.hold))
            ):
                # This process wrote it last: where a dispatch of its own moved it, or a writer's publishing that
                # this process's stored mark certifies, the events before are published (a cursor only moves
                # forward); otherwise the lease write below checks that it is still the stored one.
                cursor = remembered
            else:
                cursor = await self.cursor(stream)
            if cursor.dispatched >= request.seq:
                return "done"
            if cursor.leased(now):
                waiting = "busy"  # another dispatcher is publishing this stream; it may publish ours too
            elif (last := await self._event_row(stream, request.seq)) is None:
                waiting = "not-written"  # the change is about to be written, or never will be
            else:
                lease_until = timeutil.iso(now + dt.timedelta(seconds=self.lease_seconds))
                lease = await self._write_cursor(stream, cursor.dispatched, lease_until, cursor.etag)
                if lease is not None:
                    return await self._publish(request, cursor.dispatched, lease, last, publisher)
                waiting = "busy"
            if pause is not None:
                await asyncio.sleep(pause)
        # A change not written this long after its request was put never will be: a write gives up sooner than
        # the fallback delay (after which a request shows that a publishing process put), or than the grace.
        if waiting == "not-written" and now - timeutil.parse(request.since) > dt.timedelta(
            seconds=min(self.grace_seconds, self.fallback_delay - 1)
        ):
            log.warning(
                "dropping a dispatch request whose change was never written",
                extra=fields(taskId=stream.key, queue=DISPATCH_QUEUE),
            )
            return "stale"
        await self.queues.put(self.dispatch_queue(stream.key), request.encode(), visible_in=self.retry_delay)
        return waiting

    async def _publish(
        self, request: DispatchRequest, dispatched: int, lease: str, last: Entity, publisher: Publisher
    ) -> DispatchOutcome:
        """Publish events `dispatched + 1` .. `request.seq` (the last one, `last`, already read) in order, and
        those after it that this process wrote (their own requests then find them published)."""
        stream = request.stream
        earlier = await asyncio.gather(*(self._event_row(stream, s) for s in range(dispatched + 1, request.seq)))
        failure = await self._publish_rows(stream, dispatched, lease, [*earlier, last], publisher)
        if failure is None:
            return "published"
        delay = await self.retry_later(request)
        log.warning(
            "event bus refused an event (%s); retrying in %d s",
            failure,
            delay,
            extra=fields(taskId=stream.key, queue=DISPATCH_QUEUE),
        )
        return "bus-failed"

    async def _publish_rows(
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
        it (shared/domain/publishmarks.py), one write a moment for all of this process's streams."""
        done = dispatched
        failure: PublishError | None = None
        batch: Sequence[Entity | None] = [*rows, *self._written_after(stream, dispatched + len(rows))]
        try:
            while batch:
                for row in batch:
                    if row is None:  # cannot happen: rows are written in one transaction with contiguous numbers
                        raise RuntimeError(f"event {done + 1} of {stream.label} is missing")
                    faults.point("dispatch-before-publish")
                    event = event_of(stream.table, row)
                    await publisher.publish(event)
                    faults.point("dispatch-after-publish")
                    if event.time:
                        lag = (timeutil.now() - timeutil.parse(event.time)).total_seconds()
                        metrics.DISPATCH_LAG.record(max(0.0, lag), {"exchange": event.exchange})
                    done += 1
                batch = self._written_after(stream, done)
        except PublishError as exc:
            failure = exc
        finally:
            if failure is None and held is not None and done == held.seq and self.marks.may_cover(held.hold):
                self._cursors.put(stream, Cursor(done, "", lease, held.hold, done))
                self.marks.finished(held.hold)
            else:
                await self._move_cursor(stream, done, lease, held)
        return failure

    async def _move_cursor(self, stream: Stream, done: int, lease: str, held: Held | None) -> None:
        """Move the cursor past what was published and give up the lease (unless it ran out and was taken)."""
        try:
            moved = await self._write_cursor(stream, done, "", lease)
        except BaseException:
            if held is not None:  # the row may still name the hold, which must then stay uncovered
                self.marks.unknown(held.hold)
            raise
        if held is not None:
            self.marks.finished(held.hold)  # no row names it any more
        if moved is None:
            log.warning("dispatch lease of %s lost while publishing", stream.label, extra=fields(taskId=stream.key))

    def _written_after(self, stream: Stream, seq: int) -> Sequence[Entity | None]:
        """The stream's events after `seq` that this process wrote, as far as they follow on without a gap."""
        rows: list[Entity | None] = []
        while (row := self._events.get((stream.table, stream.key, seq + len(rows) + 1))) is not None:
            rows.append(row)
        return rows

    # --- publishing by the writer --------------------------------------------------------------------------

    async def hold(self, stream: Stream, *, new: bool = False, seq: int | None = None) -> Held | None:
        """Before this process writes a change of `stream` with events: when it can publish them itself right
        after (a publisher, the stream's cursor known here, not leased, no dispatch of it under way here), the
        stream's lease as one more row of the change's transaction (the cursor is in the same partition), and
        the stream's lock here. `new`: the change creates the entity (its cursor is written fresh, leased);
        `seq`: the last event the change records (the cursor's, when None).
        `commit_change` ends the hold (written, or `not_written`). None: the dispatch request's handler
        publishes, as without a hold."""
        if self.publisher is None or not self.dispatching:
            return None
        if stream in self._locks:
            # The stream is being published here, by the writer of the change before this one as a rule (a worker
            # reporting right after its claim): wait a moment for that to end rather than write without the lease,
            # which has that publishing take this change's events too and then write the cursor.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._quiet(stream), timing.HOLD_WAIT)
            if stream in self._locks:
                return None
        now = self.clock()
        cursor = Cursor(0, "", None) if new else self._cursors.get(stream)
        if cursor is None or cursor.leased(now) or not (new or cursor.etag):
            return None
        lock = self._enter(stream)
        await lock.lock.acquire()  # a new lock: acquired at once
        lease_until = timeutil.iso(now + dt.timedelta(seconds=self.lease_seconds))
        hold, last = self.marks.take(), cursor.dispatched if seq is None else seq
        entity = cursor_entity(stream, cursor.dispatched, lease_until, cursor.etag, hold=hold, hold_seq=last)
        return Held(stream, lock, Op("upsert" if new else "replace", entity), cursor.dispatched, hold, last)

    async def commit_change(
        self, table: str, stream: Stream, ops: Sequence[Op], *, new: bool = False, also: Sequence[Stream] = ()
    ) -> Sequence[str | None] | None:
        """Commit a change's transaction (`ops`, rows of the stream's partition, its events among them): with the
        stream's lease when this process can publish the events itself (`hold`; then it does, right after), and a
        fresh dispatch cursor when the change creates the entity (`new`). `also`: other streams of the same
        partition (a group's beside its task's, shared/domain/groups.py) whose rows are among `ops` (their events,
        held and published the same way; a fresh cursor the caller wrote). What was written is remembered
        (`recorded`). The ETags of the ops (then of the cursors'), or None when the transaction lost a race."""
        streams = [stream, *also]
        seqs = {s: [seq_of(op.entity) for op in ops if s.holds(op.entity)] for s in streams}
        helds = await self._hold_all(stream, seqs, new=new)
        fresh = [] if not new or any(h.stream == stream for h in helds) else [Op("upsert", cursor_entity(stream, 0))]
        etags, helds = await self._commit_holding(table, [*ops, *fresh], helds, new=new)
        if etags is None:
            return None
        written = [*ops, *fresh, *(h.op for h in helds)]
        for s in streams:
            self.recorded(s, written, etags)
        for held, lease in zip(helds, etags[len(ops) + len(fresh) :], strict=True):  # the leases are the last rows
            # Another stream's events (the group's resolution) go out after the change's own (its task's).
            self._publish_held(held, lease, after=stream if held.stream != stream and seqs[stream] else None)
        if self.publisher is not None and self.dispatching:
            for s in streams:
                if seqs[s] and not any(h.stream == s for h in helds):
                    self.background.start(self._dispatch_here(s, max(seqs[s])))
        return etags

    async def _hold_all(self, stream: Stream, seqs: dict[Stream, Seqs], *, new: bool) -> Helds:
        """The lease of each stream whose events the change records, where this process can publish them."""
        helds: Helds = []
        for s, recorded in seqs.items():
            if recorded:
                held = await self.hold(s, new=new and s == stream, seq=max(recorded))
                if held is not None:
                    helds.append(held)
        return helds

    async def _commit_holding(self, table: str, ops: Ops, helds: Helds, *, new: bool) -> tuple[ETags | None, Helds]:
        """Commit `ops` with the leases of `helds`; the ETags (None: the transaction lost a race) and the leases
        written with them. A lease's condition may be what failed (the cursor moved elsewhere): once more without
        them, unless the change creates the entity."""
        try:
            etags = await self.tables.commit(table, [*ops, *(h.op for h in helds)])
            if etags is None and helds and not new:
                for held in helds:
                    self.not_written(held)
                helds = []
                etags = await self.tables.commit(table, ops)
        except BaseException:
            for held in helds:  # the transaction may be stored, lease and all: its mark must never cover it
                self._unknown(held)
            raise
        if etags is None:
            for held in helds:
                self.not_written(held)
            return None, []
        return etags, helds

    async def _dispatch_here(self, stream: Stream, seq: int) -> None:
        """A change written without the lease (another process moved the cursor last, or the stream is being
        published here): dispatch its events here at once, as its request's handler would."""
        request = DispatchRequest(stream.table, stream.key, seq, timeutil.iso(self.clock()))
        publisher = self.publisher
        if publisher is None:
            return
        try:
            await self.dispatch(request, publisher)
        except Exception:
            log.warning(
                "dispatching %s after its write failed; its dispatch request will",
                stream.label,
                exc_info=True,
                extra=fields(taskId=stream.key),
            )
            return
        # Published, found published, or put back as a request of its own (busy, refused): settled either way.
        self._settled(stream, seq)

    def not_written(self, held: Held) -> None:
        """The change (and so the lease) was not written: a lost race, or the cursor moved elsewhere (then it
        is read again next time)."""
        self._cursors.pop(held.stream)
        self.marks.finished(held.hold)
        self._release(held)

    def _unknown(self, held: Held) -> None:
        """Whether the change (and so the lease) was written is not known: its hold is never to be certified,
        and the cursor is read again next time."""
        self._cursors.pop(held.stream)
        self.marks.unknown(held.hold)
        self._release(held)

    def _publish_held(self, held: Held, lease: str | None, *, after: Stream | None = None) -> None:
        """The change and the lease (ETag `lease`) are written (`recorded` has seen them): publish its events now,
        in the background (the dispatch request finds them published; if this process dies first, the lease runs
        out and the request's handler publishes them). `after`: once the publishing of that stream here (which
        takes the events the same change wrote there) has ended."""
        publisher = self.publisher
        if lease is None or publisher is None:  # cannot happen: a transaction's rows all have ETags
            self._unknown(held)
            return

        written = time.monotonic()

        async def publish() -> None:
            try:
                if after is not None:
                    async with self._locked(after):
                        pass
                failure = await self._publish_rows(held.stream, held.dispatched, lease, [], publisher, held)
            except Exception:
                log.warning(
                    "publishing %s after its write failed; its dispatch request will",
                    held.stream.label,
                    exc_info=True,
                    extra=fields(taskId=held.stream.key),
                )
                return
            finally:
                self._release(held)
                took = time.monotonic() - written
                self.publishing_seconds += timing.PUBLISH_SMOOTHING * (took - self.publishing_seconds)
            await self._after_publishing(held, failure)

        self.background.start(publish())

    async def _after_publishing(self, held: Held, failure: PublishError | None) -> None:
        """Settle the fallback requests of what the writer published, once the cursor or the stored mark says so;
        what the bus refused is put back as requests of their own, retried after a growing delay."""
        stream = held.stream
        cursor = self._cursors.get(stream)
        if cursor is None or cursor.leased(self.clock()):
            return  # not known here, or a later change holds it: its own publishing settles these too
        if cursor.hold is None or await self.marks.stored(cursor.hold):
            self._settled(stream, cursor.dispatched)
        if failure is not None:
            for seq, _ in list(self._requested.get(stream, ())):
                await self.retry_later(DispatchRequest(stream.table, stream.key, seq, timeutil.iso(self.clock())))
                self._settled(stream, seq)

    def _release(self, held: Held) -> None:
        held.lock.lock.release()
        self._leave(held.stream, held.lock)

    async def retry_later(self, request: DispatchRequest) -> int:
        """Put the request back as a new message after a delay that doubles with each attempt (up to
        `max_backoff`), so a dispatch that keeps failing waits instead of ending in the poison queue."""
        delay = int(min(self.max_backoff, 2 ** min(request.attempt, 30)))
        await self.queues.put(
            self.dispatch_queue(request.key), replace(request, attempt=request.attempt + 1).encode(), visible_in=delay
        )
        return delay
