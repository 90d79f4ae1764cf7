"""A task group's member and active rows, read (the listings, the counts, the reconciler's scan) and forgotten
(the row layout: shared/domain/groups.py)."""

from __future__ import annotations

import datetime as dt

from shared import timeutil
from shared.domain.group_outcomes import COUNTED, UNSUCCESSFUL
from shared.domain.groups import ACTIVE, GROUPS_TABLE, MEMBER
from shared.storage.base import Entity, Op, TableStore, delete_all

# After "m:"/"a:" comes the taskId; ";" sorts right after ":", so [prefix, prefix with ";") spans the rows.
_END = {MEMBER: "m;", ACTIVE: "a;"}


def active_delete(task_group_id: str, task_id: str) -> Op:
    """The delete of a member's active row (fails its transaction when the row is gone)."""
    return Op("delete", Entity(task_group_id, ACTIVE + task_id, {}))


class GroupMembers:
    def __init__(self, tables: TableStore) -> None:
        self.tables = tables

    async def is_active(self, task_group_id: str, task_id: str) -> bool:
        """Whether the task is still in its group's active set (its resolution has not left it)."""
        return await self.tables.get(GROUPS_TABLE, task_group_id, ACTIVE + task_id) is not None

    async def first(self, task_group_id: str, prefix: str, limit: int) -> list[str]:
        """The first `limit` taskIds of the group's member (`m:`) or active (`a:`) rows."""
        page = await self.tables.query(
            GROUPS_TABLE,
            "PartitionKey eq @pk and RowKey ge @lo and RowKey lt @hi",
            {"pk": task_group_id, "lo": prefix, "hi": _END[prefix]},
            limit=limit,
        )
        return [e.row_key[len(prefix) :] for e in page.entities]

    async def active_since(
        self, cutoff: dt.datetime, *, limit: int, continuation: str | None
    ) -> tuple[list[tuple[str, str]], str | None]:
        """A page of (taskGroupId, taskId) of unresolved tasks whose active row is older than `cutoff`, across
        every group (a scan of the table on the server's side: the reconciler's, a few times an hour)."""
        page = await self.tables.query(
            GROUPS_TABLE,
            "RowKey ge @lo and RowKey lt @hi and since lt @cutoff",
            {"lo": ACTIVE, "hi": _END[ACTIVE], "cutoff": timeutil.iso(cutoff)},
            limit=limit,
            continuation=continuation,
        )
        return [(e.partition_key, e.row_key[len(ACTIVE) :]) for e in page.entities], page.continuation

    async def unresolved(self, task_group_id: str) -> bool:
        """Whether any task of the group is unresolved (its active set is not empty)."""
        return bool(await self.first(task_group_id, ACTIVE, 1))

    async def count_unresolved(self, task_group_id: str) -> tuple[int, bool]:
        """How many tasks of the group are unresolved, counted up to COUNTED (one page), and whether there are more."""
        page = await self.tables.query(
            GROUPS_TABLE,
            "PartitionKey eq @pk and RowKey ge @lo and RowKey lt @hi",
            {"pk": task_group_id, "lo": ACTIVE, "hi": _END[ACTIVE]},
            limit=COUNTED,
        )
        return len(page.entities), page.continuation is not None

    async def members(
        self, task_group_id: str, *, limit: int, continuation: str | None
    ) -> tuple[list[str], str | None]:
        """A page of member taskIds, in taskId order."""
        page = await self.tables.query(
            GROUPS_TABLE,
            "PartitionKey eq @pk and RowKey ge @lo and RowKey lt @hi",
            {"pk": task_group_id, "lo": MEMBER, "hi": _END[MEMBER]},
            limit=limit,
            continuation=continuation,
        )
        return [e.row_key[len(MEMBER) :] for e in page.entities], page.continuation

    async def all_members(self, task_group_id: str) -> list[str]:
        ids: list[str] = []
        token: str | None = None
        while True:
            page, token = await self.members(task_group_id, limit=1000, continuation=token)
            ids.extend(page)
            if token is None:
                return ids

    async def forget_member(self, task_group_id: str, task_id: str) -> None:
        await delete_all(
            self.tables,
            GROUPS_TABLE,
            [(task_group_id, p + task_id) for p in (MEMBER, ACTIVE, UNSUCCESSFUL)],
        )
