"""The index of each task queue's pending and claimed runs, which listPendingTasks / listClaimedTasks and the
pending counts read.

Table `TaskQueueRuns`: PK taskQueueId (key-encoded, salted into QUEUE_PENDING_SHARDS partitions) / RK taskId: the
task's current run while it is pending or claimed (`state`, `runId`, `since`, worker). Written before the task
change it follows (a crash leaves a stale row, which readers check against the task and drop), deleted once the
task resolved.
"""

from __future__ import annotations

TASK_QUEUE_RUNS_TABLE = "TaskQueueRuns"
