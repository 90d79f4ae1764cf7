"""The event log (a transactional outbox): what the rest of the service calls, over the outbox's roles.

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
(shared/outbox/marks.py), not a cursor move, then says so. Hence:
- at least once: a crash after the write leaves the message, which is delivered again; a broker that is down
  makes the dispatcher put the message back with a growing delay (never to the poison queue), from the fourth
  time on parked where no trigger counts it (outage.py);
- in order per stream: one dispatcher at a time per stream (the lease), in sequence order;
- duplicates: a crash between publishing and moving the cursor publishes those events again, in order.
A message that arrives before its change is written waits a moment and is put back; one whose change never
got written (the write lost a race, or the process died) is dropped once old.

A change whose caller is answered only once its events are published (a dependent's createTask: `published`) needs
no request: should this process die first, the caller gets no answer and retries, and the retry asks for the
dispatch (`ensure_dispatched`); a bus that refuses them, or is slow, gets a request then.

The roles, a module each: the rows (rows.py), what this process remembers of them (memory.py), the stream locks
(locks.py), the fallback messages (fallbacks.py), the dispatcher (dispatcher.py), the writer's own publishing
(writers.py) and its publication marks (marks.py), the writes in flight here (inflight.py), the requests parked
while the bus refuses (outage.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from shared import timeutil
from shared.domain.events import Event
from shared.outbox.dispatcher import Dispatcher, DispatchOutcome
from shared.outbox.fallbacks import Fallback, Fallbacks
from shared.outbox.inflight import Background, InFlight
from shared.outbox.locks import StreamLocks
from shared.outbox.marks import PublicationMarks
from shared.outbox.memory import Remembered
from shared.outbox.outage import BusMarks, ParkedDispatch
from shared.outbox.parts import Parts
from shared.outbox.rows import (
    DISPATCH_PARKED_QUEUE,
    DISPATCH_QUEUE,
    Cursor,
    DispatchRequest,
    Publisher,
    Stream,
    cursor_row_key,
    event_of,
    event_row_key,
    seq_of,
)
from shared.outbox.writers import WriterPublishing
from shared.storage.base import Op, QueueMessage, QueueStore, TableStore, delete_all

__all__ = ["DispatchOutcome", "EventLog", "Fallback"]


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
        parked_queue: Callable[[str], str] = lambda key: DISPATCH_PARKED_QUEUE,
        parked_queues: Callable[[], list[str]] = lambda: [DISPATCH_PARKED_QUEUE],
    ) -> None:
        self.tables, self.dispatching, self.clock, self.lease_seconds = tables, dispatching, clock, lease_seconds
        self.background = background or Background()
        self.marks = PublicationMarks(tables, interval=mark_interval, background=self.background)
        self.in_flight = InFlight()  # changes announced here and being written (their writers register)
        self.fallbacks = Fallbacks(
            queues,
            dispatch_queue=dispatch_queue,
            parked_queue=parked_queue,
            delay=lambda: self.fallback_delay,
            max_backoff=max_backoff,
            background=self.background,
        )
        self.memory = Remembered()
        self.bus = BusMarks(tables, clock)  # whether the bus refuses, as the processes saw it lately
        self.parked = ParkedDispatch(queues, parked_queues)  # retries parked while it does
        parts = Parts(
            tables,
            queues,
            clock,
            lease_seconds,
            self.memory,
            StreamLocks(),
            self.marks,
            self.in_flight,
            self.background,
            self.fallbacks,
            self.bus,
        )
        self.dispatcher = Dispatcher(
            parts,
            retry_delay=retry_delay,
            grace_seconds=grace_seconds,
            dispatch_queue=dispatch_queue,
            fallback_delay=lambda: self.fallback_delay,
        )
        self.writers = WriterPublishing(parts, self.dispatcher, dispatching=dispatching)

    @property
    def publisher(self) -> Publisher | None:
        """When set (a bus is configured), a change's writer publishes its events."""
        return self.writers.publisher

    @publisher.setter
    def publisher(self, publisher: Publisher | None) -> None:
        self.writers.publisher = publisher

    @property
    def publishing_seconds(self) -> float:
        """How long a writer's publishing here took, from its write (smoothed)."""
        return self.writers.seconds

    @publishing_seconds.setter
    def publishing_seconds(self, seconds: float) -> None:
        self.writers.seconds = seconds

    @property
    def fallback_delay(self) -> int:
        """Seconds before a request put as a fallback shows: after the lease of a writer that died ran out."""
        return math.ceil(self.lease_seconds + self.marks.longest_wait)

    @property
    def published_by_writers(self) -> bool:
        """Whether the events of the changes this process writes are published by it (a publisher here), or not at
        all (no bus)."""
        return not self.dispatching or self.publisher is not None

    @property
    def answers_after_publishing(self) -> bool:
        """Whether a change may go without a dispatch request when its answer waits for its publishing here
        (`published`): this process publishes what it writes, and keeps up (timing.PUBLISH_KEEPING_UP). Read it once
        per change: it may change between its guards and its answer."""
        return self.dispatching and self.writers.keeping_up

    # --- recording -----------------------------------------------------------------------------------------

    def recorded(self, stream: Stream, ops: list[Op], etags: list[str | None]) -> None:
        """A transaction that held these rows of the stream is written, and left these ETags (memory.py)."""
        self.memory.recorded(stream, ops, etags)

    async def commit_change(
        self, table: str, stream: Stream, ops: Sequence[Op], *, new: bool = False, also: Sequence[Stream] = ()
    ) -> Sequence[str | None] | None:
        """Commit a change's transaction (`ops`, rows of the stream's partition, its events among them): with the
        stream's lease when this process can publish the events itself (writers.py; then it does, right after),
        and a fresh dispatch cursor when the change creates the entity (`new`). `also`: other streams of the same
        partition (a group's beside its task's, shared/domain/groups.py) whose rows are among `ops` (their events,
        held and published the same way; a fresh cursor the caller wrote). What was written is remembered
        (`recorded`). The ETags of the ops (then of the cursors'), or None when the transaction lost a race."""
        return await self.writers.commit_change(table, stream, ops, new=new, also=also)

    async def announce(self, stream: Stream, seq: int, *, now: bool = False) -> None:
        """Before a change that records events up to `seq` is written: ask for their dispatch. Returns once the
        request is on the queue (fallbacks.py: requests announced together share a message).

        Where this process publishes (a publisher is set), the change's events are dispatched here right after
        its write (by its writer, or its dispatch here), so the request is only the fallback should this process
        die first: it shows after `fallback_delay`, and this process deletes its message once each of its
        requests is settled; no dispatcher receives it. `now`: show it at once (the reconciler)."""
        if self.dispatching:
            later = self.publisher is not None and not now
            await self.fallbacks.request(DispatchRequest.of(stream, seq, self.clock()), later=later)

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
        (`ensure_dispatched`). A bus that refuses them gets requests of their own (writers.py)."""
        if not self.dispatching:
            streams = []  # no bus: no events to wait for
        return self.fallbacks.guard(queue, message, streams, also=also, keep=keep)

    def also_guarded_by(self, fallback: Fallback, stream: Stream, seq: int) -> None:
        """Another change written with no dispatch request, whose events up to `seq` `fallback` (from
        `guarded_by`, still open) also stands in for: a resolution's claim check, for the dependents it released.
        The message is deleted only once these are published and settled too."""
        if self.dispatching:
            self.fallbacks.also_guard(fallback, stream, seq)

    def done_with(self, fallback: Fallback) -> None:
        """One part of `fallback` is done; the message is deleted once none is open."""
        self.fallbacks.done_with(fallback)

    async def published(self, stream: Stream, seq: int) -> None:
        """A change this process wrote, with events up to `seq`, for which no dispatch request was put: its caller
        is answered once they are published, so a caller that got no answer (this process died) retries, and the
        retry asks for their dispatch (`ensure_dispatched`). Waits for the writer's publishing here, at most
        timing.ANSWER_WAIT: still publishing then, the change's fallback request is put after all, as for any change
        (settled once the publishing ends); ended without publishing them (the bus refused), a request is put to
        show after the first of the growing delays of a refused dispatch (`retry_later`)."""
        if self.dispatching and seq > 0:
            await self.writers.published(stream, seq)

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
        await self.dispatcher.dispatch(DispatchRequest.of(stream, seq, self.clock()), publisher)

    async def retry_later(self, request: DispatchRequest) -> int:
        """Put the request back after a delay that doubles with each attempt (fallbacks.py)."""
        return await self.fallbacks.retry_later(request)

    # --- reading and forgetting ------------------------------------------------------------------------------

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
        self.memory.forget(stream, last_seq)
        keys = [(stream.key, event_row_key(stream, s)) for s in range(1, last_seq + 1)]
        await delete_all(self.tables, stream.storage, [*keys, (stream.key, cursor_row_key(stream))])

    # --- dispatching ---------------------------------------------------------------------------------------

    async def cursor(self, stream: Stream) -> Cursor:
        """The stream's cursor as stored, or as its writer's publication mark certifies it."""
        return await self.dispatcher.cursor(stream)

    async def dispatch(self, request: DispatchRequest, publisher: Publisher) -> DispatchOutcome:
        """Publish the stream's events up to `request.seq` that are not published yet; an outcome word
        (dispatcher.py)."""
        return await self.dispatcher.dispatch(request, publisher)
