"""While the event bus refuses: dispatch requests parked where no trigger counts them, a few let through to probe.

Why: a request whose events the bus refused is put back after a growing delay (Fallbacks.retry_later, up to
QUEUE_EVENT_RETRY_MAX_DELAY). In the triggered `event-dispatch` queue a delayed message counts for Flex's scaler as
a visible one (shared/domain/parking.py): a 5-minute broker outage with 2,000 tasks flowing held 13,094 requests
there, for which the scaler model voted 273 instances, each failing to publish.

So from its fourth retry (`PARK_AFTER`) a refused dispatch goes to `event-dispatch-parked`, which no trigger
watches, visible when due; the mover (the `move_due_checks` timer, QUEUE_PARK_SCHEDULE) brings what shows there to
`event-dispatch`: all of it while the bus accepts, `PROBES` per parked queue and tick while it refuses (they find
out when it accepts again). Whether it refuses is two rows every process shares (`BusMarks`, table `EventBus`): the
last time a process saw the bus refuse, and the last time one saw it accept after a refusal (one partition, read in
one query); each process writes each at most once per `MARK_EVERY` seconds. The reconciler announces no undispatched
stream while the bus refuses: the parked requests carry them.

Nothing is lost by parking: a parked request is the same message, moved when it shows (a mover that dies between
its put and its delete leaves the parked one to show again and be moved twice, which its dispatch takes as any
duplicate). A rollback to 0.2.0, which does not read the parked queue, ends with `return-checks`, which brings them
back (`return_all`); left there, 0.2.0's reconciler announces their streams after QUEUE_RECONCILE_GRACE.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from shared import timeutil
from shared.logs import fields
from shared.outbox.rows import DISPATCH_QUEUE
from shared.storage.base import Entity, QueueMessage, QueueStore, TableStore
from shared.storage.batches import RECEIVE_BATCH, batches, until_empty
from shared.storage.sharded import shard_name, split_shard

log = logging.getLogger("queue.events")

BUS_TABLE = "EventBus"
BUS_PARTITION = "bus"
REFUSED_ROW, ACCEPTED_ROW = "refused", "accepted"
MARK_ROWS = 2  # the partition's rows: one read of it takes both
MARK_EVERY = 10.0  # seconds between two writes of one row by one process (on its clock)
READ_EVERY = 5.0  # seconds a process keeps what it read of the rows
# A refusal this old, with none since, no longer counts: every dispatch that the bus refuses writes one anew (at
# most every MARK_EVERY s), so an outage keeps it fresh; a bus that came back and that nobody has tried since is
# taken as accepting.
REFUSAL_LASTS = dt.timedelta(seconds=120)
PARK_AFTER = 3  # retries of a refused dispatch from the triggered queue (after 1, 2, 4 s) before the next are parked
PROBES = 8  # parked requests one tick brings back per parked queue while the bus refuses
MOVES_PER_TICK = 300  # receives one tick makes of one parked queue at most (9,600 requests)


class BusMarks:
    """What the processes saw of the bus lately: shared through two rows of `EventBus`."""

    def __init__(self, tables: TableStore, clock: Callable[[], dt.datetime] = timeutil.now) -> None:
        self.tables, self.clock = tables, clock
        self._written: dict[str, dt.datetime] = {}  # row -> when this process last wrote it
        self._refused_here = False  # this process saw a refusal it has not seen an acceptance after
        self._read: tuple[dt.datetime, bool] | None = None  # (when, refusing) as last read here

    async def refused(self) -> None:
        """The bus refused an event of this process's."""
        self._refused_here = True
        self._read = (self.clock(), True)
        await self._mark(REFUSED_ROW)

    async def accepted(self, *, after_parking: bool = False) -> None:
        """The bus took an event of this process's: marked when this process saw it refuse before, or when the
        event was a parked request's (a probe)."""
        if not (self._refused_here or after_parking):
            return
        self._refused_here = False
        self._read = (self.clock(), False)
        await self._mark(ACCEPTED_ROW)

    async def _mark(self, row: str) -> None:
        now = self.clock()
        last = self._written.get(row)
        if last is not None and now - last < dt.timedelta(seconds=MARK_EVERY):
            return
        self._written[row] = now
        try:
            await self.tables.upsert(BUS_TABLE, Entity(BUS_PARTITION, row, {"at": timeutil.iso(now)}))
        except Exception:  # a hint for the mover and the reconciler: the next refusal or acceptance writes it
            self._written.pop(row, None)
            log.info("the bus mark was not written", exc_info=True, extra=fields(event="bus-mark-failed"))

    async def refusing(self) -> bool:
        """Whether the bus refuses, as the processes saw it last: a refusal within REFUSAL_LASTS and no
        acceptance after it. Read at most once per READ_EVERY seconds here."""
        now = self.clock()
        if self._read is not None and now - self._read[0] < dt.timedelta(seconds=READ_EVERY):
            return self._read[1]
        page = await self.tables.query(BUS_TABLE, "PartitionKey eq @pk", {"pk": BUS_PARTITION}, limit=MARK_ROWS)
        marks = {row.row_key: timeutil.parse(row.data["at"]) for row in page.entities}
        refused, accepted = marks.get(REFUSED_ROW), marks.get(ACCEPTED_ROW)
        refusing = refused is not None and refused > now - REFUSAL_LASTS and (accepted is None or refused > accepted)
        self._read = (now, refusing)
        return refusing


@dataclass
class MovedRequests:
    """What one tick did with the parked dispatch requests."""

    moved: int = 0
    receives: int = 0


class ParkedDispatch:
    """The parked dispatch queues, and the mover that brings their requests back to `event-dispatch`."""

    def __init__(self, queues: QueueStore, parked_queues: Callable[[], list[str]]) -> None:
        self.queues = queues
        self.parked_queues = parked_queues  # every shard of `event-dispatch-parked`

    async def move(self, *, refusing: bool) -> MovedRequests:
        """Bring what shows in the parked queues to `event-dispatch`: PROBES per queue while the bus refuses."""
        done = MovedRequests()
        for outcome in await asyncio.gather(*(self._move_from(q, refusing) for q in self.parked_queues())):
            done.moved += outcome.moved
            done.receives += outcome.receives
        if done.moved:
            log.info(
                "parked dispatch requests: %d brought back%s",
                done.moved,
                " to probe the bus" if refusing else "",
                extra=fields(event="dispatch-probed" if refusing else "dispatch-unparked", moved=done.moved),
            )
        return done

    async def return_all(self, within: float, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> int:
        """Bring every parked request back as it shows, until none is left or `within` seconds have passed (one
        shows within QUEUE_EVENT_RETRY_MAX_DELAY): how many. The end of a rollback to a release that does not read
        the parked queue (`python -m local_host return-checks`)."""

        async def one_pass() -> int:
            return (await self.move(refusing=False)).moved

        return await until_empty(one_pass, self.queues, self.parked_queues(), within, sleep)

    async def _move_from(self, parked: str, refusing: bool) -> MovedRequests:
        """What shows in one parked queue, to the same shard of `event-dispatch`: one receive of PROBES while the
        bus refuses, else batches until none shows or MOVES_PER_TICK receives were made."""
        target = shard_name(DISPATCH_QUEUE, split_shard(parked)[1])
        done = MovedRequests()
        receiving = batches(
            self.queues,
            parked,
            max_receives=1 if refusing else MOVES_PER_TICK,
            take=PROBES if refusing else RECEIVE_BATCH,
        )
        async for batch in receiving:
            done.receives += 1
            await asyncio.gather(*(self._move_one(parked, target, m) for m in batch))
            done.moved += len(batch)
        return done

    async def _move_one(self, parked: str, target: str, message: QueueMessage) -> None:
        await self.queues.put(target, message.content)
        await self.queues.delete(parked, message)
