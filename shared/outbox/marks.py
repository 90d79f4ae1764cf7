"""Publication marks: one row per publishing process says how far its writers' holds are done, so that a writer
that published a change's events need not move the stream's cursor (one table write per change) to say so.

A writer that publishes its change's events itself takes the stream's lease in the change's transaction
(shared/outbox/writers.py, `WriterPublishing.hold`). The lease row names a *hold*: this process's marks id (`holder`)
and a number (`holdNo`, counting up from 1 in this process), and the last event the change records
(`holdSeq`). When the writer has published exactly up to `holdSeq`, its hold is *certified* here and the cursor
row is left as it is; otherwise (the bus refused, or it published more or less) the writer writes the cursor as
before, and the hold is *settled*: nothing stored names it any more. The mark row (`PartitionKey` = the marks id)
says `upTo`: every hold numbered up to it is certified or settled. A reader of a cursor (another process's
dispatcher, the reconciler) whose hold the holder's mark covers knows the events up to `holdSeq` published and
the lease given up; one it does not cover is a lease like any other: wait for it, or publish again once it ran
out (a crash between publishing and the mark's write publishes those events again, as a crash between
publishing and the cursor's move did).

The mark is written at most once per `interval` seconds (a busy process: a few writes a second, where each
change moved a cursor). A hold whose outcome is unknown (its transaction's answer was lost, or the cursor's
write failed) must never be covered: the marks id is replaced by a new one, and the old mark stops below it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from shared import timeutil, timing
from shared.logs import fields
from shared.outbox.inflight import Background
from shared.storage.base import Entity, TableStore

log = logging.getLogger("queue.events")

MARKS_TABLE = "EventPublishers"
MARK_ROW = "mark"
KNOWN_MARKS = 1_000


@dataclass(frozen=True)
class Hold:
    """A hold's name in the lease row."""

    holder: str
    number: int


@dataclass
class _Marks:
    """One marks id's holds in this process."""

    holder: str
    taken: int = 0
    done: set[int] = field(default_factory=set)  # finished above `up_to`
    up_to: int = 0  # every hold up to here is finished
    stop_below: int | None = None  # a hold of unknown outcome: the mark never reaches it
    written: int = 0
    writing: bool = False
    waiting: list[tuple[int, asyncio.Future[None]]] = field(default_factory=list)  # `stored` callers

    def wrote(self, up_to: int) -> None:
        self.written = up_to
        for number, written in [w for w in self.waiting if w[0] <= up_to]:
            self.waiting.remove((number, written))
            if not written.done():
                written.set_result(None)


class PublicationMarks:
    def __init__(self, tables: TableStore, *, interval: float = 0.2, background: Background | None = None) -> None:
        self.tables, self.interval = tables, interval
        self.background = background or Background()
        self._current = _Marks(timeutil.slugid())
        self._replaced: dict[str, _Marks] = {}  # ids replaced while holds of theirs were open
        self._last_write = 0.0
        # Other processes' marks as last read (a mark only grows) and when, newest last.
        self._read: dict[str, tuple[int, float]] = {}

    @property
    def holder(self) -> str:
        """The marks id that new holds are named by."""
        return self._current.holder

    def take(self) -> Hold:
        """A number for a hold about to be written."""
        marks = self._current
        marks.taken += 1
        return Hold(marks.holder, marks.taken)

    def finished(self, hold: Hold) -> None:
        """The hold is certified (its events up to `holdSeq` are published) or settled (no stored row names it:
        its transaction was not written, or the cursor was written since)."""
        marks = self._marks_of(hold)
        if marks is None:
            return
        marks.done.add(hold.number)
        while marks.up_to + 1 in marks.done:
            marks.up_to += 1
            marks.done.discard(marks.up_to)
        self._schedule(marks)

    def unknown(self, hold: Hold) -> None:
        """The hold's outcome is unknown (its lease may be stored, its events not published): never cover it.
        Later holds take a new marks id."""
        marks = self._marks_of(hold)
        if marks is None:
            return
        marks.stop_below = min(hold.number, marks.stop_below or hold.number)
        if marks is self._current:
            if not self._all_written(marks):
                self._replaced[marks.holder] = marks
            self._current = _Marks(timeutil.slugid())
        log.warning(
            "a hold's outcome is unknown; later holds are named %s",
            self._current.holder,
            extra=fields(event="publication-mark-renewed"),
        )

    def _marks_of(self, hold: Hold) -> _Marks | None:
        # Holds of a replaced id finish into it (its mark may still grow below the unknown one) until its mark
        # is written that far.
        if hold.holder == self._current.holder:
            return self._current
        return self._replaced.get(hold.holder)

    def may_cover(self, hold: Hold) -> bool:
        """Whether this process's mark can still come to cover the hold (not after one of unknown outcome)."""
        marks = self._marks_of(hold)
        return marks is not None and (marks.stop_below is None or hold.number < marks.stop_below)

    def covers_here(self, hold: Hold) -> bool | None:
        """Whether this process's stored mark covers the hold; None when the hold is not this process's."""
        marks = self._marks_of(hold)
        if marks is None:
            return None
        return marks.written >= hold.number

    @property
    def longest_wait(self) -> float:
        """How long `stored` waits for the mark: its interval, and some patience."""
        return self.interval + timing.MARK_PATIENCE

    async def stored(self, hold: Hold) -> bool:
        """Wait until this process's stored mark covers its hold (its next write once the holds before it have
        finished: within `interval`, unless storage or the bus is failing); False when it does not within
        `longest_wait`, or the hold is not this process's."""
        marks = self._marks_of(hold)
        if marks is None or not self.may_cover(hold):
            return False
        if marks.written >= hold.number:
            return True
        written = asyncio.get_running_loop().create_future()
        marks.waiting.append((hold.number, written))
        try:
            async with asyncio.timeout(self.longest_wait):
                await written
            return True
        except TimeoutError:
            return False
        finally:
            if (hold.number, written) in marks.waiting:
                marks.waiting.remove((hold.number, written))

    @staticmethod
    def _coverable(marks: _Marks) -> int:
        return marks.up_to if marks.stop_below is None else min(marks.up_to, marks.stop_below - 1)

    async def covers(self, hold: Hold) -> bool:
        """Whether the holder's mark covers the hold: its events up to `holdSeq` are published."""
        here = self.covers_here(hold)
        if here is not None:
            return here
        known = self._read.get(hold.holder)
        if known is not None and (known[0] >= hold.number or time.monotonic() - known[1] < timing.MARK_READ_AGAIN):
            return known[0] >= hold.number
        entity = await self.tables.get(MARKS_TABLE, hold.holder, MARK_ROW)
        up_to = int(entity.data.get("upTo", 0)) if entity is not None else 0
        self._read.pop(hold.holder, None)
        self._read[hold.holder] = (max(up_to, known[0] if known else 0), time.monotonic())
        while len(self._read) > KNOWN_MARKS:
            del self._read[next(iter(self._read))]
        return up_to >= hold.number

    def _schedule(self, marks: _Marks) -> None:
        if not marks.writing and self._coverable(marks) > marks.written:
            marks.writing = True
            self.background.start(self._write(marks))

    async def _write(self, marks: _Marks) -> None:
        """Write the mark, at most once per `interval`, until it is as far as the holds finished so far."""
        try:
            while (up_to := self._coverable(marks)) > marks.written:
                wait = self._last_write + self.interval - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                    up_to = self._coverable(marks)
                self._last_write = time.monotonic()
                try:
                    await self.tables.upsert(
                        MARKS_TABLE, Entity(marks.holder, MARK_ROW, {"upTo": up_to, "at": timeutil.iso(timeutil.now())})
                    )
                except Exception:  # readers wait for the lease, as without the mark; tried again later
                    log.warning(
                        "writing the publication mark failed",
                        exc_info=True,
                        extra=fields(event="publication-mark-failed"),
                    )
                    return
                marks.wrote(up_to)
        finally:
            marks.writing = False
            if marks is not self._current and self._all_written(marks):
                self._replaced.pop(marks.holder, None)

    @staticmethod
    def _all_written(marks: _Marks) -> bool:
        """A replaced id's mark is as far as it will ever go."""
        return marks.stop_below is not None and marks.written >= marks.stop_below - 1
