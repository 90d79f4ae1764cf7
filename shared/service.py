"""The queue's operations: the Taskcluster task state machine over a table store and a queue store.

Rules every operation follows:
- The task entity is the truth. Each change is a read-modify-write conditional on the ETag read; a lost race
  re-reads and decides again (`_modify`).
- A queue message that guards a change (pending hint, claim check, deadline check) is written *before* the
  entity change it guards, so a crash between the two leaves at most a harmless stale message, never a task
  that nothing will move. Readers of a message re-check state, so stale and duplicated messages do nothing.
- A pending hint may therefore arrive before the run it names is written: claimers put such a young hint
  back for a moment instead of dropping it.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from shared import credentials, errors, faults, timeutil
from shared.artifacts import ARTIFACT_EXPIRY_TABLE, Artifacts
from shared.domain.deadlines import DEADLINES_TABLE, DeadlineBucket, DeadlineIndex
from shared.domain.dependencies import (
    DEPENDENCIES_TABLE,
    POINT_READ_LIMIT,
    REQUIREMENTS_TABLE,
    DependencyStore,
    Dependent,
)
from shared.domain.eventlog import DISPATCH_QUEUE, EventLog, Stream, cursor_entity, event_ops
from shared.domain.events import Event, group_event, task_event
from shared.domain.expiry import TASK_EXPIRY_TABLE, ExpiryIndex
from shared.domain.groups import TASK_GROUPS_TABLE, TaskGroup, TaskGroupNotFound, TaskGroupStore
from shared.domain.messages import (
    CLAIM_QUEUE,
    DEADLINE_QUEUE,
    FIXED_QUEUES,
    RESOLVED_QUEUE,
    ClaimCheck,
    DeadlineCheck,
    PendingHint,
    ResolvedCheck,
    pending_queue,
    pending_queues,
)
from shared.domain.tasks import (
    DEFINITION_FIELDS,
    MAX_DEFINITION_CHARS,
    MAX_RUNS,
    RESOLVED_STATES,
    TASKS_TABLE,
    KnownTasks,
    Run,
    Task,
    definition_size,
    task_row,
)
from shared.domain.workers import TASK_QUEUE_RUNS_TABLE, WORKER_INFO_TABLE, WorkerInfo
from shared.logs import fields
from shared.maintenance.reconciler import Reconciler
from shared.settings import Settings
from shared.storage.base import BlobStore, Entity, Op, QueueMessage, QueueStore, TableStore

log = logging.getLogger("queue")

TABLES = (TASKS_TABLE, TASK_GROUPS_TABLE, REQUIREMENTS_TABLE, DEPENDENCIES_TABLE, TASK_EXPIRY_TABLE,
          ARTIFACT_EXPIRY_TABLE, WORKER_INFO_TABLE, TASK_QUEUE_RUNS_TABLE, DEADLINES_TABLE)

CREATED_DRIFT = dt.timedelta(minutes=15)
DEFAULT_EXPIRES = dt.timedelta(days=365)
RETRY_REASONS = {"worker-shutdown": "retry", "intermittent-task": "task-retry"}
LOAD_CONCURRENCY = 32
DEPENDENCY_BATCH = 100  # dependencies read at once before the edges of a long list are written
DEPENDENTS_PAGE = 250  # dependents handled by one resolution message; the next page goes to another message
MAX_PAGE = 1000
KNOWN_TASKS = 10_000  # task rows remembered with their ETags (shared.domain.tasks.KnownTasks): about 30 MB at most
# A message written just before the write it announces usually finds that write done within milliseconds:
# re-check after these pauses before putting the message back for QUEUE_HINT_RETRY_DELAY seconds.
SETTLE_PAUSES = (0.02, 0.05, 0.1, 0.2)
MAX_HINTS = 4  # hints a pending run accepts at once: its first, and the reconciler's latest


class PriorityUnchanged(errors.RequestConflict):
    """Task `{taskId}` already has priority {priority}"""


class TaskAlreadyResolved(errors.RequestConflict):
    """Task `{taskId}` is resolved: its priority can no longer change"""


class TaskGroupNotSealed(errors.RequestConflict):
    """Task group `{taskGroupId}` must be sealed before it can be cancelled"""


class ClaimRefusal(Enum):
    """Why a claim attempt did not claim; returned as a value, since losing a race is normal."""

    TASK_NOT_FOUND = "task-not-found"
    RUN_NOT_FOUND = "run-not-found"  # runId is past the last run: maybe not written yet
    DEADLINE_PASSED = "deadline-passed"
    CONFLICT = "conflict"  # not the latest run, not pending, or claimed by another worker / hint


@dataclass
class Claim:
    task: Task
    run_id: int

    @property
    def run(self) -> Run:
        return self.task.runs[self.run_id]


class _Unchanged:
    """Returned by a mutation that decided no write is needed."""


UNCHANGED = _Unchanged()
Mutation = Callable[[Task], Awaitable[_Unchanged | None]]


class _Guards:
    """The messages a change puts before it is written, each once across retries of the same change: the
    pending hint of a new pending run, and the resolution message of a task that just resolved."""

    def __init__(self, service: QueueService, now: dt.datetime) -> None:
        self.service, self.now = service, now
        self._hints: dict[tuple[int, str], str] = {}
        self._resolved: set[int] = set()

    async def hint(self, task: Task) -> None:
        """Hint the task's last (pending) run at the task's current priority; the run remembers the hint."""
        run_id = task.last_run_id
        key = (run_id, task.priority)
        if key not in self._hints:
            hint_id = await self.service._put_pending_hint(task.task_id, run_id, task.definition, self.now)
            self._hints[key] = hint_id or ""
        task.runs[-1].hint_id = self._hints[key] or None

    async def resolved(self, task: Task) -> None:
        run_id = task.last_run_id
        if run_id not in self._resolved:
            check = ResolvedCheck(task.task_id, run_id, task.definition["taskGroupId"], None,
                                  timeutil.iso(self.now))
            await self.service.queues.put(RESOLVED_QUEUE, check.encode())
            self._resolved.add(run_id)


async def _all(*steps: Awaitable[Any]) -> list[Any]:
    """Run independent steps at once and wait for every one (none is left running on its own); the first
    failure is raised once all have ended."""
    done = await asyncio.gather(*steps, return_exceptions=True)
    failed = next((r for r in done if isinstance(r, BaseException)), None)
    if failed is not None:
        raise failed
    return done


async def _nothing() -> None:
    return None


class QueueService:
    def __init__(self, settings: Settings, tables: TableStore, queues: QueueStore, blobs: BlobStore | None = None,
                 clock: Callable[[], dt.datetime] = timeutil.now) -> None:
        self.settings = settings
        self.tables = tables
        self.queues = queues
        self.blobs = blobs
        self.clock = clock
        self._ready = False
        self._ready_lock = asyncio.Lock()
        self._pending_queues_ready: set[str] = set()
        # Pending queues this process found empty, and until when it skips them in claimWork (monotonic time).
        self._empty_until: dict[str, float] = {}
        self.known = KnownTasks(KNOWN_TASKS)
        self.events = EventLog(tables, queues, dispatching=settings.event_bus != "none",
                               lease_seconds=settings.event_lease, retry_delay=settings.hint_retry_delay,
                               grace_seconds=settings.hint_grace, max_backoff=settings.event_retry_max_delay,
                               clock=clock)
        self.groups = TaskGroupStore(tables, self.events)
        self.deps = DependencyStore(tables)
        self.expiry = ExpiryIndex(tables)
        self.deadlines = DeadlineIndex(tables, queues, DEADLINE_QUEUE, settings.deadline_delay, clock)
        self.artifacts = Artifacts(self, blobs)
        self.workers = WorkerInfo(tables, settings, clock)
        self.reconciler = Reconciler(self)

    # --- plumbing -------------------------------------------------------------------------------------------

    async def ensure_storage(self) -> None:
        """Create the tables and fixed queues (once per process; cheap when they exist)."""
        if self._ready:
            return
        async with self._ready_lock:
            if not self._ready:
                await self.tables.ensure_tables(list(TABLES))
                await self.queues.ensure_queues([*FIXED_QUEUES, DISPATCH_QUEUE])
                if self.blobs is not None:
                    await self.blobs.ensure_container(self.settings.artifact_container)
                self._ready = True

    async def ensure_pending_queues(self, task_queue_id: str) -> None:
        """Create the task queue's pending queues (once per process), for workers that poll them directly."""
        if task_queue_id not in self._pending_queues_ready:
            await self.queues.ensure_queues(pending_queues(task_queue_id))
            self._pending_queues_ready.add(task_queue_id)

    async def close(self) -> None:
        await self.tables.close()
        await self.queues.close()
        if self.blobs is not None:
            await self.blobs.close()

    async def _get(self, task_id: str) -> Task | None:
        entity = await self.tables.get(TASKS_TABLE, task_id, task_row(task_id))
        if entity is None:
            self.known.forget(task_id)
            return None
        self.known.put(entity)
        return Task.from_entity(entity)

    async def _load(self, task_id: str) -> Task:
        task = await self._get(task_id)
        if task is None:
            raise errors.TaskNotFound(taskId=task_id)
        return task

    async def _modify(self, task_id: str, mutate: Mutation, guards: _Guards | None = None) -> Task:
        """Read, mutate, write conditionally on the ETag; on a lost race read again and re-decide. A change
        that resolves the task puts its resolution message first (dependents and its group follow it)."""
        guards = guards or _Guards(self, self.clock())
        task: Task | None = self.known.get(task_id)
        fresh = task is None  # whether `task` was read from storage rather than remembered (KnownTasks)
        while True:
            if task is None:
                task, fresh = await self._load(task_id), True
            was_resolved, etag = task.state in RESOLVED_STATES, task.etag
            refusal: errors.QueueError | None = None
            try:
                unchanged = await mutate(task) is UNCHANGED
            except errors.QueueError as exc:
                unchanged, refusal = True, exc
            if unchanged:  # refused, or nothing to write
                if not fresh:
                    same, stored = await self._recheck(task_id, etag)
                    if stored is None:
                        raise errors.TaskNotFound(taskId=task_id)
                    if not same:
                        task, fresh = stored, True  # decided on a remembered row that changed: decide again
                        continue
                if refusal is not None:
                    raise refusal
                return task
            resolving = task.state in RESOLVED_STATES and not was_resolved
            spent: dict[str, list[str]] = {}
            if resolving:
                await guards.resolved(task)
                spent = {kind: task.checks.pop(kind) for kind in ("claim", "deadline") if kind in task.checks}
            if await self._write(task):
                if resolving:
                    await asyncio.gather(self.workers.run_resolved(task.task_queue_id, task_id),
                                         self._delete_checks(task_id, spent))
                return task
            task = None
            log.debug("lost a write race, retrying", extra=fields(taskId=task_id))

    async def _recheck(self, task_id: str, etag: str | None) -> tuple[bool, Task | None]:
        """After a decision made on a remembered row that wrote nothing (a refusal, nothing to do): whether the
        stored row is still the one decided on (the decision stands), and the stored task (None: gone)."""
        stored = await self._get(task_id)
        return stored is not None and stored.etag == etag, stored

    async def _write(self, task: Task, *, insert: bool = False, extra: Sequence[Op] = (),
                     touch: bool = False) -> bool:
        """Store a changed task (replace, conditional on its ETag; or insert) together with the events it
        announces and `extra` rows of its partition (artifacts), in one transaction. `touch`: the task itself
        did not change, only its event count is written (still conditional on the ETag, so that the extra rows
        are written against the state that was read). False when the write lost a race (changed; exists)."""
        if task.emitted or extra or touch:
            now = self.clock()
            events = [task_event(task, exchange, run_id, now=now, **fields_)
                      for exchange, run_id, fields_ in task.emitted]
            first = task.event_seq + 1
            task.event_seq += len(events)
            stream = Stream(TASKS_TABLE, task.task_id)
            if events:
                await self.events.announce(stream, task.event_seq)  # before the write, as every guard is
            faults.point("before-state-write")
            if touch:
                task_op = Op("merge", Entity(task.task_id, task_row(task.task_id), {"eventSeq": task.event_seq},
                                             task.etag))
            else:
                task_op = Op("insert" if insert else "replace", task.to_entity())
            ops = [task_op, *extra, *event_ops(stream, first, events)]
            if insert:  # a fresh dispatch cursor, whatever an expired task of the same id left behind
                ops.append(Op("upsert", cursor_entity(stream, 0)))
            etags = await self.tables.commit(TASKS_TABLE, ops)
            if etags is None:
                task.event_seq -= len(events)
                self.known.forget(task.task_id)
                return False
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
            stored = await (self.tables.insert if insert else self.tables.replace)(TASKS_TABLE, entity)
            if stored is None:
                self.known.forget(task.task_id)
                return False
            task.etag = stored.etag
            self.known.put(entity.with_etag(task.etag))
        faults.point("after-state-write")
        return True

    def _deadline_passed(self, task: Task, now: dt.datetime) -> bool:
        return timeutil.parse(task.deadline) <= now

    async def _put_pending_hint(self, task_id: str, run_id: int, definition: dict[str, Any],
                                now: dt.datetime) -> str | None:
        """Put a pending hint; its hintId, which the run keeps (only that hint may claim it)."""
        ttl = timeutil.ceil_seconds(timeutil.parse(definition["deadline"]) - now)
        if ttl <= 0:
            return None  # past the deadline nothing may claim it; the deadline check resolves the run
        task_queue_id, priority = definition["taskQueueId"], definition["priority"]
        hint = PendingHint(task_id, run_id, timeutil.slugid(), priority).signed(self.settings.hint_key, task_queue_id)
        queue = pending_queue(task_queue_id, priority)
        await _all(  # both before the run is written; neither depends on the other
            self.workers.run_pending(task_queue_id, task_id, run_id, timeutil.iso(now)),
            self.queues.put(queue, hint.encode(), ttl=ttl))
        self._empty_until.pop(queue, None)  # not empty any more, as far as this process knows
        return hint.hintId

    async def _put_claim_check(self, task_id: str, run_id: int, taken_until: str, now: dt.datetime) -> list[str]:
        """Put the check that expires the claim at `taken_until`; its [messageId, popReceipt]."""
        delay = timeutil.ceil_seconds(timeutil.parse(taken_until) - now)
        sent = await self.queues.put(CLAIM_QUEUE, ClaimCheck(task_id, run_id, taken_until).encode(),
                                     visible_in=delay)
        return [sent.id, sent.pop_receipt]

    async def _delete_checks(self, task_id: str, spent: dict[str, list[str]]) -> None:
        """Delete checks a change made pointless (the task resolved; a claim was renewed). Best effort: a check
        already received (its pop receipt changed) or gone is left to its handler, which finds nothing to do.
        Why bother: a queued check costs nothing on Azure until it comes due, but Azurite scans every message
        it holds on every queue operation, so spent checks slow everything down locally."""
        queues = {"claim": CLAIM_QUEUE, "deadline": DEADLINE_QUEUE}

        async def delete(kind: str, message_id: str, pop_receipt: str) -> None:
            try:
                await self.queues.delete(queues[kind], QueueMessage(message_id, pop_receipt, b"", 0, self.clock()))
            except Exception:
                log.warning("could not delete a spent %s check", kind, exc_info=True, extra=fields(taskId=task_id))

        await asyncio.gather(*(delete(kind, *ref) for kind, ref in spent.items()))

    # --- reading ----------------------------------------------------------------------------------------------

    async def task(self, task_id: str) -> dict[str, Any]:
        await self.ensure_storage()
        return _definition_out((await self._load(task_id)).definition)

    async def status(self, task_id: str) -> dict[str, Any]:
        await self.ensure_storage()
        return (await self._load(task_id)).status()

    async def load_many(self, task_ids: Iterable[str]) -> list[Task]:
        """The tasks that exist among `task_ids`, in the order asked; unknown ids are left out."""
        await self.ensure_storage()
        limit = asyncio.Semaphore(LOAD_CONCURRENCY)

        async def one(task_id: str) -> Task | None:
            async with limit:
                return await self._get(task_id)

        found = await asyncio.gather(*(one(t) for t in dict.fromkeys(task_ids)))
        return [t for t in found if t is not None]

    # --- createTask -------------------------------------------------------------------------------------------

    def _normalize(self, task_id: str, body: dict[str, Any]) -> dict[str, Any]:
        """The stored definition: schema defaults already applied; ids completed, dates re-serialised."""
        definition = dict(body)
        tq, prov, wt = (definition.get(k) for k in ("taskQueueId", "provisionerId", "workerType"))
        if tq is None:
            if prov is None or wt is None:
                raise errors.InputError("Either taskQueueId, or both provisionerId and workerType, must be given")
            tq = f"{prov}/{wt}"
        elif (prov is not None or wt is not None) and f"{prov}/{wt}" != tq:
            raise errors.InputError("taskQueueId `{tq}` does not match provisionerId/workerType `{prov}/{wt}`",
                                    tq=tq, prov=prov, wt=wt)
        prov, wt = tq.split("/", 1)
        definition.update(taskQueueId=tq, provisionerId=prov, workerType=wt)
        definition.setdefault("taskGroupId", task_id)
        for key in ("created", "deadline"):
            definition[key] = timeutil.normalize(definition[key])
        if "expires" in definition:
            definition["expires"] = timeutil.normalize(definition["expires"])
        else:  # a year after the deadline (the latest date there is, for a deadline the checks will refuse anyway)
            deadline = timeutil.parse(definition["deadline"])
            definition["expires"] = timeutil.iso(deadline + min(DEFAULT_EXPIRES, dt.datetime.max.replace(
                tzinfo=dt.UTC) - deadline))
        return {key: definition[key] for key in DEFINITION_FIELDS}

    def _check_definition(self, definition: dict[str, Any], now: dt.datetime) -> None:
        created = timeutil.parse(definition["created"])
        deadline = timeutil.parse(definition["deadline"])
        expires = timeutil.parse(definition["expires"])
        problems = []
        if abs(created - now) > CREATED_DRIFT:
            problems.append(f"created ({definition['created']}) must be within 15 minutes of the current time "
                            f"({timeutil.iso(now)})")
        if created > deadline:
            problems.append("created must not be after deadline")
        if deadline < now:
            problems.append(f"deadline ({definition['deadline']}) is in the past")
        max_days = self.settings.max_task_deadline_days
        if deadline > now + dt.timedelta(days=max_days) + CREATED_DRIFT:
            problems.append(f"deadline must be at most {max_days:g} days from now")
        if expires < deadline:
            problems.append("expires must not be before deadline")
        doubled = [s for s in definition["scopes"] if s.endswith("**")]
        if doubled:
            problems.append(f"scopes must not end in `**`: {', '.join(doubled)}")
        if problems:
            raise errors.InputError("Invalid task definition:\n" + "\n".join(f"* {p}" for p in problems))
        size = definition_size(definition)
        if size > MAX_DEFINITION_CHARS:
            raise errors.TaskTooLarge(size=size, limit=MAX_DEFINITION_CHARS)

    async def _check_dependencies(self, task_id: str, definition: dict[str, Any],
                                  checked: dict[str, Task] | None = None) -> list[str]:
        """Check the dependencies exist and outlive this task's deadline; the ones already satisfied. Those that
        were satisfied in `checked` (read before the edges were written) are not read again."""
        accepted = ("completed",) if definition["requires"] == "all-completed" else RESOLVED_STATES
        wanted = [d for d in dict.fromkeys(definition["dependencies"]) if d != task_id]
        found = {d: t for d, t in (checked or {}).items() if t.state in accepted}
        found.update((t.task_id, t) for t in await self.load_many(d for d in wanted if d not in found))
        _refuse_dependencies(wanted, found, definition)
        return [d for d, t in found.items() if t.state in accepted]

    async def _precheck_dependencies(self, task_id: str, definition: dict[str, Any]) -> dict[str, Task]:
        """Before any edge of a long dependency list is written: read the dependencies a batch at a time and
        refuse at the first batch with a missing or expiring one, so that a refused createTask costs a batch of
        reads rather than an edge, a marker and a read per dependency (10,000 dependencies took minutes)."""
        wanted = [d for d in dict.fromkeys(definition["dependencies"]) if d != task_id]
        found: dict[str, Task] = {}
        for start in range(0, len(wanted), DEPENDENCY_BATCH):
            batch = wanted[start:start + DEPENDENCY_BATCH]
            tasks = {t.task_id: t for t in await self.load_many(batch)}
            _refuse_dependencies(batch, tasks, definition)
            found.update(tasks)
        return found

    async def create_task(self, task_id: str, body: dict[str, Any]) -> dict[str, Any]:
        """createTask: `body` has passed the create-task-request schema (defaults filled in).

        Order, so that a crash anywhere leaves nothing that misleads: refusals first (group, dependencies),
        then the deadline check, the edges, the group membership and the expiry index, then the task; a task
        whose dependencies are all satisfied is scheduled last, by whoever sees it unblocked first (this
        request, or the resolution of its last dependency)."""
        await self.ensure_storage()
        now = self.clock()
        definition = self._normalize(task_id, body)
        self._check_definition(definition, now)
        group_id, scheduler_id, expires = (definition[k] for k in ("taskGroupId", "schedulerId", "expires"))
        group = await self.groups.check_joinable(group_id, scheduler_id)
        dependencies = list(dict.fromkeys(definition["dependencies"]))
        if dependencies:
            checked = (await self._precheck_dependencies(task_id, definition)
                       if len(dependencies) > POINT_READ_LIMIT else None)
            # Edges before the dependencies are read: a dependency that resolves meanwhile finds this task.
            await self.deps.add(task_id, dependencies, "completed" if definition["requires"] == "all-completed"
                                else "resolved", expires)
            try:
                satisfied = await self._check_dependencies(task_id, definition, checked)
            except errors.InputError:
                await self.deps.remove(task_id, dependencies)
                found = {t.task_id for t in await self.load_many(dependencies)}
                await self.deps.unmark([d for d in dependencies if d not in found])
                raise
        # What must precede the task's write, in any order among itself: so all at once (one round trip of
        # latency instead of four).
        _, hint_id, _, _ = await _all(
            self.deadlines.add(task_id, definition["deadline"]),
            self._put_pending_hint(task_id, 0, definition, now) if not dependencies else _nothing(),
            self.groups.join(group_id, scheduler_id, task_id, expires, timeutil.iso(now), group),
            self.expiry.add(task_id, expires))
        task = Task(task_id, definition, [], retries_left=definition["retries"], dependents_marked=True)
        task.emit("task-defined")
        if not dependencies:
            task.runs.append(Run("pending", "scheduled", timeutil.iso(now)))
            task.runs[0].hint_id = hint_id
            task.emit("task-pending", 0)
        if not await self._write(task, insert=True):
            existing = await self._load(task_id)
            if existing.definition != definition:
                raise errors.TaskIdConflict(taskId=task_id)
            if not dependencies or existing.runs:
                return existing.status()
            task = existing  # a retry of a createTask that died after its write: finish what it left undone
        if dependencies:
            await self.deps.satisfy(task_id, satisfied)
            waiting_for = [d for d in dependencies if d not in satisfied]  # includes a self-dependency
            if not await self.deps.blocked(task_id, waiting_for):
                return (await self._schedule_unblocked(task_id)).status()
        return task.status()

    async def _schedule_unblocked(self, task_id: str, *, refuse_late: bool = False) -> Task:
        """Give a task its first run, unless it has one or its deadline passed (what a dependency's resolution
        does for a task it unblocked; scheduleTask, with `refuse_late`, answers 409 past the deadline)."""
        now = self.clock()
        guards = _Guards(self, now)

        async def schedule(task: Task) -> _Unchanged | None:
            if task.runs:
                return UNCHANGED
            if self._deadline_passed(task, now):
                if refuse_late:
                    raise errors.DeadlinePassed(taskId=task_id, deadline=task.deadline)
                return UNCHANGED
            task.runs.append(Run("pending", "scheduled", timeutil.iso(now)))
            await guards.hint(task)
            task.emit("task-pending", 0)
            return None

        return await self._modify(task_id, schedule, guards)

    # --- scheduleTask, rerunTask, cancelTask -------------------------------------------------------------------

    async def schedule_task(self, task_id: str) -> dict[str, Any]:
        """scheduleTask: schedule a task that has no runs, whatever its dependencies say."""
        await self.ensure_storage()
        return (await self._schedule_unblocked(task_id, refuse_late=True)).status()

    async def rerun_task(self, task_id: str) -> dict[str, Any]:
        await self.ensure_storage()
        now = self.clock()
        guards = _Guards(self, now)

        deadline_indexed = False

        async def rerun(task: Task) -> _Unchanged | None:
            nonlocal deadline_indexed
            if self._deadline_passed(task, now):
                raise errors.DeadlinePassed(taskId=task_id, deadline=task.deadline)
            if task.runs and task.runs[-1].state in ("pending", "running"):
                return UNCHANGED
            if len(task.runs) >= MAX_RUNS:
                raise errors.MaxRunsReached(maxRuns=MAX_RUNS)
            if not deadline_indexed:  # its row is there until the deadline, unless the task predates the index
                await self.deadlines.add(task_id, task.deadline)
                deadline_indexed = True
            task.runs.append(Run("pending", "rerun", timeutil.iso(now)))
            task.retries_left = min(int(task.definition["retries"]), MAX_RUNS - len(task.runs))
            task.taken_until = None
            await guards.hint(task)
            task.emit("task-pending", task.last_run_id)
            return None

        return (await self._modify(task_id, rerun, guards)).status()

    async def cancel_task(self, task_id: str) -> dict[str, Any]:
        await self.ensure_storage()
        now = self.clock()
        task, _ = await self._cancel(task_id, now)
        return task.status()

    async def _cancel(self, task_id: str, now: dt.datetime) -> tuple[Task, bool]:
        """Resolve the task exception/canceled unless it is resolved already; and whether this changed it."""
        changed = False

        async def cancel(task: Task) -> _Unchanged | None:
            nonlocal changed
            if self._deadline_passed(task, now):
                raise errors.DeadlinePassed(taskId=task_id, deadline=task.deadline)
            stamp = timeutil.iso(now)
            if not task.runs:
                task.runs.append(Run("exception", "exception", stamp, reason_resolved="canceled", resolved=stamp))
            elif task.runs[-1].state in ("pending", "running"):
                _resolve_run(task.runs[-1], "exception", "canceled", stamp)
            else:
                return UNCHANGED
            task.taken_until = None
            task.emit("task-exception", task.last_run_id)
            changed = True
            return None

        task = await self._modify(task_id, cancel)
        return task, changed

    # --- claiming -----------------------------------------------------------------------------------------------

    async def claim(self, task_id: str, run_id: int, worker_group: str, worker_id: str,
                    hint_id: str | None = None) -> Claim | ClaimRefusal:
        """Claim run `run_id` for a worker. The same worker claiming again with the same hint (or none, as
        claimTask does) gets the same claim back; anyone else gets CONFLICT."""
        await self.ensure_storage()
        now = self.clock()
        taken_until = timeutil.iso(now + dt.timedelta(seconds=self.settings.claim_timeout))
        check: list[str] | None = None
        # As in _modify: a remembered row may start a claim; a refusal or a repeated claim made on it stands
        # only if the stored row is still the same.
        task: Task | None = self.known.get(task_id)
        fresh = read = task is None
        while True:
            if read:
                task, fresh, read = await self._get(task_id), True, False
            outcome = self._claim_outcome(task, run_id, worker_group, worker_id, hint_id, now)
            if outcome is not None:
                if fresh:
                    return outcome
                assert task is not None
                same, task = await self._recheck(task_id, task.etag)
                if same:
                    return outcome
                fresh = True
                continue
            assert task is not None
            run = task.runs[run_id]
            if check is None:
                # The claim check goes out before the claim is written: a crash in between leaves only a
                # stale check, never a running run that nothing expires.
                check, _ = await _all(  # independent of each other; both before the claim is written
                    self._put_claim_check(task_id, run_id, taken_until, now),
                    self.workers.run_claimed(task.task_queue_id, task_id, run_id, worker_group, worker_id,
                                             timeutil.iso(now)))
            task.checks["claim"] = check
            run.state, run.worker_group, run.worker_id = "running", worker_group, worker_id
            run.started, run.taken_until, run.hint_id = timeutil.iso(now), taken_until, hint_id
            task.taken_until = taken_until
            task.emit("task-running", run_id)
            if await self._write(task):
                self.workers.claimed(task.task_queue_id, worker_group, worker_id, task_id, run_id)
                return Claim(task, run_id)
            read = True  # lost a race

    def _claim_outcome(self, task: Task | None, run_id: int, worker_group: str, worker_id: str,
                       hint_id: str | None, now: dt.datetime) -> Claim | ClaimRefusal | None:
        """What a claim of `task` as read comes to without writing: a refusal, the worker's own claim again,
        or None (the run is pending: claim it)."""
        if task is None:
            return ClaimRefusal.TASK_NOT_FOUND
        if run_id >= len(task.runs):
            return ClaimRefusal.RUN_NOT_FOUND
        run = task.runs[run_id]
        if self._deadline_passed(task, now):
            return ClaimRefusal.DEADLINE_PASSED
        if (run.state == "running" and run.worker_group == worker_group and run.worker_id == worker_id
                and (hint_id is None or run.hint_id == hint_id)):
            return Claim(task, run_id)
        if run_id != task.last_run_id or run.state != "pending":
            return ClaimRefusal.CONFLICT
        if hint_id is not None and not run.accepts_hint(hint_id):
            return ClaimRefusal.CONFLICT  # a duplicated hint, or one from before a priority change
        return None

    async def claim_task(self, task_id: str, task_queue_id: str, run_id: int, worker_group: str,
                         worker_id: str) -> dict[str, Any]:
        """claimTask (deprecated API): claim a given run of a task of `task_queue_id` (which the caller read for
        the scopes), raising the Taskcluster error when refused."""
        await self.ensure_storage()
        await self.workers.check_not_quarantined(task_queue_id, worker_group, worker_id)
        result = await self.claim(task_id, run_id, worker_group, worker_id)
        await self.workers.active(task_queue_id, worker_group, worker_id)
        if isinstance(result, Claim):
            return self.claim_response(result, include_task=True)
        if result is ClaimRefusal.TASK_NOT_FOUND:
            raise errors.TaskNotFound(taskId=task_id)
        if result is ClaimRefusal.RUN_NOT_FOUND:
            raise errors.RunNotFound(taskId=task_id, runId=run_id)
        task = await self._load(task_id)
        if result is ClaimRefusal.DEADLINE_PASSED:
            raise errors.DeadlinePassed(taskId=task_id, deadline=task.deadline)
        raise errors.RunAlreadyClaimed(taskId=task_id, runId=run_id)

    async def _try_hint(self, queue: str, message: QueueMessage, worker_group: str,
                        worker_id: str) -> Claim | None:
        try:
            hint = PendingHint.decode(message.json())
        except ValueError:
            hint = None
        if hint is None:
            log.warning("dropping a malformed pending hint", extra=fields(queue=queue, messageId=message.id))
            await self.queues.delete(queue, message)
            return None
        try:
            for pause in (*SETTLE_PAUSES, None):
                result = await self.claim(hint.taskId, hint.runId, worker_group, worker_id, hint.hintId)
                if result not in (ClaimRefusal.TASK_NOT_FOUND, ClaimRefusal.RUN_NOT_FOUND) or pause is None:
                    break
                await asyncio.sleep(pause)  # the hint is written just ahead of its run
        except Exception:
            log.exception("claim attempt failed; the hint is released", extra=fields(taskId=hint.taskId))
            await self.queues.release(queue, message, 0)
            return None
        if isinstance(result, Claim):
            await self.queues.delete(queue, message)
            return result
        young = self.clock() - message.inserted < dt.timedelta(seconds=self.settings.hint_grace)
        if result in (ClaimRefusal.TASK_NOT_FOUND, ClaimRefusal.RUN_NOT_FOUND) and young:
            # The hint is written before its run; the run may be about to appear.
            await self.queues.release(queue, message, self.settings.hint_retry_delay)
            return None
        await self.queues.delete(queue, message)  # stale: the run moved on, or never will exist
        return None

    async def claim_work(self, task_queue_id: str, worker_group: str, worker_id: str, count: int,
                         gone: Callable[[], Awaitable[bool]] | None = None) -> list[dict[str, Any]]:
        """claimWork: claim up to `count` pending runs, highest priority first, FIFO within a priority.

        Returns as soon as a polling round claimed something; otherwise polls until `claim_work_wait`
        has passed (or the caller is `gone`) and returns nothing.
        """
        await self.ensure_storage()
        give_up = time.monotonic() + self.settings.claim_work_wait
        if await self.workers.quarantined_until(task_queue_id, worker_group, worker_id):
            # As Taskcluster: a quarantined worker waits the whole long-poll and gets nothing.
            while (remaining := give_up - time.monotonic()) > 0:
                if gone is not None and await gone():
                    break
                await asyncio.sleep(min(1.0, remaining))
            return []
        await self.workers.active(task_queue_id, worker_group, worker_id)
        visibility = self.settings.pending_hint_visibility
        while True:
            claims: list[Claim] = []
            for queue in pending_queues(task_queue_id):
                wanted = count - len(claims)
                if wanted <= 0:
                    break
                # Most task queues use one or two of the seven priorities: a queue found empty is skipped for
                # `pending_empty_ttl` (a hint put by this process clears that at once; one put by another
                # process waits at most that long). Each receive is a storage call, and on Azurite a costly one.
                if self._empty_until.get(queue, 0.0) > time.monotonic():
                    continue
                messages = await self.queues.receive(queue, wanted, visibility)
                if not messages and self.settings.pending_empty_ttl > 0:
                    self._empty_until[queue] = time.monotonic() + self.settings.pending_empty_ttl
                elif messages:
                    self._empty_until.pop(queue, None)
                results = await asyncio.gather(
                    *(self._try_hint(queue, m, worker_group, worker_id) for m in messages))
                claims.extend(r for r in results if r is not None)
            if claims:
                faults.point("claimed-before-response")
                # The answer first, and nothing after it that can fail: claims are saved, and a worker that
                # never hears of them would leave them to expire.
                answer = [self.claim_response(c, include_task=True) for c in claims]
                await self.workers.active_best_effort(task_queue_id, worker_group, worker_id)
                return answer
            remaining = give_up - time.monotonic()
            if remaining <= 0 or (gone is not None and await gone()):
                return []
            await asyncio.sleep(min(self.settings.claim_work_poll_interval, remaining))

    def _task_credentials(self, task: Task, run_id: int) -> dict[str, str]:
        run = task.runs[run_id]
        assert run.taken_until is not None and run.worker_group and run.worker_id
        taken_until = timeutil.parse(run.taken_until)
        client_id = (f"task-client/{task.task_id}/{run_id}/on/{run.worker_group}/{run.worker_id}"
                     f"/until/{timeutil.js_seconds(taken_until)}")
        scopes = [f"queue:reclaim-task:{task.task_id}/{run_id}", f"queue:resolve-task:{task.task_id}/{run_id}",
                  f"queue:create-artifact:{task.task_id}/{run_id}", *task.definition["scopes"]]
        return credentials.issue(issuer=self.settings.root_client_id,
                                 issuer_access_token=self.settings.root_access_token,
                                 client_id=client_id, scopes=scopes, start=self.clock(), expiry=taken_until)

    def claim_response(self, claim: Claim, *, include_task: bool) -> dict[str, Any]:
        run = claim.run
        out: dict[str, Any] = {
            "status": claim.task.status(),
            "runId": claim.run_id,
            "workerGroup": run.worker_group,
            "workerId": run.worker_id,
            "takenUntil": run.taken_until,
            "credentials": self._task_credentials(claim.task, claim.run_id),
        }
        if include_task:
            out["task"] = _definition_out(claim.task.definition)
        return out

    async def reclaim_task(self, task_id: str, run_id: int) -> dict[str, Any]:
        await self.ensure_storage()
        now = self.clock()
        proposed = timeutil.iso(now + dt.timedelta(seconds=self.settings.claim_timeout))
        sent: dict[str, list[str]] = {}
        replaced: dict[str, list[str]] = {}

        async def reclaim(task: Task) -> _Unchanged | None:
            replaced.clear()
            run = _run_of(task, run_id)
            if self._deadline_passed(task, now):
                raise errors.DeadlinePassed(taskId=task_id, deadline=task.deadline)
            if run_id != task.last_run_id or run.state != "running":
                raise errors.RunNotRunning(taskId=task_id, runId=run_id, state=run.state)
            assert run.taken_until is not None
            taken_until = max(proposed, run.taken_until)  # takenUntil only moves forward
            if taken_until == run.taken_until:
                return UNCHANGED
            if taken_until not in sent:
                sent[taken_until] = await self._put_claim_check(task_id, run_id, taken_until, now)
            if "claim" in task.checks:
                replaced["claim"] = task.checks["claim"]
            task.checks["claim"] = sent[taken_until]
            run.taken_until = task.taken_until = taken_until
            return None

        task = await self._modify(task_id, reclaim)
        await self._delete_checks(task_id, replaced)  # the check of the claim this one renewed
        log.info("run reclaimed", extra=fields(event="task-reclaimed", taskId=task_id, runId=run_id))
        return self.claim_response(Claim(task, run_id), include_task=False)

    # --- resolution -----------------------------------------------------------------------------------------------

    async def resolve(self, task_id: str, run_id: int, state: str, reason: str) -> dict[str, Any]:
        """reportCompleted / reportFailed / reportException. A repeat with the same outcome is a no-op."""
        await self.ensure_storage()
        now = self.clock()
        guards = _Guards(self, now)

        async def report(task: Task) -> _Unchanged | None:
            run = _run_of(task, run_id)
            if run.state == state and run.reason_resolved == reason:
                return UNCHANGED
            if run.resolved_state:
                raise errors.RunResolvedDifferently(taskId=task_id, runId=run_id, state=run.state,
                                                    reasonResolved=run.reason_resolved)
            if run_id != task.last_run_id or run.state != "running":
                raise errors.RunNotRunning(taskId=task_id, runId=run_id, state=run.state)
            _resolve_run(run, state, reason, timeutil.iso(now))
            task.taken_until = None
            task.emit(f"task-{state}", run_id)
            if state == "exception":
                await self._retry(task, RETRY_REASONS.get(reason), guards, now)
            return None

        task = await self._modify(task_id, report, guards)
        log.info("run resolved %s/%s", state, reason,
                 extra=fields(event=f"task-{state}", taskId=task_id, runId=run_id, reason=reason))
        return task.status()

    async def _retry(self, task: Task, reason_created: str | None, guards: _Guards, now: dt.datetime) -> None:
        """Add a retry run when the reason allows one and retries are left."""
        if reason_created is None or task.retries_left <= 0:
            return
        task.retries_left -= 1
        task.runs.append(Run("pending", reason_created, timeutil.iso(now)))
        await guards.hint(task)
        task.emit("task-pending", task.last_run_id)

    async def rehint(self, task_id: str, run_id: int, *, keep_previous: bool) -> bool:
        """Put a new pending hint for a pending run (the reconciler's repair of a lost hint). With
        `keep_previous` the run's earlier hints stay valid too (the first keeps its place in the queue); at most
        MAX_HINTS are kept. False when the run is no longer pending or its deadline passed."""
        now = self.clock()
        guards = _Guards(self, now)
        hinted = False

        async def again(task: Task) -> _Unchanged | None:
            nonlocal hinted
            run = task.runs[-1] if task.runs else None
            if run is None or task.last_run_id != run_id or run.state != "pending" or self._deadline_passed(task, now):
                hinted = False
                return UNCHANGED
            earlier = run.hint_ids()
            await guards.hint(task)
            assert run.hint_id is not None
            kept = [*earlier[:1], *earlier[1:][-(MAX_HINTS - 2):]] if keep_previous else []
            run.hint_id = " ".join([*kept, run.hint_id])
            hinted = True
            return None

        await self._modify(task_id, again, guards)
        return hinted

    # --- the queue-triggered checks ---------------------------------------------------------------------------------

    async def _put_back_if_early(self, queue: str, body: bytes, due: str, now: dt.datetime) -> bool:
        """A check delivered before it is due (clock skew; visibility is in whole seconds) is put back."""
        early = timeutil.parse(due) - now
        if early <= dt.timedelta(0):
            return False
        await self.queues.put(queue, body, visible_in=max(1, timeutil.ceil_seconds(early)))
        return True

    async def check_claim(self, check: ClaimCheck) -> str:
        """A claim check came due: resolve the run claim-expired if it was not reclaimed or resolved."""
        await self.ensure_storage()
        faults.point("check-claim")
        now = self.clock()
        guards = _Guards(self, now)
        outcome = "expired"

        async def expire(task: Task) -> _Unchanged | None:
            nonlocal outcome
            run = task.runs[check.runId] if check.runId < len(task.runs) else None
            if (run is None or run.state != "running" or run.taken_until != check.takenUntil
                    or task.taken_until != check.takenUntil):
                outcome = "stale"
                return UNCHANGED
            if await self._put_back_if_early(CLAIM_QUEUE, check.encode(), check.takenUntil, now):
                outcome = "early"
                return UNCHANGED
            if self._deadline_passed(task, now):
                outcome = "deadline"  # the deadline check resolves it, as deadline-exceeded
                return UNCHANGED
            _resolve_run(run, "exception", "claim-expired", timeutil.iso(now))
            task.taken_until = None
            task.emit("task-exception", check.runId)  # also when retried (modern Taskcluster), before task-pending
            await self._retry(task, "retry", guards, now)
            outcome = "expired"
            return None

        try:
            await self._modify(check.taskId, expire, guards)
        except errors.TaskNotFound:
            return "task-gone"
        if outcome == "expired":
            log.info("claim expired", extra=fields(event="claim-expired", taskId=check.taskId, runId=check.runId))
        return outcome

    async def check_deadlines(self, body: Any) -> str:
        """A `task-deadlines` message came due: a bucket of deadlines (shared/domain/deadlines.py), or one task's check
        (the form queued before buckets, and the reconciler's). An outcome word."""
        await self.ensure_storage()
        if isinstance(body, dict) and "taskId" in body:
            return await self.check_deadline(DeadlineCheck.decode(body))
        return await self.deadlines.check(DeadlineBucket.decode(body),
                                          lambda task_id, deadline: self.check_deadline(DeadlineCheck(task_id,
                                                                                                      deadline)))

    async def check_deadline(self, check: DeadlineCheck) -> str:
        """A deadline check came due: resolve whatever is unresolved as deadline-exceeded."""
        await self.ensure_storage()
        faults.point("check-deadline")
        now = self.clock()
        outcome = "exceeded"

        async def exceed(task: Task) -> _Unchanged | None:
            nonlocal outcome
            if task.deadline != check.deadline:
                outcome = "stale"
                return UNCHANGED
            if await self._put_back_if_early(DEADLINE_QUEUE, check.encode(), check.deadline, now):
                outcome = "early"
                return UNCHANGED
            stamp = timeutil.iso(now)
            if not task.runs:
                task.runs.append(Run("exception", "exception", stamp, reason_resolved="deadline-exceeded",
                                     resolved=stamp))
            elif not task.runs[-1].resolved_state:
                _resolve_run(task.runs[-1], "exception", "deadline-exceeded", stamp)
            else:
                outcome = "already-resolved"
                return UNCHANGED
            task.taken_until = None
            task.emit("task-exception", task.last_run_id)
            outcome = "exceeded"
            return None

        try:
            await self._modify(check.taskId, exceed)
        except errors.TaskNotFound:
            return "task-gone"
        if outcome == "exceeded":
            log.info("deadline exceeded", extra=fields(event="deadline-exceeded", taskId=check.taskId))
        return outcome

    # --- dependency resolution ---------------------------------------------------------------------------------

    async def resolve_dependencies(self, check: ResolvedCheck) -> str:
        """A task resolved. On the first page: take it out of its group's active set. Then unblock a page of
        its dependents, handing the next page to a new message first, so no invocation runs long and several
        hosts share a large fan-out. Every step is idempotent: a duplicated message changes nothing."""
        await self.ensure_storage()
        faults.point("resolve-dependencies")
        now = self.clock()
        resolution: str | None = None
        # A remembered row that shows the run resolved is enough (a resolved run stays so); otherwise read.
        known = self.known.get(check.taskId)
        for pause in (*SETTLE_PAUSES, None):
            task = known if known is not None and _resolved_run(known, check.runId) else await self._get(check.taskId)
            known = None
            run = task.runs[check.runId] if task is not None and check.runId < len(task.runs) else None
            if task is None or (run is not None and run.resolved_state) or pause is None:
                break
            await asyncio.sleep(pause)  # written just ahead of the resolution it announces
        if task is not None:
            if run is None or not run.resolved_state:
                # Still not written: wait for it a while; once old, it was a write that lost a race.
                if now - timeutil.parse(check.since) < dt.timedelta(seconds=self.settings.hint_grace):
                    await self.queues.put(RESOLVED_QUEUE, check.encode(), visible_in=self.settings.hint_retry_delay)
                    return "not-yet"
                return "stale"
            resolution = run.state
        group_step = asyncio.create_task(self._resolve_group_member(check))
        if resolution is None:
            await group_step
            return "task-gone"
        if (check.continuation is None and task is not None and task.dependents_marked
                and not await self.deps.has_dependents(check.taskId)):
            await group_step
            return "resolved"  # nothing depends on it: no partition query
        dependents, token = await self.deps.dependents(check.taskId, limit=DEPENDENTS_PAGE,
                                                       continuation=check.continuation)
        if token is not None:
            await self.queues.put(RESOLVED_QUEUE, replace(check, continuation=token).encode())
        limit = asyncio.Semaphore(LOAD_CONCURRENCY)

        async def unblock(dependent: Dependent) -> None:
            if dependent.require == "completed" and resolution != "completed":
                return  # all-completed: it stays blocked (until scheduleTask, cancel or its deadline)
            async with limit:
                if dependent.count != 1:  # with a single dependency (this one) it is unblocked now
                    await self.deps.satisfy(dependent.task_id, [check.taskId])
                    if await self.deps.blocked(dependent.task_id, dependent.others):
                        return
                try:
                    await self._schedule_unblocked(dependent.task_id)
                except errors.TaskNotFound:
                    # Its createTask has not written it yet, and reads its requirements after writing it. With
                    # a single dependency the requirement row is normally left (the schedule makes it moot):
                    # drop it, then try once more, so that one of the two sides sees the other's write.
                    if dependent.count == 1:
                        await self.deps.satisfy(dependent.task_id, [check.taskId])
                        with contextlib.suppress(errors.TaskNotFound):
                            await self._schedule_unblocked(dependent.task_id)
                faults.point("resolution-mid-page")

        await asyncio.gather(group_step, *(unblock(d) for d in dependents))
        return "resolved"

    async def _resolve_group_member(self, check: ResolvedCheck) -> None:
        """On the first page of a resolution: the task leaves its group's active set; the group is resolved when
        none is left (announced at least once: two last members resolving together may both announce it)."""
        if check.continuation is None and await self.groups.resolve_member(check.taskGroupId, check.taskId):
            # Announced at least once: a redelivered message, or two last members resolving together, may
            # announce it again (as in Taskcluster, where a group can also resolve again after new tasks).
            now = self.clock()
            with contextlib.suppress(TaskGroupNotFound):
                await self.groups.update(check.taskGroupId, lambda g: g, lambda g: [
                    _group_changed("task-group-resolved", g, now)])

    async def list_dependents(self, task_id: str, *, limit: int, continuation: str | None) -> dict[str, Any]:
        await self.ensure_storage()
        await self._load(task_id)
        dependents, token = await self.deps.dependents(task_id, limit=min(limit, MAX_PAGE),
                                                       continuation=continuation)
        tasks = await self.load_many(d.task_id for d in dependents)
        out: dict[str, Any] = {"taskId": task_id, "tasks": [_definition_and_status(t) for t in tasks]}
        if token:
            out["continuationToken"] = token
        return out

    # --- task groups ---------------------------------------------------------------------------------------------

    async def _group(self, task_group_id: str) -> Any:
        await self.ensure_storage()
        group = await self.groups.get(task_group_id)
        if group is None:
            raise TaskGroupNotFound(taskGroupId=task_group_id)
        return group

    async def task_group(self, task_group_id: str) -> dict[str, Any]:
        return dict((await self._group(task_group_id)).to_api())

    async def list_task_group(self, task_group_id: str, *, limit: int, continuation: str | None) -> dict[str, Any]:
        group = await self._group(task_group_id)
        ids, token = await self.groups.members(task_group_id, limit=min(limit, MAX_PAGE), continuation=continuation)
        tasks = await self.load_many(ids)  # a member whose task is gone (expired) is left out
        out: dict[str, Any] = {**group.to_api(), "tasks": [_definition_and_status(t) for t in tasks]}
        if token:
            out["continuationToken"] = token
        return out

    async def seal_task_group(self, task_group_id: str) -> dict[str, Any]:
        await self.ensure_storage()
        now = self.clock()
        group = await self.groups.seal(task_group_id, timeutil.iso(now),
                                       lambda g: [_group_changed("task-group-sealed", g, now)])
        return dict(group.to_api())

    async def cancel_task_group(self, task_group_id: str) -> dict[str, Any]:
        """Cancel every unresolved task of a sealed group whose deadline has not passed."""
        group = await self._group(task_group_id)
        if not group.sealed:
            raise TaskGroupNotSealed(taskGroupId=task_group_id)
        ids = await self.groups.all_members(task_group_id)
        now = self.clock()
        limit = asyncio.Semaphore(LOAD_CONCURRENCY)

        async def cancel(task: Task) -> str | None:
            if task.state in RESOLVED_STATES or self._deadline_passed(task, now):
                return None
            async with limit:
                _, changed = await self._cancel(task.task_id, now)
            return task.task_id if changed else None

        cancelled = [t for t in await asyncio.gather(*(cancel(t) for t in await self.load_many(ids))) if t]
        return {"taskGroupId": task_group_id, "taskGroupSize": len(ids), "cancelledCount": len(cancelled),
                "taskIds": cancelled}

    # --- priorities ----------------------------------------------------------------------------------------------

    async def _change_priority(self, task_id: str, new_priority: str, *, strict: bool) -> Task | None:
        """Set a task's priority; pending work is hinted again in the new priority's queue (the old hint can no
        longer claim it). Not strict: skip tasks it does not apply to (group changes)."""
        now = self.clock()
        guards = _Guards(self, now)
        changed = False

        async def change(task: Task) -> _Unchanged | None:
            nonlocal changed
            problem: errors.QueueError | None = None
            if self._deadline_passed(task, now):
                problem = errors.DeadlinePassed(taskId=task_id, deadline=task.deadline)
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

        task = await self._modify(task_id, change, guards)
        return task if changed else None

    async def change_task_priority(self, task_id: str, new_priority: str) -> dict[str, Any]:
        await self.ensure_storage()
        task = await self._change_priority(task_id, new_priority, strict=True)
        assert task is not None
        log.info("task priority changed to %s", new_priority, extra=fields(event="task-priority-changed",
                                                                           taskId=task_id))
        return task.status()

    async def change_task_group_priority(self, task_group_id: str, new_priority: str) -> dict[str, Any]:
        group = await self._group(task_group_id)
        ids = await self.groups.all_members(task_group_id)
        limit = asyncio.Semaphore(LOAD_CONCURRENCY)

        async def change(task_id: str) -> str | None:
            async with limit:
                try:
                    return task_id if await self._change_priority(task_id, new_priority, strict=False) else None
                except errors.TaskNotFound:
                    return None

        changed = [t for t in await asyncio.gather(*(change(t) for t in ids)) if t]
        now = self.clock()
        await self.groups.update(task_group_id, lambda g: g, lambda g: [group_event(
            "task-group-priority-changed", g.task_group_id, g.scheduler_id, now=now, newPriority=new_priority,
            tasksAffected=len(changed))])
        return {"taskGroupId": task_group_id, "schedulerId": group.scheduler_id, "newPriority": new_priority,
                "tasksAffected": len(changed), "taskIds": changed}

    # --- events ------------------------------------------------------------------------------------------------

    async def task_events(self, task_id: str, *, limit: int, continuation: str | None) -> dict[str, Any]:
        """A task's recorded events, in order (whether or not a bus is configured)."""
        await self.ensure_storage()
        await self._load(task_id)
        return await self._events_page({"taskId": task_id}, Stream(TASKS_TABLE, task_id), limit, continuation)

    async def task_group_events(self, task_group_id: str, *, limit: int,
                                continuation: str | None) -> dict[str, Any]:
        await self._group(task_group_id)
        return await self._events_page({"taskGroupId": task_group_id}, Stream(TASK_GROUPS_TABLE, task_group_id),
                                       limit, continuation)

    async def _events_page(self, head: dict[str, Any], stream: Stream, limit: int,
                           continuation: str | None) -> dict[str, Any]:
        events, token = await self.events.list(stream, limit=min(limit, MAX_PAGE), continuation=continuation)
        out = {**head, "events": [e.to_api(seq, self.settings.pulse_namespace) for seq, e in events]}
        if token:
            out["continuationToken"] = token
        return out

    # --- task queues: pending and claimed runs ------------------------------------------------------------------

    async def task_queue_runs(self, task_queue_id: str, state: str, *, limit: int,
                              continuation: str | None) -> dict[str, Any]:
        """listPendingTasks (`pending`) / listClaimedTasks (`running`): the index's rows, each checked against its
        task (a row a crash left stale is dropped, and deleted)."""
        await self.ensure_storage()
        rows, token = await self.workers.runs(task_queue_id, state, limit=min(limit, MAX_PAGE),
                                              continuation=continuation)
        tasks = {t.task_id: t for t in await self.load_many(r.row_key for r in rows)}
        out: list[dict[str, Any]] = []
        for row in rows:
            task, run_id = tasks.get(row.row_key), int(row.data["runId"])
            if task is None or task.last_run_id != run_id or task.runs[run_id].state != state:
                continue  # stale (also: pending again or resolved, and the row not rewritten yet)
            item: dict[str, Any] = {"taskId": task.task_id, "runId": run_id,
                                    "task": _definition_out(task.definition)}
            if state == "pending":
                item["inserted"] = task.runs[run_id].scheduled
            else:
                run = task.runs[run_id]
                item.update(workerGroup=run.worker_group, workerId=run.worker_id, claimed=run.started)
            out.append(item)
        result: dict[str, Any] = {"tasks": out}
        if token:
            result["continuationToken"] = token
        return result

    async def task_queue_counts(self, task_queue_id: str) -> dict[str, Any]:
        """Pending: the messages in the pending queues (approximate, as Azure counts them, and as Taskcluster
        counted); claimed: the task queue's claimed runs in the index."""
        await self.ensure_storage()
        pending = sum(await asyncio.gather(*(self.queues.approximate_count(q) for q in pending_queues(task_queue_id))))
        provisioner_id, worker_type = task_queue_id.split("/", 1)
        return {"provisionerId": provisioner_id, "workerType": worker_type, "taskQueueId": task_queue_id,
                "pendingTasks": pending, "claimedTasks": await self.workers.count_claimed(task_queue_id)}

    async def expire_worker_info(self) -> int:
        await self.ensure_storage()
        cutoff = timeutil.iso(self.clock() - dt.timedelta(seconds=self.settings.expiry_delay))
        deleted = await self.workers.expire(cutoff)
        if deleted:
            log.info("expired %d worker info entries", deleted, extra=fields(event="worker-info-expired"))
        return deleted

    # --- expiry ----------------------------------------------------------------------------------------------------

    async def expire_tasks(self, *, batch: int = 200, budget_seconds: float = 60) -> int:
        """Delete tasks whose `expires` is more than QUEUE_EXPIRY_DELAY ago, with their artifacts, events,
        dependency and deadline rows and group membership (and the group once it is empty and expired), a batch
        at a time within a time budget."""
        await self.ensure_storage()
        cutoff = timeutil.iso(self.clock() - dt.timedelta(seconds=self.settings.expiry_delay))
        give_up = time.monotonic() + budget_seconds
        limit = asyncio.Semaphore(16)
        expired = 0

        async def expire(hour: str, task_id: str) -> None:
            async with limit:
                task = await self._get(task_id)
                self.known.forget(task_id)
                if task is not None:
                    await self.artifacts.forget_task(task_id)
                    await self.workers.run_resolved(task.task_queue_id, task_id)
                    await self.events.forget(Stream(TASKS_TABLE, task_id), task.event_seq)
                    await self.deps.forget_task(task_id)
                    group_id = task.definition["taskGroupId"]
                    await self.groups.forget_member(group_id, task_id)
                    await self.deadlines.forget(task_id, task.deadline)
                    await self.tables.delete(TASKS_TABLE, task_id, task_row(task_id))
                    await self.groups.delete_if_empty(group_id, cutoff)
                await self.expiry.remove(hour, task_id)

        while time.monotonic() < give_up:
            due = await self.expiry.due(cutoff, batch)
            if not due:
                break
            await asyncio.gather(*(expire(hour, task_id) for hour, task_id in due))
            expired += len(due)
        if expired:
            log.info("expired %d tasks", expired, extra=fields(event="tasks-expired"))
        return expired


def _refuse_dependencies(wanted: list[str], found: dict[str, Task], definition: dict[str, Any]) -> None:
    """400 when a wanted dependency was not found, or expires before the task's deadline."""
    missing = [d for d in wanted if d not in found]
    if missing:
        raise errors.InputError("Dependencies not found: {missing}", missing=", ".join(missing))
    expiring = [d for d in wanted if found[d].definition["expires"] < definition["deadline"]]
    if expiring:
        raise errors.InputError("Dependencies expire before this task's deadline: {ids}", ids=", ".join(expiring))


def _group_changed(exchange: str, group: TaskGroup, now: dt.datetime) -> Event:
    """task-group-resolved / task-group-sealed: the task-group-changed-message."""
    return group_event(exchange, group.task_group_id, group.scheduler_id, now=now, expires=group.expires,
                       **({"sealed": group.sealed} if group.sealed else {}))


def _resolved_run(task: Task, run_id: int) -> bool:
    return run_id < len(task.runs) and task.runs[run_id].resolved_state


def _run_of(task: Task, run_id: int) -> Run:
    if run_id >= len(task.runs):
        raise errors.RunNotFound(taskId=task.task_id, runId=run_id)
    return task.runs[run_id]


def _resolve_run(run: Run, state: str, reason: str, stamp: str) -> None:
    run.state, run.reason_resolved, run.resolved = state, reason, stamp


def _definition_out(definition: dict[str, Any]) -> dict[str, Any]:
    return {key: definition[key] for key in DEFINITION_FIELDS}


def _definition_and_status(task: Task) -> dict[str, Any]:
    return {"task": _definition_out(task.definition), "status": task.status()}
