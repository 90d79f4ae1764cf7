"""Scheduling: a task given its first run (a dependency's resolution unblocked it, or scheduleTask), a rerun
that waited for its dependencies, what a waiting task still waits for, and a pending run hinted again (the
reconciler's repair). None of these resolves a run: each is one `TaskRepository.modify` without the resolution's
steps, which is what lets the dependency resolution (shared/operations/resolution/follow_up.py) use them.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Collection
from dataclasses import dataclass

from shared import errors
from shared.domain.group_outcomes import UNSUCCESSFUL_STATES
from shared.domain.tasks import MAX_RUNS, RESOLVED_STATES, TASKS_TABLE, Run, Task
from shared.gather import nothing
from shared.logs import fields
from shared.operations.writes.guards import Guards
from shared.operations.writes.repository import UNCHANGED, TaskRepository, Unchanged
from shared.outbox.log import Fallback
from shared.outbox.rows import Stream
from shared.storage.grouped import GroupCommit

log = logging.getLogger("queue")

MAX_HINTS = 4  # hints a pending run accepts at once: its first, and the reconciler's latest


def deadline_passed(task: Task, now: dt.datetime) -> bool:
    return task.deadline <= now


@dataclass
class _Release:
    """One dependency's release of a dependent, written with the others that arrive meanwhile; what it left."""

    dependency: str
    stands_in: Fallback | None  # the dependency's claim check, standing in for the dependent's events
    task: Task | None = None
    changed: bool = False


class Scheduling:
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
                await self.add_rerun(task, guards, now)
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
                    await self.add_rerun(task, guards, now)
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

    async def add_rerun(self, task: Task, guards: Guards, now: dt.datetime, *, index_deadline: bool = True) -> None:
        """A new pending run of a resolved task (rerunTask, or a rerun that waited for its dependencies), its retries
        reset; any rerun that was waiting is done with. Its deadline row is written again first (it is there until
        the deadline, unless the task predates the index; once is enough across retries of one change)."""
        if index_deadline:
            await asyncio.gather(
                self.stores.deadlines.add(task.task_id, task.deadline, task.expires),
                self.stores.groups.reactivate(task.definition["taskGroupId"], task.task_id, task.expires, now),
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
