"""Which tasks of a group did not succeed, kept in the group's own partition so that a push's row on the start
page and its rerun plan are read in a query or two, not from every task of it.

Rows (Tasks table, PartitionKey = taskGroupId, beside shared/domain/groups.py's):
`f:<taskId>`: a member whose newest run failed or ended in an exception: `state` (failed, exception), `runId`,
`reason` (its reasonResolved) and, once it is marked to rerun when its dependencies complete (rerunTaskWhenReady),
`waitsFor` (the dependencies it waits for, comma-separated, the first DEPENDENCIES_NAMED). Written by the resolution's
group step (after the answer; an upsert, so a repeated message changes nothing); deleted when the task gets its
new run (rerunTask, or the release of a waiting rerun) and with the member's other rows at its expiry.

Best effort: a lost write leaves a count short by one until the next resolution of that task; the group's own page
(listTaskGroup, every task's status) stays the truth, which the start page links to. A release before this one
writes no such row (its groups count no failure) and leaves the rows it finds (they expire with the group's
partition: `forget` is called for every member).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from shared import timeutil
from shared.domain.groups import GROUPS_TABLE
from shared.storage.base import Entity, TableStore

UNSUCCESSFUL, _END = "f:", "f;"  # ";" sorts right after ":"
COUNTED = 1000  # rows of a kind counted for a group's row on the start page (one page); more is "at least"
DEPENDENCIES_NAMED = 20  # dependencies a waiting rerun's row names
UNSUCCESSFUL_STATES = ("failed", "exception")


@dataclass(frozen=True)
class Unsuccessful:
    """A member whose newest run failed or ended in an exception (`waits_for`: marked to rerun once these complete;
    None: not marked)."""

    task_id: str
    state: str
    run_id: int
    reason: str
    resolved: str
    waits_for: list[str] | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "taskId": self.task_id,
            "state": self.state,
            "runId": self.run_id,
            "reasonResolved": self.reason,
            "resolved": self.resolved,
        }
        if self.waits_for is not None:
            out["rerunWaitsFor"] = self.waits_for
        return out


@dataclass(frozen=True)
class GroupCounts:
    """What a push's row says of its tasks; `at_least`: a kind had more than COUNTED rows (its count is a floor)."""

    unresolved: int
    failed: int
    exception: int
    rerun_waiting: int
    at_least: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "unresolved": self.unresolved,
            "failed": self.failed,
            "exception": self.exception,
            "rerunWaiting": self.rerun_waiting,
            "atLeast": self.at_least,
        }


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
            {"pk": task_group_id, "lo": UNSUCCESSFUL, "hi": _END},
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
