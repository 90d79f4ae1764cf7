"""An index of tasks by the hour they expire, so expiry never scans the Tasks table.

TaskExpiry: PartitionKey = `YYYY-MM-DDTHH` of the task's `expires`, RowKey = taskId. The expiry timer reads
the partitions before the cut-off in key order, a page at a time.
"""

from __future__ import annotations

from shared.storage.base import Entity, TableStore

TASK_EXPIRY_TABLE = "TaskExpiry"


def bucket(expires: str) -> str:
    return expires[:13]  # 2026-11-22T12:00:00.000Z -> 2026-11-22T12


class ExpiryIndex:
    def __init__(self, tables: TableStore) -> None:
        self.tables = tables

    async def add(self, task_id: str, expires: str) -> None:
        await self.tables.upsert(TASK_EXPIRY_TABLE, Entity(bucket(expires), task_id, {"expires": expires}))

    async def due(self, cutoff: str, limit: int) -> list[tuple[str, str]]:
        """(bucket, taskId) of tasks whose `expires` is before `cutoff`, oldest hours first."""
        page = await self.tables.query(TASK_EXPIRY_TABLE, "PartitionKey le @bucket and expires lt @cutoff",
                                       {"bucket": bucket(cutoff), "cutoff": cutoff}, limit=limit)
        return [(e.partition_key, e.row_key) for e in page.entities]

    async def remove(self, hour: str, task_id: str) -> None:
        await self.tables.delete(TASK_EXPIRY_TABLE, hour, task_id)
