"""Publishing by the writer: a change's writer holds its stream's lease in the change's own transaction and
publishes the change's events right after the write, so that its dispatch request finds nothing left to do.

`hold` prepares the lease row (when this process can publish: a publisher, the cursor known here and not leased,
no dispatch of the stream under way here); `commit_change` writes the change with it and starts the publishing
(`_publish_held`); what it published is settled once the cursor or this process's stored mark says so
(`_after_publishing`), which deletes the change's fallback request. A writer that dies leaves its lease to run
out: the request shows then, and its handler publishes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence

from shared import timing
from shared.logs import fields
from shared.outbox.dispatcher import Dispatcher, Held
from shared.outbox.parts import Parts
from shared.outbox.rows import (
    Cursor,
    DispatchRequest,
    Publisher,
    PublishError,
    Stream,
    cursor_entity,
    cursor_row_key,
    seq_of,
)
from shared.storage.base import Op

log = logging.getLogger("queue.events")

Helds = list[Held]
Seqs = list[int]  # event numbers
Ops = list[Op]
ETags = list[str | None]


class WriterPublishing:
    def __init__(self, parts: Parts, dispatcher: Dispatcher, *, dispatching: bool) -> None:
        self.parts, self.dispatcher, self.dispatching = parts, dispatcher, dispatching
        self.memory, self.marks, self.locks = parts.memory, parts.marks, parts.locks
        self.publisher: Publisher | None = None  # when set (a bus is configured), a change's writer publishes
        self.seconds = 0.0  # how long a writer's publishing here took, from its write (smoothed)

    @property
    def publishes(self) -> bool:
        """Whether this process publishes the events of the changes it writes (a bus, and a publisher here)."""
        return self.dispatching and self.publisher is not None

    async def hold(self, stream: Stream, *, new: bool = False, seq: int | None = None) -> Held | None:
        """Before this process writes a change of `stream` with events: when it can publish them itself right
        after (a publisher, the stream's cursor known here, not leased, no dispatch of it under way here), the
        stream's lease as one more row of the change's transaction (the cursor is in the same partition), and
        the stream's lock here. `new`: the change creates the entity (its cursor is written fresh, leased);
        `seq`: the last event the change records (the cursor's, when None).
        `commit_change` ends the hold (written, or `not_written`). None: the dispatch request's handler
        publishes, as without a hold."""
        if not self.publishes:
            return None
        if stream in self.locks:
            # The stream is being published here, by the writer of the change before this one as a rule (a worker
            # reporting right after its claim): wait a moment for that to end rather than write without the lease,
            # which has that publishing take this change's events too and then write the cursor.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.locks.quiet(stream), timing.HOLD_WAIT)
            if stream in self.locks:
                return None
        now = self.parts.clock()
        cursor = Cursor(0, "", None) if new else self.memory.cursor(stream)
        if cursor is None or cursor.leased(now) or not (new or cursor.etag):
            return None
        lock = await self.locks.take(stream)  # a new lock: acquired at once
        hold, last = self.marks.take(), cursor.dispatched if seq is None else seq
        entity = cursor_entity(
            stream, cursor.dispatched, self.parts.lease_until(now), cursor.etag, hold=hold, hold_seq=last
        )
        return Held(stream, lock, Op("upsert" if new else "replace", entity), cursor.dispatched, hold, last)

    async def commit_change(
        self, table: str, stream: Stream, ops: Sequence[Op], *, new: bool = False, also: Sequence[Stream] = ()
    ) -> Sequence[str | None] | None:
        """EventLog.commit_change: the change with the leases this process can hold, and their publishing."""
        streams = [stream, *also]
        seqs = {s: [seq_of(op.entity) for op in ops if s.holds(op.entity)] for s in streams}
        helds = await self._hold_all(stream, seqs, new=new)
        fresh = [] if not new or any(h.stream == stream for h in helds) else [Op("upsert", cursor_entity(stream, 0))]
        etags, helds = await self._commit_holding(table, [*ops, *fresh], helds, new=new)
        if etags is None:
            return None
        written = [*ops, *fresh, *(h.op for h in helds)]
        for s in streams:
            self.memory.recorded(s, written, etags)
        for held, lease in zip(helds, etags[len(ops) + len(fresh) :], strict=True):  # the leases are the last rows
            # Another stream's events (the group's resolution) go out after the change's own (its task's).
            self._publish_held(held, lease, after=stream if held.stream != stream and seqs[stream] else None)
        if self.publishes:
            for s in streams:
                if seqs[s] and not any(h.stream == s for h in helds):
                    self.parts.background.start(self._dispatch_here(s, max(seqs[s])))
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
        tables = self.parts.tables
        try:
            etags = await tables.commit(table, [*ops, *(h.op for h in helds)])
            if etags is None and helds and not new:
                for held in helds:
                    await self._lost(held)
                helds = []
                etags = await tables.commit(table, ops)
        except BaseException:
            for held in helds:  # the transaction may be stored, lease and all: its mark must never cover it
                self._unknown(held)
            raise
        if etags is None:
            for held in helds:
                await self._lost(held)
            return None, []
        return etags, helds

    async def _lost(self, held: Held) -> None:
        """The transaction with the hold's lease answered a lost race. After a lost response that may be its own
        first attempt, applied, whose rows a later change made look like someone else's (the fault campaign found
        a task created that a worker claimed at once: shared/storage/lost_responses.py): the lease row naming the
        hold is then stored, and a mark covering the hold would have every dispatcher pass over the change's
        unpublished events. So the cursor row decides: naming the hold, its outcome is unknown; not (or unread),
        nothing can name it any more."""
        stream = held.stream
        try:
            row = await self.parts.tables.get(stream.storage, stream.key, cursor_row_key(stream))
        except Exception:
            self._unknown(held)
            return
        if row is not None and (row.data.get("holder"), row.data.get("holdNo")) == (held.hold.holder, held.hold.number):
            self._unknown(held)
        else:
            self.not_written(held)

    async def _dispatch_here(self, stream: Stream, seq: int) -> None:
        """A change written without the lease (another process moved the cursor last, or the stream is being
        published here): dispatch its events here at once, as its request's handler would."""
        request = DispatchRequest.of(stream, seq, self.parts.clock())
        publisher = self.publisher
        if publisher is None:
            return
        try:
            await self.dispatcher.dispatch(request, publisher)
        except Exception:
            log.warning(
                "dispatching %s after its write failed; its dispatch request will",
                stream.label,
                exc_info=True,
                extra=fields(taskId=stream.key),
            )
            return
        # Published, found published, or put back as a request of its own (busy, refused): settled either way.
        self.parts.fallbacks.settled(stream, seq)

    def not_written(self, held: Held) -> None:
        """The change (and so the lease) was not written: a lost race, or the cursor moved elsewhere (then it
        is read again next time)."""
        self.memory.cursors.pop(held.stream)
        self.marks.finished(held.hold)
        self.locks.release(held.stream, held.lock)

    def _unknown(self, held: Held) -> None:
        """Whether the change (and so the lease) was written is not known: its hold is never to be certified,
        and the cursor is read again next time."""
        self.memory.cursors.pop(held.stream)
        self.marks.unknown(held.hold)
        self.locks.release(held.stream, held.lock)

    def _publish_held(self, held: Held, lease: str | None, *, after: Stream | None = None) -> None:
        """The change and the lease (ETag `lease`) are written (`recorded` has seen them): publish its events now,
        in the background (the dispatch request finds them published; if this process dies first, the lease runs
        out and the request's handler publishes them). `after`: once the publishing of that stream here (which
        takes the events the same change wrote there) has ended."""
        publisher = self.publisher
        if lease is None or publisher is None:  # cannot happen: a transaction's rows all have ETags
            self._unknown(held)
            return
        self.parts.background.start(self._publish(held, lease, publisher, after, time.monotonic()))

    async def _publish(
        self, held: Held, lease: str, publisher: Publisher, after: Stream | None, written: float
    ) -> None:
        try:
            if after is not None:
                await self.locks.quiet(after)
            failure = await self.dispatcher.publish_rows(held.stream, held.dispatched, lease, [], publisher, held)
        except Exception:
            log.warning(
                "publishing %s after its write failed; its dispatch request will",
                held.stream.label,
                exc_info=True,
                extra=fields(taskId=held.stream.key),
            )
            return
        finally:
            self.locks.release(held.stream, held.lock)
            took = time.monotonic() - written
            self.seconds += timing.PUBLISH_SMOOTHING * (took - self.seconds)
        await self._after_publishing(held, failure)

    async def _after_publishing(self, held: Held, failure: PublishError | None) -> None:
        """Settle the fallback requests of what the writer published, once the cursor or the stored mark says so;
        what the bus refused is put back as requests of their own, retried after a growing delay."""
        stream, fallbacks = held.stream, self.parts.fallbacks
        cursor = self.memory.cursor(stream)
        if cursor is None or cursor.leased(self.parts.clock()):
            return  # not known here, or a later change holds it: its own publishing settles these too
        if cursor.hold is None or await self.marks.stored(cursor.hold):
            fallbacks.settled(stream, cursor.dispatched)
        if failure is not None:
            for seq in fallbacks.open_seqs(stream):
                await fallbacks.retry_later(DispatchRequest.of(stream, seq, self.parts.clock()))
                fallbacks.settled(stream, seq)

    @property
    def keeping_up(self) -> bool:
        """Whether this process publishes what it writes, and keeps up (timing.PUBLISH_KEEPING_UP)."""
        return self.publishes and self.seconds < timing.PUBLISH_KEEPING_UP

    async def published(self, stream: Stream, seq: int) -> None:
        """EventLog.published: wait for the writer's publishing here, at most timing.ANSWER_WAIT; a request put
        after all when it takes longer, or put to show later when it ended without publishing them."""
        try:
            await asyncio.wait_for(self.locks.quiet(stream), timing.ANSWER_WAIT)
        except TimeoutError:
            request = DispatchRequest.of(stream, seq, self.parts.clock())
            await self.parts.fallbacks.request(request, later=self.publisher is not None)
            self.parts.background.start(self._settle_when_quiet(stream, seq))
            return
        cursor = self.memory.cursor(stream)
        if cursor is None or cursor.dispatched < seq:
            await self.parts.fallbacks.retry_later(DispatchRequest.of(stream, seq, self.parts.clock()))

    async def _settle_when_quiet(self, stream: Stream, seq: int) -> None:
        """The request `published` put while the writer was still publishing: settled as `_after_publishing` would
        have, had it been put before (a refusal leaves it to show, and its handler to publish)."""
        await self.locks.quiet(stream)
        cursor = self.memory.cursor(stream)
        if cursor is None or cursor.dispatched < seq or cursor.leased(self.parts.clock()):
            return
        if cursor.hold is None or await self.marks.stored(cursor.hold):
            self.parts.fallbacks.settled(stream, cursor.dispatched)
