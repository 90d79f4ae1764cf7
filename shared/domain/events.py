"""The queue's events, as Taskcluster publishes them: exchanges, routing keys, CC routes and payloads.

An `Event` is what one state change announces. It is built from the state *after* the change, recorded in the
same table transaction as that change (`shared/outbox/log.py`) and published later, at least once, by the
dispatcher. Payloads follow the official `*-message.yml` schemas (the modern generation: task messages carry
`task: {tags}`).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from shared import timeutil

if TYPE_CHECKING:
    from shared.domain.tasks import Task

MESSAGE_VERSION = 1
DEFAULT_NAMESPACE = "taskcluster-queue"

# Exchange → the schema its payloads follow.
TASK_EXCHANGES = {
    "task-defined": "task-defined-message",
    "task-pending": "task-pending-message",
    "task-running": "task-running-message",
    "artifact-created": "artifact-created-message-azure",  # the official one, plus storageType `azure`
    "task-completed": "task-completed-message",
    "task-failed": "task-failed-message",
    "task-exception": "task-exception-message",
    "task-priority-changed": "task-priority-changed-message",
}
GROUP_EXCHANGES = {
    "task-group-resolved": "task-group-changed-message",
    "task-group-sealed": "task-group-changed-message",
    "task-group-priority-changed": "task-group-priority-changed-message",
}
EXCHANGES = {**TASK_EXCHANGES, **GROUP_EXCHANGES}

# The words of a task routing key, as Taskcluster names them (the Service Bus adapter uses them as property
# names); `reserved` is always `_` so consumers bind with a trailing `#`.
TASK_KEY_WORDS = (
    "routingKeyKind",
    "taskId",
    "runId",
    "workerGroup",
    "workerId",
    "provisionerId",
    "workerType",
    "schedulerId",
    "taskGroupId",
    "reserved",
)
GROUP_KEY_WORDS = ("routingKeyKind", "taskGroupId", "schedulerId", "reserved")
MISSING = "_"


def exchange_name(exchange: str, namespace: str = DEFAULT_NAMESPACE) -> str:
    """The full AMQP exchange name, as Pulse names Taskcluster's: `exchange/taskcluster-queue/v1/task-defined`."""
    return f"exchange/{namespace}/v1/{exchange}"


@dataclass(frozen=True)
class Event:
    """One message: its exchange (short name), routing key, CC routes (`route.<r>`) and JSON payload."""

    exchange: str
    routing_key: str
    payload: dict[str, Any]
    cc: list[str] = field(default_factory=list)
    time: str = ""
    message_id: str = ""  # `<table>/<key>/<seq>` once recorded: the same for every re-publication

    @property
    def words(self) -> dict[str, str]:
        """The routing key's words by name."""
        names = GROUP_KEY_WORDS if self.exchange in GROUP_EXCHANGES else TASK_KEY_WORDS
        return dict(zip(names, self.routing_key.split("."), strict=True))

    @property
    def schema(self) -> str:
        return EXCHANGES[self.exchange]


def _word(value: Any) -> str:
    return MISSING if value is None or value == "" else str(value)


def task_routing_key(task: Task, run_id: int | None) -> str:
    run = task.runs[run_id] if run_id is not None else None
    d = task.definition
    provisioner_id, _, worker_type = d["taskQueueId"].partition("/")
    words = [
        "primary",
        task.task_id,
        run_id,
        run.worker_group if run else None,
        run.worker_id if run else None,
        provisioner_id,
        worker_type,
        d["schedulerId"],
        d["taskGroupId"],
        None,
    ]
    return ".".join(_word(w) for w in words)


def task_event(task: Task, exchange: str, run_id: int | None = None, *, now: dt.datetime, **extra: Any) -> Event:
    """A task exchange's message about `task` as it is now; `extra` adds the exchange's own fields."""
    if exchange not in TASK_EXCHANGES:
        raise ValueError(f"not a task exchange: {exchange}")
    payload: dict[str, Any] = {"version": MESSAGE_VERSION, "status": task.status()}
    if exchange not in ("task-priority-changed", "artifact-created"):
        payload["task"] = {"tags": task.definition.get("tags", {})}
    if run_id is not None:
        run = task.runs[run_id]
        payload["runId"] = run_id
        if exchange not in ("task-defined", "task-pending") and run.worker_group and run.worker_id:
            payload["workerGroup"], payload["workerId"] = run.worker_group, run.worker_id
        if exchange == "task-running":
            payload["takenUntil"] = timeutil.iso(run.taken_until) if run.taken_until else None
    payload.update(extra)
    return Event(
        exchange,
        task_routing_key(task, run_id),
        payload,
        [f"route.{r}" for r in task.definition.get("routes", [])],
        timeutil.iso(now),
    )


def group_event(exchange: str, task_group_id: str, scheduler_id: str, *, now: dt.datetime, **fields: Any) -> Event:
    """A task-group exchange's message (these carry no CC routes)."""
    if exchange not in GROUP_EXCHANGES:
        raise ValueError(f"not a task-group exchange: {exchange}")
    payload = {"version": MESSAGE_VERSION, "taskGroupId": task_group_id, "schedulerId": scheduler_id, **fields}
    routing_key = ".".join(["primary", task_group_id, scheduler_id, MISSING])
    return Event(exchange, routing_key, payload, [], timeutil.iso(now))
