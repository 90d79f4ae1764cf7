"""The recent task groups' store: the start page's list of pushes, newest first
(rows: shared/domain/recent_groups.py)."""

from __future__ import annotations

import datetime as dt
import logging

from shared import timeutil
from shared.domain.recent_groups import RECENT_GROUPS_TABLE, day_of, row_key
from shared.storage.base import Entity, TableStore, delete_all

log = logging.getLogger("queue")

DAYS_LISTED = 7  # days read back for the listing

DAYS_KEPT = 8  # days of rows kept; older ones are deleted by the expiry timer


class RecentGroups:
    def __init__(self, tables: TableStore) -> None:
        self.tables = tables

    async def add(self, task_group_id: str, scheduler_id: str, since: dt.datetime, expires: dt.datetime) -> None:
        """The group became a push at `since` (best effort: a failure is logged, and the group is only missing
        from the recent list)."""
        data = {
            "taskGroupId": task_group_id,
            "schedulerId": scheduler_id,
            "since": timeutil.iso(since),
            "expires": timeutil.iso(expires),
        }
        try:
            await self.tables.upsert(RECENT_GROUPS_TABLE, Entity(day_of(since), row_key(since, task_group_id), data))
        except Exception:
            log.warning("could not list task group %s as recent", task_group_id, exc_info=True)

    async def recent(self, now: dt.datetime, limit: int) -> list[dict[str, str]]:
        """Up to `limit` groups, the most recent first, from the last DAYS_LISTED days."""
        found: list[dict[str, str]] = []
        for back in range(DAYS_LISTED):
            day = day_of(now - dt.timedelta(days=back))
            page = await self.tables.query(RECENT_GROUPS_TABLE, "PartitionKey eq @pk", {"pk": day}, limit=limit)
            found += [{k: str(v) for k, v in e.data.items() if k in ROW_FIELDS} for e in page.entities]
            if len(found) >= limit:
                break
        return found[:limit]

    async def forget_before(self, now: dt.datetime) -> int:
        """Delete the rows of the days before DAYS_KEPT (the expiry timer's, a page at a time); how many."""
        cutoff = day_of(now - dt.timedelta(days=DAYS_KEPT))
        page = await self.tables.query(RECENT_GROUPS_TABLE, "PartitionKey lt @cutoff", {"cutoff": cutoff}, limit=1000)
        await delete_all(self.tables, RECENT_GROUPS_TABLE, [(e.partition_key, e.row_key) for e in page.entities])
        return len(page.entities)


ROW_FIELDS = ("taskGroupId", "schedulerId", "since", "expires")
