"""The messages one change puts before it is written, each once across the retries of that change (a lost race
decides again, and must not put them twice): the pending hint of a new pending run, and the resolution message of
a task that just resolved. A crash between a message and its write leaves a stale message, which its reader
re-checks and drops; never a task that nothing will move.
"""

from __future__ import annotations

import datetime as dt

from shared.domain.messages import RESOLVED_QUEUE, ResolvedCheck
from shared.domain.tasks import Task
from shared.gather import all_of
from shared.operations.writes.messages import TaskMessages
from shared.outbox.log import Fallback
from shared.storage.base import QueueMessage

ResolutionMessage = tuple[str, QueueMessage, ResolvedCheck]  # its queue, the message, and what it says


class Guards:
    """The guard messages of one change (`TaskRepository.modify`), as its tries put them."""

    def __init__(self, messages: TaskMessages, now: dt.datetime) -> None:
        self.messages, self.now = messages, now
        self._hints: dict[tuple[int, str], str] = {}
        self._resolved: dict[int, ResolutionMessage] = {}  # run -> its resolution message
        self._converted: set[int] = set()  # runs whose claim check became their resolution message
        self.group_failed = False  # a try that resolved the task's group with it was not written
        self.announced: int | None = None  # the sequence number a hint's dispatch request was put for
        # A message that already stands in for this change's events should the process die before publishing
        # them (a resolution's claim check, releasing its dependents): the hint goes without a dispatch request.
        self.stands_in: Fallback | None = None

    @property
    def grace(self) -> int:
        """Seconds a resolution message stays hidden while the process that wrote the resolution follows it up
        itself (`QUEUE_RESOLUTION_GRACE`); 0: the message's handler does, at once."""
        return self.messages.stores.settings.resolution_grace

    async def hint(self, task: Task) -> None:
        """Hint the task's last (pending) run at the task's current priority; the run remembers the hint."""
        run_id = task.last_run_id
        key = (run_id, task.priority)
        if key not in self._hints:
            if self.stands_in is not None:  # the write is guarded: it puts no request
                hint_id = await self.messages.put_pending_hint(task, run_id, self.now)
            else:
                # The events emitted so far (a change emits before it hints) are announced beside the hint, not
                # after it: one round trip for both (modify hands `announced` to the write, which announces again
                # only if more was emitted since, or a lost race made it decide again).
                hint_id, self.announced = await all_of(
                    self.messages.put_pending_hint(task, run_id, self.now), self.messages.announce(task)
                )
            self._hints[key] = hint_id or ""
        task.runs[-1].hint_id = self._hints[key] or None

    async def resolved(self, task: Task) -> None:
        """The resolution message. A run that was running has a claim check waiting in the claim queue, which
        the resolution makes pointless: the check becomes the resolution message (Update Message: new content,
        with the pop receipt its put returned), one queue call instead of a put and, after the write, the check's
        delete. The claim queue's handler tells the two kinds apart. A check received meanwhile can no longer be
        updated: then a message of its own, as for a run that was not running. The message stays hidden for
        `grace` seconds: the writing process resolves the task itself after its answer (ResolutionSteps), and the
        message's handler runs only if it did not."""
        run_id = task.last_run_id
        queues = self.messages.stores.queues
        if run_id not in self._resolved:
            check = ResolvedCheck(task.task_id, run_id, task.definition["taskGroupId"], None, self.now)
            claim = task.held_check("claim", self.now)
            claim_queue = self.messages.claim_queue(task.task_id)
            converted = (
                None if claim is None else await queues.release(claim_queue, claim, self.grace, content=check.encode())
            )
            if converted is not None:
                self._converted.add(run_id)
                self._resolved[run_id] = (claim_queue, converted, check)
            else:
                resolved_queue = self.messages.check_queue(RESOLVED_QUEUE, task.task_id)
                put = await queues.put(resolved_queue, check.encode(), visible_in=self.grace)
                self._resolved[run_id] = (resolved_queue, put, check)
        if run_id in self._converted:
            task.checks.pop("claim", None)  # it is the resolution message now: not to be deleted

    async def message_after(self, task: Task) -> None:
        """After a guarded resolution's write, whose claim check stands in until what follows is done: a
        resolution message of its own, to follow the resolution up sooner than the check would should this process
        die or fail first (either is harmless twice)."""
        run_id = task.last_run_id
        if run_id not in self._resolved:
            check = ResolvedCheck(task.task_id, run_id, task.definition["taskGroupId"], None, self.now)
            resolved_queue = self.messages.check_queue(RESOLVED_QUEUE, task.task_id)
            put = await self.messages.stores.queues.put(resolved_queue, check.encode(), visible_in=self.grace)
            self._resolved[run_id] = (resolved_queue, put, check)

    def resolution_message(self, run_id: int) -> ResolutionMessage | None:
        """The resolution message put (or converted) for `run_id`: its queue, the message, and what it says."""
        return self._resolved.get(run_id)
