"""The task record: definition, runs and retry budget, and how it is stored as one Tasks table entity.

The entity (PartitionKey = taskId, RowKey = `task:<taskId>`) is the truth about a task; every queue message is a
hint checked against it. Definition and runs are JSON split across properties (a property holds 64 KiB).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict, cast, get_args

from shared import timeutil
from shared.bounded import Bounded, text_weight
from shared.storage.base import Entity, QueueMessage, pack_json, unpack_json

TASK_ID = re.compile(r"[A-Za-z0-9_-]{8}[Q-T][A-Za-z0-9_-][CGKOSWaeimquy26-][A-Za-z0-9_-]{10}[AQgw]")  # a slugid
TASKS_TABLE = "Tasks"
TASK_ROW = "task:"
TASK_ROW_END = "task;"


def task_row(task_id: str) -> str:
    """The task entity's RowKey. It holds the taskId (its PartitionKey too) so that no two partitions share a RowKey:
    Azurite looks an entity up by its RowKey index first, so a RowKey every partition has made each point read and
    write O(tasks) locally (docs/performance.md)."""
    return TASK_ROW + task_id


Priority = Literal["highest", "very-high", "high", "medium", "low", "very-low", "lowest"]
RunState = Literal["pending", "running", "completed", "failed", "exception"]
ResolvedState = Literal["completed", "failed", "exception"]
TaskState = Literal[RunState, "unscheduled"]
ReasonCreated = Literal["scheduled", "retry", "task-retry", "rerun", "exception"]
ReasonResolved = Literal[
    "completed",
    "failed",
    "deadline-exceeded",
    "canceled",
    "superseded",
    "claim-expired",
    "worker-shutdown",
    "malformed-payload",
    "resource-unavailable",
    "internal-error",
    "intermittent-task",
]

PRIORITIES: tuple[Priority, ...] = get_args(Priority)  # highest first
MAX_RUNS = 50
RESOLVED_STATES: tuple[ResolvedState, ...] = get_args(ResolvedState)


def accepted_states(requires: str) -> tuple[str, ...]:
    """The states of a dependency that satisfy a dependent whose definition `requires` them."""
    return ("completed",) if requires == "all-completed" else RESOLVED_STATES


class TaskMetadata(TypedDict):
    name: str
    description: str
    owner: str
    source: str


class TaskDefinition(TypedDict):
    """A stored task definition (task.yml): what createTask was given, normalized (shared/operations/creation.py).
    Its dates are the strings the API returns; `Task.deadline` and `Task.expires` are them as datetimes."""

    provisionerId: str
    workerType: str
    taskQueueId: str
    schedulerId: str
    projectId: str
    taskGroupId: str
    dependencies: list[str]
    requires: Literal["all-completed", "all-resolved"]
    routes: list[str]
    priority: Priority
    retries: int
    created: str
    deadline: str
    expires: str
    scopes: list[str]
    payload: dict[str, Any]
    metadata: TaskMetadata
    tags: dict[str, str]
    extra: dict[str, Any]


# The definition fields of task.yml, in the order the API returns them.
DEFINITION_FIELDS = (
    "provisionerId",
    "workerType",
    "taskQueueId",
    "schedulerId",
    "projectId",
    "taskGroupId",
    "dependencies",
    "requires",
    "routes",
    "priority",
    "retries",
    "created",
    "deadline",
    "expires",
    "scopes",
    "payload",
    "metadata",
    "tags",
    "extra",
)

MAX_DEFINITION_CHARS = 400_000  # an entity holds 1 MiB, strings counted as UTF-16


def definition_size(definition: TaskDefinition) -> int:
    return len(json.dumps(definition, separators=(",", ":"), ensure_ascii=True))


def _time(value: Any) -> dt.datetime | None:
    return timeutil.parse(value) if value else None


def _text(value: dt.datetime | None) -> str | None:
    return timeutil.iso(value) if value is not None else None


@dataclass
class Run:
    state: RunState
    reason_created: ReasonCreated
    scheduled: dt.datetime
    reason_resolved: ReasonResolved | None = None
    worker_group: str | None = None
    worker_id: str | None = None
    taken_until: dt.datetime | None = None
    started: dt.datetime | None = None
    resolved: dt.datetime | None = None
    # Pending: the ids of the hints that may claim it (space-separated; more than one only after the reconciler
    # hinted it again). Claimed: the one hint that claimed it. Guards against duplicated and stale hints.
    hint_id: str | None = None
    # Its artifacts whose worker may still write their data (Azure-era `azure` ones, live logs), by name: "" until
    # the run resolves, then the snapshot of their blob taken before the resolution was written ("-": none was
    # uploaded). shared/operations/writes/livelogs.py.
    live: dict[str, str] = field(default_factory=dict)

    @property
    def resolved_state(self) -> bool:
        return self.state in RESOLVED_STATES

    def resolve(self, state: ResolvedState, reason: ReasonResolved, now: dt.datetime) -> None:
        self.state, self.reason_resolved, self.resolved = state, reason, now

    def accepts_hint(self, hint_id: str) -> bool:
        """Whether the hint `hint_id` may claim this run (a run from before hint ids accepts any)."""
        return self.hint_id is None or hint_id in self.hint_id.split()

    def hint_ids(self) -> list[str]:
        return self.hint_id.split() if self.hint_id else []

    def to_api(self, run_id: int) -> dict[str, Any]:
        """task-status.yml's run (also what is stored, without the runId)."""
        out: dict[str, Any] = {"runId": run_id, "state": self.state, "reasonCreated": self.reason_created}
        for key, value in (
            ("reasonResolved", self.reason_resolved),
            ("workerGroup", self.worker_group),
            ("workerId", self.worker_id),
            ("takenUntil", _text(self.taken_until)),
            ("scheduled", _text(self.scheduled)),
            ("started", _text(self.started)),
            ("resolved", _text(self.resolved)),
        ):
            if value is not None:
                out[key] = value
        return out

    def to_stored(self) -> dict[str, Any]:
        stored = self.to_api(0)
        del stored["runId"]
        if self.hint_id is not None:
            stored["hintId"] = self.hint_id
        if self.live:
            stored["live"] = dict(self.live)
        return stored

    @classmethod
    def from_stored(cls, data: dict[str, Any]) -> Run:
        return cls(
            data["state"],
            data["reasonCreated"],
            timeutil.parse(data["scheduled"]),
            data.get("reasonResolved"),
            data.get("workerGroup"),
            data.get("workerId"),
            _time(data.get("takenUntil")),
            _time(data.get("started")),
            _time(data.get("resolved")),
            data.get("hintId"),
            dict(data.get("live") or {}),
        )


@dataclass
class Task:
    task_id: str
    definition: TaskDefinition
    runs: list[Run] = field(default_factory=list)
    retries_left: int = 0
    taken_until: dt.datetime | None = None
    etag: str | None = None
    event_seq: int = 0  # the last event recorded for this task (shared/outbox/log.py)
    # The pending claim check of this task: {"claim": [messageId, popReceipt]} (and "deadline" on tasks created
    # before deadline buckets), so that a resolution deletes it rather than leave it queued until it comes due.
    checks: dict[str, list[str]] = field(default_factory=dict)
    # Created when dependents mark themselves (shared/domain/dependencies.py): no marker row means no dependents.
    dependents_marked: bool = False
    # Whether a task may depend on this one, flagged on this row by such a task's createTask (conditional on the
    # ETag it read, after its edge is written): False means none, and its resolution skips the dependents
    # lookup. None: a row written before the flag existed (its marker row tells).
    has_dependents: bool | None = None
    # Tasks that keep their waiting list on their row have their edges here, in this task's partition
    # (shared/operations/writes/edges.py): set with the first such edge, its resolution then lists them.
    dependents_here: bool = False
    # Those dependents, listed on this row with their edges (taskId, require), so that the resolution needs no
    # query of the edges (shared/domain/dependencies.py, LISTED); None: not listed (more than LISTED, or edges
    # written before the list existed): the resolution queries them.
    dependents: list[tuple[str, str]] | None = field(default_factory=list)
    # The dependencies it still waits for, kept on its own row (shared/domain/dependencies.py: at most IN_ROW
    # dependencies); None: its requirement rows tell (a longer list, or a row written before this field).
    waiting: list[str] | None = None
    # A resolved task to rerun once every dependency it requires has completed (shared/operations/reruns.py): the
    # resolution that releases it last reruns it, as it schedules a task that waits for the first time.
    rerun_when_ready: bool = False
    # Events the change being made announces: (exchange, runId, extra payload fields); not stored.
    emitted: list[tuple[str, int | None, dict[str, Any]]] = field(default_factory=list)
    # The characters of its row as read (0: not read from a row); not stored. Listings weigh a task by it to bound
    # their pages in bytes (shared/operations/paging.py) without serializing it twice.
    stored_bytes: int = field(default=0, compare=False)

    def held_check(self, kind: str, now: dt.datetime) -> QueueMessage | None:
        """The check message this row keeps for `kind` (`checks[kind]`: its id and pop receipt), to update or delete
        in its queue; None when it keeps none."""
        held = self.checks.get(kind)
        return None if held is None else QueueMessage(held[0], held[1], b"", 0, now)

    def emit(self, exchange: str, run_id: int | None = None, **extra: Any) -> None:
        """Announce `exchange` with the change being made (built from the state once the change is complete)."""
        self.emitted.append((exchange, run_id, extra))

    @property
    def state(self) -> TaskState:
        return self.runs[-1].state if self.runs else "unscheduled"

    @property
    def deadline(self) -> dt.datetime:
        return timeutil.parse(self.definition["deadline"])

    @property
    def expires(self) -> dt.datetime:
        return timeutil.parse(self.definition["expires"])

    @property
    def task_queue_id(self) -> str:
        return self.definition["taskQueueId"]

    @property
    def priority(self) -> Priority:
        return self.definition["priority"]

    @property
    def last_run_id(self) -> int:
        return len(self.runs) - 1

    def status(self) -> dict[str, Any]:
        """task-status.yml: what the API answers and every task event carries."""
        d = self.definition
        return {
            "taskId": self.task_id,
            "provisionerId": d["provisionerId"],
            "workerType": d["workerType"],
            "taskQueueId": d["taskQueueId"],
            "schedulerId": d["schedulerId"],
            "projectId": d["projectId"],
            "taskGroupId": d["taskGroupId"],
            "priority": d["priority"],
            "deadline": d["deadline"],
            "expires": d["expires"],
            "retriesLeft": self.retries_left,
            "state": self.state,
            "runs": [run.to_api(i) for i, run in enumerate(self.runs)],
        }

    def to_entity(self) -> Entity:
        d, row = self.definition, task_row(self.task_id)
        data: dict[str, Any] = {
            # Plain columns for filtering and listing; the definition JSON is what the API returns.
            "taskGroupId": d["taskGroupId"],
            "schedulerId": d["schedulerId"],
            "taskQueueId": d["taskQueueId"],
            "deadline": d["deadline"],
            "expires": d["expires"],
            "state": self.state,
            "retriesLeft": self.retries_left,
            "takenUntil": _text(self.taken_until) or "",
            "eventSeq": self.event_seq,
            "checks": json.dumps(self.checks, separators=(",", ":")) if self.checks else "",
            "dependentsMarked": self.dependents_marked,
            **({} if self.has_dependents is None else {"hasDependents": self.has_dependents}),
            **(
                {"dependentsHere": True, "dependents": encode_dependents(self.dependents)}
                if self.dependents_here
                else {}
            ),
            **({} if self.waiting is None else {"waiting": json.dumps(self.waiting, separators=(",", ":"))}),
            **({"rerunWhenReady": True} if self.rerun_when_ready else {}),
            **pack_json("definition", d),
            **pack_json("runs", [run.to_stored() for run in self.runs]),
        }
        return Entity(self.task_id, row, data, self.etag)

    @classmethod
    def from_entity(cls, entity: Entity) -> Task:
        data = entity.data
        return cls(
            task_id=entity.partition_key,
            definition=cast(TaskDefinition, unpack_json("definition", data)),
            runs=[Run.from_stored(r) for r in unpack_json("runs", data)],
            retries_left=int(data["retriesLeft"]),
            taken_until=_time(data.get("takenUntil")),
            etag=entity.etag,
            event_seq=int(data.get("eventSeq", 0)),
            checks=json.loads(data.get("checks") or "{}"),
            dependents_marked=bool(data.get("dependentsMarked", False)),
            has_dependents=None if data.get("hasDependents") is None else bool(data["hasDependents"]),
            dependents_here=bool(data.get("dependentsHere", False)),
            dependents=decode_dependents(data.get("dependents")) if data.get("dependentsHere") else [],
            waiting=None if data.get("waiting") is None else list(json.loads(data["waiting"])),
            rerun_when_ready=bool(data.get("rerunWhenReady", False)),
            stored_bytes=sum(len(value) for value in data.values() if isinstance(value, str | bytes)),
        )


NOT_LISTED = "*"  # the `dependents` property of a row whose dependents are not all listed there


def encode_dependents(dependents: list[tuple[str, str]] | None) -> str:
    """The `dependents` property: the taskIds, space-separated, `/r` after one that requires `resolved` (the
    others `completed`); NOT_LISTED for None. 23 characters a dependent: a few KiB at most (LISTED)."""
    if dependents is None:
        return NOT_LISTED
    return " ".join(task_id if require == "completed" else f"{task_id}/r" for task_id, require in dependents)


def decode_dependents(value: object) -> list[tuple[str, str]] | None:
    """`encode_dependents` undone; None (not listed) for NOT_LISTED or a row without the property (edges written
    before the list existed)."""
    if not isinstance(value, str) or value == NOT_LISTED:
        return None
    return [(token[:-2], "resolved") if token.endswith("/r") else (token, "completed") for token in value.split()]


class KnownTasks:
    """The task rows this process last wrote or read, with their ETags: a change starts from the row it knows
    instead of reading it again (the next lifecycle step of a task usually comes to the process that made the
    last one; locally there is one process). Nothing is decided on a remembered row alone: a change made from
    it is written conditionally on its ETag, so a row another process changed meanwhile makes the write fail
    and the change start over from a fresh read; an outcome that writes nothing (a refusal, no change needed)
    is decided again from a fresh read."""

    def __init__(self, size: int, max_bytes: int = 64 * 1024 * 1024) -> None:
        self.size = size
        self._rows: Bounded[str, Entity] = Bounded(
            size, max_bytes=max_bytes, weigh=lambda task_id, row: text_weight(row.data)
        )

    def get(self, task_id: str) -> Task | None:
        entity = self._rows.get(task_id)
        if entity is None:
            return None
        return Task.from_entity(entity)

    def put(self, entity: Entity) -> None:
        """Remember a whole task row as stored (with the ETag storage gave it)."""
        if entity.etag is None or self.size <= 0:
            self._rows.pop(entity.partition_key)
            return
        self._rows.put(entity.partition_key, entity)

    def forget(self, task_id: str) -> None:
        self._rows.pop(task_id)


def newest_run(task: Task | None, run_id: int) -> Run | None:
    """Run `run_id` of the task, when it is its newest (a rerun since makes it history)."""
    return task.runs[run_id] if task is not None and 0 <= run_id == task.last_run_id else None
