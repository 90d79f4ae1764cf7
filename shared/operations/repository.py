"""The task unit of work: every change to a task goes through `TaskRepository.modify`.

Rules every change follows:
- The task entity is the truth. Each change is a read-modify-write conditional on the ETag read; a lost race
  re-reads and decides again.
- A change may start from the row this process last wrote or read (`KnownTasks`) instead of reading it again.
  Nothing is decided on a remembered row alone: a change made from it is written on its ETag (a row changed
  elsewhere fails the write, and the change starts over from a fresh read), and an outcome that writes nothing (a
  refusal, nothing to do) stands only after a read shows the same ETag.
- A queue message that guards a change (pending hint, claim check, resolution message) is written *before* the
  entity change it guards (`Guards`), so a crash between the two leaves at most a harmless stale message, never a
  task that nothing will move. Readers of a message re-check state, so stale and duplicated messages do nothing.
- The resolution of a running run is guarded by the run's claim check, written before the claim: where this
  process publishes its events and resolves what follows a resolution itself, nothing is put before that write
  (one storage round trip, not two). The check stays, as it is, until the events are published and what follows
  is done (dependents released and Index written before the answer, group left after it: `_follow_here`);
  should the process die before it answers, the worker's retry of its report follows the resolution up
  (Lifecycle.resolve), and should it die after, the check comes due at `takenUntil`, and its handler finds the
  run resolved, asks for the dispatch of its events and follows the resolution up (shared/operations/checks.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, Literal, NamedTuple, Protocol

from shared import errors, faults, timeutil, timing
from shared.domain.eventlog import Fallback
from shared.domain.eventrows import Stream, event_ops
from shared.domain.events import task_event
from shared.domain.groups import GroupRows, group_changed
from shared.domain.index import indexed
from shared.domain.messages import (
    CLAIM_QUEUE,
    DEADLINE_QUEUE,
    RESOLVED_QUEUE,
    ClaimCheck,
    PendingHint,
    ResolvedCheck,
)
from shared.domain.tasks import RESOLVED_STATES, TASKS_TABLE, KnownTasks, Task, task_row
from shared.logs import fields
from shared.operations.livelogs import seal_live
from shared.operations.stores import Stores
from shared.storage.base import Entity, Op, QueueMessage

log = logging.getLogger("queue")

LOAD_CONCURRENCY = 32
KNOWN_TASKS = 10_000  # task rows remembered with their ETags: about 30 MB at most


class Resolver(Protocol):
    """What follows a task's resolution (shared/operations/resolution.py)."""

    def resolve_dependencies(
        self, check: ResolvedCheck, *, with_group: bool = True, stands_in: Fallback | None = None
    ) -> Awaitable[object]: ...

    def resolve_group_member(self, check: ResolvedCheck) -> Awaitable[None]: ...

    def follow_up_run(self, task: Task, run_id: int) -> Awaitable[None]: ...


class Unchanged:
    """Returned by a mutation that decided no write is needed."""


UNCHANGED = Unchanged()
Mutation = Callable[[Task], Awaitable[Unchanged | None]]


async def nothing() -> None:
    return None


async def all_of(*steps: Awaitable[Any]) -> list[Any]:
    """Run independent steps at once and wait for every one (none is left running on its own); the first
    failure is raised once all have ended."""
    done = await asyncio.gather(*steps, return_exceptions=True)
    failed = next((r for r in done if isinstance(r, BaseException)), None)
    if failed is not None:
        raise failed
    return done


class Guards:
    """The messages a change puts before it is written, each once across retries of the same change: the
    pending hint of a new pending run, and the resolution message of a task that just resolved."""

    def __init__(self, tasks: TaskRepository, now: dt.datetime) -> None:
        self.tasks, self.now = tasks, now
        self._hints: dict[tuple[int, str], str] = {}
        self._resolved: dict[int, tuple[str, QueueMessage, ResolvedCheck]] = {}  # run -> its resolution message
        self._converted: set[int] = set()  # runs whose claim check became their resolution message
        self.group_failed = False  # a try that resolved the task's group with it was not written
        self.announced: int | None = None  # the sequence number a hint's dispatch request was put for
        # A message that already stands in for this change's events should the process die before publishing
        # them (a resolution's claim check, releasing its dependents): the hint goes without a dispatch request.
        self.stands_in: Fallback | None = None

    async def hint(self, task: Task) -> None:
        """Hint the task's last (pending) run at the task's current priority; the run remembers the hint."""
        run_id = task.last_run_id
        key = (run_id, task.priority)
        if key not in self._hints:
            if self.stands_in is not None:  # modify's write is guarded: it puts no request
                hint_id = await self.tasks.put_pending_hint(task, run_id, self.now)
            else:
                # The events emitted so far (a change emits before it hints) are announced beside the hint, not
                # after it: one round trip for both (modify hands `announced` to the write, which announces again
                # only if more was emitted since, or a lost race made it decide again).
                hint_id, self.announced = await all_of(
                    self.tasks.put_pending_hint(task, run_id, self.now), self.tasks.announce(task)
                )
            self._hints[key] = hint_id or ""
        task.runs[-1].hint_id = self._hints[key] or None

    async def resolved(self, task: Task) -> None:
        """The resolution message. A run that was running has a claim check waiting in the claim queue, which
        the resolution makes pointless: the check becomes the resolution message (Update Message: new content,
        with the pop receipt its put returned), one queue call instead of a put and, after the write, the check's
        delete. The claim queue's handler tells the two kinds apart. A check received meanwhile can no longer be
        updated: then a message of its own, as for a run that was not running. The message stays hidden for
        `resolution_grace` seconds: this process resolves the task itself after its answer (`resolve_here`),
        and the message's handler runs only if it did not."""
        run_id = task.last_run_id
        queues = self.tasks.stores.queues
        grace = self.tasks.resolution_grace
        if run_id not in self._resolved:
            check = ResolvedCheck(task.task_id, run_id, task.definition["taskGroupId"], None, self.now)
            claim = task.checks.get("claim")
            claim_queue = self.tasks.check_queue(CLAIM_QUEUE, task.task_id)
            converted = (
                None
                if claim is None
                else await queues.release(
                    claim_queue, QueueMessage(claim[0], claim[1], b"", 0, self.now), grace, content=check.encode()
                )
            )
            if converted is not None:
                self._converted.add(run_id)
                self._resolved[run_id] = (claim_queue, converted, check)
            else:
                resolved_queue = self.tasks.check_queue(RESOLVED_QUEUE, task.task_id)
                self._resolved[run_id] = (
                    resolved_queue,
                    await queues.put(resolved_queue, check.encode(), visible_in=grace),
                    check,
                )
        if run_id in self._converted:
            task.checks.pop("claim", None)  # it is the resolution message now: not to be deleted

    async def message_after(self, task: Task) -> None:
        """After a guarded resolution's write, whose claim check stands in until what follows is done: a
        resolution message of its own, to follow the resolution up sooner than the check would should this process
        die or fail first (either is harmless twice)."""
        run_id = task.last_run_id
        if run_id not in self._resolved:
            check = ResolvedCheck(task.task_id, run_id, task.definition["taskGroupId"], None, self.now)
            resolved_queue = self.tasks.check_queue(RESOLVED_QUEUE, task.task_id)
            put = await self.tasks.stores.queues.put(
                resolved_queue, check.encode(), visible_in=self.tasks.resolution_grace
            )
            self._resolved[run_id] = (resolved_queue, put, check)

    def resolution_message(self, run_id: int) -> tuple[str, QueueMessage, ResolvedCheck] | None:
        """The resolution message put (or converted) for `run_id`: its queue, the message, and what it says."""
        return self._resolved.get(run_id)


class Before(NamedTuple):
    """What a change must know of the task as it was before its mutation."""

    resolved: bool
    running: bool  # its last run was running
    etag: str | None

    @classmethod
    def of(cls, task: Task) -> Before:
        return cls(task.state in RESOLVED_STATES, bool(task.runs) and task.runs[-1].state == "running", task.etag)


Decision = Literal["changed", "unchanged"] | Task  # what `_decide` makes of a mutation


class TaskRepository:
    def __init__(self, stores: Stores) -> None:
        self.stores = stores
        self.known = KnownTasks(KNOWN_TASKS)
        self._noting: dict[str, asyncio.Future[Task | None]] = {}  # note_dependent writes under way, by task
        # Resolves a task's dependents and group (operations/resolution.py, set where the queue is wired): when
        # set, the process that resolves a task does that itself after its answer, and the resolution message
        # is the fallback (Guards.resolved).
        self.resolver: Resolver | None = None

    @property
    def resolution_grace(self) -> int:
        """Seconds a resolution message stays hidden while this process resolves the task itself; 0 when it
        does not (no resolver wired in, or the setting is 0): then the message's handler does, at once."""
        return self.stores.settings.resolution_grace if self.resolver is not None else 0

    def check_queue(self, base: str, task_id: str) -> str:
        """The shard of a check queue (claim-expiry, task-resolved, task-deadlines) that holds the task's messages."""
        return self.stores.shards.check_queue(base, task_id)

    def guards(self) -> Guards:
        return Guards(self, self.stores.now())

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
        the flag and looks for the dependents (shared/operations/resolution.py); a row written before the flag
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

    async def modify(self, task_id: str, mutate: Mutation, guards: Guards | None = None) -> Task:
        """Read, mutate, write conditionally on the ETag; on a lost race read again and re-decide. A change
        that resolves the task puts its resolution message first (dependents and its group follow it), unless
        its run's claim check guards it (`guarded`)."""
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
            if await self._write_change(task, guards, before):
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

    async def _write_change(self, task: Task, guards: Guards, before: Before) -> bool:
        """Write a mutated task on the ETag it was read with, with what must go before it; then, for a resolution,
        what follows it. Whether it was written (not: the task changed meanwhile)."""
        await seal_live(self.stores, task)  # a run it resolves: its live logs' blobs as they are now
        resolving = task.state in RESOLVED_STATES and not before.resolved
        claim = task.checks.get("claim") if resolving and before.running and self.guarded() else None
        spent: dict[str, list[str]] = {}
        with self.stores.events.in_flight.writing(TASKS_TABLE, task.task_id):  # its resolution message's reader waits
            group = self._sole_group_resolution(task, guards) if resolving else None
            announced = await self._announce_change(task, guards, resolving, claim, group)
            if resolving:
                spent = {kind: task.checks.pop(kind) for kind in ("claim", "deadline") if kind in task.checks}
            written = await self.write(
                task, announced=announced, group=group, guarded=claim is not None or guards.stands_in is not None
            )
        if group is not None and not written:
            guards.group_failed = True  # the task changed, or the group did: decide again without it
        if written and resolving:
            await self._follow_resolution(task, guards, claim, group, spent)
        return written

    async def _announce_change(
        self, task: Task, guards: Guards, resolving: bool, claim: list[str] | None, group: GroupRows | None
    ) -> int | None:
        """What goes before a change's write; the sequence number announced, for `write`. Guarded (a claim check):
        the check, put before the claim, stands in for what follows (the module docstring), so nothing is put
        before the write; a sole resolution leaves only its events to follow, any other turns the check into its
        resolution message beside the write."""
        announced: int | None
        if claim is None and group is not None:  # nothing is left to follow: no resolution message
            assert group.announce is not None
            _, announced = await all_of(self.stores.events.announce(group.stream, group.announce), self.announce(task))
            return announced
        if claim is None and resolving:  # the resolution message and the dispatch request: both first
            _, announced = await all_of(guards.resolved(task), self.announce(task))
            return announced
        return guards.announced

    async def _follow_resolution(
        self, task: Task, guards: Guards, claim: list[str] | None, group: GroupRows | None, spent: dict[str, list[str]]
    ) -> None:
        """A resolution written: its checks and index row tidied afterwards; what follows it (dependents, group,
        Index) done here, guarded by the claim check that stands in, or by its resolution message."""
        self.stores.afterwards(self._tidy_resolved(task.task_queue_id, task.task_id, spent))
        if claim is not None:
            claim = spent.pop("claim", claim)  # the check stands in: not deleted with the others
            if group is not None:
                self._guarded_by_sole(task, guards, claim, group)
            else:
                await self._follow_here(task, guards, claim)
        message = guards.resolution_message(task.last_run_id)
        if claim is None and message is not None and self.resolution_grace:
            self.stores.afterwards(self.resolve_here(*message))

    def guarded(self) -> bool:
        """Whether this process's resolutions of running runs are guarded by their claim checks: it publishes
        its changes' events itself (or there is no bus) and resolves what follows a resolution itself (the check
        stands in for both should it die first)."""
        return self.stores.events.published_by_writers and self.resolution_grace > 0

    def _guarded_by_sole(self, task: Task, guards: Guards, claim: list[str], group: GroupRows) -> None:
        """A guarded sole resolution (its group's resolution in its own transaction, nothing depends on it) is
        written: its claim check, as it is, stands in for this process until its events are published."""
        streams = [(Stream(TASKS_TABLE, task.task_id), task.event_seq)]
        if group.announce is not None:
            streams.append((group.stream, group.announce))
        self.stores.events.guarded_by(
            self.check_queue(CLAIM_QUEUE, task.task_id), QueueMessage(claim[0], claim[1], b"", 0, guards.now), streams
        )

    def guarded_by_claim(self, task: Task, claim: list[str], now: dt.datetime) -> None:
        """A claim written without a dispatch request for its `task-running`: its claim check stands in should this
        process die before publishing it. Whatever comes of the run, a later change of the task's stream dispatches
        its events in order from the cursor, this one first: the run's resolution (guarded by the same check, or a
        request), the check's expiry of the claim (a request), a reclaim's check after it; a check that comes due
        on a resolved run asks for the dispatch itself (Resolution.follow_up_run). A bus that refuses it gets a
        request of its own (EventLog._after_publishing). The check expires the claim: it is never deleted here."""
        self._kept_in_for(task, self.check_queue(CLAIM_QUEUE, task.task_id), claim[0], claim[1], now)

    def _kept_in_for(self, task: Task, queue: str, message_id: str, pop_receipt: str, now: dt.datetime) -> None:
        """A message that stays (its handler's to delete) stands in for the events the task's change wrote."""
        self.stores.events.guarded_by(
            queue,
            QueueMessage(message_id, pop_receipt, b"", 0, now),
            [(Stream(TASKS_TABLE, task.task_id), task.event_seq)],
            keep=True,
        )

    def guarded_by_hint(self, task: Task, hint_id: str, now: dt.datetime) -> None:
        """A new task pending at once written without a dispatch request for its events (`task-defined`,
        `task-pending`): its pending hint stands in should this process die before publishing them. Whatever comes
        of the run, a later change of the task's stream dispatches its events in order from the cursor, these
        first: the claim the hint leads to (claimWork's, or claimTask's after a polling worker took it), the
        deadline's resolution when nothing claims it, a cancel; and, were none to come, the reconciler's pass over
        unresolved tasks (`QUEUE_RECONCILE_GRACE`) asks for the dispatch. A bus that refuses them gets a request of
        its own (EventLog._after_publishing). The hint is the claimer's to delete: never here."""
        queue = self.stores.shards.pending_queue(task.task_queue_id, task.priority, task.task_id)
        self._kept_in_for(task, queue, hint_id, "", now)

    async def _follow_here(self, task: Task, guards: Guards, claim: list[str]) -> None:
        """A guarded resolution that leaves more to follow (dependents, an Index entry, a group with other members)
        is written: its dependents are released and its Index entry written here before the answer, its group left
        after it, and its claim check, as it is, stands in for all of that and its events until they are done (the
        released dependents' events too: their hints go without dispatch requests). A
        process that dies before it answers leaves it to the worker's retry of the report (a repeat is followed up:
        Lifecycle.resolve); one that dies after, to the check (at `takenUntil`). A release that takes over
        FOLLOW_WAIT (a large fan-out) gets a resolution message of its own first, so that an answer given before it
        is done leaves a death to that message (after `resolution_grace`) rather than to the check."""
        assert self.resolver is not None
        run_id = task.last_run_id
        check = ResolvedCheck(task.task_id, run_id, task.definition["taskGroupId"], None, guards.now)
        fallback = self.stores.events.guarded_by(
            self.check_queue(CLAIM_QUEUE, task.task_id),
            QueueMessage(claim[0], claim[1], b"", 0, guards.now),
            [(Stream(TASKS_TABLE, task.task_id), task.event_seq)],
            also=1,
        )  # and once followed up
        releasing = asyncio.ensure_future(
            self.resolver.resolve_dependencies(check, with_group=False, stands_in=fallback)
        )
        try:
            done, _ = await asyncio.wait({releasing}, timeout=timing.FOLLOW_WAIT)
            if not done:
                try:
                    await guards.message_after(task)
                except Exception:
                    log.warning(
                        "could not put a resolution message; the claim check stands in",
                        exc_info=True,
                        extra=fields(taskId=task.task_id),
                    )
        finally:  # also when the request is cancelled (its caller left): the rest is done all the same
            self.stores.afterwards(self._followed(check, task, releasing, fallback, guards))

    async def _followed(
        self, check: ResolvedCheck, task: Task, releasing: asyncio.Future[object], fallback: Fallback, guards: Guards
    ) -> None:
        """`_follow_here` after the answer: its group left, then the check's part done (deleted once the
        events are out too), and the resolution message put for a slow release deleted. Should any step fail, a
        resolution message (put now unless there is one) takes over from the check, after `resolution_grace`."""
        assert self.resolver is not None
        message = guards.resolution_message(check.runId)
        try:
            await releasing
            await self.resolver.resolve_group_member(check)
        except Exception:
            log.warning(
                "following a resolution up here failed; its resolution message will",
                exc_info=True,
                extra=fields(taskId=check.taskId, runId=check.runId),
            )
            if message is None:
                try:
                    await guards.message_after(task)
                except Exception:
                    log.warning(
                        "could not put a resolution message; the claim check stands in",
                        exc_info=True,
                        extra=fields(taskId=check.taskId),
                    )
                    return
            self.stores.events.done_with(fallback)
            return
        self.stores.events.done_with(fallback)
        if message is not None:
            await self._delete_resolution_message(message[0], message[1], check)

    def _sole_group_resolution(self, task: Task, guards: Guards) -> GroupRows | None:
        """A resolving task that nothing depends on and that is alone in the group named after it (as this process
        knows its group): the group's
        resolution, to be written in the task's own transaction, which then leaves nothing for a resolution
        message to do (its dependents and its group are what that resolves). None otherwise, or when an earlier
        try of this change already put that message (its handler would resolve the group a second time)."""
        if (
            task.has_dependents is not False
            or task.dependents_here
            or task.definition["taskGroupId"] != task.task_id
            or guards.group_failed
            or (task.state == "completed" and indexed(task.definition))  # indexing follows it
            or guards.resolution_message(task.last_run_id) is not None
            or any(run.reason_created == "rerun" for run in task.runs)
        ):  # it left the group's active set before
            return None
        now = self.stores.now()
        return self.stores.groups.resolve_sole_ops(
            task.task_id, lambda g: [group_changed("task-group-resolved", g, now)]
        )

    async def announce(self, task: Task) -> int:
        """Ask for the dispatch of the events the task's change emitted so far, ahead of `write` (which then
        need not): to put the request together with the change's other guard messages, not after them. The
        sequence number announced, for `write`."""
        seq = task.event_seq + len(task.emitted)
        if task.emitted:
            await self.stores.events.announce(Stream(TASKS_TABLE, task.task_id), seq)
        return seq

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
        tables = self.stores.tables
        if task.emitted or extra or touch:
            now = self.stores.now()
            events = [
                task_event(task, exchange, run_id, now=now, **fields_) for exchange, run_id, fields_ in task.emitted
            ]
            first = task.event_seq + 1
            task.event_seq += len(events)
            stream = Stream(TASKS_TABLE, task.task_id)
            if events and announced != task.event_seq:  # the change's events are announced before it is written
                await self.stores.events.announce(stream, task.event_seq)
            faults.point("before-state-write")
            if touch:
                task_op = Op(
                    "merge", Entity(task.task_id, task_row(task.task_id), {"eventSeq": task.event_seq}, task.etag)
                )
            else:
                task_op = Op("insert" if insert else "replace", task.to_entity())
            ops = [task_op, *extra, *event_ops(stream, first, events)]
            written = await self.stores.events.commit_change(TASKS_TABLE, stream, ops, new=insert, also=also)
            if written is None:
                task.event_seq -= len(events)
                self.known.forget(task.task_id)
                return None
            etags = written
            task.etag = etags[0]
            if touch:
                self.known.forget(task.task_id)  # a merge: the remembered row would lack the other columns
            else:
                self.known.put(task_op.entity.with_etag(task.etag))
            task.emitted.clear()
            for event in events:
                log.info("%s", event.exchange, extra=fields(event=event.exchange, taskId=task.task_id))
        else:
            faults.point("before-state-write")
            entity = task.to_entity()
            stored = await (tables.insert if insert else tables.replace)(TASKS_TABLE, entity)
            if stored is None:
                self.known.forget(task.task_id)
                return None
            task.etag = stored.etag
            etags = [stored.etag]
            self.known.put(entity.with_etag(task.etag))
        faults.point("after-state-write")
        if task.runs and task.runs[-1].state == "pending" and task.runs[-1].hint_id:
            # Its hint went out before this write; the claimWork calls waiting here may claim it now.
            self.stores.empty_queues.wakeups.filled(
                self.stores.shards.pending_queue(task.task_queue_id, task.priority, task.task_id)
            )
        return etags

    # --- the messages changes put before they are written ------------------------------------------------------

    @staticmethod
    def hint_ttl(task: Task, now: dt.datetime) -> int:
        """Seconds a pending hint put now lives (until the deadline); 0: none is put, the deadline has passed."""
        return timeutil.ceil_seconds(task.deadline - now)

    async def put_pending_hint(self, task: Task, run_id: int, now: dt.datetime) -> str | None:
        """Put a pending hint of run `run_id` (and the run's index row); its hintId, which the run keeps (only that
        hint may claim it). None when the deadline has passed: nothing may claim the run, the deadline check
        resolves it."""
        ttl = self.hint_ttl(task, now)
        if ttl <= 0:
            return None
        task_id, task_queue_id, priority = task.task_id, task.task_queue_id, task.priority
        hint = PendingHint(task_id, run_id, timeutil.slugid(), priority).signed(
            self.stores.settings.hint_key, task_queue_id
        )
        queue = self.stores.shards.pending_queue(task_queue_id, priority, task_id)
        await all_of(  # both before the run is written; neither depends on the other
            self.stores.workers.run_pending(task_queue_id, task_id, run_id, now),
            self.stores.queues.put(queue, hint.encode(), ttl=ttl),
        )
        self.stores.empty_queues.filled(queue)
        return hint.hintId

    async def put_claim_check(self, task_id: str, run_id: int, taken_until: dt.datetime, now: dt.datetime) -> list[str]:
        """Put the check that expires the claim at `taken_until`; its [messageId, popReceipt]."""
        delay = timeutil.ceil_seconds(taken_until - now)
        sent = await self.stores.queues.put(
            self.check_queue(CLAIM_QUEUE, task_id), ClaimCheck(task_id, run_id, taken_until).encode(), visible_in=delay
        )
        return [sent.id, sent.pop_receipt]

    async def _tidy_resolved(self, task_queue_id: str, task_id: str, spent: dict[str, list[str]]) -> None:
        """After a resolution is written: the run leaves the task queue's index; its spent checks go."""
        try:
            await asyncio.gather(
                self.stores.workers.run_resolved(task_queue_id, task_id, linger=timing.INDEX_TIDY_LINGER),
                self.delete_checks(task_id, spent),
            )
        except Exception:
            log.warning("could not tidy up after a resolution", exc_info=True, extra=fields(taskId=task_id))

    async def resolve_here(self, queue: str, message: QueueMessage, check: ResolvedCheck) -> None:
        """After a resolution is written and answered: resolve the task's dependents and group here, then delete
        its resolution message (hidden meanwhile), so that no trigger need receive it: one queue call less per
        task, and dependents pending without a trigger's poll between. If this fails or the process dies, the
        message shows after `resolution_grace` and its handler does it (every step is idempotent, so a
        handler that starts while this still runs does no harm either)."""
        assert self.resolver is not None
        try:
            await self.resolver.resolve_dependencies(check)
        except Exception:
            log.warning(
                "resolving here failed; its resolution message will",
                exc_info=True,
                extra=fields(taskId=check.taskId, runId=check.runId),
            )
            return
        await self._delete_resolution_message(queue, message, check)

    async def _delete_resolution_message(self, queue: str, message: QueueMessage, check: ResolvedCheck) -> None:
        try:
            await self.stores.queues.delete(queue, message)
        except Exception:  # its handler will find the work done
            log.info(
                "could not delete a resolution message done here",
                exc_info=True,
                extra=fields(taskId=check.taskId, runId=check.runId),
            )

    async def delete_checks(self, task_id: str, spent: dict[str, list[str]]) -> None:
        """Delete checks a change made pointless (the task resolved; a claim was renewed). Best effort: a check
        already received (its pop receipt changed) or gone is left to its handler, which finds nothing to do.
        Why bother: a queued check costs nothing on Azure until it comes due, but Azurite scans every message
        it holds on every queue operation, so spent checks slow everything down locally."""
        queues = {
            "claim": self.check_queue(CLAIM_QUEUE, task_id),
            "deadline": self.check_queue(DEADLINE_QUEUE, task_id),
        }

        async def delete(kind: str, message_id: str, pop_receipt: str) -> None:
            try:
                await self.stores.queues.delete(
                    queues[kind], QueueMessage(message_id, pop_receipt, b"", 0, self.stores.now())
                )
            except Exception:
                log.warning("could not delete a spent %s check", kind, exc_info=True, extra=fields(taskId=task_id))

        await asyncio.gather(*(delete(kind, *ref) for kind, ref in spent.items()))
