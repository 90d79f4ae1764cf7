"""A task's life after createTask, as its callers ask: scheduleTask, rerunTask, cancelTask, the resolution by its
worker (reportCompleted/Failed/Exception) and its retries, and priorities. Each is one `TaskRepository.modify`:
decided on the task as read and written conditionally on its ETag, so a repeated or racing request changes nothing
twice; those that resolve a run hand it the resolution's steps (shared/operations/resolution/steps.py). What a
dependency's resolution does for its dependents is shared/operations/scheduling.py.
"""

from __future__ import annotations

import datetime as dt
import logging

from shared import errors, metrics
from shared.domain.tasks import (
    MAX_RUNS,
    RESOLVED_STATES,
    Priority,
    ReasonCreated,
    ReasonResolved,
    ResolvedState,
    Run,
    Task,
)
from shared.logs import fields
from shared.operations.resolution.steps import ResolutionSteps
from shared.operations.scheduling import Scheduling, deadline_passed
from shared.operations.writes.guards import Guards
from shared.operations.writes.repository import UNCHANGED, TaskRepository, Unchanged

log = logging.getLogger("queue")

RETRY_REASONS: dict[ReasonResolved, ReasonCreated] = {"worker-shutdown": "retry", "intermittent-task": "task-retry"}


class PriorityUnchanged(errors.RequestConflict):
    """Task `{taskId}` already has priority {priority}"""


class TaskAlreadyResolved(errors.RequestConflict):
    """Task `{taskId}` is resolved: its priority can no longer change"""


def run_of(task: Task, run_id: int) -> Run:
    """Run `run_id` of the task; 404 RunNotFound when it has no such run."""
    if run_id >= len(task.runs):
        raise errors.RunNotFound(taskId=task.task_id, runId=run_id)
    return task.runs[run_id]


async def add_retry(task: Task, reason_created: ReasonCreated | None, guards: Guards, now: dt.datetime) -> None:
    """Add a retry run (hinted) when the reason allows one and retries are left."""
    if reason_created is None or task.retries_left <= 0:
        return
    task.retries_left -= 1
    task.runs.append(Run("pending", reason_created, now))
    task.emit("task-pending", task.last_run_id)  # before the hint, which announces it (Guards.hint)
    await guards.hint(task)


class Lifecycle:
    def __init__(self, tasks: TaskRepository, scheduling: Scheduling, resolving: ResolutionSteps) -> None:
        self.tasks, self.scheduling, self.resolving = tasks, scheduling, resolving
        self.stores = tasks.stores

    async def schedule_task(self, task_id: str) -> Task:
        """scheduleTask: schedule a task that has no runs, whatever its dependencies say."""
        await self.stores.ready()
        return await self.scheduling.schedule_unblocked(task_id, refuse_late=True)

    async def rerun_task(self, task_id: str) -> Task:
        await self.stores.ready()
        guards = self.tasks.guards()
        now = guards.now
        deadline_indexed = False

        async def rerun(task: Task) -> Unchanged | None:
            nonlocal deadline_indexed
            if deadline_passed(task, now):
                raise errors.DeadlinePassed(taskId=task_id, deadline=task.definition["deadline"])
            if task.runs and task.runs[-1].state in ("pending", "running"):
                return UNCHANGED
            if len(task.runs) >= MAX_RUNS:
                raise errors.MaxRunsReached(maxRuns=MAX_RUNS)
            await self.scheduling.add_rerun(task, guards, now, index_deadline=not deadline_indexed)
            deadline_indexed = True
            return None

        return await self.tasks.modify(task_id, rerun, guards)

    async def cancel_task(self, task_id: str) -> Task:
        await self.stores.ready()
        task, _ = await self.cancel(task_id, self.stores.now())
        return task

    async def cancel(self, task_id: str, now: dt.datetime) -> tuple[Task, bool]:
        """Resolve the task exception/canceled unless it is resolved already; and whether this changed it."""
        changed = False

        async def cancel(task: Task) -> Unchanged | None:
            nonlocal changed
            changed = False
            if deadline_passed(task, now):
                raise errors.DeadlinePassed(taskId=task_id, deadline=task.definition["deadline"])
            if not task.runs:
                task.runs.append(Run("exception", "exception", now, reason_resolved="canceled", resolved=now))
            elif task.runs[-1].state in ("pending", "running"):
                task.runs[-1].resolve("exception", "canceled", now)
            else:
                return UNCHANGED
            task.taken_until = None
            task.emit("task-exception", task.last_run_id)
            changed = True
            return None

        task = await self.tasks.modify(task_id, cancel, steps=self.resolving)
        if changed:
            metrics.resolved("exception", "canceled")
        return task, changed

    async def resolve(self, task_id: str, run_id: int, state: ResolvedState, reason: ReasonResolved) -> Task:
        """reportCompleted / reportFailed / reportException. A repeat with the same outcome is a no-op."""
        await self.stores.ready()
        guards = self.tasks.guards()
        now = guards.now

        changed = False

        async def report(task: Task) -> Unchanged | None:
            nonlocal changed
            run = run_of(task, run_id)
            changed = False
            if run.state == state and run.reason_resolved == reason:
                return UNCHANGED
            if run.resolved_state:
                raise errors.RunResolvedDifferently(
                    taskId=task_id, runId=run_id, state=run.state, reasonResolved=run.reason_resolved
                )
            if run_id != task.last_run_id or run.state != "running":
                raise errors.RunNotRunning(taskId=task_id, runId=run_id, state=run.state)
            run.resolve(state, reason, now)
            task.taken_until = None
            task.emit(f"task-{state}", run_id)
            changed = True
            if state == "exception":
                await add_retry(task, RETRY_REASONS.get(reason), guards, now)
            return None

        task = await self.tasks.modify(task_id, report, guards, self.resolving)
        if changed:  # not a repeat
            metrics.resolved(state, reason)
        else:  # maybe the retry of a report whose process died before answering
            await self.resolving.follow_up_repeat(task, run_id)
        log.info(
            "run resolved %s/%s",
            state,
            reason,
            extra=fields(event=f"task-{state}", taskId=task_id, runId=run_id, reason=reason),
        )
        return task

    async def change_priority(self, task_id: str, new_priority: Priority, *, strict: bool) -> Task | None:
        """Set a task's priority; pending work is hinted again in the new priority's queue (the old hint can no
        longer claim it). Not strict: skip tasks it does not apply to (group changes); None when skipped."""
        guards = self.tasks.guards()
        now = guards.now
        changed = False

        async def change(task: Task) -> Unchanged | None:
            nonlocal changed
            problem: errors.QueueError | None = None
            if deadline_passed(task, now):
                problem = errors.DeadlinePassed(taskId=task_id, deadline=task.definition["deadline"])
            elif task.state in RESOLVED_STATES:
                problem = TaskAlreadyResolved(taskId=task_id)
            elif task.priority == new_priority:
                problem = PriorityUnchanged(taskId=task_id, priority=new_priority)
            if problem is not None:
                if strict:
                    raise problem
                return UNCHANGED
            task.emit("task-priority-changed", oldPriority=task.priority, newPriority=new_priority)
            task.definition["priority"] = new_priority
            if task.state == "pending":
                await guards.hint(task)
            changed = True
            return None

        task = await self.tasks.modify(task_id, change, guards)
        return task if changed else None

    async def change_task_priority(self, task_id: str, new_priority: Priority) -> Task:
        await self.stores.ready()
        task = await self.change_priority(task_id, new_priority, strict=True)
        assert task is not None  # strict: refused otherwise
        log.info(
            "task priority changed to %s", new_priority, extra=fields(event="task-priority-changed", taskId=task_id)
        )
        return task
