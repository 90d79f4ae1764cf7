"""The group outcomes' store: a group's unsuccessful members and their counts, in the group's partition (rows:
shared/domain/group_outcomes.py)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from shared import timeutil
from shared.domain.group_outcomes import COUNTED, UNSUCCESSFUL, UNSUCCESSFUL_END, GroupCounts, Unsuccessful
from shared.domain.groups import GROUPS_TABLE
from shared.storage.base import Entity, TableStore

DEPENDENCIES_NAMED = 20  # dependencies a waiting rerun's row names


def _of(entity: Entity) -> Unsuccessful:
    data = entity.data
    waits = data.get("waitsFor")
    return Unsuccessful(
        task_id=entity.row_key[len(UNSUCCESSFUL) :],
        state=str(data.get("state", "failed")),
        run_id=int(data.get("runId", 0)),
        reason=str(data.get("reason", "")),
        resolved=str(data.get("resolved", "")),
        waits_for=None if waits is None else [w for w in str(waits).split(",") if w],
    )


class GroupOutcomes:
    def __init__(self, tables: TableStore) -> None:
        self.tables = tables

    async def record(
        self, task_group_id: str, task_id: str, state: str, run_id: int, reason: str, resolved: dt.datetime
    ) -> None:
        """The task's newest run failed or ended in an exception (a repeat writes the same row)."""
        data = {"state": state, "runId": run_id, "reason": reason, "resolved": timeutil.iso(resolved)}
        await self.tables.upsert(GROUPS_TABLE, Entity(task_group_id, UNSUCCESSFUL + task_id, data))

    async def waiting(self, task_group_id: str, task_id: str, waits_for: Sequence[str]) -> None:
        """The task is marked to rerun once `waits_for` complete (merged into its row, when it has one)."""
        row = await self.tables.get(GROUPS_TABLE, task_group_id, UNSUCCESSFUL + task_id)
        if row is None:
            return  # resolved before this release, or its row was lost: nothing to say it waits
        data = {**row.data, "waitsFor": ",".join(list(waits_for)[:DEPENDENCIES_NAMED])}
        await self.tables.upsert(GROUPS_TABLE, Entity(task_group_id, UNSUCCESSFUL + task_id, data))

    async def forget(self, task_group_id: str, task_id: str) -> None:
        """The task has a new run (or is gone): no longer unsuccessful."""
        await self.tables.delete(GROUPS_TABLE, task_group_id, UNSUCCESSFUL + task_id, "*")

    async def page(
        self, task_group_id: str, *, limit: int, continuation: str | None
    ) -> tuple[list[Unsuccessful], str | None]:
        """A page of the group's unsuccessful members, in taskId order."""
        page = await self.tables.query(
            GROUPS_TABLE,
            "PartitionKey eq @pk and RowKey ge @lo and RowKey lt @hi",
            {"pk": task_group_id, "lo": UNSUCCESSFUL, "hi": UNSUCCESSFUL_END},
            limit=limit,
            continuation=continuation,
        )
        return [_of(e) for e in page.entities], page.continuation

    async def counts(self, task_group_id: str, unresolved_rows: tuple[int, bool]) -> GroupCounts:
        """The counts of a push's row: `unresolved_rows` (its active rows counted, and whether there were more)
        with its unsuccessful members (one page of COUNTED at most)."""
        found, more = await self.page(task_group_id, limit=COUNTED, continuation=None)
        unresolved, more_active = unresolved_rows
        return GroupCounts(
            unresolved=unresolved,
            failed=sum(1 for u in found if u.state == "failed" and u.waits_for is None),
            exception=sum(1 for u in found if u.state != "failed" and u.waits_for is None),
            rerun_waiting=sum(1 for u in found if u.waits_for is not None),
            at_least=more is not None or more_active,
        )
