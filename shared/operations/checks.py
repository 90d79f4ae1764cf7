"""The queue-triggered checks that resolve what nobody else will: a claim not renewed by its `takenUntil`, and
a task not resolved by its deadline. Each check re-reads the task and acts only if the state it was put for still
holds, so a stale, duplicated or early message changes nothing.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

from shared import errors, faults, metrics
from shared.domain.deadlines import DeadlineBucket
from shared.domain.messages import CLAIM_QUEUE, DEADLINE_QUEUE, ClaimCheck, DeadlineCheck
from shared.domain.tasks import Run, Task
from shared.logs import fields
from shared.operations.lifecycle import add_retry
from shared.operations.resolution.steps import ResolutionSteps
from shared.operations.scheduling import deadline_passed
from shared.operations.writes.repository import UNCHANGED, TaskRepository, Unchanged

log = logging.getLogger("queue")

ClaimCheckOutcome = Literal["expired", "stale", "early", "deadline", "task-gone", "followed-up"]
DeadlineCheckOutcome = Literal["exceeded", "stale", "early", "already-resolved", "task-gone"]


class Checks:
    def __init__(self, tasks: TaskRepository, resolving: ResolutionSteps) -> None:
        self.tasks, self.resolving = tasks, resolving
        self.stores = tasks.stores

    async def check_claim(self, check: ClaimCheck) -> ClaimCheckOutcome:
        """A claim check came due: resolve the run claim-expired if it was not reclaimed or resolved. A run that
        resolved: the check stood in for its resolution's process, which died or failed before publishing its
        events and deleting the check (shared/operations/writes/repository.py): follow the resolution up."""
        await self.stores.ready()
        faults.point("check-claim")
        guards = self.tasks.guards()
        now = guards.now
        outcome: ClaimCheckOutcome = "expired"

        async def expire(task: Task) -> Unchanged | None:
            nonlocal outcome
            run = task.runs[check.runId] if check.runId < len(task.runs) else None
            if run is not None and run.resolved_state:
                outcome = "followed-up"
                return UNCHANGED
            if (
                run is None
                or run.state != "running"
                or run.taken_until != check.takenUntil
                or task.taken_until != check.takenUntil
            ):
                outcome = "stale"
                return UNCHANGED
            if await self.stores.check_queues.put_back_if_early(
                CLAIM_QUEUE, check.taskId, check.encode(), check.takenUntil, now
            ):
                outcome = "early"
                return UNCHANGED
            if deadline_passed(task, now):
                outcome = "deadline"  # the deadline check resolves it, as deadline-exceeded
                return UNCHANGED
            run.resolve("exception", "claim-expired", now)
            task.taken_until = None
            task.emit("task-exception", check.runId)  # also when retried (modern Taskcluster), before task-pending
            await add_retry(task, "retry", guards, now)
            outcome = "expired"
            return None

        try:
            task = await self.tasks.modify(check.taskId, expire, guards, self.resolving)
        except errors.TaskNotFound:
            return "task-gone"
        if outcome == "followed-up":
            await self.follow_up(task, check.runId)
        if outcome == "expired":
            metrics.CLAIM_EXPIRIES.add(1)
            metrics.resolved("exception", "claim-expired")
            log.info("claim expired", extra=fields(event="claim-expired", taskId=check.taskId, runId=check.runId))
        return outcome

    async def follow_up(self, task: Task, run_id: int) -> None:
        """A resolved run's claim check came due: its resolution's process did not get to what follows it."""
        await self.resolving.follow_up_check(task, run_id)
        log.info(
            "resolution followed up by its claim check",
            extra=fields(event="resolution-followed-up", taskId=task.task_id, runId=run_id),
        )

    async def check_deadlines(self, body: Any) -> str:
        """A `task-deadlines` message came due: a bucket of deadlines (shared/domain/deadlines.py), or one task's
        check (the form queued before buckets, and the reconciler's). An outcome word."""
        await self.stores.ready()
        if isinstance(body, dict) and "taskId" in body:
            return await self.check_deadline(DeadlineCheck.decode(body))
        return await self.stores.deadlines.check(
            DeadlineBucket.decode(body), lambda task_id, deadline: self.check_deadline(DeadlineCheck(task_id, deadline))
        )

    async def check_deadline(self, check: DeadlineCheck) -> DeadlineCheckOutcome:
        """A deadline check came due: resolve whatever is unresolved as deadline-exceeded."""
        await self.stores.ready()
        faults.point("check-deadline")
        now = self.stores.now()
        outcome: DeadlineCheckOutcome = "exceeded"

        async def exceed(task: Task) -> Unchanged | None:
            nonlocal outcome
            if task.deadline != check.deadline:
                outcome = "stale"
                return UNCHANGED
            if await self.stores.check_queues.put_back_if_early(
                DEADLINE_QUEUE, check.taskId, check.encode(), check.deadline, now
            ):
                outcome = "early"
                return UNCHANGED
            if not task.runs:
                task.runs.append(Run("exception", "exception", now, reason_resolved="deadline-exceeded", resolved=now))
            elif not task.runs[-1].resolved_state:
                task.runs[-1].resolve("exception", "deadline-exceeded", now)
            else:
                outcome = "already-resolved"
                return UNCHANGED
            task.taken_until = None
            task.emit("task-exception", task.last_run_id)
            outcome = "exceeded"
            return None

        try:
            await self.tasks.modify(check.taskId, exceed, steps=self.resolving)
        except errors.TaskNotFound:
            return "task-gone"
        if outcome == "exceeded":
            metrics.DEADLINE_EXPIRIES.add(1)
            metrics.resolved("exception", "deadline-exceeded")
            log.info("deadline exceeded", extra=fields(event="deadline-exceeded", taskId=check.taskId))
        return outcome
