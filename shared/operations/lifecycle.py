"""A task's life after createTask: scheduling, reruns, cancellation, resolution by its worker, retries, new
hints for a pending run, and priorities. Each is one `TaskRepository.modify`: decided on the task as read and
written conditionally on its ETag, so a repeated or racing request changes nothing twice.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Collection
from dataclasses import dataclass

from shared import errors, metrics
from shared.domain.group_outcomes import UNSUCCESSFUL_STATES
from shared.domain.tasks import (
    MAX_RUNS,
    RESOLVED_STATES,
    TASKS_TABLE,
    Priority,
    ReasonCreated,
    ReasonResolved,
    ResolvedState,
    Run,
    Task,
)
from shared.logs import fields
from shared.operations.writes.followups import Guards, nothing
from shared.operations.writes.repository import UNCHANGED, TaskRepository, Unchanged
from shared.outbox.log import Fallback
from shared.outbox.rows import Stream
from shared.storage.grouped import GroupCommit

log = logging.getLogger("queue")

RETRY_REASONS: dict[ReasonResolved, ReasonCreated] = {"worker-shutdown": "retry", "intermittent-task": "task-retry"}
MAX_HINTS = 4  # hints a pending run accepts at once: its first, and the reconciler's latest


class PriorityUnchanged(errors.RequestConflict):
    """Task `{taskId}` already has priority {priority}"""


class TaskAlreadyResolved(errors.RequestConflict):
    """Task `{taskId}` is resolved: its priority can no longer change"""


def deadline_passed(task: Task, now: dt.datetime) -> bool:
    return task.deadline <= now


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


@dataclass
class _Release:
    """One dependency's release of a dependent, written with the others that arrive meanwhile; what it left."""

    dependency: str
    stands_in: Fallback | None  # the dependency's claim check, standing in for the dependent's events
    task: Task | None = None
    changed: bool = False


class Lifecycle:
    def __init__(self, tasks: TaskRepository) -> None:
        self.tasks = tasks
        self.stores = tasks.stores
        # The releases of one dependent that come together (a summary's test chunks resolving at once) are
        # written together: one write for them rather than a write each, each but one losing a race first.
        self._releases: GroupCommit[str, _Release] = GroupCommit(self._release_together, len)

    async def schedule_unblocked(self, task_id: str, *, refuse_late: bool = False) -> Task:
        """Give a task its first run, unless it has one or its deadline passed (what a dependency's resolution
        does for a task it unblocked; scheduleTask, with `refuse_late`, answers 409 past the deadline)."""
        guards = self.tasks.guards()
        now = guards.now

        async def schedule(task: Task) -> Unchanged | None:
            if task.runs and not (task.rerun_when_ready and not refuse_late and task.state in RESOLVED_STATES):
                return UNCHANGED
            if deadline_passed(task, now):
                if refuse_late:
                    raise errors.DeadlinePassed(taskId=task_id, deadline=task.definition["deadline"])
                return UNCHANGED
            if task.runs:  # resolved, and to rerun once nothing is left to wait for (shared/operations/reruns.py)
                await self._add_rerun(task, guards, now)
                return None
            task.runs.append(Run("pending", "scheduled", now))
            task.emit("task-pending", 0)
            await guards.hint(task)
            return None

        return await self.tasks.modify(task_id, schedule, guards)

    async def release(self, task_id: str, satisfied: Collection[str]) -> Task:
        """A task that keeps what it waits for on its row (Task.waiting) no longer waits for `satisfied`: they
        leave the list, and the write that empties it gives the task its first run (unless it has one, or its
        deadline passed). Idempotent: a dependency no longer listed changes nothing."""
        return (await self._release(task_id, satisfied, None))[0]

    async def _release(self, task_id: str, satisfied: Collection[str], stands_in: Fallback | None) -> tuple[Task, bool]:
        """`release`, and whether this call wrote it. `stands_in`: a message that already stands in for the
        events should this process die before publishing them (the resolving dependency's claim check, from
        `guarded_by`): the hint goes without a dispatch request, and the message waits for these events too."""
        satisfied = frozenset(satisfied)  # looked up once per listed dependency (up to IN_ROW)
        guards = self.tasks.guards()
        guards.stands_in = stands_in
        now = guards.now
        changed = False

        async def release(task: Task) -> Unchanged | None:
            nonlocal changed
            changed = False  # as the last try decided
            rerun = task.rerun_when_ready and task.state in RESOLVED_STATES  # shared/operations/reruns.py
            if (task.runs and not rerun) or task.waiting is None or not any(d in satisfied for d in task.waiting):
                return UNCHANGED
            task.waiting = [d for d in task.waiting if d not in satisfied]
            if not task.waiting and not deadline_passed(task, now):
                if rerun:
                    await self._add_rerun(task, guards, now)
                else:
                    task.runs.append(Run("pending", "scheduled", now))
                    task.emit("task-pending", 0)
                    await guards.hint(task)
            changed = True
            return None

        task = await self.tasks.modify(task_id, release, guards)
        if changed and task.state == "pending" and stands_in is not None:  # it scheduled (or reran) the task
            self.stores.events.also_guarded_by(stands_in, Stream(TASKS_TABLE, task_id), task.event_seq)
        return task, changed

    async def release_soon(self, task_id: str, dependency: str, stands_in: Fallback | None = None) -> tuple[Task, bool]:
        """`release` of one dependency, written with the other releases of the same task that arrive meanwhile
        (`stands_in` only when every one of them has one: `_release`); the task as left, and whether the write
        released it from this one. TaskNotFound when the task is not written."""
        item = _Release(dependency, stands_in)
        await self._releases.add(task_id, item)
        assert item.task is not None
        return item.task, item.changed

    async def _release_together(self, task_id: str, items: list[_Release]) -> None:
        guards = [item.stands_in for item in items]
        stands_in = guards[0] if all(guard is not None for guard in guards) else None
        task, changed = await self._release(task_id, {item.dependency for item in items}, stands_in)
        for item in items:
            item.task, item.changed = task, changed

    async def schedule_task(self, task_id: str) -> Task:
        """scheduleTask: schedule a task that has no runs, whatever its dependencies say."""
        await self.stores.ready()
        return await self.schedule_unblocked(task_id, refuse_late=True)

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
            await self._add_rerun(task, guards, now, index_deadline=not deadline_indexed)
            deadline_indexed = True
            return None

        return await self.tasks.modify(task_id, rerun, guards)

    async def _add_rerun(self, task: Task, guards: Guards, now: dt.datetime, *, index_deadline: bool = True) -> None:
        """A new pending run of a resolved task (rerunTask, or a rerun that waited for its dependencies), its retries
        reset; any rerun that was waiting is done with. Its deadline row is written again first (it is there until
        the deadline, unless the task predates the index; once is enough across retries of one change)."""
        if index_deadline:
            await asyncio.gather(
                self.stores.deadlines.add(task.task_id, task.deadline, task.expires),
                self._succeeds_again(task) if task.state in UNSUCCESSFUL_STATES else nothing(),
            )
        task.runs.append(Run("pending", "rerun", now))
        task.retries_left = min(int(task.definition["retries"]), MAX_RUNS - len(task.runs))
        task.taken_until = None
        task.rerun_when_ready = False
        task.emit("task-pending", task.last_run_id)
        await guards.hint(task)

    async def _succeeds_again(self, task: Task) -> None:
        """A rerun: the task is no longer among its group's unsuccessful members (best effort: a failure leaves its
        push's row counting it, until it resolves again)."""
        try:
            await self.stores.groups.outcomes.forget(task.definition["taskGroupId"], task.task_id)
        except Exception:
            log.warning(
                "could not take a rerun task off its group's failures", exc_info=True, extra=fields(taskId=task.task_id)
            )

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

        task = await self.tasks.modify(task_id, cancel)
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

        task = await self.tasks.modify(task_id, report, guards)
        if changed:  # not a repeat
            metrics.resolved(state, reason)
        elif self.tasks.guarded() and self.tasks.resolver is not None:
            # Maybe the retry of a report whose process wrote it and died before answering, leaving what follows
            # it to the claim check (shared/operations/writes/repository.py): followed up now (idempotent), the answer
            # waiting for it as the first one would have.
            await self.tasks.resolver.follow_up_run(task, run_id)
        log.info(
            "run resolved %s/%s",
            state,
            reason,
            extra=fields(event=f"task-{state}", taskId=task_id, runId=run_id, reason=reason),
        )
        return task

    async def rehint(self, task_id: str, run_id: int, *, keep_previous: bool) -> bool:
        """Put a new pending hint for a pending run (the reconciler's repair of a lost hint). With
        `keep_previous` the run's earlier hints stay valid too (the first keeps its place in the queue); at most
        MAX_HINTS are kept. False when the run is no longer pending or its deadline passed."""
        guards = self.tasks.guards()
        now = guards.now
        hinted = False

        async def again(task: Task) -> Unchanged | None:
            nonlocal hinted
            run = task.runs[-1] if task.runs else None
            if run is None or task.last_run_id != run_id or run.state != "pending" or deadline_passed(task, now):
                hinted = False
                return UNCHANGED
            earlier = run.hint_ids()
            await guards.hint(task)
            assert run.hint_id is not None
            kept = [*earlier[:1], *earlier[1:][-(MAX_HINTS - 2) :]] if keep_previous else []
            run.hint_id = " ".join([*kept, run.hint_id])
            hinted = True
            return None

        await self.tasks.modify(task_id, again, guards)
        return hinted

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
