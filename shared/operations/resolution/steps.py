"""The resolution's steps around the write (`before`, and what it plans for after it), which a change that resolves
a run hands to `TaskRepository.modify`; and the follow-up of a worker's repeated report. The protocol: this
package's docstring (shared/operations/resolution/__init__.py)."""

from __future__ import annotations

import asyncio
import functools
import logging

from shared import timing
from shared.domain.groups import group_changed
from shared.domain.index import indexed
from shared.domain.messages import ResolvedCheck
from shared.domain.tasks import TASKS_TABLE, Task, newest_run
from shared.gather import all_of
from shared.logs import fields
from shared.operations.resolution.follow_up import FollowUp
from shared.operations.writes.group_store import GroupRows
from shared.operations.writes.guards import Guards
from shared.operations.writes.livelogs import seal_live
from shared.operations.writes.repository import Before, Planned, TaskRepository
from shared.outbox.log import Fallback
from shared.outbox.rows import Stream
from shared.storage.base import QueueMessage

log = logging.getLogger("queue")


class ResolutionSteps:
    """The resolution's steps (`before`, and what it plans after the write), and its follow-up of a repeat."""

    def __init__(self, tasks: TaskRepository, resolver: FollowUp) -> None:
        self.tasks, self.resolver = tasks, resolver
        self.stores, self.messages = tasks.stores, tasks.messages

    def guarded(self) -> bool:
        """Whether this process's resolutions of running runs are guarded by their claim checks: it publishes
        its changes' events itself (or there is no bus) and resolves what follows a resolution itself (the check
        stands in for both should it die first)."""
        return self.stores.events.published_by_writers and self.stores.settings.resolution_grace > 0

    async def before(self, task: Task, guards: Guards, before: Before) -> Planned:
        """What goes before the write of a change that may resolve a run, and what is to follow it."""
        await seal_live(self.stores, task)  # a run it resolves: its live logs' blobs as they are now
        if not before.resolving(task):  # a run resolved and retried: the task goes on
            return Planned.plain(guards)
        claim = task.held_check("claim", guards.now) if before.running and self.guarded() else None
        group = self._sole_group_resolution(task, guards)
        announced = await self._announce(task, guards, claim, group)
        spent: dict[str, list[str]] = {
            kind: task.checks.pop(kind) for kind in ("claim", "deadline") if kind in task.checks
        }
        after = functools.partial(self._after, task, guards, claim, group, spent)
        return Planned(announced, group, claim is not None or guards.stands_in is not None, after)

    async def follow_up_repeat(self, task: Task, run_id: int) -> None:
        """A worker's repeated report, which may be the retry of one whose process wrote the resolution and died
        before answering, leaving what follows it to the claim check: followed up now (idempotent), the answer
        waiting for it as the first one would have."""
        if self.guarded():
            await self.resolver.follow_up_run(task, run_id)

    async def follow_up_check(self, task: Task, run_id: int) -> None:
        """What follows a resolved run, for its claim check come due (idempotent, as a repeat's follow-up)."""
        await self.resolver.follow_up_run(task, run_id)

    def _sole_group_resolution(self, task: Task, guards: Guards) -> GroupRows | None:
        """A resolving task that nothing depends on and that is alone in the group named after it (as this process
        knows its group): the group's resolution, to be written in the task's own transaction, which then leaves
        nothing for a resolution message to do (its dependents and its group are what that resolves). None
        otherwise, or when an earlier try of this change already put that message (its handler would resolve the
        group a second time)."""
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

    async def _announce(
        self, task: Task, guards: Guards, claim: QueueMessage | None, group: GroupRows | None
    ) -> int | None:
        """What goes before a resolution's write; the sequence number announced, for the write. Guarded (a claim
        check): the check, put before the claim, stands in for what follows (the module docstring), so nothing is
        put before the write; a sole resolution leaves only its events to follow, any other turns the check into
        its resolution message beside the write."""
        announced: int | None
        if claim is not None:
            return guards.announced
        if group is not None:  # nothing is left to follow: no resolution message
            assert group.announce is not None
            _, announced = await all_of(
                self.stores.events.announce(group.stream, group.announce), self.messages.announce(task)
            )
            return announced
        _, announced = await all_of(guards.resolved(task), self.messages.announce(task))
        return announced

    async def _after(
        self,
        task: Task,
        guards: Guards,
        claim: QueueMessage | None,
        group: GroupRows | None,
        spent: dict[str, list[str]],
        written: bool,
    ) -> None:
        """After the write: what follows a resolution written; a group resolved with a write that was not is
        left out of the next try (the task changed, or the group did)."""
        if not written:
            if group is not None:
                guards.group_failed = True
            return
        self.stores.afterwards(self._tidy_resolved(task.task_queue_id, task.task_id, spent))
        if claim is not None:
            spent.pop("claim", None)  # the check stands in: not deleted with the others
            if group is not None:
                self._guarded_by_sole(task, guards, claim, group)
            else:
                await self._follow_here(task, guards, claim)
        message = guards.resolution_message(task.last_run_id)
        if claim is None and message is not None and guards.grace:
            self.stores.afterwards(self.resolve_here(*message))

    def _guarded_by_sole(self, task: Task, guards: Guards, claim: QueueMessage, group: GroupRows) -> None:
        """A guarded sole resolution (its group's resolution in its own transaction, nothing depends on it) is
        written: its claim check, as it is, stands in for this process until its events are published."""
        streams = [(Stream(TASKS_TABLE, task.task_id), task.event_seq)]
        if group.announce is not None:
            streams.append((group.stream, group.announce))
        self.stores.events.guarded_by(self.messages.claim_queue(task.task_id), claim, streams)

    async def _follow_here(self, task: Task, guards: Guards, claim: QueueMessage) -> None:
        """A guarded resolution that leaves more to follow (dependents, an Index entry, a group with other members)
        is written: its dependents are released and its Index entry written here before the answer, its group left
        after it, and its claim check, as it is, stands in for all of that and its events until they are done (the
        released dependents' events too: their hints go without dispatch requests). A process that dies before it
        answers leaves it to the worker's retry of the report (`follow_up_repeat`); one that dies after, to the
        check (at `takenUntil`). A release that takes over FOLLOW_WAIT (a large fan-out) gets a resolution message
        of its own first, so that an answer given before it is done leaves a death to that message (after
        `QUEUE_RESOLUTION_GRACE`) rather than to the check."""
        run_id = task.last_run_id
        check = ResolvedCheck(task.task_id, run_id, task.definition["taskGroupId"], None, guards.now)
        fallback = self.stores.events.guarded_by(
            self.messages.claim_queue(task.task_id),
            claim,
            [(Stream(TASKS_TABLE, task.task_id), task.event_seq)],
            also=1,
        )  # and once followed up
        releasing: asyncio.Future[object] = asyncio.ensure_future(
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
        resolution message (put now unless there is one) takes over from the check, after the grace."""
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

    async def resolve_here(self, queue: str, message: QueueMessage, check: ResolvedCheck) -> None:
        """After a resolution is written and answered: resolve the task's dependents and group here, then delete
        its resolution message (hidden meanwhile), so that no trigger need receive it: one queue call less per
        task, and dependents pending without a trigger's poll between. If this fails or the process dies, the
        message shows after the grace and its handler does it (every step is idempotent, so a handler that starts
        while this still runs does no harm either)."""
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

    async def _tidy_resolved(self, task_queue_id: str, task_id: str, spent: dict[str, list[str]]) -> None:
        """After a resolution is written: the run leaves the task queue's index; its spent checks go."""
        try:
            await asyncio.gather(
                self.stores.queue_runs.run_resolved(task_queue_id, task_id, linger=timing.INDEX_TIDY_LINGER),
                self.messages.delete_checks(task_id, spent),
            )
        except Exception:
            log.warning("could not tidy up after a resolution", exc_info=True, extra=fields(taskId=task_id))


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
