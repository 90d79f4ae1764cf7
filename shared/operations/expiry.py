"""Expiry timers: tasks, artifacts, objects and worker information whose `expires` is more than QUEUE_EXPIRY_DELAY
ago are deleted, a batch at a time within a time budget.

Tasks, artifacts and objects are found through their expiry indexes (shared/domain/expiry.py: an entry per thing, by the
hour it expires), written before the thing itself (a task's when its deadline is checked, its deadline row standing
in until then: shared/domain/deadlines.py); each entry is a hint, and the thing is re-read before it is
deleted, so one whose expiry was extended, or that has not expired, is kept. An artifact's or object's blob goes
before its row, so a row never names a deleted blob. A task's row goes last and only as it was read: a change
written meanwhile (a deadline resolved late) has it read again, and the event rows that change added go too.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from collections.abc import Awaitable, Callable

from shared.domain.artifacts import (
    ARTIFACT_ROW,
    ARTIFACT_ROW_END,
    Artifact,
    parse_index_key,
    row_key,
)
from shared.domain.objects import OBJECT_ROW, OBJECTS_TABLE, StoredObject
from shared.domain.tasks import TASKS_TABLE, task_row
from shared.logs import fields
from shared.operations.writes.repository import TaskRepository
from shared.outbox.rows import Stream
from shared.storage.base import delete_all

log = logging.getLogger("queue")

EXPIRE_ATTEMPTS = 3  # reads of a task that keeps changing while it is deleted, before it is left for the next run
# TaskExpiry's RowKey for a group left empty before it expired (a group outlives its tasks); no taskId holds `:`.
GROUP_KEY = "group:"


class Expiry:
    def __init__(self, tasks: TaskRepository) -> None:
        self.tasks = tasks
        self.stores = tasks.stores

    async def _drain(
        self,
        due: Callable[[dt.datetime, int], Awaitable[list[tuple[str, str]]]],
        batch: int,
        budget_seconds: float,
        expire: Callable[[str, str, dt.datetime], Awaitable[None]],
    ) -> int:
        """Hand each entry (partition, key) that `due(cutoff, batch)` finds to `expire(partition, key, cutoff)`,
        `batch` at a time (at most 16 at once) until none is left or the time budget is spent; how many entries
        were handled."""
        await self.stores.ready()
        cutoff = self.stores.now() - dt.timedelta(seconds=self.stores.settings.expiry_delay)
        give_up = time.monotonic() + budget_seconds
        limit = asyncio.Semaphore(16)
        handled = 0

        async def one(hour: str, key: str) -> None:
            async with limit:
                await expire(hour, key, cutoff)

        while time.monotonic() < give_up:
            found = await due(cutoff, batch)
            if not found:
                break
            await asyncio.gather(*(one(hour, key) for hour, key in found))
            handled += len(found)
        return handled

    async def expire_tasks(self, *, batch: int = 200, budget_seconds: float = 60) -> int:
        """Delete expired tasks with their artifacts, events, dependency and deadline rows and group membership
        (and the group once it is empty and expired)."""
        stores = self.stores
        started = time.monotonic()
        expired = await self._drain(stores.deadlines.expired, batch, budget_seconds, self._expire_unentered)
        expired += await self._drain(
            stores.expiry.due, batch, budget_seconds - (time.monotonic() - started), self._expire_entry
        )
        if expired:
            log.info("expired %d tasks", expired, extra=fields(event="tasks-expired"))
        await stores.groups.recent.forget_before(stores.now())  # the recent groups' days no longer listed
        return expired

    async def _expire_entry(self, hour: str, task_id: str, cutoff: dt.datetime) -> None:
        """An expiry index entry come due: a group's, or a task's (removed once the task is gone)."""
        if task_id.startswith(GROUP_KEY):
            await self._expire_group(task_id[len(GROUP_KEY) :], cutoff, hour)
        elif await self._expire_task(task_id, cutoff):
            await self.stores.expiry.remove(hour, task_id)

    async def _expire_unentered(self, bucket: str, task_id: str, cutoff: dt.datetime) -> None:
        """A task enters the expiry index when its deadline is checked; its deadline row, which carries its
        `expires`, stands in while it has not (the bucket's message was lost, or has not come yet)."""
        await self._expire_task(task_id, cutoff, bucket)

    async def _expire_group(self, group_id: str, cutoff: dt.datetime, hour: str | None) -> None:
        """The group of a task just deleted (`hour` None), or one whose entry came due: deleted if empty and
        expired; empty and not yet expired, an entry of its own brings it back when it is."""
        stores = self.stores
        later = await stores.groups.delete_if_empty(group_id, cutoff)
        if later is not None:
            await stores.expiry.add(GROUP_KEY + group_id, later)
        if hour is not None and (later is None or stores.expiry.partition(GROUP_KEY + group_id, later) != hour):
            await stores.expiry.remove(hour, GROUP_KEY + group_id)

    async def _expire_task(self, task_id: str, cutoff: dt.datetime, deadline_bucket: str | None = None) -> bool:
        """Delete the task and what it has; False when it kept changing (left for the next run).
        `deadline_bucket`: where the caller read its deadline row, deleted there when no task is left (a task's
        own goes by its deadline, in the bucket this host's settings give, as always)."""
        stores = self.stores
        for _ in range(EXPIRE_ATTEMPTS):
            task = await self.tasks.get(task_id)
            self.tasks.known.forget(task_id)
            if task is None:
                if deadline_bucket is not None:
                    await stores.deadlines.remove(deadline_bucket, task_id)
                return True
            await self.forget_artifacts(task_id)
            await stores.queue_runs.run_resolved(task.task_queue_id, task_id)
            await stores.events.forget(Stream(TASKS_TABLE, task_id), task.event_seq)
            await stores.deps.forget_task(task_id)
            group_id = task.definition["taskGroupId"]
            await stores.groups.forget_member(group_id, task_id)
            await stores.deadlines.forget(task_id, task.deadline)
            # The row as read: a change written meanwhile (a deadline resolved late) wrote an event row after
            # those just deleted, which would outlive the task; the task is read again and its rows go too.
            if await stores.tables.delete(TASKS_TABLE, task_id, task_row(task_id), etag=task.etag):
                await self._expire_group(group_id, cutoff, None)
                return True
        log.warning("task changed while expiring; kept for the next run", extra=fields(taskId=task_id))
        return False  # its index entry stays

    async def expire_artifacts(self, *, batch: int = 100, budget_seconds: float = 60) -> int:
        """Delete expired artifacts: the blob first, then the row (if unchanged since read)."""
        stores = self.stores
        deleted = 0

        async def expire(hour: str, key: str, cutoff: dt.datetime) -> None:
            nonlocal deleted
            task_id, row = parse_index_key(key)
            entity = await stores.tables.get(TASKS_TABLE, task_id, row)
            artifact = Artifact.from_entity(entity) if entity is not None else None
            # Gone already, or its expiry was extended since this entry (the later one is indexed too).
            if artifact is not None and artifact.expires < cutoff:
                if not await self._delete_artifact(artifact):
                    log.warning("artifact %s changed while expiring; kept", artifact.name, extra=fields(taskId=task_id))
                    return  # looked at again on the next run
                deleted += 1
            await stores.artifact_expiry.remove(hour, key)

        await self._drain(stores.artifact_expiry.due, batch, budget_seconds, expire)
        if deleted:
            log.info("expired %d artifacts", deleted, extra=fields(event="artifacts-expired"))
        return deleted

    async def _delete_artifact(self, artifact: Artifact) -> bool:
        """The blob first, then the row (if unchanged since read): a row never points to a deleted blob unless its
        expiry was extended in between, which the ETag catches."""
        if artifact.blob is not None:
            await self._blobs_delete(artifact.blob)
        return await self.stores.tables.delete(
            TASKS_TABLE, artifact.task_id, row_key(artifact.run_id, artifact.name), etag=artifact.etag
        )

    async def forget_artifacts(self, task_id: str) -> None:
        """Delete every artifact of an expiring task (all expired: none may outlive its task), blobs first."""
        tables = self.stores.tables
        continuation: str | None = None
        while True:
            page = await tables.query(
                TASKS_TABLE,
                "PartitionKey eq @pk and RowKey ge @lo and RowKey lt @hi",
                {"pk": task_id, "lo": ARTIFACT_ROW, "hi": ARTIFACT_ROW_END},
                limit=100,
                continuation=continuation,
            )
            artifacts = [Artifact.from_entity(e) for e in page.entities]
            await asyncio.gather(*(self._blobs_delete(a.blob) for a in artifacts if a.blob is not None))
            await delete_all(tables, TASKS_TABLE, [(e.partition_key, e.row_key) for e in page.entities])
            continuation = page.continuation
            if continuation is None:
                return

    async def _blobs_delete(self, blob: str) -> None:
        if self.stores.blobs is not None:
            await self.stores.blobs.delete(self.stores.settings.artifact_container, blob)

    async def expire_objects(self, *, batch: int = 100, budget_seconds: float = 60) -> int:
        """Delete expired objects of the Object service: the blob (with its snapshots) first, then the row (if
        unchanged since read). An `object` artifact's object expires when the artifact does."""
        stores = self.stores
        deleted = 0

        async def expire(hour: str, key: str, cutoff: dt.datetime) -> None:
            nonlocal deleted
            entity = await stores.tables.get(OBJECTS_TABLE, key, OBJECT_ROW)
            stored = StoredObject.from_entity(entity) if entity is not None else None
            if stored is not None and stored.expires < cutoff:
                await self._blobs_delete(stored.blob)
                if not await stores.tables.delete(OBJECTS_TABLE, key, OBJECT_ROW, etag=stored.etag):
                    log.warning(
                        "object %s changed while expiring; kept",
                        stored.name,
                        extra=fields(event="object-expiry", object=stored.name),
                    )
                    return
                deleted += 1
            await stores.object_expiry.remove(hour, key)

        await self._drain(stores.object_expiry.due, batch, budget_seconds, expire)
        if deleted:
            log.info("expired %d objects", deleted, extra=fields(event="objects-expired"))
        return deleted

    async def expire_worker_info(self) -> int:
        await self.stores.ready()
        cutoff = self.stores.now() - dt.timedelta(seconds=self.stores.settings.expiry_delay)
        deleted = await self.stores.workers.expire(cutoff)
        if deleted:
            log.info("expired %d worker info entries", deleted, extra=fields(event="worker-info-expired"))
        return deleted
