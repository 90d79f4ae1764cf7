"""What follows a run's resolution: the task leaves its group's active set (the group resolves when none is left),
its dependents are released a page at a time, and a completed task's Index entry is written. Every step is
idempotent, so a duplicated or re-delivered message changes nothing. The protocol: this package's docstring
(shared/operations/resolution/__init__.py)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
from dataclasses import replace
from typing import Any, Literal

from shared import errors, faults, timing
from shared.domain.dependencies import LEGACY_PAGE, LISTED, Dependent
from shared.domain.events import Event
from shared.domain.group_outcomes import UNSUCCESSFUL_STATES
from shared.domain.groups import GROUP_STREAMS, TaskGroup, TaskGroupNotFound, group_changed
from shared.domain.messages import RESOLVED_QUEUE, ResolvedCheck
from shared.domain.tasks import RESOLVED_STATES, TASKS_TABLE, Run, Task, newest_run
from shared.gather import nothing
from shared.operations.index import TaskIndex
from shared.operations.scheduling import Scheduling
from shared.operations.writes.repository import LOAD_CONCURRENCY, TaskRepository
from shared.operations.writes.stores import Stores
from shared.outbox.log import Fallback
from shared.outbox.rows import Stream

DEPENDENTS_PAGE = 250  # dependents handled by one resolution message; the next page goes to another message
assert DEPENDENTS_PAGE >= LISTED  # a row's listed dependents are one page
ResolutionOutcome = Literal["resolved", "not-yet", "stale", "task-gone"]


def resolved_run(task: Task, run_id: int) -> bool:
    return run_id < len(task.runs) and task.runs[run_id].resolved_state


class FollowUp:
    def __init__(self, tasks: TaskRepository, scheduling: Scheduling, index: TaskIndex) -> None:
        self.tasks, self.scheduling, self.index = tasks, scheduling, index
        self.stores = tasks.stores

    def queue_of(self, check: ResolvedCheck) -> str:
        """The `task-resolved` shard of the check's task."""
        return self.tasks.messages.check_queue(RESOLVED_QUEUE, check.taskId)

    async def resolve_dependencies(
        self, check: ResolvedCheck, *, with_group: bool = True, stands_in: Fallback | None = None
    ) -> ResolutionOutcome:
        """A task resolved. On the first page: take it out of its group's active set. Then unblock a page of
        its dependents, handing the next page to a new message first, so no invocation runs long and several
        hosts share a large fan-out. Every step is idempotent: a duplicated message changes nothing. Not
        `with_group`: the group step is left out, for the caller to run after (`resolve_group_member`): the
        dependents and the Index only (what a report's answer waits for: shared/operations/writes/repository.py).
        `stands_in`: the resolution's claim check, which also stands in for the events of the dependents it
        releases (no dispatch requests: Scheduling.release_soon). Without one (a message, the check, a repeated
        report following a resolution up), a dependent found released already has its events dispatched: the
        process that released it may have died before publishing them."""
        stores = self.stores
        await stores.ready()
        faults.point("resolve-dependencies")
        now = stores.now()
        if check.dependent is not None:
            return await self._release_later(check, now)
        task, run = await self._read_resolved(check)
        if task is not None and (run is None or not run.resolved_state):
            return await self._not_written_yet(check, task, run, now)
        group_step: asyncio.Future[Any] = asyncio.ensure_future(
            self.resolve_group_member(check, newest_run(task, check.runId)) if with_group else nothing()
        )
        if task is None or run is None:
            await group_step
            return "task-gone"
        resolution = run.state
        if resolution == "completed" and check.continuation is None:
            # Indexed beside the group step: should either fail, the message comes back and both run again.
            group_step = asyncio.gather(group_step, self.index.index_completed(task, check.runId))
        if check.continuation is None and not task.dependents_here and await self._nothing_depends_on(task):
            await group_step
            return "resolved"  # nothing depends on it (its row says so, or no marker): no partition query
        dependents = await self._dependents_page(check, task)
        limit = asyncio.Semaphore(LOAD_CONCURRENCY)
        await asyncio.gather(
            group_step, *(self._unblock(check, d, resolution, now, stands_in, limit) for d in dependents)
        )
        return "resolved"

    async def _read_resolved(self, check: ResolvedCheck) -> tuple[Task | None, Run | None]:
        """The task and its run as the check's resolution left them: a remembered row that shows the run resolved
        is enough (a resolved run stays so); otherwise read, again after short pauses while the run is not
        resolved yet (the check was written just ahead of the resolution it announces)."""
        known = self.tasks.known.get(check.taskId)
        if (known is None or not resolved_run(known, check.runId)) and await self.stores.events.in_flight.settled(
            TASKS_TABLE, check.taskId
        ):
            known = self.tasks.known.get(check.taskId)  # the resolution was being written here: now it is known
        task: Task | None = None
        run: Run | None = None
        for pause in (*timing.CLAIM_SETTLE_PAUSES, None):
            task = (
                known if known is not None and resolved_run(known, check.runId) else await self.tasks.get(check.taskId)
            )
            known = None
            run = task.runs[check.runId] if task is not None and check.runId < len(task.runs) else None
            if task is None or (run is not None and run.resolved_state) or pause is None:
                break
            await asyncio.sleep(pause)
        return task, run

    async def _not_written_yet(
        self, check: ResolvedCheck, task: Task, run: Run | None, now: dt.datetime
    ) -> ResolutionOutcome:
        """The run is not resolved: wait for its resolution a while; once old, it was a write that lost a race."""
        stores = self.stores
        if now - check.since < dt.timedelta(seconds=stores.settings.hint_grace):
            await stores.queues.put(self.queue_of(check), check.encode(), visible_in=stores.settings.hint_retry_delay)
            return "not-yet"
        if run is not None and run.state == "running" and run.taken_until is not None:
            # This may have been the run's claim check, turned into a resolution that was never written
            # (Guards.resolved): the claim must still expire.
            await self.tasks.messages.put_claim_check(task.task_id, check.runId, run.taken_until, now)
        return "stale"

    async def _nothing_depends_on(self, task: Task) -> bool:
        """No dependents listed on its row: its row says nothing depends on it, or, for older rows, the marker
        and a look at TaskDependency say so."""
        if task.has_dependents is False:
            return True
        return (
            task.has_dependents is None
            and task.dependents_marked
            and not await self.stores.deps.has_dependents(task.task_id)
        )

    async def _dependents_page(self, check: ResolvedCheck, task: Task) -> list[Dependent]:
        """The check's page of dependents; the next page, if any, handed to a message of its own first."""
        stores = self.stores
        legacy = task.has_dependents is not False  # TaskDependency edges (requirement rows, or older rows)
        listed = task.dependents if task.dependents_here and check.continuation is None else None
        if listed is not None:
            # Listed on the row resolved (the list as of the resolution: an edge written later failed on its ETag,
            # and its dependent saw this resolution): no query, unless older edges are in TaskDependency too.
            dependents, token = [Dependent(d, require, 0, None, in_row=True) for d, require in listed], None
            if legacy:  # and those of TaskDependency (dependents with long lists, older rows): their first page
                more, token = await stores.deps.dependents(
                    check.taskId, limit=DEPENDENTS_PAGE, continuation=LEGACY_PAGE, legacy=True
                )
                dependents += more
        else:
            dependents, token = await stores.deps.dependents(
                check.taskId,
                limit=DEPENDENTS_PAGE,
                continuation=check.continuation,
                here=task.dependents_here,
                legacy=legacy,
            )
        if token is not None:
            await stores.queues.put(self.queue_of(check), replace(check, continuation=token).encode())
        return dependents

    async def _unblock(
        self,
        check: ResolvedCheck,
        dependent: Dependent,
        resolution: str,
        now: dt.datetime,
        stands_in: Fallback | None,
        limit: asyncio.Semaphore,
    ) -> None:
        """One dependent of the resolved task: released (kept on its row) or its requirement row satisfied and,
        once none is left, scheduled."""
        if dependent.require == "completed" and resolution != "completed":
            return  # all-completed: it stays blocked (until scheduleTask, cancel or its deadline)
        deps = self.stores.deps
        async with limit:
            if dependent.in_row:
                await self._release(check, dependent.task_id, now, stands_in)
                faults.point("resolution-mid-page")
                return
            if dependent.count != 1:  # with a single dependency (this one) it is unblocked now
                await deps.satisfy(dependent.task_id, [check.taskId])
                if await deps.blocked(dependent.task_id, dependent.others):
                    return
            try:
                await self.scheduling.schedule_unblocked(dependent.task_id)
            except errors.TaskNotFound:
                # Its createTask has not written it yet, and reads its requirements after writing it. With a
                # single dependency the requirement row is normally left (the schedule makes it moot): drop it,
                # then try once more, so that one of the two sides sees the other's write.
                if dependent.count == 1:
                    await deps.satisfy(dependent.task_id, [check.taskId])
                    with contextlib.suppress(errors.TaskNotFound):
                        await self.scheduling.schedule_unblocked(dependent.task_id)
            faults.point("resolution-mid-page")

    async def _release(
        self, check: ResolvedCheck, dependent: str, now: dt.datetime, stands_in: Fallback | None
    ) -> None:
        """Release a dependent that keeps what it waits for on its row. Not written yet: its createTask read this
        task before it resolved and is about to write it waiting for this one. Being written here, it is waited
        for; otherwise a message of its own comes back for it (`_release_later`)."""
        try:
            task, changed = await self.scheduling.release_soon(dependent, check.taskId, stands_in)
            if stands_in is None and not changed and task.runs:
                # Released before: by a process that may have died before publishing it, this resolution's claim
                # check standing in (usually found published: a read of its cursor).
                await self.stores.events.ensure_dispatched(Stream(TASKS_TABLE, dependent), task.event_seq)
            return
        except errors.TaskNotFound:
            if await self.stores.events.in_flight.settled(TASKS_TABLE, dependent):
                with contextlib.suppress(errors.TaskNotFound):
                    await self.scheduling.release(dependent, (check.taskId,))
                    return
        later = replace(check, continuation=None, since=now, dependent=dependent)
        await self.stores.queues.put(
            self.queue_of(check), later.encode(), visible_in=self.stores.settings.hint_retry_delay
        )

    async def _release_later(self, check: ResolvedCheck, now: dt.datetime) -> ResolutionOutcome:
        """A message of one dependent not written when its dependency's resolution looked: released once written;
        after `hint_grace` its createTask is taken to have died before writing it (a retry of that createTask
        reads this task resolved; the reconciler releases a task written later still)."""
        assert check.dependent is not None
        try:
            await self.scheduling.release(check.dependent, (check.taskId,))
            return "resolved"
        except errors.TaskNotFound:
            if now - check.since < dt.timedelta(seconds=self.stores.settings.hint_grace):
                await self.stores.queues.put(
                    self.queue_of(check), check.encode(), visible_in=self.stores.settings.hint_retry_delay
                )
                return "not-yet"
            return "stale"

    async def follow_up_run(self, task: Task, run_id: int) -> None:
        """What a resolved run's claim check does when its resolution's process did not get to it (and a worker's
        repeated report, which may be the retry of one whose process died before answering): the task's events
        (and those of the group named after it, which a sole member's resolution records) dispatched, and,
        when the run resolved the task, its dependents and group resolved. A sole member's resolution, which left
        the active set and recorded the group's resolution in its own transaction, has nothing more to follow
        when nothing depends on it (resolving the group again would announce it twice)."""
        stores = self.stores
        await stores.events.ensure_dispatched(Stream(TASKS_TABLE, task.task_id), task.event_seq)
        if task.state not in RESOLVED_STATES or run_id != task.last_run_id:
            return  # retried: the task goes on, nothing follows yet
        group_id = task.definition["taskGroupId"]
        if group_id == task.task_id:
            group = await stores.groups.get(group_id)
            if group is not None:
                await stores.events.ensure_dispatched(Stream(GROUP_STREAMS, group_id), group.event_seq)
                if (
                    group.sole == task.task_id
                    and task.has_dependents is False
                    and not task.dependents_here
                    and not await stores.groups.is_active(group_id, task.task_id)
                ):
                    return
        resolved = task.runs[run_id].resolved or stores.now()
        await self.resolve_dependencies(ResolvedCheck(task.task_id, run_id, group_id, None, resolved))

    async def follow_up(self, check: ResolvedCheck) -> ResolutionOutcome:
        """A resolution message's handler: on its first page, the task's events dispatched, for the message may
        also stand in for a resolving process that died or failed before it published them (a guarded resolution:
        shared/operations/writes/repository.py); then `resolve_dependencies` (its group's events come after the
        task's)."""
        if check.continuation is None and check.dependent is None:
            # Read, not remembered: a row this process remembers may predate the resolution another wrote.
            task = await self.tasks.get(check.taskId)
            if task is not None and resolved_run(task, check.runId):
                await self.stores.events.ensure_dispatched(Stream(TASKS_TABLE, check.taskId), task.event_seq)
        return await self.resolve_dependencies(check)

    async def resolve_group_member(self, check: ResolvedCheck, run: Run | None = None) -> None:
        """On the first page of a resolution: the task leaves its group's active set; the group is resolved when
        none is left (announced at least once: two last members resolving together may both announce it, as in
        Taskcluster, where a group can also resolve again after new tasks). `run`, the task's newest, when it
        failed or ended in an exception, is recorded among the group's unsuccessful members beside it."""
        if check.continuation is not None:
            return
        leaving = leave_group(self.stores, check.taskGroupId, check.taskId)
        if run is None or run.state not in UNSUCCESSFUL_STATES:
            await leaving
            return
        outcomes = self.stores.groups.outcomes
        reason, resolved = run.reason_resolved or run.state, run.resolved or check.since
        await asyncio.gather(
            leaving, outcomes.record(check.taskGroupId, check.taskId, run.state, check.runId, reason, resolved)
        )


async def leave_group(stores: Stores, task_group_id: str, task_id: str) -> None:
    """A task leaves its group's active set (resolved, or refused after it joined); the group is resolved when
    none is left."""
    groups = stores.groups
    now = stores.now()

    def resolved(group: TaskGroup) -> list[Event]:
        return [group_changed("task-group-resolved", group, now)]

    if await groups.resolve_sole(task_group_id, task_id, resolved):
        return  # it was the group's only member: resolved in one transaction
    if await groups.resolve_member(task_group_id, task_id):
        with contextlib.suppress(TaskGroupNotFound):
            await groups.update(task_group_id, lambda g: g, resolved)
