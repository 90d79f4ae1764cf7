"""The worker information's store: provisioners, task queues and workers seen, their activity and quarantine (rows:
shared/domain/workers.py)."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

from shared import errors, timeutil, timing
from shared.bounded import Bounded
from shared.domain.workers import (
    PROVISIONERS,
    TASK_QUEUES,
    WORKER_INFO_TABLE,
    Provisioner,
    ProvisionerNotFound,
    TaskQueueInfo,
    TaskQueueNotFound,
    Worker,
    WorkerNotFound,
    WorkerQuarantined,
    worker_key,
    workers_partition,
)
from shared.logs import fields
from shared.settings import Settings
from shared.storage.base import Entity, Page, TableStore, all_at_once
from shared.storage.keys import encode_key

log = logging.getLogger("queue.workers")

# The task queues tasks were created for, polled or not (listSeenTaskQueues, this queue's extension): a row each,
# written by createTask at most every ACTIVE_INTERVAL per process, not per task.
TASK_QUEUES_SEEN = "task-queues-seen"

ACTIVE_INTERVAL = dt.timedelta(hours=6)  # lastDateActive of provisioners and task queues: written at most this often

QUEUE_EXPIRY = dt.timedelta(days=5)

WORKER_EXPIRY = dt.timedelta(days=1)

RECENT_TASKS = 20

WORKERS_REMEMBERED = 10_000  # workers (and provisioners, task queues) a process remembers writing or reading

WRITE_ATTEMPTS = 5


class WorkerInfo:
    def __init__(self, tables: TableStore, settings: Settings, clock: Callable[[], dt.datetime]) -> None:
        self.tables, self.settings, self.clock = tables, settings, clock
        # Each map at most WORKERS_REMEMBERED keys (ids of at most 38 characters each), the least recently used
        # forgotten: a throttled write then comes sooner, or a worker's buffered claims miss its recent tasks.
        self._active_written: Bounded[tuple[str, str], float] = Bounded(WORKERS_REMEMBERED)  # (partition, row) ->
        # monotonic time written
        self._buffered: Bounded[tuple[str, str, str], list[dict[str, Any]]] = Bounded(WORKERS_REMEMBERED)  # claims
        # not yet written
        self._worker_written: Bounded[tuple[str, str, str], float] = Bounded(WORKERS_REMEMBERED)
        self._quarantine: Bounded[tuple[str, str, str], tuple[float, dt.datetime | None]] = Bounded(WORKERS_REMEMBERED)

    # --- recording activity (from claims) ---------------------------------------------------------------------

    def claimed(self, task_queue_id: str, worker_group: str, worker_id: str, task_id: str, run_id: int) -> None:
        """Remember a claim for the worker's recent tasks (written by the next `active` that is due)."""
        key = (task_queue_id, worker_group, worker_id)
        buffered = self._buffered.get(key)
        if buffered is None:
            buffered = []
            self._buffered.put(key, buffered)
        buffered.append({"taskId": task_id, "runId": run_id})
        del buffered[:-RECENT_TASKS]

    async def active(self, task_queue_id: str, worker_group: str, worker_id: str) -> None:
        """The worker asked for work: record it (and its buffered claims), and its provisioner and task queue, where
        the throttles allow; the three rows at once."""
        now = self.clock()
        stamp = timeutil.iso(now)
        provisioner_id, worker_type = task_queue_id.split("/", 1)
        queue_expires = timeutil.iso(now + QUEUE_EXPIRY)

        async def seen(partition: str, row: str, data: dict[str, Any]) -> None:
            written = self._active_written.get((partition, row))
            if written is None or time.monotonic() - written > ACTIVE_INTERVAL.total_seconds():
                await self.tables.upsert(
                    WORKER_INFO_TABLE,
                    Entity(
                        partition,
                        row,
                        {
                            **data,
                            "description": "",
                            "stability": "experimental",
                            "expires": queue_expires,
                            "lastDateActive": stamp,
                        },
                    ),
                )
                self._active_written.put((partition, row), time.monotonic())

        await all_at_once(
            [
                seen(PROVISIONERS, provisioner_id, {}),
                seen(
                    TASK_QUEUES,
                    encode_key(task_queue_id),
                    {"taskQueueId": task_queue_id, "provisionerId": provisioner_id, "workerType": worker_type},
                ),
                self._worker_seen(task_queue_id, worker_group, worker_id, now),
            ]
        )

    def task_created_for(self, task_queue_id: str) -> Coroutine[Any, Any, None] | None:
        """A task was created for `task_queue_id`: the write that records it among the task queues seen (its
        `lastTaskCreated`), or None when this process wrote it less than ACTIVE_INTERVAL ago (most tasks)."""
        key = (TASK_QUEUES_SEEN, encode_key(task_queue_id))
        written = self._active_written.get(key)
        if written is not None and time.monotonic() - written <= ACTIVE_INTERVAL.total_seconds():
            return None
        self._active_written.put(key, time.monotonic())  # now: the creations that follow meanwhile write nothing
        return self._write_seen(task_queue_id, key)

    async def _write_seen(self, task_queue_id: str, key: tuple[str, str]) -> None:
        now = self.clock()
        data = {
            "taskQueueId": task_queue_id,
            "lastTaskCreated": timeutil.iso(now),
            "expires": timeutil.iso(now + QUEUE_EXPIRY),
        }
        try:
            await self.tables.upsert(WORKER_INFO_TABLE, Entity(*key, data))
        except Exception:
            self._active_written.pop(key)  # the next creation tries again
            log.warning("could not record task queue %s as seen", task_queue_id, exc_info=True)

    async def list_seen_task_queues(
        self, *, limit: int, continuation: str | None
    ) -> tuple[list[tuple[str, dt.datetime]], str | None]:
        """The task queues tasks were created for: (taskQueueId, lastTaskCreated) each."""
        page = await self._query(TASK_QUEUES_SEEN, limit=limit, continuation=continuation)
        seen = [(str(e.data["taskQueueId"]), timeutil.parse(str(e.data["lastTaskCreated"]))) for e in page.entities]
        return seen, page.continuation

    async def _worker_seen(self, task_queue_id: str, worker_group: str, worker_id: str, now: dt.datetime) -> None:
        key = (task_queue_id, worker_group, worker_id)
        written = self._worker_written.get(key)
        if written is not None and time.monotonic() - written < self.settings.worker_info_interval:
            return
        claims = self._buffered.pop(key) or []
        try:
            await self._write_worker(task_queue_id, worker_group, worker_id, claims, now)
        except Exception:
            self._buffered.put(key, [*claims, *(self._buffered.pop(key) or [])][-RECENT_TASKS:])  # kept for the
            # next attempt
            raise
        self._worker_written.put(key, time.monotonic())

    async def active_best_effort(self, task_queue_id: str, worker_group: str, worker_id: str) -> None:
        """`active`, where the caller has saved something it must still answer with (claims): a failure to
        record the worker is logged, not raised (its buffered claims are kept for the next attempt)."""
        try:
            await self.active(task_queue_id, worker_group, worker_id)
        except Exception:
            log.warning("could not record worker %s/%s as active", worker_group, worker_id, exc_info=True)

    async def _write_worker(
        self, task_queue_id: str, worker_group: str, worker_id: str, claims: list[dict[str, Any]], now: dt.datetime
    ) -> None:
        stamp, expires = timeutil.to_ms(now), timeutil.to_ms(now + WORKER_EXPIRY)
        for _ in range(WRITE_ATTEMPTS):
            worker = await self._worker(task_queue_id, worker_group, worker_id)
            if worker is None:
                worker = Worker(task_queue_id, worker_group, worker_id, stamp, expires, stamp, claims[-RECENT_TASKS:])
                if await self.tables.insert(WORKER_INFO_TABLE, worker.to_entity()) is not None:
                    return
                continue
            worker.recent_tasks = (worker.recent_tasks + claims)[-RECENT_TASKS:]
            worker.last_date_active, worker.expires = stamp, max(worker.expires, expires)
            if await self.tables.replace(WORKER_INFO_TABLE, worker.to_entity()) is not None:
                return
        log.warning(
            "worker info of %s/%s not written: too many concurrent changes",
            worker_group,
            worker_id,
            extra=fields(workerGroup=worker_group, workerId=worker_id),
        )

    async def _worker(self, task_queue_id: str, worker_group: str, worker_id: str) -> Worker | None:
        entity = await self.tables.get(
            WORKER_INFO_TABLE, workers_partition(task_queue_id), worker_key(worker_group, worker_id)
        )
        return Worker.from_entity(entity) if entity is not None else None

    async def quarantined_until(self, task_queue_id: str, worker_group: str, worker_id: str) -> dt.datetime | None:
        """When the worker's quarantine ends, if it is quarantined (read at most every few seconds per process)."""
        key = (task_queue_id, worker_group, worker_id)
        cached = self._quarantine.get(key)
        if cached is None or time.monotonic() - cached[0] > timing.QUARANTINE_CACHE_SECONDS:
            worker = await self._worker(task_queue_id, worker_group, worker_id)
            cached = (time.monotonic(), worker.quarantine_until if worker is not None else None)
            self._quarantine.put(key, cached)
        until = cached[1]
        return until if until is not None and until > self.clock() else None

    async def check_not_quarantined(self, task_queue_id: str, worker_group: str, worker_id: str) -> None:
        until = await self.quarantined_until(task_queue_id, worker_group, worker_id)
        if until is not None:
            raise WorkerQuarantined(workerGroup=worker_group, workerId=worker_id, quarantineUntil=timeutil.iso(until))

    # --- the API ----------------------------------------------------------------------------------------------

    async def _query(
        self,
        partition: str,
        *,
        limit: int,
        continuation: str | None,
        prefix: str = "",
        extra: str = "",
        parameters: dict[str, Any] | None = None,
    ) -> Page:
        flt, params = "PartitionKey eq @pk", {"pk": partition, **(parameters or {})}
        if prefix:
            flt += " and RowKey ge @lo and RowKey lt @hi"
            params.update(lo=prefix, hi=prefix[:-1] + chr(ord(prefix[-1]) + 1))
        return await self.tables.query(WORKER_INFO_TABLE, flt + extra, params, limit=limit, continuation=continuation)

    async def list_provisioners(self, *, limit: int, continuation: str | None) -> tuple[list[Provisioner], str | None]:
        page = await self._query(PROVISIONERS, limit=limit, continuation=continuation)
        return [Provisioner.from_entity(e) for e in page.entities], page.continuation

    async def get_provisioner(self, provisioner_id: str) -> Provisioner:
        entity = await self.tables.get(WORKER_INFO_TABLE, PROVISIONERS, provisioner_id)
        if entity is None:
            raise ProvisionerNotFound(provisionerId=provisioner_id)
        return Provisioner.from_entity(entity)

    async def list_worker_types(
        self, provisioner_id: str, *, limit: int, continuation: str | None
    ) -> tuple[list[TaskQueueInfo], str | None]:
        page = await self._query(
            TASK_QUEUES, limit=limit, continuation=continuation, prefix=encode_key(f"{provisioner_id}/")
        )
        return [TaskQueueInfo.from_entity(e) for e in page.entities], page.continuation

    async def get_task_queue(self, task_queue_id: str) -> TaskQueueInfo:
        entity = await self.tables.get(WORKER_INFO_TABLE, TASK_QUEUES, encode_key(task_queue_id))
        if entity is None:
            raise TaskQueueNotFound(taskQueueId=task_queue_id)
        return TaskQueueInfo.from_entity(entity)

    async def list_task_queues(self, *, limit: int, continuation: str | None) -> tuple[list[TaskQueueInfo], str | None]:
        page = await self._query(TASK_QUEUES, limit=limit, continuation=continuation)
        return [TaskQueueInfo.from_entity(e) for e in page.entities], page.continuation

    async def list_workers(
        self, task_queue_id: str, *, quarantined: bool | None, limit: int, continuation: str | None
    ) -> tuple[list[Worker], str | None]:
        now = timeutil.iso(self.clock())
        extra, params = "", {}
        if quarantined is True:
            extra, params = " and quarantineUntil gt @now", {"now": now}
        elif quarantined is False:
            extra, params = " and quarantineUntil le @now", {"now": now}  # "" (never quarantined) sorts first
        page = await self._query(
            workers_partition(task_queue_id), limit=limit, continuation=continuation, extra=extra, parameters=params
        )
        return [Worker.from_entity(e) for e in page.entities], page.continuation

    async def get_worker(self, task_queue_id: str, worker_group: str, worker_id: str) -> Worker:
        worker = await self._worker(task_queue_id, worker_group, worker_id)
        if worker is None:
            raise WorkerNotFound(workerGroup=worker_group, workerId=worker_id, taskQueueId=task_queue_id)
        return worker

    async def _change_worker(
        self, task_queue_id: str, worker_group: str, worker_id: str, change: Callable[[Worker], None], *, create: bool
    ) -> Worker:
        for _ in range(WRITE_ATTEMPTS):
            worker = await self._worker(task_queue_id, worker_group, worker_id)
            if worker is None:
                if not create:
                    raise WorkerNotFound(workerGroup=worker_group, workerId=worker_id, taskQueueId=task_queue_id)
                now = timeutil.to_ms(self.clock())
                worker = Worker(task_queue_id, worker_group, worker_id, now, now)
                change(worker)
                if await self.tables.insert(WORKER_INFO_TABLE, worker.to_entity()) is not None:
                    return worker
                continue
            change(worker)
            if await self.tables.replace(WORKER_INFO_TABLE, worker.to_entity()) is not None:
                return worker
        raise errors.InternalServerError("The worker's entry kept changing; try again")

    async def quarantine(
        self, task_queue_id: str, worker_group: str, worker_id: str, until: dt.datetime, info: str, client_id: str
    ) -> Worker:
        """quarantineWorker: no work until `until` (a time in the past lifts the quarantine)."""
        stamp = timeutil.iso(self.clock())

        def change(worker: Worker) -> None:
            worker.quarantine_until = until
            worker.quarantine_details = [
                *worker.quarantine_details,
                {
                    "clientId": client_id,
                    "updatedAt": stamp,
                    "quarantineUntil": timeutil.iso(until),
                    "quarantineInfo": info,
                },
            ][-20:]

        worker = await self._change_worker(task_queue_id, worker_group, worker_id, change, create=False)
        self._quarantine.pop((task_queue_id, worker_group, worker_id))
        log.info(
            "worker %s/%s quarantined until %s",
            worker_group,
            worker_id,
            timeutil.iso(until),
            extra=fields(workerGroup=worker_group, workerId=worker_id),
        )
        return worker

    async def declare(self, task_queue_id: str, worker_group: str, worker_id: str, expires: dt.datetime) -> Worker:
        """declareWorker: create or update the worker's entry with this `expires`."""

        def change(worker: Worker) -> None:
            worker.expires = expires

        return await self._change_worker(task_queue_id, worker_group, worker_id, change, create=True)

    # --- expiry -----------------------------------------------------------------------------------------------

    async def expire(self, cutoff: dt.datetime, *, budget_seconds: float = 60) -> int:
        """Delete entries whose `expires` is before `cutoff`; quarantined workers stay while quarantined."""
        give_up = time.monotonic() + budget_seconds
        deleted, continuation = 0, None
        while time.monotonic() < give_up:
            page = await self.tables.query(
                WORKER_INFO_TABLE,
                "expires lt @cutoff",
                {"cutoff": timeutil.iso(cutoff)},
                limit=100,
                continuation=continuation,
            )
            stale = [e for e in page.entities if (e.data.get("quarantineUntil") or "") <= timeutil.iso(cutoff)]
            results = await asyncio.gather(
                *(self.tables.delete(WORKER_INFO_TABLE, e.partition_key, e.row_key, etag=e.etag) for e in stale)
            )
            deleted += sum(results)
            continuation = page.continuation
            if continuation is None:
                break
        return deleted
