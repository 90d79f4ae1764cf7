"""The edges of a dependent that keeps its waiting list on its row, each written where its dependency's
resolution looks, in one transaction that also proves the dependency's state.

An edge goes in its dependency's own `Tasks` partition (shared/domain/dependencies.py `edge_here`), in a
transaction with a merge of the dependency's row (`dependentsHere`, and the list of its dependents with this one
added: `dependents`, what its resolution releases without a query), conditional on the ETag this process
remembers for it (or just read). The transaction applies only if the row is still the one remembered: then the
dependency's state is the remembered one, as of a moment when the edge exists; a resolution written later was
decided on a row with the flag, so its handler lists the edge; a resolution written earlier failed the
transaction, and the row is read again (its new state decides whether the dependent waits). One round trip per
dependency, all at once, and no read when the row is remembered: the edge, the read and the note of the
earlier protocol (three calls and two round trips) in one.

The edges for one dependency that arrive together (a build's tests, created 50 at a time) go in one
transaction with one merge: several conditional merges of one row would fail each other.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from dataclasses import dataclass

from shared.domain.dependencies import ATTACH_AT_ONCE, edge_here, listed_with
from shared.domain.tasks import TASKS_TABLE, Task, encode_dependents, task_row
from shared.operations.writes.repository import TaskRepository
from shared.storage.base import BATCH_LIMIT, Entity, Op
from shared.storage.grouped import GroupCommit


@dataclass
class _Edge:
    entity: Entity
    proven: Task | None = None  # its dependency as it stood once the edge was written (None: no such task)


class DependencyEdges:
    def __init__(self, tasks: TaskRepository) -> None:
        self.tasks = tasks
        # By dependency: the edges that arrive while one of its transactions is in flight go in the next one.
        self._edges: GroupCommit[str, _Edge] = GroupCommit(self._write, lambda edges: min(len(edges), BATCH_LIMIT - 1))

    async def attach(
        self, task_id: str, dependencies: list[str], require: str, expires: dt.datetime
    ) -> dict[str, Task]:
        """Write `task_id`'s edge in each of its dependencies' partitions (a self-dependency aside), a page of
        ATTACH_AT_ONCE at a time (one round trip up to that many, one more per further page; a long list does not
        take a connection pool's worth at once); each dependency as it stood once its edge was written (missing
        ones are left out)."""
        count = len(dependencies)
        edges = [edge_here(dep, task_id, require, count, expires) for dep in dependencies if dep != task_id]
        found: list[Task | None] = []
        for start in range(0, len(edges), ATTACH_AT_ONCE):
            found += await asyncio.gather(*(self._attach(edge) for edge in edges[start : start + ATTACH_AT_ONCE]))
        return {t.task_id: t for t in found if t is not None}

    async def _attach(self, entity: Entity) -> Task | None:
        edge = _Edge(entity)
        await self._edges.add(entity.partition_key, edge)
        return edge.proven

    async def _write(self, dependency: str, edges: list[_Edge]) -> None:
        proven = await self._prove(dependency, self.tasks.known.get(dependency), [edge.entity for edge in edges])
        for edge in edges:
            edge.proven = proven

    async def _prove(self, dependency: str, task: Task | None, edges: list[Entity]) -> Task | None:
        """One transaction: the edges and the flag, conditional on `task` (the row remembered); when it fails,
        read the row and try again. The row as it stood once the edges were written; None: no such task."""
        while True:
            if task is None:
                task = await self.tasks.get(dependency)
                if task is None:
                    return None
            listed = listed_with(task.dependents if task.dependents_here else [], edges)
            flag = Op(
                "merge",
                Entity(
                    dependency,
                    task_row(dependency),
                    {"dependentsHere": True, "dependents": encode_dependents(listed)},
                    task.etag,
                ),
            )
            written = await self.tasks.stores.tables.commit(TASKS_TABLE, [flag, *(Op("upsert", e) for e in edges)])
            if written is not None:
                # The row as stored now: the one the merge was conditional on, flagged and listing the edges.
                task.dependents_here, task.dependents, task.etag = True, listed, written[0]
                self.tasks.known.put(task.to_entity())
                return task
            self.tasks.known.forget(dependency)
            task = None
