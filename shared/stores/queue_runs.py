"""The task queues' runs store: each task queue's pending and claimed runs, for its counts and the claim index (rows:
shared/domain/queue_runs.py)."""

from __future__ import annotations

import datetime as dt

from shared import timeutil
from shared.domain.messages import Shards, unsalted
from shared.domain.queue_runs import TASK_QUEUE_RUNS_TABLE
from shared.storage.base import Entity, TableStore, each_entity
from shared.storage.grouped import GroupedUpserts
from shared.storage.keys import chain_token, decode_key, encode_key, read_chain_token


class TaskQueueRuns:
    def __init__(self, tables: TableStore, shards: Shards) -> None:
        self.tables, self.shards = tables, shards
        self._rows = GroupedUpserts(tables)  # a task queue's index rows, a transaction for many requests

    def runs_partition(self, task_queue_id: str, task_id: str) -> str:
        """The partition of the task queue's index that holds the task's row: one of QUEUE_PENDING_SHARDS salted
        partitions (a busy task queue writes ~3 rows a task, Azure takes 2,000 a second per partition)."""
        return self.shards.salted(encode_key(task_queue_id), task_id)

    async def run_pending(self, task_queue_id: str, task_id: str, run_id: int, since: dt.datetime) -> None:
        await self._rows.upsert(
            TASK_QUEUE_RUNS_TABLE,
            Entity(
                self.runs_partition(task_queue_id, task_id),
                task_id,
                {"state": "pending", "runId": run_id, "since": timeutil.iso(since)},
            ),
        )

    async def run_claimed(
        self, task_queue_id: str, task_id: str, run_id: int, worker_group: str, worker_id: str, since: dt.datetime
    ) -> None:
        await self._rows.upsert(
            TASK_QUEUE_RUNS_TABLE,
            Entity(
                self.runs_partition(task_queue_id, task_id),
                task_id,
                {
                    "state": "running",
                    "runId": run_id,
                    "since": timeutil.iso(since),
                    "workerGroup": worker_group,
                    "workerId": worker_id,
                },
            ),
        )

    async def run_resolved(self, task_queue_id: str, task_id: str, *, linger: float = 0.0) -> None:
        """The run leaves the index. `linger`: when nobody waits for it, how long the delete may wait for another
        row of the task queue's partition to go with (GroupCommit.add)."""
        await self._rows.delete(
            TASK_QUEUE_RUNS_TABLE, self.runs_partition(task_queue_id, task_id), task_id, linger=linger
        )

    async def runs(
        self, task_queue_id: str, state: str, *, limit: int, continuation: str | None
    ) -> tuple[list[Entity], str | None]:
        """A page of the task queue's runs in `state`, its salted partitions one after another (with one, the
        store's own token; with more, a token naming the partition it goes on in)."""
        partitions = self.shards.salts(encode_key(task_queue_id))
        at, inner = 0, continuation
        if continuation is not None and len(partitions) > 1:
            at, inner = read_chain_token(continuation, len(partitions))
        found: list[Entity] = []
        while True:
            page = await self.tables.query(
                TASK_QUEUE_RUNS_TABLE,
                "PartitionKey eq @pk and state eq @state",
                {"pk": partitions[at], "state": state},
                limit=limit - len(found),
                continuation=inner,
            )
            found.extend(page.entities)
            if page.continuation is not None:
                return found, (page.continuation if len(partitions) == 1 else chain_token(at, page.continuation))
            at, inner = at + 1, None
            if at == len(partitions):
                return found, None
            if len(found) >= limit:
                return found, chain_token(at, None)

    async def runs_since(
        self, cutoff: dt.datetime, *, limit: int, continuation: str | None
    ) -> tuple[list[Entity], str | None]:
        """A page of index rows of every task queue written before `cutoff` (the reconciler's scan)."""
        page = await self.tables.query(
            TASK_QUEUE_RUNS_TABLE,
            "since lt @cutoff",
            {"cutoff": timeutil.iso(cutoff)},
            limit=limit,
            continuation=continuation,
        )
        return page.entities, page.continuation

    async def drop_run(self, row: Entity) -> bool:
        """Delete an index row that no longer matches its task, unless it changed since it was read; False when
        it did, or is gone (also when this process's own tidying, a lingering delete, was about to delete it)."""
        await self._rows.flush(TASK_QUEUE_RUNS_TABLE, row.partition_key)
        return await self.tables.delete(TASK_QUEUE_RUNS_TABLE, row.partition_key, row.row_key, row.etag)

    async def count_runs(self, task_queue_id: str, state: str) -> int:
        """How many of the task queue's runs the index holds in `state` (`pending` or `running`), after the index
        rows this process is still writing there (a resolution's lingering delete) are written."""
        total = 0
        for partition in self.shards.salts(encode_key(task_queue_id)):
            await self._rows.flush(TASK_QUEUE_RUNS_TABLE, partition)
            rows = each_entity(
                self.tables,
                TASK_QUEUE_RUNS_TABLE,
                "PartitionKey eq @pk and state eq @state",
                {"pk": partition, "state": state},
            )
            total += sum([1 async for _ in rows])
        return total

    async def pending_census(self) -> dict[str, tuple[int, dt.datetime | None]]:
        """Pending runs per task queue in the index, and when the oldest of each became pending (the metrics'
        census: every pending row is read, a page of 1,000 at a time)."""
        census: dict[str, tuple[int, dt.datetime | None]] = {}
        async for row in each_entity(self.tables, TASK_QUEUE_RUNS_TABLE, "state eq @state", {"state": "pending"}):
            queue = decode_key(unsalted(row.partition_key))
            count, oldest = census.get(queue, (0, None))
            since = timeutil.parse(str(row.data["since"])) if row.data.get("since") else None
            census[queue] = (count + 1, min(oldest, since) if oldest and since else oldest or since)
        return census
