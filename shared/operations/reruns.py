"""A rerun that waits for the task's dependencies (rerunTaskWhenReady, this queue's extension, which the
inspector's "Rerun failed" uses): rerunTask runs a resolved task at once, whatever its dependencies say, so rerunning
a failed build and the tests its failure cancelled ran the tests ahead of the build. Here a task whose dependencies
have not all met its `requires` (completed; resolved, for `all-resolved`) is marked instead (`Task.rerun_when_ready`)
and left waiting for the ones that have not: the resolution that releases it last reruns it (Scheduling.release,
schedule_unblocked), as it schedules a task that waits for the first time. Whatever the caller does next, the
task never runs ahead of a dependency.

The mark is written before the dependencies are looked at again: a dependency that completed between the first
look and the mark released nothing (the task was not marked yet), so the second look releases it here; one that
completes after the mark releases it itself. Either side may be the one, both is harmless (a release is idempotent,
and the rerun clears the mark).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Literal

from shared import errors
from shared.domain.tasks import MAX_RUNS, RESOLVED_STATES, Task
from shared.logs import fields
from shared.operations.lifecycle import Lifecycle
from shared.operations.scheduling import Scheduling, deadline_passed
from shared.operations.writes.repository import UNCHANGED, TaskRepository, Unchanged

log = logging.getLogger("queue")
CONCURRENCY = 16  # dependencies read at once
RerunOutcome = Literal["rerun", "waiting", "unchanged"]


class Reruns:
    def __init__(self, tasks: TaskRepository, lifecycle: Lifecycle, scheduling: Scheduling) -> None:
        self.tasks, self.lifecycle, self.scheduling = tasks, lifecycle, scheduling
        self.stores = tasks.stores

    async def rerun_when_ready(self, task_id: str) -> tuple[Task, RerunOutcome]:
        """Rerun the task now if its dependencies allow, else once they do; the task as left and which it was."""
        await self.stores.ready()
        task = await self.tasks.load(task_id)
        unmet = await self.unmet(task)
        if not unmet:
            before = len(task.runs)
            task = await self.lifecycle.rerun_task(task_id)
            return task, "rerun" if len(task.runs) > before else "unchanged"
        marked = await self._mark(task_id, unmet)
        if not marked.rerun_when_ready:
            return marked, "unchanged"
        await self._say_waiting(marked, unmet)
        met = set(unmet) - set(await self.unmet(marked))
        if met:  # met between the first look and the mark: their releases found no mark to act on
            if marked.waiting is not None:
                marked = await self.scheduling.release(task_id, met)
            elif not await self.stores.deps.blocked(task_id):
                marked = await self.scheduling.schedule_unblocked(task_id)
        return marked, "waiting" if marked.rerun_when_ready else "rerun"

    async def unmet(self, task: Task) -> list[str]:
        """The dependencies whose state does not meet the task's `requires` (a dependency gone counts as unmet:
        it will never complete). A dependency resolved but marked to run again is unmet, for `all-resolved` too:
        what it resolved as is not what it will be (a summary counting it would run ahead of the rerun)."""
        require_completed = task.definition.get("requires", "all-completed") == "all-completed"
        limit = asyncio.Semaphore(CONCURRENCY)

        async def meets(dependency: str) -> bool:
            async with limit:
                try:
                    found = await self.tasks.load(dependency)
                except errors.TaskNotFound:
                    return False
            if found.rerun_when_ready:
                return False
            return found.state == "completed" if require_completed else found.state in RESOLVED_STATES

        dependencies = list(task.definition.get("dependencies", []))
        met = await asyncio.gather(*(meets(d) for d in dependencies))
        return [d for d, ok in zip(dependencies, met, strict=True) if not ok]

    async def _say_waiting(self, task: Task, unmet: list[str]) -> None:
        """Its group's row of it says what it waits for (best effort: the inspector's "reruns after")."""
        try:
            await self.stores.groups.outcomes.waiting(task.definition["taskGroupId"], task.task_id, unmet)
        except Exception:
            log.warning(
                "could not record a waiting rerun in its group", exc_info=True, extra=fields(taskId=task.task_id)
            )

    async def _mark(self, task_id: str, unmet: list[str]) -> Task:
        now = self.stores.now()

        async def mark(task: Task) -> Unchanged | None:
            if deadline_passed(task, now):
                raise errors.DeadlinePassed(taskId=task_id, deadline=task.definition["deadline"])
            if task.state not in RESOLVED_STATES:  # unscheduled (its dependencies schedule it), pending or running
                return UNCHANGED
            if len(task.runs) >= MAX_RUNS:
                raise errors.MaxRunsReached(maxRuns=MAX_RUNS)
            if task.rerun_when_ready and (task.waiting is None or set(task.waiting) == set(unmet)):
                return UNCHANGED
            task.rerun_when_ready = True
            if task.waiting is not None:  # kept on its row: what it waits for now (its requirement rows say so)
                task.waiting = list(unmet)
            return None

        return await self.tasks.modify(task_id, mark)
