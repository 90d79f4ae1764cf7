"""The event log (a transactional outbox) and its dispatcher.

Recording: an event is a row in the same table partition as the entity whose change it describes, written in
the same transaction as that change, so a change is never stored without its events or the other way round.
A *stream* is such a partition: a task's (Tasks table, PartitionKey = taskId) or a task group's (TaskGroups,
PartitionKey = taskGroupId). The entity keeps the stream's last sequence number (`eventSeq`); its events are
the rows `event:<seq>` (seq from 1, contiguous), and `events` is the dispatch cursor.

Dispatching (when an event bus is configured): before a change is written, a message naming the stream and the
sequence number the change will reach is put on the `event-dispatch` queue. The queue-triggered dispatcher
takes a short lease on the stream's cursor, publishes the events after the cursor up to that number in order,
and moves the cursor. Hence:
- at least once: a crash after the write leaves the message, which is delivered again; a broker that is down
  makes the dispatcher put the message back with a growing delay (never to the poison queue);
- in order per stream: one dispatcher at a time per stream (the lease), in sequence order;
- duplicates: a crash between publishing and moving the cursor publishes those events again, in order.
A message that arrives before its change is written waits a moment and is put back; one whose change never
got written (the write lost a race, or the process died) is dropped once old.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal, Protocol, TypeVar

from shared import faults, metrics, timeutil
from shared.domain.events import Event
from shared.logs import fields
from shared.storage.base import Entity, Op, QueueStore, TableStore, delete_all, pack_json, put_json, unpack_json
from shared.storage.grouped import GroupCommit

log = logging.getLogger("queue.events")

DISPATCH_QUEUE = "event-dispatch"
EVENT_ROW = "event:"
EVENT_ROW_END = "event;"  # ";" sorts right after ":"
CURSOR_ROW = "events:"
# Row keys end with the stream's key (its PartitionKey) so that no two partitions share a RowKey: Azurite finds an
# entity through its RowKey index first and then scans the matches for the PartitionKey, so a RowKey that every
# partition has (`event:00000001`, `events`) made each read and write O(streams) locally (docs/performance.md).
SETTLE_PAUSES = (0.02, 0.05, 0.1, 0.2, 0.4)
DISPATCH_BATCH = 100  # requests in one message: about 12 KB of JSON (a queue message holds 64 KB)
DispatchOutcome = Literal["done", "published", "bus-failed", "busy", "not-written", "stale"]


class PublishError(Exception):
    """The event bus did not take a message (unreachable, refused, or no confirmation)."""


class Publisher(Protocol):
    """An event bus adapter. `publish` returns once the bus has the message durably, or raises PublishError."""

    async def publish(self, event: Event) -> None: ...

    async def close(self) -> None: ...


@dataclass(frozen=True)
class Stream:
    table: str
    key: str  # the PartitionKey: a taskId or a taskGroupId

    @property
    def label(self) -> str:
        return f"{self.table}/{self.key}"


def event_row_key(stream: Stream, seq: int) -> str:
    return f"{EVENT_ROW}{seq:08d}:{stream.key}"


def cursor_row_key(stream: Stream) -> str:
    return CURSOR_ROW + stream.key


def event_entity(stream: Stream, seq: int, event: Event) -> Entity:
    return Entity(stream.key, event_row_key(stream, seq), {
        "exchange": event.exchange, "routingKey": event.routing_key, "time": event.time,
        **pack_json("payload", event.payload), **pack_json("cc", event.cc)})


def event_of(table: str, entity: Entity) -> Event:
    data = entity.data
    return Event(data["exchange"], data["routingKey"], unpack_json("payload", data), unpack_json("cc", data),
                 data.get("time", ""), f"{table}/{entity.partition_key}/{seq_of(entity)}")


def seq_of(entity: Entity) -> int:
    return int(entity.row_key[len(EVENT_ROW):len(EVENT_ROW) + 8])


def event_ops(stream: Stream, first_seq: int, events: Iterable[Event]) -> list[Op]:
    """The inserts that record `events` as `first_seq`, `first_seq + 1`, ... (part of the change's transaction)."""
    # Upserts: rows left behind by a deleted entity of the same key (a crash while expiring it) are overwritten.
    return [Op("upsert", event_entity(stream, first_seq + i, e)) for i, e in enumerate(events)]


def cursor_entity(stream: Stream, dispatched: int, lease_until: str = "", etag: str | None = None) -> Entity:
    return Entity(stream.key, cursor_row_key(stream), {"dispatched": dispatched, "leaseUntil": lease_until}, etag)


@dataclass(frozen=True)
class DispatchRequest:
    """The `event-dispatch` message: publish `table`/`key`'s events up to `seq`."""

    table: str
    key: str
    seq: int
    since: str  # when the change was about to be written
    attempt: int = 0  # publish failures so far (the put-back delay grows with it)

    @property
    def stream(self) -> Stream:
        return Stream(self.table, self.key)

    def encode(self) -> bytes:
        return put_json(asdict(self))

    @classmethod
    def decode(cls, body: Any) -> DispatchRequest:
        try:
            return cls(str(body["table"]), str(body["key"]), int(body["seq"]), str(body["since"]),
                       int(body.get("attempt", 0)))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"malformed dispatch request: {body!r}") from exc


def encode_requests(requests: list[DispatchRequest]) -> bytes:
    """One `event-dispatch` message: a request alone, or several as `{"batch": [...]}`."""
    if len(requests) == 1:
        return requests[0].encode()
    return put_json({"batch": [asdict(r) for r in requests]})


def decode_requests(body: Any) -> list[DispatchRequest]:
    """The requests of an `event-dispatch` message (either form); ValueError when malformed."""
    if isinstance(body, dict) and "batch" in body:
        if not isinstance(body["batch"], list) or not body["batch"]:
            raise ValueError(f"malformed dispatch batch: {body!r}")
        return [DispatchRequest.decode(item) for item in body["batch"]]
    return [DispatchRequest.decode(body)]


@dataclass(frozen=True)
class Cursor:
    dispatched: int
    lease_until: str
    etag: str | None

    def leased(self, now: dt.datetime) -> bool:
        return bool(self.lease_until) and timeutil.parse(self.lease_until) > now


REMEMBERED_EVENTS = 20_000  # event rows this process wrote, for its dispatcher (a few MB)
REMEMBERED_CURSORS = 10_000
K = TypeVar("K")
V = TypeVar("V")


def _remember(memory: OrderedDict[K, V], key: K, value: V, limit: int) -> None:
    memory[key] = value
    memory.move_to_end(key)
    while len(memory) > limit:
        memory.popitem(last=False)


class EventLog:
    def __init__(self, tables: TableStore, queues: QueueStore, *, dispatching: bool, lease_seconds: float = 30,
                 retry_delay: int = 1, grace_seconds: float = 60, max_backoff: int = 60,
                 clock: Any = timeutil.now) -> None:
        self.tables, self.queues = tables, queues
        self.dispatching = dispatching
        self.lease_seconds, self.retry_delay = lease_seconds, retry_delay
        self.grace_seconds, self.max_backoff = grace_seconds, max_backoff
        self.clock = clock
        self._announced: GroupCommit[str, DispatchRequest] = GroupCommit(
            self._put_requests, lambda waiting: min(len(waiting), DISPATCH_BATCH))
        # What this process wrote lately, so that its dispatcher need not read it back: event rows (immutable
        # once written) and the cursors it moved, with their ETags. A cursor remembered is only a starting point:
        # the lease is written conditionally on its ETag (a cursor moved elsewhere fails it, and is read), and
        # "already published" is never decided on it.
        self._events: OrderedDict[tuple[str, str, int], Entity] = OrderedDict()
        self._cursors: OrderedDict[Stream, Cursor] = OrderedDict()

    def recorded(self, stream: Stream, ops: list[Op], etags: list[str | None]) -> None:
        """A transaction that held these rows of the stream is written, and left these ETags: its event rows are
        remembered, and a cursor it reset (a new entity's) with its ETag."""
        cursor_key = cursor_row_key(stream)
        for op, etag in zip(ops, etags, strict=False):
            if op.entity.row_key.startswith(EVENT_ROW) and op.entity.row_key[len(EVENT_ROW) + 8:] == ":" + stream.key:
                _remember(self._events, (stream.table, stream.key, seq_of(op.entity)), op.entity, REMEMBERED_EVENTS)
            elif op.entity.row_key == cursor_key:
                if etag is None:
                    self._cursors.pop(stream, None)
                else:
                    _remember(self._cursors, stream, Cursor(int(op.entity.data["dispatched"]),
                                                            str(op.entity.data.get("leaseUntil", "")), etag),
                              REMEMBERED_CURSORS)

    # --- recording -----------------------------------------------------------------------------------------

    async def announce(self, stream: Stream, seq: int) -> None:
        """Before a change that records events up to `seq` is written: ask for their dispatch. Returns once the
        request is on the queue; requests announced while another put is in flight share the next message (a
        fan-out's thousand changes: tens of messages, not a thousand, to put, receive and delete)."""
        if self.dispatching:
            await self._announced.add(DISPATCH_QUEUE, DispatchRequest(stream.table, stream.key, seq,
                                                                      timeutil.iso(self.clock())))

    async def _put_requests(self, queue: str, requests: list[DispatchRequest]) -> None:
        await self.queues.put(queue, encode_requests(requests))

    async def list(self, stream: Stream, *, limit: int, continuation: str | None) -> tuple[list[tuple[int, Event]],
                                                                                           str | None]:
        page = await self.tables.query(stream.table, "PartitionKey eq @pk and RowKey ge @lo and RowKey lt @hi",
                                       {"pk": stream.key, "lo": EVENT_ROW, "hi": EVENT_ROW_END}, limit=limit,
                                       continuation=continuation)
        return [(seq_of(e), event_of(stream.table, e)) for e in page.entities], page.continuation

    async def forget(self, stream: Stream, last_seq: int) -> None:
        """Delete a stream's events and cursor (its entity is expiring)."""
        self._cursors.pop(stream, None)
        for seq in range(1, last_seq + 1):
            self._events.pop((stream.table, stream.key, seq), None)
        keys = [(stream.key, event_row_key(stream, s)) for s in range(1, last_seq + 1)]
        await delete_all(self.tables, stream.table, [*keys, (stream.key, cursor_row_key(stream))])

    # --- dispatching ---------------------------------------------------------------------------------------

    async def cursor(self, stream: Stream) -> Cursor:
        entity = await self.tables.get(stream.table, stream.key, cursor_row_key(stream))
        if entity is None:
            return Cursor(0, "", None)
        return Cursor(int(entity.data["dispatched"]), entity.data.get("leaseUntil", ""), entity.etag)

    async def _write_cursor(self, stream: Stream, dispatched: int, lease_until: str,
                            etag: str | None) -> str | None:
        """Write the cursor conditionally (insert when new); its new ETag, or None when someone else moved it."""
        entity = cursor_entity(stream, dispatched, lease_until, etag)
        stored = await (self.tables.replace if etag else self.tables.insert)(stream.table, entity)
        if stored is None:
            self._cursors.pop(stream, None)
            return None
        _remember(self._cursors, stream, Cursor(dispatched, lease_until, stored.etag), REMEMBERED_CURSORS)
        return stored.etag

    async def _event_row(self, stream: Stream, seq: int) -> Entity | None:
        known = self._events.get((stream.table, stream.key, seq))
        if known is not None:
            return known
        return await self.tables.get(stream.table, stream.key, event_row_key(stream, seq))

    async def dispatch(self, request: DispatchRequest, publisher: Publisher) -> DispatchOutcome:
        """Publish the stream's events up to `request.seq` that are not published yet; an outcome word."""
        stream = request.stream
        waiting: DispatchOutcome = "busy"
        now = self.clock()
        remembered = self._cursors.get(stream)
        for pause in (*SETTLE_PAUSES, None):
            now = self.clock()
            if remembered is not None and remembered.dispatched < request.seq and not remembered.leased(now):
                cursor = remembered  # this process moved it last; its lease write below checks that it still is
            else:
                cursor = await self.cursor(stream)
            remembered = None
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
        if waiting == "not-written" and now - timeutil.parse(request.since) > dt.timedelta(
                seconds=self.grace_seconds):
            log.warning("dropping a dispatch request whose change was never written",
                        extra=fields(taskId=stream.key, queue=DISPATCH_QUEUE))
            return "stale"
        await self.queues.put(DISPATCH_QUEUE, request.encode(), visible_in=self.retry_delay)
        return waiting

    async def _publish(self, request: DispatchRequest, dispatched: int, lease: str, last: Entity,
                       publisher: Publisher) -> DispatchOutcome:
        """Publish events `dispatched + 1` .. `request.seq` (the last one, `last`, already read) in order."""
        stream = request.stream
        earlier = await asyncio.gather(*(self._event_row(stream, s) for s in range(dispatched + 1, request.seq)))
        rows = [*earlier, last]
        done = dispatched
        failure: Exception | None = None
        try:
            for row in rows:
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
        except PublishError as exc:
            failure = exc
        finally:
            # Move the cursor past what was published and give up the lease (unless it ran out and was taken).
            if await self._write_cursor(stream, done, "", lease) is None:
                log.warning("dispatch lease of %s lost while publishing", stream.label,
                            extra=fields(taskId=stream.key))
        if failure is None:
            return "published"
        delay = await self.retry_later(request)
        log.warning("event bus refused an event (%s); retrying in %d s", failure, delay,
                    extra=fields(taskId=stream.key, queue=DISPATCH_QUEUE))
        return "bus-failed"

    async def retry_later(self, request: DispatchRequest) -> int:
        """Put the request back as a new message after a delay that doubles with each attempt (up to
        `max_backoff`), so a dispatch that keeps failing waits instead of ending in the poison queue."""
        delay = int(min(self.max_backoff, 2 ** min(request.attempt, 30)))
        await self.queues.put(DISPATCH_QUEUE, replace(request, attempt=request.attempt + 1).encode(),
                              visible_in=delay)
        return delay
