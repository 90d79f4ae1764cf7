"""Names of the Azure queues and the messages they carry.

Every message is a hint: whoever receives it re-reads the task entity and acts only if the state still matches,
so a stale or duplicated message changes nothing.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import hmac
import random
from dataclasses import asdict, dataclass, replace
from typing import Any

from shared import timeutil
from shared.domain.tasks import PRIORITIES
from shared.storage.base import put_json
from shared.storage.sharded import shard_name, stable_hash

# Claim checks and deadline buckets due more than QUEUE_PARK_LEAD ahead wait in these, which no trigger watches
# (shared/domain/parking.py); the rest, and what the mover brings, in the `-due` queues, which the triggers watch.
CLAIM_QUEUE = "claim-expiry"  # {taskId, runId, takenUntil}, visible QUEUE_PARK_LEAD before takenUntil
DEADLINE_QUEUE = "task-deadlines"  # {bucket}: the deadlines of a second (shared/domain/deadlines.py)
CLAIM_DUE_QUEUE = "claim-expiry-due"  # claim checks due within the lead, visible at takenUntil
DEADLINE_DUE_QUEUE = "task-deadlines-due"  # deadline buckets due within the lead, visible after their second
RESOLVED_QUEUE = "task-resolved"  # {taskId, runId, taskGroupId, continuation, since}: follow its dependents
FIXED_QUEUES = (CLAIM_QUEUE, DEADLINE_QUEUE, CLAIM_DUE_QUEUE, DEADLINE_DUE_QUEUE, RESOLVED_QUEUE)
TRIGGERED_QUEUES = (CLAIM_DUE_QUEUE, DEADLINE_DUE_QUEUE, RESOLVED_QUEUE)  # with event-dispatch (shared/outbox)


def priority_level(priority: str) -> int:
    """highest = 7 ... lowest = 1, as Taskcluster numbers its pending queues."""
    return len(PRIORITIES) - PRIORITIES.index(priority)


def _hash(identifier: str) -> str:
    # Azure queue names are 3-63 chars of [a-z0-9-]; a task queue id is up to 77 chars of anything allowed.
    digest = hashlib.sha256(identifier.encode()).digest()[:15]
    return base64.b32encode(digest).decode().lower()


def pending_queue(task_queue_id: str, priority: str, shard: int = 0) -> str:
    return shard_name(f"pending-{_hash(task_queue_id)}-{priority_level(priority)}", shard)


def pending_queues(task_queue_id: str, shards: int = 1, start: int = 0) -> list[str]:
    """The task queue's pending queues, highest priority first; the shards of a priority from `start` on, so
    that claimers starting at different shards spread their receives over them."""
    return [pending_queue(task_queue_id, p, (start + i) % shards) for p in PRIORITIES for i in range(shards)]


@dataclass(frozen=True)
class Shards:
    """How the queues and the hot partitions are split (QUEUE_CHECK_SHARDS, QUEUE_PENDING_SHARDS): the shard of a
    task is its taskId's hash, so every process finds a task's messages and rows in the same shard, and a message
    put back or deleted goes to the queue it came from. One of each (the default) gives the names of old."""

    checks: int = 1
    pending: int = 1

    def check_queue(self, base: str, key: str) -> str:
        """The shard of check queue `base` (claim-expiry, task-deadlines, task-resolved, event-dispatch) for the
        task (or deadline bucket) `key`."""
        return shard_name(base, stable_hash(key) % self.checks)

    def check_queues(self, base: str) -> list[str]:
        return [shard_name(base, shard) for shard in range(self.checks)]

    def pending_queue(self, task_queue_id: str, priority: str, task_id: str) -> str:
        return pending_queue(task_queue_id, priority, stable_hash(task_id) % self.pending)

    def pending_queues(self, task_queue_id: str) -> list[str]:
        """Every pending queue of the task queue, highest priority first, each priority's shards from a random
        one on."""
        return pending_queues(task_queue_id, self.pending, random.randrange(self.pending))

    def salted(self, partition_key: str, task_id: str) -> str:
        """A partition that many tasks write (a task queue's runs, a second of deadlines, an hour of expiries),
        split `pending` ways by taskId: `<key>`, `<key>~1` .. (`~` is in no such key)."""
        return salt(partition_key, stable_hash(task_id) % self.pending)

    def salts(self, partition_key: str) -> list[str]:
        return [salt(partition_key, n) for n in range(self.pending)]


def salt(partition_key: str, n: int) -> str:
    return partition_key if n == 0 else f"{partition_key}~{n}"


def unsalted(partition_key: str) -> str:
    return partition_key.split("~", 1)[0]


def bucket_of(due: dt.datetime) -> str:
    """The second `due` falls in, rounded up: its bucket's key and the time its message becomes visible."""
    whole = due.replace(microsecond=0)
    if whole < due:
        whole += dt.timedelta(seconds=1)
    return whole.strftime("%Y-%m-%dT%H:%M:%S")


def bucket_time(bucket: str) -> dt.datetime:
    """When a bucket comes due (its second; a salted bucket's, `<second>~<n>`, too)."""
    return dt.datetime.strptime(unsalted(bucket), "%Y-%m-%dT%H:%M:%S").replace(tzinfo=dt.UTC)


def poison_queue(queue: str) -> str:
    return f"{queue}-poison"


@dataclass(frozen=True)
class PendingHint:
    """A pending run's hint. Workers polling with signed URLs read it and hand it back to claimWork, so it is
    signed (`sig`: HMAC-SHA256 of the task queue and every field): a worker cannot forge one, alter one, or use
    one of another task queue. `priority` names the queue it is on (so the claimer can delete it)."""

    taskId: str
    runId: int
    hintId: str
    priority: str = ""
    sig: str = ""

    def _mac(self, key: bytes, task_queue_id: str) -> str:
        text = "\n".join((task_queue_id, self.taskId, str(self.runId), self.hintId, self.priority))
        return base64.urlsafe_b64encode(hmac.new(key, text.encode(), hashlib.sha256).digest()).decode().rstrip("=")

    def signed(self, key: bytes, task_queue_id: str) -> PendingHint:
        return replace(self, sig=self._mac(key, task_queue_id))

    def verify(self, key: bytes, task_queue_id: str) -> bool:
        """Whether the hint was written by this queue, unaltered, for a run of `task_queue_id`."""
        return (
            bool(self.sig)
            and self.priority in PRIORITIES
            and hmac.compare_digest(self.sig, self._mac(key, task_queue_id))
        )

    def encode(self) -> bytes:
        return put_json(asdict(self))

    @classmethod
    def decode(cls, body: Any) -> PendingHint | None:
        try:
            return cls(
                str(body["taskId"]),
                int(body["runId"]),
                str(body["hintId"]),
                str(body.get("priority", "")),
                str(body.get("sig", "")),
            )
        except (KeyError, TypeError, ValueError, AttributeError):
            return None


@dataclass(frozen=True)
class ClaimCheck:
    """Check, at `takenUntil`, that run `runId` was reclaimed or resolved; otherwise its claim has expired."""

    taskId: str
    runId: int
    takenUntil: dt.datetime

    def encode(self) -> bytes:
        return put_json({"taskId": self.taskId, "runId": self.runId, "takenUntil": timeutil.iso(self.takenUntil)})

    @classmethod
    def decode(cls, body: Any) -> ClaimCheck:
        return cls(str(body["taskId"]), int(body["runId"]), timeutil.parse(str(body["takenUntil"])))


@dataclass(frozen=True)
class DeadlineCheck:
    """Check, at `deadline`, that the task resolved; otherwise it is resolved deadline-exceeded."""

    taskId: str
    deadline: dt.datetime

    def encode(self) -> bytes:
        return put_json({"taskId": self.taskId, "deadline": timeutil.iso(self.deadline)})

    @classmethod
    def decode(cls, body: Any) -> DeadlineCheck:
        return cls(str(body["taskId"]), timeutil.parse(str(body["deadline"])))


@dataclass(frozen=True)
class ResolvedCheck:
    """A task resolved (run `runId`): take it out of its group's active set and unblock its dependents, a page
    of them per message (`continuation` names the next page)."""

    taskId: str
    runId: int
    taskGroupId: str
    continuation: str | None
    since: dt.datetime  # when the resolution was written: a message ahead of its entity, or a stale one?
    # Only this dependent is left to release: it was not written yet when the resolution looked (its createTask
    # was between reading this task and writing itself); `since` is then when that was found.
    dependent: str | None = None

    def encode(self) -> bytes:
        return put_json(
            {
                "taskId": self.taskId,
                "runId": self.runId,
                "taskGroupId": self.taskGroupId,
                "continuation": self.continuation,
                "since": timeutil.iso(self.since),
                **({} if self.dependent is None else {"dependent": self.dependent}),
            }
        )

    @staticmethod
    def carried_by(body: Any) -> bool:
        """Whether a message of the claim queue is a resolution message (a claim check has no `taskGroupId`)."""
        return isinstance(body, dict) and "taskGroupId" in body

    @classmethod
    def decode(cls, body: Any) -> ResolvedCheck:
        dependent = body.get("dependent")
        return cls(
            str(body["taskId"]),
            int(body["runId"]),
            str(body["taskGroupId"]),
            body.get("continuation"),
            timeutil.parse(str(body["since"])),
            None if dependent is None else str(dependent),
        )
