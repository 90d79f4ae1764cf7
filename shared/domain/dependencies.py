"""Dependency edges, and what a task still waits for.

A task with at most IN_ROW dependencies (nearly every task of a CI graph):
- keeps the ones it still waits for on its own row (Task.waiting): its createTask writes the list with the task,
  without what was already satisfied; each dependency's resolution takes itself out of the list, conditional on
  the row's ETag, and the write that empties it schedules the task;
- writes each edge in its dependency's own `Tasks` partition (RowKey `d:<dependent>`: `require`, `count`,
  `expires`), in one transaction with the dependency's `dependentsHere` flag and its list of dependents
  (`dependents`, up to LISTED), conditional on the dependency's row (shared/operations/writes/edges.py): the
  dependency's state as of the edge, without a read; a resolution takes the dependents from the row it resolved
  (no query), or, past LISTED, lists the edges. The edge rows stay what listDependentTasks and expiry read.

A task with more keeps Taskcluster's requirement rows, so that no single row is rewritten by thousands of
resolutions:
- TaskRequirement: PartitionKey = the waiting task, RowKey = a task it still waits for. The task is blocked
  while its partition has a row; all of one task's rows share a partition, so they are written in batches.
- TaskDependency: PartitionKey = the required task, RowKey = a task that depends on it, with `require`
  (`completed` or `resolved`) and `count` (how many tasks that dependent waits for): the reverse edges that
  resolution follows, and what listDependentTasks lists (`inRow` on edges of dependents that kept their list on
  their row before their edges moved to the dependency's partition). A dependent with `count` 1 is unblocked by
  this one resolution without reading its requirements (the common fan-out). With at most POINT_READ_LIMIT
  dependencies the row also lists the dependent's `others`, whose requirement rows are then checked by point
  reads.
- The required task's own row says whether it has such dependents (`hasDependents`, Task.has_dependents): a
  dependent's createTask sets it after writing its edge, conditional on the ETag it read
  (TaskRepository.note_dependent), so a resolution either sees the flag or failed the flag's write (and the
  dependent sees the resolution). A resolution of a row whose flags are both false skips the dependents lookup:
  most tasks of a lone lifecycle have no dependents.
- TaskDependency also holds, in the required task's partition, a marker row (RowKey `~<taskId>`, after every
  taskId) written in one transaction with its first edge: what a resolution reads instead for rows written
  before the flag existed. Only for tasks created with the `dependentsMarked` flag: an older task's dependents
  may have no marker.

Deleting a requirement, or taking a dependency out of a list that no longer holds it, is idempotent, so
duplicated or re-delivered resolution messages are harmless.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from collections import OrderedDict
from dataclasses import dataclass

from shared import timeutil
from shared.domain.tasks import TASKS_TABLE
from shared.storage.base import Entity, TableStore, all_at_once, delete_all, upsert_all

POINT_READ_LIMIT = 16
LISTED = 250  # dependents listed on their dependency's row (Task.dependents, ~6 KiB); more are only queried
# Dependencies a task keeps on its own row: its `waiting` list is one property (JSON, 25 characters a taskId: 25,000
# at most, under the 32,768 UTF-16 characters of a property's 64 KiB), a few KiB once most have resolved. A summary
# of a large push's test chunks (300-odd) keeps its list here too; only a longer one writes requirement rows.
IN_ROW = 1000
EDGE, EDGE_END = "d:", "d;"  # the RowKeys of the edges kept in their dependency's own `Tasks` partition
HERE_PAGE, LEGACY_PAGE = "here:", "legacy:"  # continuations of `dependents`
MARK = "~"  # the marker row's RowKey prefix: "~" sorts after every character of a taskId
MARKS_REMEMBERED = 10_000  # markers this process wrote, so a fan-out writes its root's once
ATTACH_AT_ONCE = 100  # edges of one task written (or deleted) at once: a page; a longer list takes more round trips
REQUIREMENTS_TABLE = "TaskRequirement"
DEPENDENCIES_TABLE = "TaskDependency"


@dataclass(frozen=True)
class Dependent:
    task_id: str
    require: str  # "completed" or "resolved"
    count: int  # how many tasks it waits for in all
    others: list[str] | None  # the other tasks it waits for, when there are few
    in_row: bool = False  # it keeps what it waits for on its own row (Task.waiting)


def listed_with(listed: list[tuple[str, str]] | None, edges: list[Entity]) -> list[tuple[str, str]] | None:
    """A dependency's list of dependents once `edges` (of `edge_here`) are written beside it: None (not listed)
    stays so, and becomes so past LISTED; an edge written again (a retried createTask) is listed once."""
    if listed is None:
        return None
    known = {task_id for task_id, _ in listed}
    added = [(e.row_key[len(EDGE) :], str(e.data["require"])) for e in edges if e.row_key[len(EDGE) :] not in known]
    return None if len(listed) + len(added) > LISTED else [*listed, *dict(added).items()]


def edge_here(dependency: str, dependent: str, require: str, count: int, expires: dt.datetime) -> Entity:
    """The edge a dependent that keeps its waiting list on its row writes in its dependency's `Tasks` partition."""
    return Entity(dependency, EDGE + dependent, {"require": require, "expires": timeutil.iso(expires), "count": count})


class DependencyStore:
    def __init__(self, tables: TableStore) -> None:
        self.tables = tables
        self._marked: OrderedDict[str, None] = OrderedDict()

    async def add(self, task_id: str, dependencies: list[str], require: str, expires: dt.datetime) -> None:
        """Record the reverse edges of `task_id`'s dependencies (with each dependency's marker, in the same
        partition's transaction, unless this process wrote it already) and its requirement rows: a task with
        more than IN_ROW dependencies."""
        stored = timeutil.iso(expires)
        unmarked = [dep for dep in dependencies if dep not in self._marked]
        count = len(set(dependencies))

        def edge(dep: str) -> Entity:
            data: dict[str, object] = {"require": require, "expires": stored, "count": count}
            if count <= POINT_READ_LIMIT:
                data["others"] = json.dumps([d for d in dependencies if d != dep])
            return Entity(dep, task_id, data)

        # The two tables at once: both only precede the dependencies' read.
        await all_at_once(
            [
                upsert_all(
                    self.tables, REQUIREMENTS_TABLE, [Entity(task_id, dep, {"expires": stored}) for dep in dependencies]
                ),
                upsert_all(
                    self.tables,
                    DEPENDENCIES_TABLE,
                    [*(edge(dep) for dep in dependencies), *(Entity(dep, MARK + dep, {}) for dep in unmarked)],
                ),
            ]
        )
        for dep in unmarked:
            self._marked[dep] = None
        while len(self._marked) > MARKS_REMEMBERED:
            self._marked.popitem(last=False)

    async def remove(self, task_id: str, dependencies: list[str]) -> None:
        """Undo `add` (a createTask that was refused)."""
        await delete_all(self.tables, REQUIREMENTS_TABLE, [(task_id, dep) for dep in dependencies])
        await delete_all(self.tables, DEPENDENCIES_TABLE, [(dep, task_id) for dep in dependencies])

    async def remove_here(self, task_id: str, dependencies: list[str]) -> None:
        """Delete the edges `task_id` wrote in its dependencies' partitions (a createTask that was refused)."""
        await delete_all(
            self.tables, TASKS_TABLE, [(dep, EDGE + task_id) for dep in dependencies], at_once=ATTACH_AT_ONCE
        )

    async def unmark(self, task_ids: list[str]) -> None:
        """Delete the markers of tasks that do not exist (a refused createTask named them)."""
        for task_id in task_ids:
            self._marked.pop(task_id, None)
        await delete_all(self.tables, DEPENDENCIES_TABLE, [(t, MARK + t) for t in task_ids])

    async def satisfy(self, task_id: str, dependencies: list[str]) -> None:
        await delete_all(self.tables, REQUIREMENTS_TABLE, [(task_id, dep) for dep in dependencies])

    async def blocked(self, task_id: str, candidates: list[str] | None = None) -> bool:
        """Whether `task_id` still waits for anything; when the few tasks it might wait for are known, by point
        reads of their requirement rows, otherwise by a partition query."""
        if candidates is not None and len(candidates) <= POINT_READ_LIMIT:
            found = await asyncio.gather(*(self.tables.get(REQUIREMENTS_TABLE, task_id, c) for c in candidates))
            return any(f is not None for f in found)
        page = await self.tables.query(REQUIREMENTS_TABLE, "PartitionKey eq @pk", {"pk": task_id}, limit=1)
        return bool(page.entities)

    async def requirements(self, task_id: str, *, limit: int) -> list[str]:
        """The first `limit` tasks `task_id` still waits for."""
        page = await self.tables.query(REQUIREMENTS_TABLE, "PartitionKey eq @pk", {"pk": task_id}, limit=limit)
        return [e.row_key for e in page.entities]

    async def has_dependents(self, task_id: str) -> bool:
        """Whether a task (created with `dependentsMarked`) may have dependents: its marker row exists."""
        return await self.tables.get(DEPENDENCIES_TABLE, task_id, MARK + task_id) is not None

    async def dependents(
        self, task_id: str, *, limit: int, continuation: str | None, here: bool = False, legacy: bool = True
    ) -> tuple[list[Dependent], str | None]:
        """A page of the tasks that depend on `task_id`: those whose edges are `here` (in its own partition),
        then, when `legacy`, those of TaskDependency. The continuation names the place (one from before the
        edges here, unmarked, is TaskDependency's)."""
        found: list[Dependent] = []
        if continuation is None or continuation.startswith(HERE_PAGE):
            if continuation is not None or here:
                page = await self.tables.query(
                    TASKS_TABLE,
                    "PartitionKey eq @pk and RowKey ge @lo and RowKey lt @hi",
                    {"pk": task_id, "lo": EDGE, "hi": EDGE_END},
                    limit=limit,
                    continuation=continuation[len(HERE_PAGE) :] if continuation else None,
                )
                found = [
                    Dependent(
                        e.row_key[len(EDGE) :],
                        str(e.data.get("require", "completed")),
                        int(e.data.get("count", 0)),
                        None,
                        in_row=True,
                    )
                    for e in page.entities
                ]
                if page.continuation is not None:
                    return found, HERE_PAGE + page.continuation
            if not legacy or len(found) >= limit:
                return found, (LEGACY_PAGE if legacy else None)
            continuation = None
        elif continuation.startswith(LEGACY_PAGE):
            continuation = continuation[len(LEGACY_PAGE) :] or None
        page = await self.tables.query(
            DEPENDENCIES_TABLE,
            "PartitionKey eq @pk and RowKey lt @mark",
            {"pk": task_id, "mark": MARK},
            limit=limit - len(found),
            continuation=continuation,
        )
        found += [
            Dependent(
                e.row_key,
                str(e.data.get("require", "completed")),
                int(e.data.get("count", 0)),
                json.loads(e.data["others"]) if e.data.get("others") is not None else None,
                bool(e.data.get("inRow", False)),
            )
            for e in page.entities
        ]
        return found, None if page.continuation is None else LEGACY_PAGE + page.continuation

    async def forget_task(self, task_id: str) -> None:
        """Delete every edge row kept under `task_id`'s own partitions (task expiry)."""
        for table, where in (
            (REQUIREMENTS_TABLE, ""),
            (DEPENDENCIES_TABLE, ""),
            (TASKS_TABLE, " and RowKey ge @lo and RowKey lt @hi"),
        ):
            token: str | None = None
            while True:
                page = await self.tables.query(
                    table,
                    "PartitionKey eq @pk" + where,
                    {"pk": task_id, "lo": EDGE, "hi": EDGE_END} if where else {"pk": task_id},
                    limit=1000,
                    continuation=token,
                )
                await delete_all(self.tables, table, [(e.partition_key, e.row_key) for e in page.entities])
                token = page.continuation
                if token is None:
                    break
