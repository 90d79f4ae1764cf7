"""An index of things by the hour they expire, so expiry never scans the tables that hold them.

TaskExpiry: PartitionKey = `YYYY-MM-DDTHH` of the task's `expires`, RowKey = taskId (ArtifactExpiry likewise,
RowKey naming the artifact). The expiry timer reads the partitions before the cut-off in key order, a page at a
time, and re-checks each thing before deleting it: an entry is a hint, written before the thing it indexes.
An hour takes every task created with that expiry (Azure: 2,000 entities/s per partition), so with
QUEUE_PENDING_SHARDS above one it is salted by key: `<hour>`, `<hour>~1` ... (all sort before the next hour).
"""

from __future__ import annotations

import datetime as dt

from shared import timeutil

TASK_EXPIRY_TABLE = "TaskExpiry"


def bucket(expires: dt.datetime) -> str:
    return timeutil.iso(expires)[:13]  # 2026-11-22T12:00:00.000Z -> 2026-11-22T12
