"""The work claimer: claimWork (long-polling the pending queues, highest priority first), claims from received
hints (claimWork's and pollTaskUrls' workers'), and claims from the run index after a receive lost its answer.

Each claim comes to `Claims.claim` (claims.py): a hint claims only the run it was given for.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from shared import faults, timing
from shared.domain.messages import PendingHint, pending_queues
from shared.logs import fields
from shared.operations.claims import Claim, ClaimRefusal, Claims
from shared.operations.writes.receiving import ClaimWaiters, Waiter
from shared.storage.base import QueueMessage, Received

log = logging.getLogger("queue")

T = TypeVar("T")


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


class WorkClaimer:
    def __init__(self, claims: Claims) -> None:
        self.claims = claims
        self.stores = claims.stores
        self.waiters = ClaimWaiters(claims.stores.settings.claim_work_waiters)

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
        waiter: Waiter | None = None
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
                if waiter is None:
                    waiter = self.waiters.enter()
                if remaining <= 0 or waiter.released or (gone is not None and await gone()):
                    return []
                # Until the next poll, or until this process puts a hint for the task queue (the callers waiting
                # then share the receive that follows: SharedReceives), or until released.
                await stores.empty_queues.wakeups.wait(
                    pending_queues(task_queue_id, stores.shards.pending),
                    min(settings.claim_work_poll_interval, remaining),
                    waiter.woken,
                )
                if waiter.released:
                    return []
        finally:
            if waiter is not None:
                self.waiters.leave(waiter)
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
                result = await self.claims.claim(
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

    async def claim_from_index(self, task_queue_id: str, count: int, worker_group: str, worker_id: str) -> list[Claim]:
        """Claim up to `count` pending runs that the task queue's index lists, oldest first, without a hint.

        Used while hints that a receive with a lost answer took stay hidden (until their visibility ends,
        QUEUE_PENDING_HINT_VISIBILITY, 5 minutes), so the runs they name do not wait that long. Their hints,
        when they come back, find the runs claimed and are dropped. Priority is not known here: in this rare
        case the oldest pending runs go first."""
        rows, _ = await self.stores.queue_runs.runs(
            task_queue_id, "pending", limit=min(100, 4 * count), continuation=None
        )
        if not rows:
            self.stores.empty_queues.none_hidden(pending_queues(task_queue_id, self.stores.shards.pending))
        rows.sort(key=lambda row: str(row.data.get("since") or ""))
        claims: list[Claim] = []
        for row in rows:
            if len(claims) >= count:
                break
            result = await self.claims.claim(
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
