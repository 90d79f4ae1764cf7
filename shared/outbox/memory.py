"""What this process wrote lately, so that its dispatcher need not read it back: event rows (immutable once
written) and the dispatch cursors it wrote, with their ETags.

A cursor remembered is a starting point: the lease is written conditionally on its ETag (a cursor moved
elsewhere fails it, and is read); and since a cursor only moves forward, the events up to where this process
moved it are published, whoever moved it since.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from shared.bounded import Bounded, text_weight
from shared.outbox.rows import Cursor, Stream, cursor_row_key, seq_of
from shared.storage.base import Entity, Op

REMEMBERED_EVENTS = 20_000  # event rows this process wrote, for its dispatcher (a few MB)
REMEMBERED_EVENTS_BYTES = 32 * 1024 * 1024  # ... at most, whatever their size
REMEMBERED_CURSORS = 10_000


class Remembered:
    def __init__(self) -> None:
        self.events: Bounded[tuple[str, str, int], Entity] = Bounded(
            REMEMBERED_EVENTS, max_bytes=REMEMBERED_EVENTS_BYTES, weigh=lambda key, row: text_weight(row.data)
        )
        self.cursors: Bounded[Stream, Cursor] = Bounded(REMEMBERED_CURSORS)

    def recorded(self, stream: Stream, ops: Sequence[Op], etags: Sequence[str | None]) -> None:
        """A transaction that held these rows of the stream is written, and left these ETags: its event rows are
        remembered, and a cursor it reset (a new entity's) with its ETag."""
        cursor_key = cursor_row_key(stream)
        for op, etag in zip(ops, etags, strict=False):
            if stream.holds(op.entity):
                self.events.put((stream.table, stream.key, seq_of(op.entity)), op.entity)
            elif op.entity.row_key == cursor_key:
                if etag is None:
                    self.cursors.pop(stream)
                else:
                    self.cursors.put(stream, replace(Cursor.of(op.entity), etag=etag))

    def knows_event(self, stream: Stream, seq: int) -> bool:
        return (stream.table, stream.key, seq) in self.events

    def event(self, stream: Stream, seq: int) -> Entity | None:
        return self.events.get((stream.table, stream.key, seq))

    def written_after(self, stream: Stream, seq: int) -> Sequence[Entity | None]:
        """The stream's events after `seq` that this process wrote, as far as they follow on without a gap."""
        rows: list[Entity | None] = []
        while (row := self.event(stream, seq + len(rows) + 1)) is not None:
            rows.append(row)
        return rows

    def cursor(self, stream: Stream) -> Cursor | None:
        return self.cursors.get(stream)

    def forget(self, stream: Stream, last_seq: int) -> None:
        """The stream's entity is expiring: its events and cursor are forgotten."""
        self.cursors.pop(stream)
        for seq in range(1, last_seq + 1):
            self.events.pop((stream.table, stream.key, seq))
