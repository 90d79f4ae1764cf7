"""The queue messages a task's changes put beside their writes: a pending run's hint, a claim's check, the dispatch
request of a change's events; where each kind is kept (its queue and shard); the checks a change made pointless
deleted; and a message that stays registered as the stand-in for the events its write recorded. What goes before
a write and why: shared/operations/writes/repository.py's docstring, and docs/glossary.md ("guard", "stands in").
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging

from shared import timeutil
from shared.domain.messages import CLAIM_QUEUE, DEADLINE_QUEUE, ClaimCheck, PendingHint
from shared.domain.tasks import TASKS_TABLE, Task
from shared.gather import all_of
from shared.logs import fields
from shared.operations.writes.stores import Stores
from shared.outbox.rows import Stream
from shared.storage.base import QueueMessage

log = logging.getLogger("queue")


class TaskMessages:
    """The messages of one queue's tasks, put and deleted through its stores."""

    def __init__(self, stores: Stores) -> None:
        self.stores = stores

    def check_queue(self, base: str, task_id: str) -> str:
        """The shard of a check queue (claim-expiry, task-resolved, task-deadlines) that holds the task's messages."""
        return self.stores.shards.check_queue(base, task_id)

    @property
    def claims_parked(self) -> bool:
        """Whether claim checks wait in the parking queue (a claim outlasts QUEUE_PARK_LEAD: production's 20
        minutes) rather than in the triggered one: decided by the settings, not per check, so that a task's
        `checks["claim"]` (a message id and pop receipt, no queue) is looked for where it was put. A process with
        other settings looks in the other queue: its update or delete of the check fails, which is harmless (a
        resolution then puts its message of its own; the check shows as stale)."""
        return self.stores.check_queues.parks(self.stores.settings.claim_timeout)

    def claim_queue(self, task_id: str) -> str:
        """The queue that holds the task's claim checks (`checks["claim"]` refers to a message in it)."""
        return self.stores.check_queues.queue(CLAIM_QUEUE, task_id, parked=self.claims_parked)

    async def announce(self, task: Task) -> int:
        """Ask for the dispatch of the events the task's change emitted so far, ahead of its write (which then
        need not): to put the request together with the change's other guard messages, not after them. The
        sequence number announced, for the write."""
        seq = task.event_seq + len(task.emitted)
        if task.emitted:
            await self.stores.events.announce(Stream(TASKS_TABLE, task.task_id), seq)
        return seq

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
            self.stores.queue_runs.run_pending(task_queue_id, task_id, run_id, now),
            self.stores.queues.put(queue, hint.encode(), ttl=ttl),
        )
        self.stores.empty_queues.filled(queue)
        return hint.hintId

    async def put_claim_check(self, task_id: str, run_id: int, taken_until: dt.datetime, now: dt.datetime) -> list[str]:
        """Put the check that expires the claim at `taken_until` (to `claim_queue`); its [messageId, popReceipt]."""
        _, sent = await self.stores.check_queues.put(
            CLAIM_QUEUE,
            task_id,
            ClaimCheck(task_id, run_id, taken_until).encode(),
            taken_until,
            parked=self.claims_parked,
            now=now,
        )
        return [sent.id, sent.pop_receipt]

    def guarded_by_claim(self, task: Task, claim: list[str], now: dt.datetime) -> None:
        """A claim written without a dispatch request for its `task-running`: its claim check stands in should this
        process die before publishing it. Whatever comes of the run, a later change of the task's stream dispatches
        its events in order from the cursor, this one first: the run's resolution (guarded by the same check, or a
        request), the check's expiry of the claim (a request), a reclaim's check after it; a check that comes due
        on a resolved run asks for the dispatch itself (FollowUp.follow_up_run). A bus that refuses it gets a
        request of its own (shared/outbox/writers.py). The check expires the claim: it is never deleted here."""
        self._kept_in_for(task, self.claim_queue(task.task_id), claim[0], claim[1], now)

    def guarded_by_hint(self, task: Task, hint_id: str, now: dt.datetime) -> None:
        """A new task pending at once written without a dispatch request for its events (`task-defined`,
        `task-pending`): its pending hint stands in should this process die before publishing them. Whatever comes
        of the run, a later change of the task's stream dispatches its events in order from the cursor, these
        first: the claim the hint leads to (claimWork's, or claimTask's after a polling worker took it), the
        deadline's resolution when nothing claims it, a cancel; and, were none to come, the reconciler's pass over
        unresolved tasks (`QUEUE_RECONCILE_GRACE`) asks for the dispatch. A bus that refuses them gets a request of
        its own (shared/outbox/writers.py). The hint is the claimer's to delete: never here."""
        queue = self.stores.shards.pending_queue(task.task_queue_id, task.priority, task.task_id)
        self._kept_in_for(task, queue, hint_id, "", now)

    def _kept_in_for(self, task: Task, queue: str, message_id: str, pop_receipt: str, now: dt.datetime) -> None:
        """A message that stays (its handler's to delete) stands in for the events the task's change wrote."""
        self.stores.events.guarded_by(
            queue,
            QueueMessage(message_id, pop_receipt, b"", 0, now),
            [(Stream(TASKS_TABLE, task.task_id), task.event_seq)],
            keep=True,
        )

    async def delete_checks(self, task_id: str, spent: dict[str, list[str]]) -> None:
        """Delete checks a change made pointless (the task resolved; a claim was renewed). Best effort: a check
        already received (its pop receipt changed) or gone is left to its handler, which finds nothing to do.
        Why bother: a queued check costs nothing on Azure until it comes due, but Azurite scans every message
        it holds on every queue operation, so spent checks slow everything down locally."""
        queues = {
            "claim": self.claim_queue(task_id),
            "deadline": self.check_queue(DEADLINE_QUEUE, task_id),  # per-task checks of old: in the parking queue
        }

        async def delete(kind: str, message_id: str, pop_receipt: str) -> None:
            try:
                await self.stores.queues.delete(
                    queues[kind], QueueMessage(message_id, pop_receipt, b"", 0, self.stores.now())
                )
            except Exception:
                log.warning("could not delete a spent %s check", kind, exc_info=True, extra=fields(taskId=task_id))

        await asyncio.gather(*(delete(kind, *ref) for kind, ref in spent.items()))
