"""Task groups in one table partition per group: the group, its members and its unresolved ("active") set.

PartitionKey = taskGroupId, and RowKey
- `group`: schedulerId, expires, sealed
- `m:<taskId>`: a member (for listing), with its expires
- `a:<taskId>`: a member that has not resolved yet; the group is resolved when no such row is left

All three live in one partition, so joining a group is one transaction, and "is anything unresolved?" is a
range query that reads at most one row.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from shared import errors
from shared.storage.base import Entity, Op, TableStore, delete_all

TASK_GROUPS_TABLE = "TaskGroups"
GROUP_ROW = "group"
MEMBER, ACTIVE = "m:", "a:"
# After "m:"/"a:" comes the taskId; ";" sorts right after ":", so [prefix, prefix with ";") spans the rows.
_END = {MEMBER: "m;", ACTIVE: "a;"}
GROUP_CACHE_SECONDS = 1.0  # how long a process trusts a group row it read (sealing shows within this)


class TaskGroupSchedulerConflict(errors.RequestConflict):
    """Task group `{taskGroupId}` belongs to schedulerId `{existing}`; this task has schedulerId `{schedulerId}`"""


class TaskGroupSealed(errors.RequestConflict):
    """Task group `{taskGroupId}` is sealed: no tasks can be added to it"""


class TaskGroupNotFound(errors.ResourceNotFound):
    """Task group `{taskGroupId}` not found"""


@dataclass(frozen=True)
class TaskGroup:
    task_group_id: str
    scheduler_id: str
    expires: str
    sealed: str | None
    etag: str | None = None

    def to_api(self) -> dict[str, Any]:
        out: dict[str, Any] = {"taskGroupId": self.task_group_id, "schedulerId": self.scheduler_id,
                               "expires": self.expires}
        if self.sealed:
            out["sealed"] = self.sealed
        return out

    @classmethod
    def from_entity(cls, entity: Entity) -> TaskGroup:
        return cls(entity.partition_key, entity.data["schedulerId"], entity.data["expires"],
                   entity.data.get("sealed") or None, entity.etag)


class TaskGroupStore:
    def __init__(self, tables: TableStore) -> None:
        self.tables = tables
        self._cache: dict[str, tuple[float, TaskGroup]] = {}

    async def get(self, task_group_id: str, *, cached: bool = False) -> TaskGroup | None:
        if cached:
            hit = self._cache.get(task_group_id)
            if hit is not None and hit[0] > time.monotonic():
                return hit[1]
        entity = await self.tables.get(TASK_GROUPS_TABLE, task_group_id, GROUP_ROW)
        group = TaskGroup.from_entity(entity) if entity is not None else None
        if group is not None:
            self._cache[task_group_id] = (time.monotonic() + GROUP_CACHE_SECONDS, group)
        return group

    async def check_joinable(self, task_group_id: str, scheduler_id: str) -> TaskGroup | None:
        """Refuse a task that may not join: another scheduler's group, or a sealed one."""
        group = await self.get(task_group_id, cached=True)
        if group is not None:
            if group.scheduler_id != scheduler_id:
                raise TaskGroupSchedulerConflict(taskGroupId=task_group_id, existing=group.scheduler_id,
                                                 schedulerId=scheduler_id)
            if group.sealed:
                raise TaskGroupSealed(taskGroupId=task_group_id)
        return group

    async def join(self, task_group_id: str, scheduler_id: str, task_id: str, expires: str) -> None:
        """Add a task to its group (member and active rows, and the group row when new or its expiry must
        grow), in one transaction; re-checked and retried when the group changed meanwhile."""
        rows = [Op("upsert", Entity(task_group_id, MEMBER + task_id, {"expires": expires})),
                Op("upsert", Entity(task_group_id, ACTIVE + task_id, {"expires": expires}))]
        group = await self.check_joinable(task_group_id, scheduler_id)
        while True:
            if group is None:
                head = Op("insert", Entity(task_group_id, GROUP_ROW, {"schedulerId": scheduler_id,
                                                                      "expires": expires, "sealed": ""}))
            elif group.expires < expires:
                head = Op("replace", Entity(task_group_id, GROUP_ROW, {
                    "schedulerId": group.scheduler_id, "expires": expires, "sealed": group.sealed or ""},
                    group.etag))
            else:
                head = None
            if await self.tables.transact(TASK_GROUPS_TABLE, [*([head] if head else []), *rows]):
                self._cache.pop(task_group_id, None)
                return
            group = await self.get(task_group_id)  # created, raised or sealed meanwhile: decide again
            if group is not None:
                await self.check_joinable(task_group_id, scheduler_id)

    async def seal(self, task_group_id: str, stamp: str) -> TaskGroup:
        """Seal once; sealing again keeps the first time."""
        while True:
            group = await self.get(task_group_id)
            if group is None:
                raise TaskGroupNotFound(taskGroupId=task_group_id)
            if group.sealed:
                return group
            sealed = Entity(task_group_id, GROUP_ROW, {"schedulerId": group.scheduler_id, "expires": group.expires,
                                                       "sealed": stamp}, group.etag)
            stored = await self.tables.replace(TASK_GROUPS_TABLE, sealed)
            if stored is not None:
                self._cache.pop(task_group_id, None)
                return TaskGroup.from_entity(stored)

    async def resolve_member(self, task_group_id: str, task_id: str) -> bool:
        """Take a resolved task out of the active set; True when the group has no unresolved task left."""
        await self.tables.delete(TASK_GROUPS_TABLE, task_group_id, ACTIVE + task_id)
        return not await self._any(task_group_id, ACTIVE)

    async def _any(self, task_group_id: str, prefix: str) -> bool:
        page = await self.tables.query(TASK_GROUPS_TABLE, "PartitionKey eq @pk and RowKey ge @lo and RowKey lt @hi",
                                       {"pk": task_group_id, "lo": prefix, "hi": _END[prefix]}, limit=1)
        return bool(page.entities)

    async def members(self, task_group_id: str, *, limit: int,
                      continuation: str | None) -> tuple[list[str], str | None]:
        """A page of member taskIds, in taskId order."""
        page = await self.tables.query(
            TASK_GROUPS_TABLE, "PartitionKey eq @pk and RowKey ge @lo and RowKey lt @hi",
            {"pk": task_group_id, "lo": MEMBER, "hi": _END[MEMBER]}, limit=limit, continuation=continuation)
        return [e.row_key[len(MEMBER):] for e in page.entities], page.continuation

    async def all_members(self, task_group_id: str) -> list[str]:
        ids: list[str] = []
        token: str | None = None
        while True:
            page, token = await self.members(task_group_id, limit=1000, continuation=token)
            ids.extend(page)
            if token is None:
                return ids

    async def forget_member(self, task_group_id: str, task_id: str) -> None:
        await delete_all(self.tables, TASK_GROUPS_TABLE,
                         [(task_group_id, MEMBER + task_id), (task_group_id, ACTIVE + task_id)])

    async def delete_if_empty(self, task_group_id: str, now_iso: str) -> bool:
        """Delete an expired group that has no members left."""
        group = await self.get(task_group_id)
        if group is None or group.expires > now_iso or await self._any(task_group_id, MEMBER):
            return False
        return await self.tables.delete(TASK_GROUPS_TABLE, task_group_id, GROUP_ROW, group.etag)
