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
import time
from dataclasses import dataclass, field

from shared import roundtrips
from shared.domain.dependencies import edge_here, listed_with
from shared.domain.tasks import TASKS_TABLE, Task, encode_dependents, task_row
from shared.operations.repository import TaskRepository
from shared.storage.base import BATCH_LIMIT, Entity, Op


@dataclass
class _Edge:
    entity: Entity
    done: asyncio.Future[Task | None]
    arrived: float  # time.monotonic()
    spans: list[roundtrips.Span] | None  # its createTask's traced round trips, which the writes it waits for join


@dataclass
class _Waiting:
    edges: list[_Edge] = field(default_factory=list)


class DependencyEdges:
    def __init__(self, tasks: TaskRepository) -> None:
        self.tasks = tasks
        self._waiting: dict[str, _Waiting] = {}  # by dependency: edges not yet written, while its writer runs
        self._writers: set[asyncio.Task[None]] = set()

    async def attach(self, task_id: str, dependencies: list[str], require: str,
                     expires: dt.datetime) -> dict[str, Task]:
        """Write `task_id`'s edge in each of its dependencies' partitions (a self-dependency aside); each
        dependency as it stood once its edge was written (missing ones are left out)."""
        count = len(dependencies)
        found = await asyncio.gather(*(self._attach(edge_here(dep, task_id, require, count, expires))
                                       for dep in dependencies if dep != task_id))
        return {t.task_id: t for t in found if t is not None}

    async def _attach(self, edge: Entity) -> Task | None:
        dependency = edge.partition_key
        done: asyncio.Future[Task | None] = asyncio.get_running_loop().create_future()
        waiting = self._waiting.get(dependency)
        if waiting is None:
            waiting = self._waiting[dependency] = _Waiting()
            writer = asyncio.get_running_loop().create_task(self._write(dependency, waiting))
            self._writers.add(writer)
            writer.add_done_callback(self._writers.discard)
        waiting.edges.append(_Edge(edge, done, time.monotonic(), roundtrips.current()))
        return await asyncio.shield(done)

    async def _write(self, dependency: str, waiting: _Waiting) -> None:
        """Write the edges waiting for `dependency`, a transaction at a time, until none is left."""
        # This task began in one createTask's context: each transaction is told to the createTasks that wait for it.
        roundtrips.untraced()
        task: Task | None = self.tasks.known.get(dependency)
        try:
            while waiting.edges:
                batch, waiting.edges = waiting.edges[:BATCH_LIMIT - 1], waiting.edges[BATCH_LIMIT - 1:]
                failed: Exception | None = None
                with roundtrips.traced() as spans:
                    try:
                        task = await self._prove(dependency, task, [edge.entity for edge in batch])
                    except Exception as exc:  # storage failed: every createTask of the batch gets the error
                        task, failed = None, exc
                for edge in (*batch, *waiting.edges):
                    roundtrips.waited(spans, edge.arrived, edge.spans)
                for edge in batch:
                    if not edge.done.done():
                        if failed is None:
                            edge.done.set_result(task)
                        else:
                            edge.done.set_exception(failed)
        finally:
            if self._waiting.get(dependency) is waiting:
                del self._waiting[dependency]
            for edge in waiting.edges:  # cancelled with edges unwritten: their callers must not wait on
                if not edge.done.done():
                    edge.done.set_exception(RuntimeError("the edge writer was stopped"))

    async def _prove(self, dependency: str, task: Task | None, edges: list[Entity]) -> Task | None:
        """One transaction: the edges and the flag, conditional on `task` (the row remembered); when it fails,
        read the row and try again. The row as it stood once the edges were written; None: no such task."""
        while True:
            if task is None:
                task = await self.tasks.get(dependency)
                if task is None:
                    return None
            listed = listed_with(task.dependents if task.dependents_here else [], edges)
            flag = Op("merge", Entity(dependency, task_row(dependency), {
                "dependentsHere": True, "dependents": encode_dependents(listed)}, task.etag))
            written = await self.tasks.stores.tables.commit(TASKS_TABLE, [flag, *(Op("upsert", e) for e in edges)])
            if written is not None:
                # The row as stored now: the one the merge was conditional on, flagged and listing the edges.
                task.dependents_here, task.dependents, task.etag = True, listed, written[0]
                self.tasks.known.put(task.to_entity())
                return task
            self.tasks.known.forget(dependency)
            task = None
