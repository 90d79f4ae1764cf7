"""The dependencies' store: edges both ways, requirement rows and dependents' markers (rows:
shared/domain/dependencies.py)."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from collections import OrderedDict

from shared import timeutil
from shared.domain.dependencies import (
    ATTACH_AT_ONCE,
    DEPENDENCIES_TABLE,
    EDGE,
    EDGE_END,
    HERE_PAGE,
    LEGACY_PAGE,
    POINT_READ_LIMIT,
    REQUIREMENTS_TABLE,
    Dependent,
)
from shared.domain.tasks import TASKS_TABLE
from shared.storage.base import Entity, TableStore, all_at_once, delete_all, upsert_all

MARK = "~"  # the marker row's RowKey prefix: "~" sorts after every character of a taskId

MARKS_REMEMBERED = 10_000  # markers this process wrote, so a fan-out writes its root's once


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
