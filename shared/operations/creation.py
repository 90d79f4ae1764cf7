"""createTask: a definition checked, normalized and written with everything that must precede it.

Order, so that a crash anywhere leaves nothing that misleads: refusals first (group, a long list of dependencies);
then what must precede the task, at once where it can: for a task without dependencies, the deadline row (which
carries `expires` into the expiry index at the deadline: shared/domain/deadlines.py), the pending hint, the group
membership (and the dispatch request, where this process does not publish what it writes: otherwise the hint
stands in for it); for one with at most IN_ROW, its edges, each in one
transaction that proves its dependency's state (shared/operations/writes/edges.py), beside the index rows (the dispatch
request, as before) and an existing group's membership; then the task, waiting for the dependencies not yet
satisfied (shared/domain/dependencies.py). Round trips one after another: 2 without dependencies, 2 with (3 when a
dependency is not remembered here and is read first; 3 when all are satisfied already: the pending hint goes before
the task), up to ATTACH_AT_ONCE (100) dependencies: a longer list's edges take a round trip per further page, at
most IN_ROW (1000) of them. A longer list still keeps Taskcluster's requirement rows: edges and index rows, the
dependencies' read, the group membership with the notes to the dependencies, the task, then its requirements read
(whoever sees it unblocked first, this request or the resolution of its last dependency, schedules it).
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from shared import errors
from shared.domain.definitions import check_definition, normalize, refuse_dependencies
from shared.domain.dependencies import IN_ROW, POINT_READ_LIMIT
from shared.domain.groups import TaskGroup
from shared.domain.tasks import (
    TASKS_TABLE,
    Run,
    Task,
    TaskDefinition,
    accepted_states,
)
from shared.gather import all_of, nothing
from shared.operations.resolution.follow_up import leave_group
from shared.operations.scheduling import Scheduling
from shared.operations.writes.edges import DependencyEdges
from shared.operations.writes.group_store import GroupRows
from shared.operations.writes.repository import LOAD_CONCURRENCY, TaskRepository
from shared.outbox.rows import Stream
from shared.storage.base import all_at_once

DEPENDENCY_BATCH = 100  # dependencies read at once before the edges of a long list are written


def _answered_after_publishing(writer_publishes: bool, task: Task) -> bool:
    """Whether a created task's events go without a dispatch request, its answer waiting for them instead: where
    this process publishes, a task that waits for dependencies (`TaskCreation._announce`)."""
    return writer_publishes and bool(task.definition["dependencies"]) and not task.runs


@dataclass
class Creation:
    """One createTask's state: what is decided once for the request, and what its steps leave for the next."""

    task: Task
    now: dt.datetime
    group: TaskGroup | None  # the existing group, as check_joinable answered (None: new, or not read)
    sole: GroupRows | None  # a new group named after the task, written in the task's own transaction
    dependencies: list[str]
    in_row: bool  # what it waits for kept on its row (domain/dependencies.py)
    require: str
    accepted: tuple[str, ...]  # the states of a dependency that satisfy this task (`accepted_states`)
    writer_publishes: bool  # EventLog.answers_after_publishing, read once per creation (`_announce`)
    hinted: bool
    announced: int = 0  # the sequence number its dispatch request announced, for `write`
    hint_id: str | None = None
    satisfied: list[str] = field(default_factory=list)  # of a long list: those satisfied when read

    @property
    def definition(self) -> TaskDefinition:
        return self.task.definition

    @property
    def group_id(self) -> str:
        return str(self.definition["taskGroupId"])

    @property
    def scheduler_id(self) -> str:
        return str(self.definition["schedulerId"])


class TaskCreation:
    def __init__(self, tasks: TaskRepository, scheduling: Scheduling) -> None:
        self.tasks, self.scheduling = tasks, scheduling
        self.stores = tasks.stores
        self.edges = DependencyEdges(tasks)

    async def _announce(self, task: Task, writer_publishes: bool, *, hinted: bool = False) -> int:
        """The creation's dispatch request, unless this process publishes what it writes and
        - the task waits for dependencies (no run yet) and this process keeps up (`writer_publishes`:
          EventLog.answers_after_publishing, read once per creation): its answer waits for its event to be
          published instead (`EventLog.published`), and a caller that got no answer retries, which dispatches it;
        - or the task is pending at once (`hinted`: its hint put beside): the hint stands in for the request
          (`TaskRepository.guarded_by_hint`), the answer waiting for nothing (waiting for its two events made the
          lone lifecycle's createTask slower under load: docs/performance.md).
        One message put and deleted per task less. The sequence number announced, for `write`."""
        if hinted or _answered_after_publishing(writer_publishes, task):
            return task.event_seq + len(task.emitted)
        return await self.tasks.messages.announce(task)

    async def create_task(self, task_id: str, body: dict[str, Any]) -> Task:
        """createTask: `body` has passed the create-task-request schema (defaults filled in)."""
        creation = await self._plan(task_id, body)
        with self.stores.events.in_flight.writing(TASKS_TABLE, task_id):  # a claim of its hint here waits for it
            written = await self._write(creation)
        if not written:
            return await self._repeated(creation)
        await self._after_written(creation)
        seen = self.stores.workers.task_created_for(creation.task.task_queue_id)
        if seen is not None:  # once per task queue and process every few hours: after the answer
            self.stores.afterwards(seen)
        return await self._unblock(creation, creation.task, late=[])

    async def _plan(self, task_id: str, body: dict[str, Any]) -> Creation:
        """The definition checked and normalized, the group checked, and what is decided once for the request."""
        stores = self.stores
        await stores.ready()
        now = stores.now()
        definition = normalize(task_id, body)
        check_definition(definition, now, stores.settings.max_task_deadline_days)
        group_id, scheduler_id = definition["taskGroupId"], definition["schedulerId"]
        group = await stores.groups.check_joinable(group_id, scheduler_id, likely_new=group_id == task_id)
        dependencies = list(dict.fromkeys(definition["dependencies"]))
        in_row = 0 < len(dependencies) <= IN_ROW  # what it waits for kept on its row (domain/dependencies.py)
        require = "completed" if definition["requires"] == "all-completed" else "resolved"
        task = Task(
            task_id,
            definition,
            [],
            retries_left=definition["retries"],
            dependents_marked=True,
            has_dependents=False,
            waiting=[] if in_row else None,
        )
        task.emit("task-defined")
        if not dependencies:
            task.emit("task-pending", 0)
        return Creation(
            task=task,
            now=now,
            group=group,
            # A new group named after the task (the default) is written in the task's own transaction.
            sole=stores.groups.new_sole(task_id, scheduler_id, task.expires, now)
            if (group_id == task_id and group is None)
            else None,
            dependencies=dependencies,
            in_row=in_row,
            require=require,
            accepted=accepted_states(definition["requires"]),
            # Decided once: whether its events go without a dispatch request, its answer waiting for them.
            writer_publishes=stores.events.answers_after_publishing,
            # A task pending at once (its hint put before its write): the hint stands in for its dispatch request.
            hinted=stores.events.published_by_writers and self.tasks.messages.hint_ttl(task, now) > 0,
        )

    async def _write(self, creation: Creation) -> bool:
        """What must precede the task, by the shape of its dependencies, then the task; whether it was written
        (not: a task of that id existed)."""
        if creation.in_row:
            await self._precede_with_edges_on_its_row(creation)
        elif creation.dependencies:
            await self._precede_with_a_long_list(creation)
        else:
            await self._precede_pending_at_once(creation)
        task = creation.task
        written = await self.tasks.write(task, insert=True, announced=creation.announced, group=creation.sole)
        if not written and creation.sole is not None and await self.tasks.get(task.task_id) is None:
            return await self._join_the_group_that_exists(creation)
        return written

    def _join(self, creation: Creation) -> Coroutine[Any, Any, None]:
        """The task's membership of an existing group (a new one named after it goes in its own transaction)."""
        if creation.sole is not None:
            return nothing()
        task = creation.task
        return self.stores.groups.join(
            creation.group_id, creation.scheduler_id, task.task_id, task.expires, creation.now, creation.group
        )

    async def _precede_pending_at_once(self, creation: Creation) -> None:
        """No dependencies: what must precede the task's write, in any order among itself, so all at once (one
        round trip of latency instead of five)."""
        task = creation.task
        _, hint_id, _, creation.announced = await all_of(
            self.stores.deadlines.add(task.task_id, task.deadline, task.expires),
            self.tasks.messages.put_pending_hint(task, 0, creation.now),
            self._join(creation),
            self._announce(task, creation.writer_publishes, hinted=creation.hinted),
        )
        creation.hint_id = hint_id
        task.runs.append(Run("pending", "scheduled", creation.now))
        task.runs[0].hint_id = hint_id

    async def _precede_with_edges_on_its_row(self, creation: Creation) -> None:
        """Up to IN_ROW dependencies: the edges, each in one transaction with its dependency's flag, conditional
        on the row remembered or read (shared/operations/writes/edges.py): the dependency's state as of its edge, in one
        round trip. Beside them, what only has to precede the task's write: the index rows, the dispatch request
        and an existing group's membership, rows many requests write together (shared/storage/grouped.py), whose
        waits for one another's writes then add no round trip (a refusal leaves them; a new group is joined once
        the dependencies are found, so that a refused task never makes one)."""
        task, task_id, dependencies = creation.task, creation.task.task_id, creation.dependencies
        early = creation.group is not None and creation.sole is None
        guards = asyncio.ensure_future(
            all_of(
                self.stores.deadlines.add(task_id, task.deadline, task.expires),
                self._announce(task, creation.writer_publishes),
                self._join(creation) if early else nothing(),
            )
        )
        try:
            found = await self.edges.attach(task_id, dependencies, creation.require, task.expires)
            refuse_dependencies([d for d in dependencies if d != task_id], found, creation.definition)
        except BaseException as failed:
            await asyncio.wait([guards])
            if isinstance(failed, errors.InputError):
                await self._undo(task_id, list(found), creation.group_id if early else None)
            raise
        _, creation.announced, _ = await guards
        # What it waits for (a self-dependency included: only scheduleTask releases that).
        task.waiting = [d for d in dependencies if d not in found or found[d].state not in creation.accepted]
        if not task.waiting:
            task.runs.append(Run("pending", "scheduled", creation.now))
            task.emit("task-pending", 0)
            _, hint_id, creation.announced = await all_of(
                nothing() if early else self._join(creation),
                self.tasks.messages.put_pending_hint(task, 0, creation.now),
                self._announce(task, creation.writer_publishes, hinted=creation.hinted),
            )
            creation.hint_id = task.runs[0].hint_id = hint_id
        elif not early:
            await self._join(creation)

    async def _precede_with_a_long_list(self, creation: Creation) -> None:
        """More than IN_ROW dependencies, Taskcluster's requirement rows: edges before the dependencies are read
        (a dependency that resolves meanwhile finds this task); with them, the rows and messages that precede the
        task's write and that a refusal leaves harmlessly (the deadline row, the dispatch request: hints that find
        nothing)."""
        stores, task, dependencies = self.stores, creation.task, creation.dependencies
        checked = (
            await self._precheck_dependencies(task.task_id, creation.definition)
            if len(dependencies) > POINT_READ_LIMIT
            else None
        )
        _, _, creation.announced = await all_of(
            stores.deps.add(task.task_id, dependencies, creation.require, task.expires),
            stores.deadlines.add(task.task_id, task.deadline, task.expires),
            self._announce(task, creation.writer_publishes),
        )
        try:
            # The group learns of the task once its dependencies were read and found (a phantom member would hold
            # the group unresolved): with their notes, which refuse only a dependency deleted since it was read
            # (the reconciler then drops the member).
            creation.satisfied = await self._check_dependencies(
                task.task_id, creation.definition, checked, alongside=lambda: self._join(creation)
            )
        except errors.InputError:
            await stores.deps.remove(task.task_id, dependencies)
            found = {t.task_id: t for t in await self.tasks.load_many(dependencies)}
            await stores.deps.unmark([d for d in dependencies if d not in found])
            raise

    async def _join_the_group_that_exists(self, creation: Creation) -> bool:
        """The task's own transaction failed on its new group's row, no task being there: the group exists
        (another task named it first). Join it as any member, then write the task."""
        stores, task = self.stores, creation.task
        group = await stores.groups.check_joinable(creation.group_id, creation.scheduler_id)
        await stores.groups.join(
            creation.group_id, creation.scheduler_id, task.task_id, task.expires, creation.now, group
        )
        return await self.tasks.write(task, insert=True, announced=creation.announced)

    async def _after_written(self, creation: Creation) -> None:
        """A pending task's hint now guards it; a task answered after its publishing waits for it."""
        task = creation.task
        if creation.hinted and creation.hint_id is not None:
            self.tasks.messages.guarded_by_hint(task, creation.hint_id, creation.now)
        if _answered_after_publishing(creation.writer_publishes, task):
            # Instead of a dispatch request (`_announce`).
            await self.stores.events.published(Stream(TASKS_TABLE, task.task_id), task.event_seq)

    async def _repeated(self, creation: Creation) -> Task:
        """A task of that id exists: another definition is a conflict; the same is a retry, which finishes what
        the call it repeats may have left undone (it may have died after its write)."""
        stores, task_id = self.stores, creation.task.task_id
        existing = await self.tasks.load(task_id)
        if existing.definition != creation.definition:
            raise errors.TaskIdConflict(taskId=task_id)
        if stores.events.answers_after_publishing:
            # The call it repeats may have died between its write and its publishing (no dispatch request stood
            # in for that: `_announce`), so the task's events are dispatched before the answer.
            await stores.events.ensure_dispatched(Stream(TASKS_TABLE, task_id), existing.event_seq)
        if not creation.dependencies or existing.runs:
            return existing
        late: list[str] = []
        if existing.waiting is not None:  # its edges again (it may have died before them), proving their states
            proven = await self.edges.attach(task_id, existing.waiting, creation.require, existing.expires)
            late = [d for d, t in proven.items() if t.state in creation.accepted]
        return await self._unblock(creation, existing, late)

    async def _unblock(self, creation: Creation, task: Task, late: list[str]) -> Task:
        """A written task that waits for dependencies, released from those found satisfied since (`late`, on its
        row), or scheduled once none of a long list's requirement rows is left."""
        if task.waiting is not None:
            return await self.scheduling.release(task.task_id, late) if late else task
        if creation.dependencies:
            # The satisfied dependencies' rows go, and the others are read (they may have gone meanwhile, their
            # dependency resolved and its resolver found this task not written yet): at once.
            waiting_for = [d for d in creation.dependencies if d not in creation.satisfied]  # a self-dependency too
            _, blocked = await all_of(
                self.stores.deps.satisfy(task.task_id, creation.satisfied),
                self.stores.deps.blocked(task.task_id, waiting_for),
            )
            if not blocked:
                return await self.scheduling.schedule_unblocked(task.task_id)
        return task

    async def _undo(self, task_id: str, dependencies: list[str], joined: str | None) -> None:
        """What a refused createTask with dependencies kept on its row wrote before it was refused: its edges in
        `dependencies` (those that exist) and its place in the group `joined` (leaving it as a resolved member
        does, so that a group it held open is announced resolved)."""
        stores = self.stores

        async def leave(task_group_id: str) -> None:
            await leave_group(stores, task_group_id, task_id)
            await stores.groups.forget_member(task_group_id, task_id)

        await all_of(stores.deps.remove_here(task_id, dependencies), leave(joined) if joined is not None else nothing())

    async def _check_dependencies(
        self,
        task_id: str,
        definition: TaskDefinition,
        checked: dict[str, Task] | None = None,
        alongside: Callable[[], Coroutine[Any, Any, None]] = nothing,
    ) -> list[str]:
        """Check the dependencies exist and outlive this task's deadline; the ones already satisfied. Those that
        were satisfied in `checked` (read before the edges were written) are not read again. `alongside` runs
        once they were read and found, at the same time as the notes to those that learn of a first dependent."""
        accepted = accepted_states(definition["requires"])
        wanted = [d for d in dict.fromkeys(definition["dependencies"]) if d != task_id]
        found = {d: t for d, t in (checked or {}).items() if t.state in accepted}
        found.update((t.task_id, t) for t in await self.tasks.load_many(d for d in wanted if d not in found))
        refuse_dependencies(wanted, found, definition)
        # Each dependency this task still waits for learns that it has a dependent (its resolution then looks
        # for them): after the edges are written, and conditional on the row read (a resolution written
        # meanwhile fails it, and the dependency is read again).
        limit = asyncio.Semaphore(LOAD_CONCURRENCY)

        async def note(dependency: Task) -> None:
            async with limit:
                noted = await self.tasks.note_dependent(dependency, lambda t: t.state in accepted)
            if noted is None:
                raise errors.InputError("Dependencies not found: {missing}", missing=dependency.task_id)
            found[dependency.task_id] = noted

        await all_at_once(
            [
                alongside(),
                *(note(t) for t in list(found.values()) if t.state not in accepted and t.has_dependents is False),
            ]
        )
        return [d for d, t in found.items() if t.state in accepted]

    async def _precheck_dependencies(self, task_id: str, definition: TaskDefinition) -> dict[str, Task]:
        """Before any edge of a long dependency list is written: read the dependencies a batch at a time and
        refuse at the first batch with a missing or expiring one, so that a refused createTask costs a batch of
        reads rather than an edge, a marker and a read per dependency (10,000 dependencies took minutes)."""
        wanted = [d for d in dict.fromkeys(definition["dependencies"]) if d != task_id]
        found: dict[str, Task] = {}
        for start in range(0, len(wanted), DEPENDENCY_BATCH):
            batch = wanted[start : start + DEPENDENCY_BATCH]
            tasks = {t.task_id: t for t in await self.tasks.load_many(batch)}
            refuse_dependencies(batch, tasks, definition)
            found.update(tasks)
        return found
