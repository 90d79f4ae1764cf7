"""Claiming work: claimWork (long-polling the pending queues), claimTask, claims from polled hints, reclaimTask,
and the temporary credentials each claim gives its worker.

A pending run is claimed through one of its hints (`PendingHint`): the run accepts only the hints it was given,
so a duplicated, replayed or stale hint claims nothing. The claim check, which expires the claim at `takenUntil`,
is put before the claim is written. Losing a race is a normal outcome, returned as a `ClaimRefusal`.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import Enum
from typing import TypeVar

from shared import errors, faults, metrics, timeutil, timing
from shared.domain.messages import PendingHint, pending_queues
from shared.domain.tasks import TASKS_TABLE, Run, Task
from shared.logs import fields
from shared.operations.followups import all_of, nothing
from shared.operations.lifecycle import deadline_passed, run_of
from shared.operations.repository import UNCHANGED, TaskRepository, Unchanged
from shared.storage.base import QueueMessage, Received

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


@dataclass
class WorkerCheck:
    """A claimWork's worker: whether it is quarantined (found out alongside the first receive) and its record as
    active (written alongside the claims), both in flight while the request polls."""

    group: str
    id: str
    quarantine: asyncio.Future[dt.datetime | None] | None
    seen: asyncio.Future[None] | None = None

    def settle(self) -> None:
        """On leaving the request: what is still in flight is cancelled, what failed is retrieved (raised already,
        or logged by active_best_effort)."""
        for pending in (self.quarantine, self.seen):
            if pending is not None and not pending.done():
                pending.cancel()
            if pending is not None and pending.done() and not pending.cancelled():
                pending.exception()


@dataclass
class Quarantined:
    """A polling round's answer for a quarantined worker: what it received for it, to give back."""

    received: list[tuple[str, Received]]


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
                        self.tasks.put_claim_check(task_id, run_id, taken_until, now),
                        stores.workers.run_claimed(task.task_queue_id, task_id, run_id, worker_group, worker_id, now),
                        nothing() if guarded else self.tasks.announce(task),
                    )
                task.checks["claim"] = check
                run.state, run.worker_group, run.worker_id = "running", worker_group, worker_id
                run.started, run.taken_until, run.hint_id = now, taken_until, token
                task.taken_until = taken_until
                written = await self.tasks.write(task, announced=announced, guarded=guarded)
            if written:
                if guarded:
                    self.tasks.guarded_by_claim(task, check, now)
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

    async def try_hint(self, queue: str, message: QueueMessage, worker_group: str, worker_id: str) -> Claim | None:
        """Claim the run a received pending hint names; the message is deleted once it claimed, or once it is
        stale, and released for later when its run may not be written yet."""
        stores = self.stores
        try:
            hint = PendingHint.decode(message.json())
        except ValueError:
            hint = None
        if hint is None:
            log.warning("dropping a malformed pending hint", extra=fields(queue=queue, messageId=message.id))
            await stores.queues.delete(queue, message)
            return None
        try:
            for pause in (*timing.CLAIM_SETTLE_PAUSES, None):
                # The message's id in the token: the same message received again (its claimWork answer was
                # lost before the message was deleted) gives the worker its claim again; a second copy of the
                # hint (a put retried after a lost answer) does not.
                result = await self.claim(
                    hint.taskId, hint.runId, worker_group, worker_id, hint.hintId, f"{hint.hintId}@{message.id}"
                )
                if result not in (ClaimRefusal.TASK_NOT_FOUND, ClaimRefusal.RUN_NOT_FOUND) or pause is None:
                    break
                await asyncio.sleep(pause)  # the hint is written just ahead of its run
        except Exception:
            log.exception("claim attempt failed; the hint is released", extra=fields(taskId=hint.taskId))
            await stores.queues.release(queue, message, 0)
            return None
        if isinstance(result, Claim):
            stores.afterwards(self._consumed(queue, message))
            return result
        young = stores.now() - message.inserted < dt.timedelta(seconds=stores.settings.hint_grace)
        if result in (ClaimRefusal.TASK_NOT_FOUND, ClaimRefusal.RUN_NOT_FOUND) and young:
            # The hint is written before its run; the run may be about to appear.
            await stores.queues.release(queue, message, stores.settings.hint_retry_delay)
            return None
        await stores.queues.delete(queue, message)  # stale: the run moved on, or never will exist
        return None

    async def _consumed(self, queue: str, message: QueueMessage) -> None:
        """Delete the hint a claim consumed, once the claim is written (not awaited by the request: if it fails the
        hint reappears after its visibility timeout, finds its run claimed and is deleted then)."""
        try:
            await self.stores.queues.delete(queue, message)
        except Exception:
            log.warning(
                "could not delete a consumed pending hint",
                exc_info=True,
                extra=fields(queue=queue, messageId=message.id),
            )

    async def claim_work(
        self,
        task_queue_id: str,
        worker_group: str,
        worker_id: str,
        count: int,
        gone: Callable[[], Awaitable[bool]] | None = None,
    ) -> list[Claim]:
        """claimWork: claim up to `count` pending runs, highest priority first, FIFO within a priority.

        Returns as soon as a polling round claimed something; otherwise polls until `claim_work_wait`
        has passed (or the caller is `gone`) and returns nothing. A quarantined worker waits as long and gets
        nothing, as in Taskcluster.

        Whether the worker is quarantined (read every few seconds per process) is found out alongside the first
        receive, and the worker is recorded as active (a write a minute) alongside the claims: neither is a
        storage round trip before them.
        """
        stores = self.stores
        await stores.ready()
        settings = stores.settings
        give_up = time.monotonic() + settings.claim_work_wait
        worker = WorkerCheck(
            worker_group,
            worker_id,
            asyncio.ensure_future(stores.workers.quarantined_until(task_queue_id, worker_group, worker_id)),
        )
        try:
            while True:
                polled = await self._poll_round(task_queue_id, worker, count)
                if isinstance(polled, Quarantined):
                    return await self._quarantined(give_up, gone, polled.received)
                if polled:
                    faults.point("claimed-before-response")
                    # Nothing after the claims may fail the request: they are saved, and a worker that never hears
                    # of them would leave them to expire.
                    if worker.seen is not None:
                        await asyncio.wait([worker.seen])  # its failure is logged below (the record is tried again)
                    await stores.workers.active_best_effort(task_queue_id, worker_group, worker_id)
                    return polled
                if worker.seen is not None:
                    await (
                        worker.seen
                    )  # a worker that cannot be recorded fails its claimWork, as long as nothing is claimed
                remaining = give_up - time.monotonic()
                if remaining <= 0 or (gone is not None and await gone()):
                    return []
                # Until the next poll, or until this process puts a hint for the task queue: the callers waiting
                # then share the receive that follows (SharedReceives).
                await stores.empty_queues.wakeups.wait(
                    pending_queues(task_queue_id, stores.shards.pending),
                    min(settings.claim_work_poll_interval, remaining),
                )
        finally:
            worker.settle()

    async def _poll_round(self, task_queue_id: str, worker: WorkerCheck, count: int) -> list[Claim] | Quarantined:
        """One polling round of claimWork: receive from the pending queues, highest priority first, and claim, up
        to `count`; from the run index too when a receive lost its answer. The first round also learns whether
        the worker is quarantined (then what it received goes back) and records it as active."""
        stores = self.stores
        claims: list[Claim] = []
        lost = False
        queues = stores.shards.pending_queues(task_queue_id)
        while queues and len(claims) < count:
            together, hidden = self._next_receives(queues)
            lost = lost or hidden
            received = await self._receive_all(together, count - len(claims))
            if worker.quarantine is not None:
                until = await self._unless_refused(worker.quarantine, received)
                worker.quarantine = None
                if until is not None:
                    return Quarantined(received)
                worker.seen = asyncio.ensure_future(stores.workers.active(task_queue_id, worker.group, worker.id))
            got, lost_now = await self._claim_in_order(received, worker.group, worker.id, count - len(claims))
            claims.extend(got)
            lost = lost or lost_now
        if worker.quarantine is not None:  # every queue was skipped (found empty a moment ago): nothing received
            until, worker.quarantine = await worker.quarantine, None
            if until is not None:
                return Quarantined([])
            worker.seen = asyncio.ensure_future(stores.workers.active(task_queue_id, worker.group, worker.id))
        if lost and len(claims) < count:
            claims.extend(await self.claim_from_index(task_queue_id, count - len(claims), worker.group, worker.id))
        return claims

    def _next_receives(self, queues: list[str]) -> tuple[list[str], bool]:
        """Take from `queues` (highest priority first) the next ones to receive from at once: those that are
        probably empty (EmptyPendingQueues.may_hold_hints: found so, or never received here; most task queues use
        one or two of the seven priorities) with the first that may hold hints, skipping those found empty a
        moment ago; and whether one of them hides hints a lost receive took."""
        empty = self.stores.empty_queues
        together: list[str] = []
        hidden = False
        while queues and (not together or not empty.may_hold_hints(together[-1])):
            queue = queues.pop(0)
            hidden = hidden or empty.hides(queue)
            if not empty.skipped(queue):
                together.append(queue)
        return together, hidden

    async def _receive_all(self, queues: list[str], wanted: int) -> list[tuple[str, Received]]:
        """Up to `wanted` hints from each of `queues`, received at once (one round trip where one queue after
        another took up to seven). If one receive fails, what the others got goes back and the failure is raised."""
        stores = self.stores
        got = await asyncio.gather(
            *(stores.receives.receive(q, wanted, stores.settings.pending_hint_visibility) for q in queues),
            return_exceptions=True,
        )
        received = [(q, r) for q, r in zip(queues, got, strict=True) if not isinstance(r, BaseException)]
        failed = next((r for r in got if isinstance(r, BaseException)), None)
        if failed is not None:
            self._give_back_all(received)
            raise failed
        return received

    async def _unless_refused(self, check: Awaitable[T], received: list[tuple[str, Received]]) -> T:
        """`check`'s result; if it fails, the received hints go back first."""
        try:
            return await check
        except BaseException:
            self._give_back_all(received)
            raise

    async def _claim_in_order(
        self, received: list[tuple[str, Received]], worker_group: str, worker_id: str, wanted: int
    ) -> tuple[list[Claim], bool]:
        """Claim from what `received` got, queue by queue, highest priority first: what a higher queue claimed is
        not taken from a lower one, whose extra hints go back at once. The claims, and whether a receive lost its
        answer."""
        stores = self.stores
        claims: list[Claim] = []
        lost = False
        for queue, messages in received:
            if messages.lost:  # says nothing of whether the queue is empty
                stores.empty_queues.lost(queue, stores.settings.pending_hint_visibility)
                lost = True
            else:
                stores.empty_queues.received(queue, len(messages), messages.sent_at)
            mine = list(messages)
            take = max(0, wanted - len(claims))
            self._give_back_all([(queue, Received(mine[take:], lost=False))])
            results = await asyncio.gather(*(self.try_hint(queue, m, worker_group, worker_id) for m in mine[:take]))
            claims.extend(r for r in results if r is not None)
        return claims, lost

    async def _quarantined(
        self, give_up: float, gone: Callable[[], Awaitable[bool]] | None, received: list[tuple[str, Received]]
    ) -> list[Claim]:
        """As Taskcluster: a quarantined worker waits the whole long-poll and gets nothing (what was received for
        it goes back)."""
        self._give_back_all(received)
        while (remaining := give_up - time.monotonic()) > 0:
            if gone is not None and await gone():
                break
            await asyncio.sleep(min(1.0, remaining))
        return []

    def _give_back_all(self, received: list[tuple[str, Received]]) -> None:
        """Hints received and not wanted after all: visible again at once, after the answer."""
        for queue, messages in received:
            for message in messages:
                self.stores.afterwards(self._give_back(queue, message))

    async def _give_back(self, queue: str, message: QueueMessage) -> None:
        """A received hint not needed after all: visible again at once (if this fails, after its visibility)."""
        try:
            await self.stores.queues.release(queue, message, 0)
        except Exception:
            log.info(
                "could not give back a pending hint", exc_info=True, extra=fields(queue=queue, messageId=message.id)
            )

    async def claim_from_index(self, task_queue_id: str, count: int, worker_group: str, worker_id: str) -> list[Claim]:
        """Claim up to `count` pending runs that the task queue's index lists, oldest first, without a hint.

        Used while hints that a receive with a lost answer took stay hidden (until their visibility ends,
        QUEUE_PENDING_HINT_VISIBILITY, 5 minutes), so the runs they name do not wait that long. Their hints,
        when they come back, find the runs claimed and are dropped. Priority is not known here: in this rare
        case the oldest pending runs go first."""
        rows, _ = await self.stores.workers.runs(task_queue_id, "pending", limit=min(100, 4 * count), continuation=None)
        if not rows:
            self.stores.empty_queues.none_hidden(pending_queues(task_queue_id, self.stores.shards.pending))
        rows.sort(key=lambda row: str(row.data.get("since") or ""))
        claims: list[Claim] = []
        for row in rows:
            if len(claims) >= count:
                break
            result = await self.claim(
                row.row_key, int(row.data["runId"]), worker_group, worker_id, token=f"index@{uuid.uuid4().hex}"
            )  # never the same claim again
            if isinstance(result, Claim):
                claims.append(result)
        if claims:
            log.info(
                "claimed %d pending runs from the index after a lost receive",
                len(claims),
                extra=fields(event="claimed-from-index", taskQueueId=task_queue_id),
            )
        return claims

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
                sent[taken_until] = await self.tasks.put_claim_check(task_id, run_id, taken_until, now)
            if "claim" in task.checks:
                replaced["claim"] = task.checks["claim"]
            task.checks["claim"] = sent[taken_until]
            run.taken_until = task.taken_until = taken_until
            return None

        task = await self.tasks.modify(task_id, reclaim)
        await self.tasks.delete_checks(task_id, replaced)  # the check of the claim this one renewed
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
