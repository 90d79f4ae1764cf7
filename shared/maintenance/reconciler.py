"""The reconciler: finds tasks that a lost or poisoned message would leave stuck, and moves them on.

Tables and queues share no transaction, so each change puts the messages that guard it before it writes
(`shared/operations/writes/repository.py`), and those messages keep every task moving. A message can still be lost: one
that failed `maxDequeueCount` times sits in `<queue>-poison`, an operator may clear a queue, a polling worker may
delete a hint it never claimed. The reconciler, a timer, restores the invariants those messages keep
(docs/invariants.md):

- every pending run has a hint that may claim it in its pending queue;
- every running run is checked no later than its `takenUntil`;
- every unresolved task is checked at its deadline;
- every resolved task has left its group's active set and unblocked its dependents;
- every event recorded is dispatched (with a bus).

It reads only what may be wrong: the poison queues, the group rows of unresolved tasks whose state is older than
QUEUE_RECONCILE_GRACE (`a:<taskId>` with `since`), and index rows as old (`TaskQueueRuns`). Each repair is one of
the queue's own idempotent, ETag-conditional operations, so a repair that races the normal triggers, or
another reconciler, changes nothing twice. Each is logged (`event: repair`, `reason`: the kind) and counted.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any

from shared import metrics
from shared.domain.messages import (
    CLAIM_QUEUE,
    DEADLINE_QUEUE,
    RESOLVED_QUEUE,
    TRIGGERED_QUEUES,
    ClaimCheck,
    DeadlineCheck,
    ResolvedCheck,
    poison_queue,
)
from shared.domain.parking import PARKED_KIND
from shared.domain.tasks import RESOLVED_STATES, TASKS_TABLE, Task, accepted_states
from shared.logs import fields
from shared.operations.checks import Checks
from shared.operations.resolution.follow_up import FollowUp
from shared.operations.scheduling import Scheduling
from shared.operations.writes.repository import TaskRepository
from shared.outbox.rows import DISPATCH_QUEUE, Stream, decode_requests, encode_requests
from shared.storage.base import Entity, QueueMessage

log = logging.getLogger("queue.reconciler")

PAGE = 100  # rows read, and tasks checked concurrently at most, per step
CONCURRENCY = 16
REQUIREMENTS_CHECKED = 100  # of a blocked task's remaining dependencies, per pass (satisfied ones are deleted)
# The queues whose poison queues are redriven: each triggered one, and the parking queues, which releases before
# 0.3.0 triggered (poison they left).
POISONED_QUEUES = (CLAIM_QUEUE, DEADLINE_QUEUE, *TRIGGERED_QUEUES, DISPATCH_QUEUE)

# The repairs, by the name logged (`reason`) and counted.
REPAIRS = {
    "hint-lost": "a pending run whose queue is empty was hinted again",
    "hint-hidden": "a pending run whose queue showed nothing visible for a claim's timeout was hinted again",
    "hint-renewed": "a pending run waiting QUEUE_REHINT_AFTER (doubling) was hinted again, its first hint kept",
    "claim-expired": "a running run past its takenUntil was resolved claim-expired (retried if it may)",
    "deadline-exceeded": "an unresolved task past its deadline was resolved deadline-exceeded",
    "resolution": "a resolved task still in its group's active set had its resolution run",
    "dependency": "a blocked task's requirement on a resolved dependency was satisfied",
    "unblocked": "a task with nothing left to wait for and no run was scheduled",
    "phantom-member": "the active row of a task that was never written was removed",
    "run-index": "a TaskQueueRuns row that no longer matched its task was deleted",
    "events": "recorded events not dispatched were announced again",
    "poison": "a poison message was reported and its handler run again",
}


@dataclass
class Report:
    """What one pass did."""

    checked: int = 0
    repairs: Counter[str] = field(default_factory=Counter)
    failures: int = 0
    poison: int = 0
    complete: bool = True  # False when the pass ran out of its time budget

    def add(self, other: Report) -> None:
        self.checked += other.checked
        self.repairs.update(other.repairs)
        self.failures += other.failures
        self.poison += other.poison
        self.complete = self.complete and other.complete

    def summary(self) -> str:
        repairs = ", ".join(f"{k} {v}" for k, v in sorted(self.repairs.items())) or "none"
        return (
            f"checked {self.checked}, repairs: {repairs}; poison messages {self.poison}, "
            f"failures {self.failures}{'' if self.complete else ', out of time'}"
        )


class Reconciler:
    def __init__(self, tasks: TaskRepository, scheduling: Scheduling, checks: Checks, resolution: FollowUp) -> None:
        self.tasks, self.scheduling, self.checks, self.resolution = tasks, scheduling, checks, resolution
        self.stores = tasks.stores
        self.settings = self.stores.settings
        self._poison_ready = False
        # Where a scan that ran out of time stopped (its next page): the next pass here goes on from there, so a
        # table too large for one pass's budget is still walked whole, over several.
        self._resume: dict[str, str] = {}

    def _repaired(self, report: Report, kind: str, task_id: str | None, **extra: Any) -> None:
        report.repairs[kind] += 1
        metrics.REPAIRS.add(1, {"reason": kind})
        if kind == "poison":
            metrics.POISON_MESSAGES.add(1, {"queue": str(extra.get("queue", ""))})
        log.warning("repair: %s", REPAIRS[kind], extra=fields(event="repair", reason=kind, taskId=task_id, **extra))

    async def run(self) -> Report:
        """One pass: poison queues, then unresolved tasks, then the run index, within QUEUE_RECONCILE_BUDGET."""
        await self.stores.ready()
        now = self.stores.now()
        give_up = time.monotonic() + self.settings.reconcile_budget
        report = Report()
        await self._poison(report, give_up)
        cutoff = now - dt.timedelta(seconds=self.settings.reconcile_grace)
        await self._scan(
            "active",
            report,
            give_up,
            lambda token: self.stores.groups.active_since(cutoff, limit=PAGE, continuation=token),
            lambda item: self._active(report, *item),
        )
        await self._scan(
            "runs",
            report,
            give_up,
            lambda token: self.stores.queue_runs.runs_since(cutoff, limit=PAGE, continuation=token),
            lambda row: self._index_row(report, row),
        )
        if time.monotonic() < give_up:
            metrics.CENSUS.record(await self.stores.queue_runs.pending_census())
        level = logging.WARNING if report.repairs or report.failures or report.poison else logging.INFO
        log.log(level, "reconciler pass: %s", report.summary(), extra=fields(event="reconciled"))
        return report

    async def _scan(
        self,
        name: str,
        report: Report,
        give_up: float,
        page: Callable[[str | None], Awaitable[tuple[list[Any], str | None]]],
        check: Callable[[Any], Awaitable[None]],
    ) -> None:
        """Check each item of the pages, from where this scan last ran out of time, until done or `give_up`."""
        limit = asyncio.Semaphore(CONCURRENCY)

        async def one(item: Any) -> None:
            async with limit:
                try:
                    await check(item)
                except Exception:
                    report.failures += 1
                    log.exception("reconciler: a check failed", extra=fields(event="repair-failed"))

        token: str | None = self._resume.pop(name, None)
        while True:
            if time.monotonic() > give_up:
                report.complete = False
                if token is not None:
                    self._resume[name] = token
                return
            items, token = await page(token)
            await asyncio.gather(*(one(item) for item in items))
            if token is None:
                return

    # --- unresolved tasks ------------------------------------------------------------------------------------

    async def _active(self, report: Report, task_group_id: str, task_id: str) -> None:
        report.checked += 1
        task = await self.tasks.get(task_id)
        if task is None:
            # createTask joins the group before it writes the task, and died in between (or was refused
            # after): nothing will ever resolve it, and the group would never resolve.
            now = self.stores.now()
            await self.resolution.resolve_group_member(ResolvedCheck(task_id, 0, task_group_id, None, now))
            self._repaired(report, "phantom-member", task_id, taskGroupId=task_group_id)
            return
        await self._reconcile(task, report)

    async def _reconcile(self, task: Task, report: Report) -> None:
        """Repair what is wrong with a task whose active row is older than the grace period."""
        now = self.stores.now()
        grace = dt.timedelta(seconds=self.settings.reconcile_grace)
        task_id = task.task_id
        await self._events(task, report)
        if task.state in RESOLVED_STATES:
            # Resolved, yet still in its group's active set (the caller found the row): the resolution was lost.
            run = task.runs[-1]
            if run.resolved and run.resolved + grace <= now:
                await self.resolution.resolve_dependencies(
                    ResolvedCheck(task_id, task.last_run_id, task.definition["taskGroupId"], None, now)
                )
                self._repaired(report, "resolution", task_id, runId=task.last_run_id)
            return
        deadline_due = task.deadline + dt.timedelta(seconds=self.settings.deadline_delay) + grace
        if deadline_due <= now:
            if await self.checks.check_deadline(DeadlineCheck(task_id, task.deadline)) == "exceeded":
                self._repaired(report, "deadline-exceeded", task_id)
            return
        if not task.runs:
            await self._blocked(task, report)
            return
        run, run_id = task.runs[-1], task.last_run_id
        if run.state == "running":
            assert run.taken_until is not None
            if (
                run.taken_until + grace <= now
                and await self.checks.check_claim(ClaimCheck(task_id, run_id, run.taken_until)) == "expired"
            ):
                self._repaired(report, "claim-expired", task_id, runId=run_id)
        elif run.state == "pending":
            await self._pending(task, report)

    async def _pending(self, task: Task, report: Report) -> None:
        """A pending run's hint cannot be looked up in its queue (a queue cannot be searched). An empty queue
        proves it gone (Azure's approximate count is never below the real one, and counts hidden messages). One
        whose messages are all hidden (a poll URL's `visibilitytimeout`, or work being claimed) after a claim's
        timeout per hint it has: its hint was hidden, the run gets another (the hidden one is stale when it
        comes back). A queue with visible messages may hide a lost hint behind others: after QUEUE_REHINT_AFTER,
        doubling with each hint, the run gets another, and keeps its first so it does not lose its place."""
        now = self.stores.now()
        run, run_id = task.runs[-1], task.last_run_id
        waited = (now - run.scheduled).total_seconds()
        if waited < self.settings.reconcile_grace:
            return
        queue = self.stores.shards.pending_queue(task.task_queue_id, task.priority, task.task_id)
        await self.stores.ensure_pending_queues(task.task_queue_id)
        if await self.stores.queues.approximate_count(queue) == 0:
            if await self.scheduling.rehint(task.task_id, run_id, keep_previous=False):
                self._repaired(report, "hint-lost", task.task_id, runId=run_id)
            return
        hints = max(1, len(run.hint_ids()))
        # A worker's poll URL may hide what it receives for up to 7 days (its `visibilitytimeout`); a worker that
        # took a hint claims within seconds. Pending a claim's timeout with nothing visible: its hint is hidden.
        if (
            waited >= min(self.settings.claim_timeout, self.settings.rehint_after) * hints
            and not await self.stores.queues.any_visible(queue)
            and await self.scheduling.rehint(task.task_id, run_id, keep_previous=True)
        ):
            self._repaired(report, "hint-hidden", task.task_id, runId=run_id)
            return
        if waited >= self.settings.rehint_after * (2 ** (hints - 1)) and await self.scheduling.rehint(
            task.task_id, run_id, keep_previous=True
        ):
            self._repaired(report, "hint-renewed", task.task_id, runId=run_id)

    async def _blocked(self, task: Task, report: Report) -> None:
        """A task without runs waits for its dependencies. A dependency that resolved (as this task requires)
        more than the grace period ago should have released it: its resolution was lost, so do its part."""
        stores, now = self.stores, self.stores.now()
        grace = dt.timedelta(seconds=self.settings.reconcile_grace)
        task_id = task.task_id
        in_row = task.waiting is not None  # what it waits for is on its row (shared/domain/dependencies.py)
        waiting = [
            d
            for d in (
                task.waiting
                if task.waiting is not None
                else await stores.deps.requirements(task_id, limit=REQUIREMENTS_CHECKED)
            )
            if d != task_id
        ]
        self_dependent = task_id in task.definition["dependencies"]
        if waiting:
            accepted = accepted_states(task.definition["requires"])
            done = [
                t.task_id
                for t in await self.tasks.load_many(waiting[:REQUIREMENTS_CHECKED])
                if t.state in accepted and (resolved := t.runs[-1].resolved) is not None and resolved + grace <= now
            ]
            if not done:
                return
            if in_row:
                self._repaired(report, "dependency", task_id)
                if (await self.scheduling.release(task_id, done)).runs:
                    self._repaired(report, "unblocked", task_id)
                return
            await stores.deps.satisfy(task_id, done)
            self._repaired(report, "dependency", task_id)
        elif self_dependent or not task.definition["dependencies"] or in_row:
            return  # waits for scheduleTask (a self-dependency), or is being created right now
        if not await stores.deps.blocked(task_id):
            scheduled = await self.scheduling.schedule_unblocked(task_id)
            if scheduled.runs:
                self._repaired(report, "unblocked", task_id)

    async def _events(self, task: Task, report: Report) -> None:
        """With a bus: events recorded but not dispatched, with no dispatcher at work, are announced again."""
        events = self.stores.events
        if not events.dispatching or task.event_seq == 0 or await events.bus.refusing():
            return  # while the bus refuses, the parked requests carry the streams (shared/outbox/outage.py)
        stream = Stream(TASKS_TABLE, task.task_id)
        cursor = await events.cursor(stream)
        if cursor.dispatched < task.event_seq and not cursor.leased(self.stores.now()):
            await events.announce(stream, task.event_seq, now=True)
            self._repaired(report, "events", task.task_id)

    # --- the run index ---------------------------------------------------------------------------------------

    async def _index_row(self, report: Report, row: Entity) -> None:
        """An index row is written before the change it describes and deleted after the resolution; a crash
        between leaves one that listPendingTasks / listClaimedTasks and the counts would show."""
        report.checked += 1
        task = await self.tasks.get(row.row_key)
        run_id, state = int(row.data["runId"]), str(row.data["state"])
        if task is not None and task.last_run_id == run_id and task.runs[run_id].state == state:
            return
        if await self.stores.queue_runs.drop_run(row):
            self._repaired(report, "run-index", row.row_key, runId=run_id)

    # --- poison queues ---------------------------------------------------------------------------------------

    async def _poison(self, report: Report, give_up: float) -> None:
        """Each poison message is reported, and its handler is run again here; when that succeeds the message
        is deleted, otherwise it stays (hidden until the next pass) and is reported again."""
        queues = self.stores.queues
        shards = self.stores.shards
        triggered = [(base, queue) for base in POISONED_QUEUES for queue in shards.check_queues(base)]
        if not self._poison_ready:
            await queues.ensure_queues([poison_queue(queue) for _, queue in triggered])
            self._poison_ready = True
        hide = max(1, round(self.settings.reconcile_grace))
        for base, queue in triggered:
            poison = poison_queue(queue)
            while time.monotonic() < give_up:
                messages = await queues.receive(poison, 32, hide)
                if not messages:
                    break
                for message in messages:
                    report.poison += 1
                    await self._redrive(report, base, queue, poison, message)

    async def _redrive(self, report: Report, base: str, queue: str, poison: str, message: QueueMessage) -> None:
        """Run a poison message's handler again: `base` names the kind of queue (`queue` is its shard)."""
        base = PARKED_KIND.get(base, base)  # a triggered `-due` queue holds the checks its parking queue does
        try:
            body = message.json()
        except ValueError:
            body = None
        task_id = str(body.get("taskId") or body.get("key") or "") if isinstance(body, dict) else ""
        log.error(
            "poison message in %s (dequeued %d times): %s",
            poison,
            message.dequeue_count,
            message.content.decode(errors="replace"),
            extra=fields(
                event="poison",
                queue=poison,
                messageId=message.id,
                taskId=task_id or None,
                dequeueCount=message.dequeue_count,
            ),
        )
        queues = self.stores.queues
        try:
            if base == RESOLVED_QUEUE or (base == CLAIM_QUEUE and ResolvedCheck.carried_by(body)):
                await self.resolution.resolve_dependencies(ResolvedCheck.decode(body))
            elif base == CLAIM_QUEUE:
                await self.checks.check_claim(ClaimCheck.decode(body))
            elif base == DEADLINE_QUEUE:
                await self.checks.check_deadlines(body)
            else:  # the dispatcher needs the bus: hand the requests back to it, their attempts counted afresh
                requests = [replace(r, attempt=0) for r in decode_requests(body)]
                await queues.put(queue, encode_requests(requests))
        except (KeyError, TypeError, ValueError):
            log.error(
                "dropping a malformed poison message (its content is logged above)",
                extra=fields(queue=poison, messageId=message.id),
            )
        except Exception:
            report.failures += 1
            log.exception(
                "poison message still fails; it stays in %s",
                poison,
                extra=fields(event="repair-failed", queue=poison, messageId=message.id, taskId=task_id or None),
            )
            return
        await queues.delete(poison, message)
        self._repaired(report, "poison", task_id or None, queue=poison)
