"""The task unit of work: every change to a task goes through `TaskRepository.modify`.

Rules every change follows:
- The task entity is the truth. Each change is a read-modify-write conditional on the ETag read; a lost race
  re-reads and decides again.
- A change may start from the row this process last wrote or read (`KnownTasks`) instead of reading it again.
  Nothing is decided on a remembered row alone: a change made from it is written on its ETag (a row changed
  elsewhere fails the write, and the change starts over from a fresh read), and an outcome that writes nothing (a
  refusal, nothing to do) stands only after a read shows the same ETag.
- A queue message that guards a change (pending hint, claim check, resolution message) is written *before* the
  entity change it guards (shared/operations/writes/guards.py), so a crash between the two leaves at most a
  harmless stale message, never a task that nothing will move. Readers of a message re-check state, so stale and
  duplicated messages do nothing.
- `modify` is the same loop for every change: read, decide, the steps before the write, the write, the steps
  after it. A change that resolves a run hands it the resolution's steps (shared/operations/resolution/steps.py:
  its live logs sealed, its resolution message or claim check, what follows it); any other change has none.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Literal, NamedTuple, Protocol

from shared import errors, faults
from shared.domain.events import task_event
from shared.domain.tasks import RESOLVED_STATES, TASKS_TABLE, KnownTasks, Task, task_row
from shared.logs import fields
from shared.operations.writes.group_store import GroupRows
from shared.operations.writes.guards import Guards
from shared.operations.writes.messages import TaskMessages
from shared.operations.writes.stores import Stores
from shared.outbox.rows import Stream, event_ops
from shared.storage.base import Entity, Op

log = logging.getLogger("queue")

LOAD_CONCURRENCY = 32
KNOWN_TASKS = 10_000  # task rows remembered with their ETags: about 30 MB at most


class Unchanged:
    """Returned by a mutation that decided no write is needed."""


UNCHANGED = Unchanged()
Mutation = Callable[[Task], Awaitable[Unchanged | None]]


class Before(NamedTuple):
    """What a change must know of the task as it was before its mutation."""

    resolved: bool
    running: bool  # its last run was running
    etag: str | None
    last_run: int  # its last run's id (-1: none)
    last_resolved: bool  # its last run was resolved

    @classmethod
    def of(cls, task: Task) -> Before:
        last = task.runs[-1] if task.runs else None
        return cls(
            task.state in RESOLVED_STATES,
            last is not None and last.state == "running",
            task.etag,
            len(task.runs) - 1,
            last is not None and bool(last.resolved_state),
        )

    def resolving(self, task: Task) -> bool:
        """Whether the change resolves the task."""
        return task.state in RESOLVED_STATES and not self.resolved

    def resolves_a_run(self, task: Task) -> bool:
        """Whether the change resolves a run: the task, or the run it had (then retried), or a first run that is
        born resolved (a cancel or deadline before any run)."""
        if self.resolving(task):
            return True
        run = task.runs[self.last_run] if 0 <= self.last_run < len(task.runs) else None
        return run is not None and bool(run.resolved_state) and not self.last_resolved


class Planned(NamedTuple):
    """What a change's steps before its write decided: the sequence number its events were announced up to (None:
    the write announces them), the group rows written with it, whether a message put before stands in for the
    dispatch of its events (no request), and what follows the write (told whether it was written)."""

    announced: int | None
    group: GroupRows | None = None
    guarded: bool = False
    after: Callable[[bool], Awaitable[None]] | None = None

    @classmethod
    def plain(cls, guards: Guards) -> Planned:
        """A write with no steps of its own: its events announced as the guards have it."""
        return cls(guards.announced, guarded=guards.stands_in is not None)


class WriteSteps(Protocol):
    """The steps a kind of change takes around its write, which `modify` hands the task as mutated."""

    async def before(self, task: Task, guards: Guards, before: Before) -> Planned: ...


class ResolutionWithoutItsSteps(RuntimeError):
    """A change that resolves a run was written without the resolution's steps (ResolutionSteps): nothing would
    follow the resolution. A programming error, raised before anything is written."""


class PlainWrite:
    """The steps of a change that resolves no run: none but the write, its events announced with a hint put
    before it (Guards.hint)."""

    async def before(self, task: Task, guards: Guards, before: Before) -> Planned:
        if before.resolves_a_run(task):
            raise ResolutionWithoutItsSteps(task.task_id)
        return Planned.plain(guards)


PLAIN = PlainWrite()


Decision = Literal["changed", "unchanged"] | Task  # what `_decide` makes of a mutation


class TaskRepository:
    def __init__(self, stores: Stores) -> None:
        self.stores = stores
        self.messages = TaskMessages(stores)
        self.known = KnownTasks(KNOWN_TASKS)
        self._noting: dict[str, asyncio.Future[Task | None]] = {}  # note_dependent writes under way, by task

    def guards(self) -> Guards:
        return Guards(self.messages, self.stores.now())

    # --- reading -------------------------------------------------------------------------------------------------

    async def get(self, task_id: str) -> Task | None:
        entity = await self.stores.tables.get(TASKS_TABLE, task_id, task_row(task_id))
        if entity is None:
            self.known.forget(task_id)
            return None
        self.known.put(entity)
        return Task.from_entity(entity)

    async def load(self, task_id: str) -> Task:
        """The task; 404 TaskNotFound when there is none."""
        task = await self.get(task_id)
        if task is None:
            raise errors.TaskNotFound(taskId=task_id)
        return task

    async def load_many(self, task_ids: Iterable[str], *, at_once: int = LOAD_CONCURRENCY) -> list[Task]:
        """The tasks that exist among `task_ids`, in the order asked (`at_once` read at the same time); unknown
        ids are left out."""
        limit = asyncio.Semaphore(at_once)

        async def one(task_id: str) -> Task | None:
            async with limit:
                return await self.get(task_id)

        found = await asyncio.gather(*(one(t) for t in dict.fromkeys(task_ids)))
        return [t for t in found if t is not None]

    async def note_dependent(self, task: Task, satisfies: Callable[[Task], bool]) -> Task | None:
        """A task being created waits for `task` (its edge is written): flag `task`'s row as having dependents,
        conditional on the ETag read, unless a fresh read shows it `satisfies` the dependent already (resolved
        as required: the dependent need not wait) or flagged by another. The row as it now stands; None when
        it is gone. A resolution written before the flag fails the flag's condition; one written after it sees
        the flag and looks for the dependents (shared/operations/resolution/follow_up.py); a row written before the flag
        existed (None) gets it too, so that a dependent needs no marker row. The notes of one task that
        come together (a build's tests, created at once, each its first dependent as far as it read) share
        the first one's write: its outcome, a row flagged or found resolved after their edges were written, is
        what each of them would have found."""
        if task.has_dependents is True:
            return task
        shared = self._noting.get(task.task_id)
        if shared is None:
            shared = self._noting[task.task_id] = asyncio.ensure_future(self._note(task))
            shared.add_done_callback(lambda _: self._noting.pop(task.task_id, None))
        current = await asyncio.shield(shared)
        if current is not None and current.has_dependents is not True and not satisfies(current):
            return await self._note(current, satisfies)  # it stopped at another's notion of satisfied
        return current

    async def _note(
        self, task: Task, satisfies: Callable[[Task], bool] = lambda t: t.state in RESOLVED_STATES
    ) -> Task | None:
        current: Task | None = task
        while current is not None and current.has_dependents is not True and not satisfies(current):
            flag = Op(
                "merge", Entity(current.task_id, task_row(current.task_id), {"hasDependents": True}, current.etag)
            )
            written = await self.stores.tables.commit(TASKS_TABLE, [flag])
            if written is not None:
                # The row as stored now: the one the merge was conditional on, flagged (its claim starts from it).
                current.has_dependents, current.etag = True, written[0]
                self.known.put(current.to_entity())
                return current
            self.known.forget(current.task_id)
            current = await self.get(current.task_id)
        return current

    async def recheck(self, task_id: str, etag: str | None) -> tuple[bool, Task | None]:
        """After a decision made on a remembered row that wrote nothing (a refusal, nothing to do): whether the
        stored row is still the one decided on (the decision stands), and the stored task (None: gone)."""
        stored = await self.get(task_id)
        return stored is not None and stored.etag == etag, stored

    # --- changing ------------------------------------------------------------------------------------------------

    async def modify(
        self, task_id: str, mutate: Mutation, guards: Guards | None = None, steps: WriteSteps = PLAIN
    ) -> Task:
        """Read, mutate, write conditionally on the ETag, with the change's `steps` around the write; on a lost
        race read again and re-decide. A change that may resolve a run hands the resolution's steps."""
        guards = guards or self.guards()
        task: Task | None = self.known.get(task_id)
        fresh = task is None  # whether `task` was read from storage rather than remembered (KnownTasks)
        while True:
            if task is None:
                task, fresh = await self.load(task_id), True
            before = Before.of(task)
            decided = await self._decide(task, fresh, before.etag, mutate)
            if decided == "unchanged":
                return task
            if isinstance(decided, Task):
                task, fresh = decided, True  # decided on a remembered row that changed: decide again
                continue
            if await self._write_change(task, guards, before, steps):
                return task
            task = None
            log.debug("lost a write race, retrying", extra=fields(taskId=task_id))

    async def _decide(self, task: Task, fresh: bool, etag: str | None, mutate: Mutation) -> Decision:
        """Apply the mutation: "changed" (to write), or "unchanged" (nothing to write, or a refusal raised) once
        a remembered row is found to be storage's still; storage's row when it is not (decide again on it)."""
        refusal: errors.QueueError | None = None
        try:
            unchanged = await mutate(task) is UNCHANGED
        except errors.QueueError as exc:
            unchanged, refusal = True, exc
        if not unchanged:
            return "changed"
        if not fresh:
            same, stored = await self.recheck(task.task_id, etag)
            if stored is None:
                raise errors.TaskNotFound(taskId=task.task_id)
            if not same:
                return stored
        if refusal is not None:
            raise refusal
        return "unchanged"

    async def _write_change(self, task: Task, guards: Guards, before: Before, steps: WriteSteps) -> bool:
        """Write a mutated task on the ETag it was read with, its steps before and after it. Whether it was
        written (not: the task changed meanwhile)."""
        with self.stores.events.in_flight.writing(TASKS_TABLE, task.task_id):  # a message put before: its reader waits
            planned = await steps.before(task, guards, before)
            written = await self.write(task, announced=planned.announced, group=planned.group, guarded=planned.guarded)
        if planned.after is not None:
            await planned.after(written)
        return written

    async def write(
        self,
        task: Task,
        *,
        insert: bool = False,
        extra: Sequence[Op] = (),
        touch: bool = False,
        announced: int | None = None,
        group: GroupRows | None = None,
        guarded: bool = False,
    ) -> bool:
        """Store a changed task (replace, conditional on its ETag; or insert) together with the events it
        announces and `extra` rows of its partition (artifacts), in one transaction. `touch`: the task itself
        did not change, only its event count is written (still conditional on the ETag, so that the extra rows
        are written against the state that was read). `group`: its group's rows, written with it (the group is
        named after the task: shared/domain/groups.py), told the outcome. `guarded`: a message put before stands
        in for the dispatch of its events (modify): no dispatch request. False when the write lost a race
        (changed; exists)."""
        with contextlib.ExitStack() as writing:
            writing.enter_context(self.stores.events.in_flight.writing(TASKS_TABLE, task.task_id))
            if group is not None and group.announce is not None:
                writing.enter_context(self.stores.events.in_flight.writing(group.stream.table, group.stream.key))
            etags = await self._write(
                task,
                insert=insert,
                extra=[*extra, *(group.ops if group else ())],
                touch=touch,
                announced=task.event_seq + len(task.emitted) if guarded else announced,
                also=[group.stream] if group else [],
            )
        if group is not None:
            group.done(None if etags is None else etags[1 + len(extra) : 1 + len(extra) + len(group.ops)])
        return etags is not None

    async def _write(
        self,
        task: Task,
        *,
        insert: bool,
        extra: Sequence[Op],
        touch: bool,
        announced: int | None,
        also: Sequence[Stream],
    ) -> Sequence[str | None] | None:
        """`write`: the transaction's ETags (the task's first, then `extra`'s), or None when it lost a race."""
        now = self.stores.now()
        events = [task_event(task, exchange, run_id, now=now, **fields_) for exchange, run_id, fields_ in task.emitted]
        first = task.event_seq + 1
        task.event_seq += len(events)
        stream = Stream(TASKS_TABLE, task.task_id)
        if events and announced != task.event_seq:  # the change's events are announced before it is written
            await self.stores.events.announce(stream, task.event_seq)
        if touch:  # only its event count: still conditional on the ETag, as the extra rows were read against it
            task_op = Op("merge", Entity(task.task_id, task_row(task.task_id), {"eventSeq": task.event_seq}, task.etag))
        else:
            task_op = Op("insert" if insert else "replace", task.to_entity())
        faults.point("before-state-write")
        if events or extra or touch:
            ops = [task_op, *extra, *event_ops(stream, first, events)]
            etags = await self.stores.events.commit_change(TASKS_TABLE, stream, ops, new=insert, also=also)
        else:
            stored = await (self.stores.tables.insert if insert else self.stores.tables.replace)(
                TASKS_TABLE, task_op.entity
            )
            etags = None if stored is None else [stored.etag]
        if etags is None:
            task.event_seq -= len(events)
            self.known.forget(task.task_id)
            return None
        task.etag = etags[0]
        if touch:
            self.known.forget(task.task_id)  # a merge: the remembered row would lack the other columns
        else:
            self.known.put(task_op.entity.with_etag(task.etag))
        task.emitted.clear()
        for event in events:
            log.info("%s", event.exchange, extra=fields(event=event.exchange, taskId=task.task_id))
        faults.point("after-state-write")
        if task.runs and task.runs[-1].state == "pending" and task.runs[-1].hint_id:
            # Its hint went out before this write; the claimWork calls waiting here may claim it now.
            self.stores.empty_queues.wakeups.filled(
                self.stores.shards.pending_queue(task.task_queue_id, task.priority, task.task_id)
            )
        return etags
