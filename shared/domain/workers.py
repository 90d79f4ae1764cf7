"""Worker information: provisioners, worker types / task queues, workers (recent tasks, quarantine). The index of
each task queue's pending and claimed runs is in shared/domain/queue_runs.py.

Table `WorkerInfo`: PK `provisioners` / RK provisionerId; PK `task-queues` / RK taskQueueId (key-encoded: one row
is both the task queue and its worker type); PK `workers:<taskQueueId>` / RK `<workerGroup>:<workerId>`.

Writes are throttled so a busy fleet does not turn every claim into extra table writes: a process writes a
provisioner's and a task queue's `lastDateActive` at most every 6 hours, and a worker's row (its recent tasks and
`lastDateActive`) at most every QUEUE_WORKER_INFO_INTERVAL seconds, from claims it buffered meanwhile. So recent
tasks may lag by that much, and a process that stops loses what it had not written (the row is informational).
Entries expire like Taskcluster's: workers a day after last seen, provisioners and task queues after 5 days;
quarantined workers not while quarantined.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from shared import errors, timeutil
from shared.storage.base import Entity, pack_json, unpack_json
from shared.storage.keys import encode_key

WORKER_INFO_TABLE = "WorkerInfo"
PROVISIONERS, TASK_QUEUES, WORKERS = "provisioners", "task-queues", "workers:"


class ProvisionerNotFound(errors.ResourceNotFound):
    """Provisioner `{provisionerId}` not found (provisioners are known once a worker claimed from them)"""


class TaskQueueNotFound(errors.ResourceNotFound):
    """Task queue `{taskQueueId}` not found (task queues are known once a worker claimed from them)"""


class WorkerNotFound(errors.ResourceNotFound):
    """Worker `{workerGroup}/{workerId}` of task queue `{taskQueueId}` not found"""


class WorkerQuarantined(errors.RequestConflict):
    """Worker `{workerGroup}/{workerId}` is quarantined until {quarantineUntil}: it gets no work"""


def _time(text: str | None) -> dt.datetime | None:
    return timeutil.parse(text) if text else None


def _text(value: dt.datetime | None) -> str:
    """A time column: empty for none (so that `quarantineUntil le @now` also finds workers never quarantined)."""
    return timeutil.iso(value) if value is not None else ""


def workers_partition(task_queue_id: str) -> str:
    return WORKERS + encode_key(task_queue_id)


def worker_key(worker_group: str, worker_id: str) -> str:
    return f"{worker_group}:{worker_id}"


@dataclass
class Worker:
    task_queue_id: str
    worker_group: str
    worker_id: str
    first_claim: dt.datetime
    expires: dt.datetime
    last_date_active: dt.datetime | None = None
    recent_tasks: list[dict[str, Any]] = field(default_factory=list)
    quarantine_until: dt.datetime | None = None
    quarantine_details: list[dict[str, Any]] = field(default_factory=list)
    etag: str | None = None

    def quarantined(self, now: dt.datetime) -> bool:
        return self.quarantine_until is not None and self.quarantine_until > now

    def to_entity(self) -> Entity:
        return Entity(
            workers_partition(self.task_queue_id),
            worker_key(self.worker_group, self.worker_id),
            {
                "taskQueueId": self.task_queue_id,
                "workerGroup": self.worker_group,
                "workerId": self.worker_id,
                "firstClaim": timeutil.iso(self.first_claim),
                "expires": timeutil.iso(self.expires),
                "lastDateActive": _text(self.last_date_active),
                "quarantineUntil": _text(self.quarantine_until),
                **pack_json("recentTasks", self.recent_tasks),
                **pack_json("quarantineDetails", self.quarantine_details),
            },
            self.etag,
        )

    @classmethod
    def from_entity(cls, entity: Entity) -> Worker:
        d = entity.data
        return cls(
            d["taskQueueId"],
            d["workerGroup"],
            d["workerId"],
            timeutil.parse(d["firstClaim"]),
            timeutil.parse(d["expires"]),
            _time(d.get("lastDateActive")),
            unpack_json("recentTasks", d),
            _time(d.get("quarantineUntil")),
            unpack_json("quarantineDetails", d),
            entity.etag,
        )


@dataclass(frozen=True)
class Provisioner:
    provisioner_id: str
    description: str
    stability: str
    expires: dt.datetime
    last_date_active: dt.datetime

    @classmethod
    def from_entity(cls, entity: Entity) -> Provisioner:
        d = entity.data
        return cls(
            entity.row_key,
            d.get("description", ""),
            d.get("stability", "experimental"),
            timeutil.parse(d["expires"]),
            timeutil.parse(d["lastDateActive"]),
        )


@dataclass(frozen=True)
class TaskQueueInfo:
    """A task queue (which is also its worker type: `<provisionerId>/<workerType>`)."""

    task_queue_id: str
    description: str
    stability: str
    expires: dt.datetime
    last_date_active: dt.datetime

    @classmethod
    def from_entity(cls, entity: Entity) -> TaskQueueInfo:
        d = entity.data
        return cls(
            d["taskQueueId"],
            d.get("description", ""),
            d.get("stability", "experimental"),
            timeutil.parse(d["expires"]),
            timeutil.parse(d["lastDateActive"]),
        )
