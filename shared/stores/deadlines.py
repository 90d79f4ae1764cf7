"""The deadline index's store: deadline buckets of a second, their rows and their messages (rows:
shared/domain/deadlines.py)."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Awaitable, Callable

from shared import timeutil, timing
from shared.bounded import Bounded
from shared.domain.deadlines import DEADLINES_TABLE, DeadlineBucket
from shared.domain.messages import DEADLINE_QUEUE, Shards, bucket_of, bucket_time
from shared.storage.base import Entity, TableStore, delete_all
from shared.storage.grouped import GroupedUpserts
from shared.stores.expiry import ExpiryIndex
from shared.stores.parking import CheckQueues

ANNOUNCED_KEPT = 10_000  # deadline buckets whose message this process remembers having put

PAGE = 100

CONCURRENCY = 16

# The outcomes of a task's check (shared/operations/checks.py) after which it is entered in the expiry index: all
# but "stale" (another task of that id, whose own row enters it). A task not found ("task-gone") is entered too:
# its createTask may still be under way (held up past the deadline), and the task, written after the check, would
# otherwise never expire; where none comes (a refused createTask), the expiry timer drops the entry.
EXPIRY_AFTER = frozenset({"exceeded", "already-resolved", "early", "task-gone"})

PAGES_READ = 50  # pages one look for rows past their `expires` reads at most (see `expired`)


class DeadlineIndex:
    def __init__(
        self,
        tables: TableStore,
        checks: CheckQueues,
        shards: Shards,
        delay_seconds: float,
        expiry: ExpiryIndex,
        clock: Callable[[], dt.datetime] = timeutil.now,
    ) -> None:
        self.tables, self.checks, self.shards, self.expiry = tables, checks, shards, expiry
        self.delay = dt.timedelta(seconds=delay_seconds)
        self.clock = clock
        self._rows = GroupedUpserts(tables)  # a second's rows, a transaction for many requests
        # bucket -> the put of its message by this process (shared by concurrent callers), and the bucket's time.
        # At most ANNOUNCED_KEPT buckets: one forgotten costs a second message for its bucket, which is harmless.
        self._announced: Bounded[str, tuple[asyncio.Future[None], dt.datetime]] = Bounded(ANNOUNCED_KEPT)
        self._puts = 0
        self._expired_from: str | None = None  # where the last look for expired rows, finding none, stopped

    def bucket(self, task_id: str, deadline: dt.datetime) -> str:
        """The task's bucket: the second its deadline comes due, salted by taskId when QUEUE_PENDING_SHARDS
        splits each second's partition (a graph's tasks share their deadline)."""
        return self.shards.salted(bucket_of(deadline + self.delay), task_id)

    async def add(self, task_id: str, deadline: dt.datetime, expires: dt.datetime) -> None:
        """Before the task is written: its row (with its `expires`, entered in the expiry index at the deadline), and
        its bucket's message (unless this process queued it)."""
        bucket = self.bucket(task_id, deadline)
        await asyncio.gather(
            self._rows.upsert(
                DEADLINES_TABLE,
                Entity(bucket, task_id, {"deadline": timeutil.iso(deadline), "expires": timeutil.iso(expires)}),
            ),
            self._announce(bucket),
        )

    async def expired(self, cutoff: dt.datetime, limit: int) -> list[tuple[str, str]]:
        """Up to `limit` (bucket, taskId) of rows whose `expires` is before `cutoff`: rows a lost bucket message
        left (or whose check has not come yet), which the expiry timer takes as entries. Only buckets before the
        cut-off's can hold them (`expires` >= `deadline`): on Azure a range of partitions, empty but for such rows.
        Azure ends a query's page at a partition boundary, so a lost bucket whose rows expire later ends one, empty:
        a look reads at most PAGES_READ pages, and one that found nothing there goes on from that point next time
        (from the start once it reached the end), so rows behind many such buckets are still reached."""
        found: list[tuple[str, str]] = []
        token = self._expired_from
        bounds = {"bucket": bucket_of(cutoff + self.delay + dt.timedelta(seconds=1)), "cutoff": timeutil.iso(cutoff)}
        for _ in range(PAGES_READ):
            page = await self.tables.query(
                DEADLINES_TABLE,
                "PartitionKey lt @bucket and expires lt @cutoff",
                bounds,
                limit=limit - len(found),
                continuation=token,
            )
            found += [(e.partition_key, e.row_key) for e in page.entities]
            token = page.continuation
            if token is None or len(found) >= limit:
                break
        self._expired_from = token if not found else None
        return found

    async def remove(self, bucket: str, task_id: str) -> None:
        await self.tables.delete(DEADLINES_TABLE, bucket, task_id, etag="*")

    async def forget(self, task_id: str, deadline: dt.datetime) -> None:
        """Delete a task's row (it is expiring): gone already unless its bucket's message was lost, in which case
        the reconciler resolved the task."""
        await self.remove(self.bucket(task_id, deadline), task_id)

    async def _announce(self, bucket: str) -> None:
        now = self.clock()
        loop = asyncio.get_running_loop()
        known = self._announced.get(bucket)
        if known is not None and known[0].get_loop() is loop:
            if not known[0].done():
                await asyncio.shield(known[0])  # another request's put of it: wait for it (its error is ours)
                return
            if known[1] - now > dt.timedelta(seconds=timing.ANNOUNCE_MARGIN):
                return
        due = bucket_time(bucket)
        put: asyncio.Future[None] = loop.create_future()
        self._announced.put(bucket, (put, due))
        try:
            await self.checks.put(DEADLINE_QUEUE, bucket, DeadlineBucket(bucket).encode(), due)
        except BaseException as exc:
            self._announced.pop(bucket)
            put.set_exception(exc)
            put.exception()  # retrieved: concurrent callers re-raise it, nobody else need
            raise
        put.set_result(None)
        self._puts += 1
        if len(self._announced) > 1000 and self._puts % 500 == 0:  # now and then: the scan costs the whole map
            self._forget_past(now)

    def _forget_past(self, now: dt.datetime) -> None:
        for key, (put, due) in list(self._announced.items()):
            if put.done() and due - now <= dt.timedelta(seconds=timing.ANNOUNCE_MARGIN):
                self._announced.pop(key)

    async def check(self, message: DeadlineBucket, check_task: Callable[[str, dt.datetime], Awaitable[str]]) -> str:
        """The bucket's message came due: `check_task(taskId, deadline)` a page of its tasks (its outcome word),
        enter them in the expiry index, then delete their rows; the next page goes to a new message first. An
        outcome word."""
        now = self.clock()
        if await self.checks.put_back_if_early(
            DEADLINE_QUEUE, message.bucket, message.encode(), bucket_time(message.bucket), now
        ):
            return "early"
        page = await self.tables.query(
            DEADLINES_TABLE,
            "PartitionKey eq @pk",
            {"pk": message.bucket},
            limit=PAGE,
            continuation=message.continuation,
        )
        if page.continuation is not None:
            await self.checks.put(
                DEADLINE_QUEUE, message.bucket, DeadlineBucket(message.bucket, page.continuation).encode(), now
            )
        limit = asyncio.Semaphore(CONCURRENCY)

        async def one(row: Entity) -> str:
            async with limit:
                return await check_task(row.row_key, timeutil.parse(str(row.data["deadline"])))

        results = await asyncio.gather(*(one(row) for row in page.entities), return_exceptions=True)
        checked = [
            (row, result)
            for row, result in zip(page.entities, results, strict=True)
            if not isinstance(result, BaseException)
        ]
        # The tasks checked enter the expiry index before their rows go (a transaction per hour: a page's tasks
        # mostly share one); a row written before rows carried `expires` had its entry written by createTask.
        await self.expiry.add_all(
            [
                (row.row_key, timeutil.parse(str(row.data["expires"])))
                for row, outcome in checked
                if outcome in EXPIRY_AFTER and row.data.get("expires")
            ]
        )
        # The rows of the tasks checked go in one batch; a failed check keeps its row for the message's retry.
        await delete_all(self.tables, DEADLINES_TABLE, [(row.partition_key, row.row_key) for row, _ in checked])
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return f"checked {len(page.entities)}"
