"""Claiming a run: claimTask, reclaimTask, the claim every way of claiming comes to (`Claims.claim`), and the
temporary credentials each claim gives its worker. claimWork and claims from polled hints: work_claimer.py.

A pending run is claimed through one of its hints (`PendingHint`): the run accepts only the hints it was given,
so a duplicated, replayed or stale hint claims nothing. The claim check, which expires the claim at `takenUntil`,
is put before the claim is written. Losing a race is a normal outcome, returned as a `ClaimRefusal`.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass
from enum import Enum
from typing import TypeVar

from shared import errors, metrics, timeutil
from shared.domain.tasks import TASKS_TABLE, Run, Task
from shared.gather import all_of, nothing
from shared.logs import fields
from shared.operations.lifecycle import run_of
from shared.operations.scheduling import deadline_passed
from shared.operations.writes.repository import UNCHANGED, TaskRepository, Unchanged

log = logging.getLogger("queue")

T = TypeVar("T")


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


class Claims:
    def __init__(self, tasks: TaskRepository) -> None:
        self.tasks = tasks
        self.stores = tasks.stores

    async def claim(
        self,
        task_id: str,
        run_id: int,
        worker_group: str,
        worker_id: str,
        hint_id: str | None = None,
        token: str | None = None,
    ) -> Claim | ClaimRefusal:
        """Claim run `run_id` for a worker, through hint `hint_id` if given. The run keeps `token` (by default the
        hint id): the same worker claiming again with the same token (or none, as claimTask does) gets the same
        claim back; anyone else gets CONFLICT."""
        token = token or hint_id
        stores = self.stores
        await stores.ready()
        now = stores.now()
        taken_until = timeutil.to_ms(now + dt.timedelta(seconds=stores.settings.claim_timeout))
        check: list[str] | None = None
        # As in TaskRepository.modify: a remembered row may start a claim; a refusal or a repeated claim made on
        # it stands only if the stored row is still the same.
        task: Task | None = self.tasks.known.get(task_id)
        if (task is None or run_id >= len(task.runs)) and await stores.events.in_flight.settled(TASKS_TABLE, task_id):
            task = self.tasks.known.get(task_id)  # its hint was put here just before its write: now it is known
        fresh = read = task is None
        while True:
            if read:
                task, fresh, read = await self.tasks.get(task_id), True, False
            outcome = claim_outcome(task, run_id, worker_group, worker_id, hint_id, token, now)
            if outcome is not None:
                if fresh:
                    return outcome
                assert task is not None
                same, task = await self.tasks.recheck(task_id, task.etag)
                if same:
                    return outcome
                fresh = True
                continue
            assert task is not None
            run = task.runs[run_id]
            task.emit("task-running", run_id)
            announced: int | None = None
            # Where this process publishes what it writes, the claim check is task-running's dispatch request.
            guarded = stores.events.published_by_writers
            with stores.events.in_flight.writing(TASKS_TABLE, task_id):  # its dispatch request's handler waits
                if check is None:
                    # The claim check goes out before the claim is written: a crash in between leaves only a
                    # stale check, never a running run that nothing expires.
                    check, _, announced = await all_of(  # independent of each other; all before the write
                        self.tasks.messages.put_claim_check(task_id, run_id, taken_until, now),
                        stores.queue_runs.run_claimed(
                            task.task_queue_id, task_id, run_id, worker_group, worker_id, now
                        ),
                        nothing() if guarded else self.tasks.messages.announce(task),
                    )
                task.checks["claim"] = check
                run.state, run.worker_group, run.worker_id = "running", worker_group, worker_id
                run.started, run.taken_until, run.hint_id = now, taken_until, token
                task.taken_until = taken_until
                written = await self.tasks.write(task, announced=announced, guarded=guarded)
            if written:
                if guarded:
                    self.tasks.messages.guarded_by_claim(task, check, now)
                stores.workers.claimed(task.task_queue_id, worker_group, worker_id, task_id, run_id)
                metrics.CLAIMS.add(1, {"taskQueueId": task.task_queue_id})
                return Claim(task, run_id)
            read = True  # lost a race

    async def claim_task(
        self, task_id: str, task_queue_id: str, run_id: int, worker_group: str, worker_id: str
    ) -> Claim:
        """claimTask (deprecated API): claim a given run of a task of `task_queue_id` (which the caller read for
        the scopes), raising the Taskcluster error when refused."""
        stores = self.stores
        await stores.ready()
        await stores.workers.check_not_quarantined(task_queue_id, worker_group, worker_id)
        result = await self.claim(task_id, run_id, worker_group, worker_id)
        await stores.workers.active(task_queue_id, worker_group, worker_id)
        if isinstance(result, Claim):
            return result
        if result is ClaimRefusal.TASK_NOT_FOUND:
            raise errors.TaskNotFound(taskId=task_id)
        if result is ClaimRefusal.RUN_NOT_FOUND:
            raise errors.RunNotFound(taskId=task_id, runId=run_id)
        task = await self.tasks.load(task_id)
        if result is ClaimRefusal.DEADLINE_PASSED:
            raise errors.DeadlinePassed(taskId=task_id, deadline=task.definition["deadline"])
        raise errors.RunAlreadyClaimed(taskId=task_id, runId=run_id)

    async def reclaim_task(self, task_id: str, run_id: int) -> Claim:
        stores = self.stores
        await stores.ready()
        now = stores.now()
        proposed = timeutil.to_ms(now + dt.timedelta(seconds=stores.settings.claim_timeout))
        sent: dict[dt.datetime, list[str]] = {}
        replaced: dict[str, list[str]] = {}

        async def reclaim(task: Task) -> Unchanged | None:
            replaced.clear()
            run = run_of(task, run_id)
            if deadline_passed(task, now):
                raise errors.DeadlinePassed(taskId=task_id, deadline=task.definition["deadline"])
            if run_id != task.last_run_id or run.state != "running":
                raise errors.RunNotRunning(taskId=task_id, runId=run_id, state=run.state)
            assert run.taken_until is not None
            taken_until = max(proposed, run.taken_until)  # takenUntil only moves forward
            if taken_until == run.taken_until:
                return UNCHANGED
            if taken_until not in sent:
                sent[taken_until] = await self.tasks.messages.put_claim_check(task_id, run_id, taken_until, now)
            if "claim" in task.checks:
                replaced["claim"] = task.checks["claim"]
            task.checks["claim"] = sent[taken_until]
            run.taken_until = task.taken_until = taken_until
            return None

        task = await self.tasks.modify(task_id, reclaim)
        await self.tasks.messages.delete_checks(task_id, replaced)  # the check of the claim this one renewed
        log.info("run reclaimed", extra=fields(event="task-reclaimed", taskId=task_id, runId=run_id))
        return Claim(task, run_id)

    def credentials(self, claim: Claim) -> dict[str, str]:
        """The run's temporary credentials, until its takenUntil: it may reclaim, resolve and create artifacts
        for its own run, and holds the task's scopes."""
        task, run_id, run = claim.task, claim.run_id, claim.run
        assert run.taken_until is not None and run.worker_group and run.worker_id
        taken_until = run.taken_until
        client_id = (
            f"task-client/{task.task_id}/{run_id}/on/{run.worker_group}/{run.worker_id}"
            f"/until/{timeutil.js_seconds(taken_until)}"
        )
        scopes = [
            f"queue:reclaim-task:{task.task_id}/{run_id}",
            f"queue:resolve-task:{task.task_id}/{run_id}",
            f"queue:create-artifact:{task.task_id}/{run_id}",
            *task.definition["scopes"],
        ]
        return self.stores.credentials(client_id, scopes, taken_until)


def claim_outcome(
    task: Task | None,
    run_id: int,
    worker_group: str,
    worker_id: str,
    hint_id: str | None,
    token: str | None,
    now: dt.datetime,
) -> Claim | ClaimRefusal | None:
    """What a claim of `task` as read comes to without writing: a refusal, the worker's own claim again, or None
    (the run is pending: claim it)."""
    if task is None:
        return ClaimRefusal.TASK_NOT_FOUND
    if run_id >= len(task.runs):
        return ClaimRefusal.RUN_NOT_FOUND
    run = task.runs[run_id]
    if deadline_passed(task, now):
        return ClaimRefusal.DEADLINE_PASSED
    if (
        run.state == "running"
        and run.worker_group == worker_group
        and run.worker_id == worker_id
        and (token is None or run.hint_id == token)
    ):
        return Claim(task, run_id)
    if run_id != task.last_run_id or run.state != "pending":
        return ClaimRefusal.CONFLICT
    if hint_id is not None and not run.accepts_hint(hint_id):
        return ClaimRefusal.CONFLICT  # a duplicated hint, or one from before a priority change
    return None
