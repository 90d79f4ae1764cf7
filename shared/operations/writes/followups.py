"""What follows a task's write: the messages that guard a change, put before it is written (`Guards`: a pending
hint, a resolution message), the checks that stand in for this process should it die before its events are
published or a resolution followed up (`guarded_by_*`, `_follow_here`), and the tidying of what a resolution left
(index rows, spent checks). `TaskRepository` (shared/operations/writes/repository.py) is built on `FollowUps`; the rules
they keep together are in that module's docstring.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Awaitable
from typing import Any, Protocol

from shared import timeutil, timing
from shared.domain.messages import (
    CLAIM_QUEUE,
    DEADLINE_QUEUE,
    RESOLVED_QUEUE,
    ClaimCheck,
    PendingHint,
    ResolvedCheck,
)
from shared.domain.tasks import TASKS_TABLE, Run, Task, newest_run
from shared.logs import fields
from shared.operations.writes.group_store import GroupRows
from shared.operations.writes.stores import Stores
from shared.outbox.log import Fallback
from shared.outbox.rows import Stream
from shared.storage.base import QueueMessage

log = logging.getLogger("queue")


class Resolver(Protocol):
    """What follows a task's resolution (shared/operations/resolution.py)."""

    def resolve_dependencies(
        self, check: ResolvedCheck, *, with_group: bool = True, stands_in: Fallback | None = None
    ) -> Awaitable[object]: ...

    def resolve_group_member(self, check: ResolvedCheck, run: Run | None = None) -> Awaitable[None]: ...

    def follow_up_run(self, task: Task, run_id: int) -> Awaitable[None]: ...


async def _message_after(guards: Guards, task: Task) -> bool:
    """Put the resolution message that takes over from the claim check; False (logged) when it could not be put:
    the check stands in."""
    try:
        await guards.message_after(task)
    except Exception:
        log.warning(
            "could not put a resolution message; the claim check stands in",
            exc_info=True,
            extra=fields(taskId=task.task_id),
        )
        return False
    return True


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

    def __init__(self, tasks: FollowUps, now: dt.datetime) -> None:
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
            claim_queue = self.tasks.claim_queue(task.task_id)
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


class FollowUps:
    """The guard messages a change puts and what follows its write, for `TaskRepository`, which is built on it."""

    def __init__(self, stores: Stores) -> None:
        self.stores = stores
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
            self.claim_queue(task.task_id), QueueMessage(claim[0], claim[1], b"", 0, guards.now), streams
        )

    def guarded_by_claim(self, task: Task, claim: list[str], now: dt.datetime) -> None:
        """A claim written without a dispatch request for its `task-running`: its claim check stands in should this
        process die before publishing it. Whatever comes of the run, a later change of the task's stream dispatches
        its events in order from the cursor, this one first: the run's resolution (guarded by the same check, or a
        request), the check's expiry of the claim (a request), a reclaim's check after it; a check that comes due
        on a resolved run asks for the dispatch itself (Resolution.follow_up_run). A bus that refuses it gets a
        request of its own (shared/outbox/writers.py). The check expires the claim: it is never deleted here."""
        self._kept_in_for(task, self.claim_queue(task.task_id), claim[0], claim[1], now)

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
        its own (shared/outbox/writers.py). The hint is the claimer's to delete: never here."""
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
            self.claim_queue(task.task_id),
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
                await _message_after(guards, task)
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
            await self.resolver.resolve_group_member(check, newest_run(task, check.runId))
        except Exception:
            log.warning(
                "following a resolution up here failed; its resolution message will",
                exc_info=True,
                extra=fields(taskId=check.taskId, runId=check.runId),
            )
            if message is None and not await _message_after(guards, task):
                return
            self.stores.events.done_with(fallback)
            return
        self.stores.events.done_with(fallback)
        if message is not None:
            await self._delete_resolution_message(message[0], message[1], check)

    async def announce(self, task: Task) -> int:
        """Ask for the dispatch of the events the task's change emitted so far, ahead of `write` (which then
        need not): to put the request together with the change's other guard messages, not after them. The
        sequence number announced, for `write`."""
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

    async def _tidy_resolved(self, task_queue_id: str, task_id: str, spent: dict[str, list[str]]) -> None:
        """After a resolution is written: the run leaves the task queue's index; its spent checks go."""
        try:
            await asyncio.gather(
                self.stores.queue_runs.run_resolved(task_queue_id, task_id, linger=timing.INDEX_TIDY_LINGER),
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
