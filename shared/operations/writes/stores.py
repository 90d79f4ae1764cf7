"""What every operation works on: the settings and the clock, the table, queue and blob stores, and the domain's
stores over them (events, groups, dependencies, deadlines, expiry, worker information).

Built once per process (shared/runtime.py) and shared by the operations, so that what one process remembers (a
group row, a marker it wrote, a pending queue it found empty) serves all of them.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from shared import credentials, timeutil
from shared.bounded import Bounded
from shared.domain.artifacts import ARTIFACT_EXPIRY_TABLE
from shared.domain.deadlines import DEADLINES_TABLE
from shared.domain.dependencies import DEPENDENCIES_TABLE, REQUIREMENTS_TABLE
from shared.domain.expiry import TASK_EXPIRY_TABLE
from shared.domain.index import INDEX_TABLE
from shared.domain.messages import FIXED_QUEUES, Shards, pending_queues
from shared.domain.objects import OBJECT_EXPIRY_TABLE, OBJECTS_TABLE
from shared.domain.purges import PURGE_REQUESTS_TABLE
from shared.domain.queue_runs import TASK_QUEUE_RUNS_TABLE
from shared.domain.recent_groups import RECENT_GROUPS_TABLE
from shared.domain.tasks import TASKS_TABLE
from shared.domain.workers import WORKER_INFO_TABLE
from shared.operations.writes.group_store import TaskGroupStore
from shared.operations.writes.receiving import PendingWakeups, SharedReceives
from shared.outbox.inflight import Background
from shared.outbox.log import EventLog
from shared.outbox.marks import MARKS_TABLE
from shared.outbox.outage import BUS_TABLE
from shared.outbox.rows import DISPATCH_PARKED_QUEUE, DISPATCH_QUEUE
from shared.settings import Settings
from shared.storage.base import BlobStore, QueueStore, TableStore, all_at_once
from shared.stores.deadlines import DeadlineIndex
from shared.stores.dependencies import DependencyStore
from shared.stores.expiry import ExpiryIndex
from shared.stores.parking import CheckQueues
from shared.stores.queue_runs import TaskQueueRuns
from shared.stores.workers import WorkerInfo

FILLED_REMEMBERED = 10_000  # pending queues whose last hint put here is remembered
TABLES = (
    TASKS_TABLE,
    REQUIREMENTS_TABLE,
    DEPENDENCIES_TABLE,
    TASK_EXPIRY_TABLE,
    ARTIFACT_EXPIRY_TABLE,
    WORKER_INFO_TABLE,
    TASK_QUEUE_RUNS_TABLE,
    DEADLINES_TABLE,
    OBJECTS_TABLE,
    OBJECT_EXPIRY_TABLE,
    MARKS_TABLE,
    BUS_TABLE,
    INDEX_TABLE,
    RECENT_GROUPS_TABLE,
    PURGE_REQUESTS_TABLE,
)
Clock = Callable[[], dt.datetime]


class EmptyPendingQueues:
    """Pending queues this process found empty, and until when claimWork skips them (monotonic time). Most task
    queues use one or two of the seven priorities, and each receive is a storage call (on Azurite a costly one):
    a queue found empty is skipped for `pending_empty_ttl`; a hint put by this process clears that at once, one
    put by another process waits at most that long."""

    def __init__(self, ttl: float, ticks: Callable[[], float] = time.monotonic) -> None:
        self.ttl = ttl
        self.ticks = ticks  # seconds, only ever growing (time.monotonic; a test's own clock)
        self.wakeups = PendingWakeups()  # claimWork calls waiting for a run this process makes pending
        # Each map at most FILLED_REMEMBERED pending queues (the least recently touched are forgotten, which costs
        # at most a receive that could have been skipped).
        self._until: Bounded[str, float] = Bounded(FILLED_REMEMBERED)
        self._hinted: Bounded[str, None] = Bounded(FILLED_REMEMBERED)  # queues whose last receive here got hints,
        # or this process put one on
        self._hidden: Bounded[str, float] = Bounded(FILLED_REMEMBERED)  # queue -> until when hints a lost receive
        # took stay hidden
        self._filled: Bounded[str, float] = Bounded(FILLED_REMEMBERED)  # queue -> when this process last put a
        # hint on it

    def lost(self, queue: str, hidden_for: float) -> None:
        """A receive from `queue` lost its answer: the hints it took are hidden for `hidden_for` s, and claimWork
        looks for their runs in the task queue's index meanwhile."""
        self._hidden.put(queue, self.ticks() + hidden_for)
        self._until.pop(queue)

    def hides(self, queue: str) -> bool:
        until = self._hidden.peek(queue)
        if until is not None and until <= self.ticks():
            self._hidden.pop(queue)
            return False
        return until is not None

    def none_hidden(self, queues: list[str]) -> None:
        """The index has no pending run left for these queues: nothing they hide is still wanted."""
        for queue in queues:
            self._hidden.pop(queue)

    def skipped(self, queue: str) -> bool:
        return (self._until.peek(queue) or 0.0) > self.ticks()

    def may_hold_hints(self, queue: str) -> bool:
        """Whether the last receive of `queue` here got hints, or this process put one on it since. claimWork
        receives the queues that are probably empty (found so, or never received here: most task queues use one
        or two of the seven priorities) together with the next one, in one round trip."""
        return queue in self._hinted

    def _hints_seen(self, queue: str, seen: bool) -> None:
        self._hinted.pop(queue)  # to the end when seen: the oldest is dropped first
        if seen:
            self._hinted.put(queue, None)

    def received(self, queue: str, count: int, sent_at: float | None = None) -> None:
        """A receive sent at `sent_at` (monotonic; now if not known) got `count` messages. Found empty, the queue
        is skipped for the TTL, unless this process put a hint on it since that receive was sent."""
        now = self.ticks()
        filled = self._filled.peek(queue)
        filled_at = -1.0 if filled is None else filled
        self._hints_seen(queue, count > 0 or filled_at >= (now if sent_at is None else sent_at))
        if count:
            self._until.pop(queue)
        elif self.ttl > 0 and filled_at < (now if sent_at is None else sent_at):
            self._until.put(queue, now + self.ttl)

    def filled(self, queue: str) -> None:
        """This process put a hint on `queue`: it is not empty any more, as far as this process knows."""
        self._until.pop(queue)
        self._hints_seen(queue, True)
        self._filled.put(queue, self.ticks())  # to the end: the oldest is dropped first


@dataclass
class Stores:
    settings: Settings
    tables: TableStore
    queues: QueueStore
    blobs: BlobStore | None
    clock: Clock
    events: EventLog
    groups: TaskGroupStore
    deps: DependencyStore
    expiry: ExpiryIndex  # tasks
    artifact_expiry: ExpiryIndex
    object_expiry: ExpiryIndex
    deadlines: DeadlineIndex
    workers: WorkerInfo
    queue_runs: TaskQueueRuns  # the pending / claimed index of each task queue
    empty_queues: EmptyPendingQueues
    receives: SharedReceives
    background: Background  # work after an answer: cleanups, the writer's publishing
    shards: Shards  # how the check and pending queues and the hot partitions are split
    check_queues: CheckQueues  # where a delayed check waits: parked, or in its trigger's queue
    _ready: bool = field(default=False, init=False)
    _readying: asyncio.Future[None] | None = field(default=None, init=False)
    _pending_queues_ready: Bounded[str, None] = field(default_factory=lambda: Bounded(FILLED_REMEMBERED), init=False)

    @classmethod
    def create(
        cls,
        settings: Settings,
        tables: TableStore,
        queues: QueueStore,
        blobs: BlobStore | None = None,
        clock: Clock = timeutil.now,
        ticks: Callable[[], float] = time.monotonic,
    ) -> Stores:
        background = Background()
        shards = Shards(settings.check_shards, settings.pending_shards)
        events = EventLog(
            tables,
            queues,
            dispatching=settings.event_bus != "none",
            lease_seconds=settings.event_lease,
            retry_delay=settings.hint_retry_delay,
            grace_seconds=settings.hint_grace,
            max_backoff=settings.event_retry_max_delay,
            clock=clock,
            background=background,
            mark_interval=settings.event_mark_interval,
            dispatch_queue=lambda key: shards.check_queue(DISPATCH_QUEUE, key),
            parked_queue=lambda key: shards.check_queue(DISPATCH_PARKED_QUEUE, key),
            parked_queues=lambda: shards.check_queues(DISPATCH_PARKED_QUEUE),
        )
        expiry = ExpiryIndex(tables, shards=shards)
        check_queues = CheckQueues(queues, shards, settings.park_lead, clock)
        return cls(
            settings,
            tables,
            queues,
            blobs,
            clock,
            events,
            TaskGroupStore(tables, events),
            DependencyStore(tables),
            expiry,
            ExpiryIndex(tables, ARTIFACT_EXPIRY_TABLE, shards),
            ExpiryIndex(tables, OBJECT_EXPIRY_TABLE, shards),
            DeadlineIndex(tables, check_queues, shards, settings.deadline_delay, expiry, clock),
            WorkerInfo(tables, settings, clock),
            TaskQueueRuns(tables, shards),
            EmptyPendingQueues(settings.pending_empty_ttl, ticks),
            SharedReceives(queues, ticks),
            background,
            shards,
            check_queues,
        )

    def credentials(self, client_id: str, scopes: list[str], expiry: dt.datetime) -> dict[str, str]:
        """Named temporary credentials signed by the root client, from now until `expiry` (Taskcluster's)."""
        return credentials.issue(
            issuer=self.settings.root_client_id,
            issuer_access_token=self.settings.root_access_token,
            client_id=client_id,
            scopes=scopes,
            start=self.clock(),
            expiry=expiry,
        )

    def now(self) -> dt.datetime:
        """The time, to the millisecond (what times are written with: a time kept equals the same time read)."""
        return timeutil.to_ms(self.clock())

    async def ready(self) -> None:
        """Create the tables and fixed queues, all at once (once per process; cheap when they exist). Callers that
        come meanwhile wait for the same work and go on together."""
        if self._ready:
            return
        if self._readying is None:
            self._readying = asyncio.ensure_future(self._make_ready())
        readying = self._readying
        try:
            await asyncio.shield(readying)
        except BaseException:
            if readying.done() and self._readying is readying:
                self._readying = None  # failed: the next caller tries again
            raise

    async def _make_ready(self) -> None:
        await all_at_once(
            [
                self.tables.ensure_tables(list(TABLES)),
                self.queues.ensure_queues(
                    [
                        name
                        for base in (*FIXED_QUEUES, DISPATCH_QUEUE, DISPATCH_PARKED_QUEUE)
                        for name in self.shards.check_queues(base)
                    ]
                ),
                *([self.blobs.ensure_container(self.settings.artifact_container)] if self.blobs is not None else []),
            ]
        )
        self._ready = True

    async def ensure_pending_queues(self, task_queue_id: str) -> None:
        """Create the task queue's pending queues (once per process), for workers that poll them directly."""
        if task_queue_id not in self._pending_queues_ready:
            await self.queues.ensure_queues(pending_queues(task_queue_id, self.shards.pending))
            self._pending_queues_ready.put(task_queue_id, None)

    def afterwards(self, cleanup: Coroutine[Any, Any, None]) -> None:
        """Run a best-effort cleanup of a change already written (a consumed hint's or a spent check's delete, an
        index row's) without making the request wait for it: the answer goes out a storage round trip sooner.
        What it would have tidied is harmless if it never runs (a stale message's handler finds nothing to do;
        the reconciler drops index rows that no longer match their task)."""
        self.background.start(cleanup)

    async def settled(self) -> None:
        """Wait for the work started after answers so far (tests; a process about to stop)."""
        await self.background.settled()

    async def close(self) -> None:
        await self.settled()
        await self.tables.close()
        await self.queues.close()
        if self.blobs is not None:
            await self.blobs.close()
