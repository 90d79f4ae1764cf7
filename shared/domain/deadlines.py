"""Deadline checks, one queue message per second of deadlines instead of one per task; and the way into the expiry
index.

TaskDeadlines: PartitionKey = the second a deadline comes due (`deadline + QUEUE_DEADLINE_DELAY`, rounded up:
`YYYY-MM-DDTHH:MM:SS`), RowKey = taskId, `deadline`, `expires`. createTask (and rerunTask) writes the task's row before
the task, and makes sure a `task-deadlines` message `{bucket}` is queued, visible when that second is over (parked
until shortly before when it is further off: shared/domain/parking.py); a process
puts one such message per bucket and remembers it, so a graph whose tasks share a deadline (as a decision task's
do) queues one message, not thousands. When it comes due the handler checks a page of the bucket's tasks (each
re-read: a resolved or re-deadlined task is left alone), enters each in the expiry index (shared/domain/expiry.py),
a transaction per expiry hour, deletes their rows, and hands the next page to a new
message first, so no invocation runs long.

Why: a check per task was a message held for the task's whole life, put and deleted once each; Azurite scans every
message it holds on every queue call, so those made every queue operation O(unresolved tasks) locally
(docs/performance.md), and on Azure they were two billed transactions per task. The expiry entry waits for the
deadline (a task cannot expire before it: `expires` >= `deadline`) because a page of a bucket's tasks share an
expiry hour and go in one transaction, where createTask wrote an entry of its own (half a storage call per task in
a lone lifecycle). A lost bucket message is repaired as a lost per-task check was: the reconciler resolves
unresolved tasks found past their deadline, and the expiry timer reads the rows left past their `expires` as
entries (`expired`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from shared.domain.messages import bucket_time
from shared.storage.base import put_json

DEADLINES_TABLE = "TaskDeadlines"


@dataclass(frozen=True)
class DeadlineBucket:
    """The `task-deadlines` message: check the tasks of `bucket` (from page `continuation` on)."""

    bucket: str
    continuation: str | None = None

    def encode(self) -> bytes:
        return put_json(asdict(self))

    @classmethod
    def decode(cls, body: Any) -> DeadlineBucket:
        try:
            bucket, continuation = str(body["bucket"]), body.get("continuation")
            bucket_time(bucket)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"malformed deadline message: {body!r}") from exc
        return cls(bucket, None if continuation is None else str(continuation))
