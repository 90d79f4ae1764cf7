"""Reads: tasks, a task's dependents and events, and a task queue's pending and claimed runs and counts. They
change nothing; HTTP answers are shaped from what they return in shared/api/."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from shared import errors
from shared.domain.events import Event
from shared.domain.tasks import TASK_ID, TASKS_TABLE, Task
from shared.operations.paging import PAGE_BYTES, bounded_page, task_weight, tasks_page
from shared.operations.writes.repository import TaskRepository
from shared.outbox.rows import Stream
from shared.storage.base import Entity

MAX_PAGE = 1000
MAX_TASK_IDS = 1000  # taskIds one `tasks` / `statuses` request may ask for (each a storage read)


class TooManyTaskIds(errors.InputError):
    """{count} taskIds were asked for: at most {limit} in one request"""


class QueueCounts(NamedTuple):
    pending: int  # runs pending, counted in the index
    claimed: int


@dataclass(frozen=True)
class QueuedRun:
    """A run of a task queue's pending or claimed listing: the task as it is, and the run's id."""

    task: Task
    run_id: int


class Queries:
    def __init__(self, tasks: TaskRepository, page_bytes: int = PAGE_BYTES) -> None:
        self.page_bytes = page_bytes  # what a page of definitions weighs at most (shared/operations/paging.py)
        self.tasks = tasks
        self.stores = tasks.stores

    async def task(self, task_id: str) -> Task:
        """The task; 404 when there is none."""
        await self.stores.ready()
        return await self.tasks.load(task_id)

    @staticmethod
    def bounded(task_ids: Sequence[str]) -> Sequence[str]:
        """`task_ids`, if there are at most MAX_TASK_IDS (checked before the scopes for each are); 400 if not."""
        if len(task_ids) > MAX_TASK_IDS:
            raise TooManyTaskIds(count=len(task_ids), limit=MAX_TASK_IDS)
        return task_ids

    async def tasks_of(self, task_ids: Sequence[str]) -> list[Task]:
        """The tasks that exist among `task_ids`, in the order asked (at most MAX_TASK_IDS; an id that is not a
        taskId exists nowhere, and costs no storage call)."""
        self.bounded(task_ids)
        await self.stores.ready()
        return await self.tasks.load_many(t for t in task_ids if TASK_ID.fullmatch(t))

    async def dependents(self, task_id: str, *, limit: int, continuation: str | None) -> tuple[list[Task], str | None]:
        """listDependentTasks: a page of the tasks that depend on `task_id` (404 when it does not exist)."""
        task = await self.task(task_id)

        async def dependent_ids(count: int, token: str | None) -> tuple[list[str], str | None]:
            dependents, token = await self.stores.deps.dependents(
                task_id,
                limit=count,
                continuation=token,
                here=task.dependents_here,
                legacy=task.has_dependents is not False,
            )
            return [d.task_id for d in dependents], token

        return await tasks_page(
            dependent_ids,
            self.tasks.load_many,
            limit=min(limit, MAX_PAGE),
            continuation=continuation,
            budget=self.page_bytes,
        )

    async def task_events(
        self, task_id: str, *, limit: int, continuation: str | None
    ) -> tuple[list[tuple[int, Event]], str | None]:
        """A task's recorded events, in order (whether or not a bus is configured)."""
        await self.task(task_id)
        return await self.stores.events.list(
            Stream(TASKS_TABLE, task_id), limit=min(limit, MAX_PAGE), continuation=continuation
        )

    async def task_queue_runs(
        self, task_queue_id: str, state: str, *, limit: int, continuation: str | None
    ) -> tuple[list[QueuedRun], str | None]:
        """listPendingTasks (`pending`) / listClaimedTasks (`running`): the index's rows, each checked against its
        task (a row a crash left stale is left out)."""
        await self.stores.ready()

        async def rows_of(count: int, token: str | None) -> tuple[list[Entity], str | None]:
            return await self.stores.queue_runs.runs(task_queue_id, state, limit=count, continuation=token)

        async def runs_of(rows: list[Entity]) -> list[QueuedRun]:
            tasks = {t.task_id: t for t in await self.tasks.load_many(r.row_key for r in rows)}
            out: list[QueuedRun] = []
            for row in rows:
                task, run_id = tasks.get(row.row_key), int(row.data["runId"])
                if task is None or task.last_run_id != run_id or task.runs[run_id].state != state:
                    continue  # stale (also: pending again or resolved, and the row not rewritten yet)
                out.append(QueuedRun(task, run_id))
            return out

        return await bounded_page(
            rows_of,
            runs_of,
            lambda row: row.row_key,
            lambda run: task_weight(run.task),
            limit=min(limit, MAX_PAGE),
            continuation=continuation,
            budget=self.page_bytes,
        )

    async def task_queue_counts(self, task_queue_id: str) -> QueueCounts:
        """The task queue's pending and claimed runs, counted in the index (shared/domain/queue_runs.py), which every
        change of a run's state updates: exact, unlike the pending queues' message counts (Azure's approximate
        counts of hints, some of them stale). A row a crash left stale counts until the reconciler drops it."""
        await self.stores.ready()
        queue_runs = self.stores.queue_runs
        pending, claimed = await asyncio.gather(
            queue_runs.count_runs(task_queue_id, "pending"), queue_runs.count_runs(task_queue_id, "running")
        )
        return QueueCounts(pending, claimed)
