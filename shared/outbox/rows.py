"""The event log's records: a stream's event rows and dispatch cursor, the `event-dispatch` message, and the
event bus interface (shared/outbox/log.py uses them; the bus adapters implement `Publisher`).

An event is a row `event:<seq>:<key>` in the partition of the entity whose change it describes (a *stream*: a
task's or a task group's), seq from 1 and contiguous; the row `events:<key>` is the stream's dispatch cursor (how
far its events are published, and a dispatcher's lease while it publishes).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from shared import timeutil
from shared.domain.events import Event
from shared.outbox.marks import Hold
from shared.storage.base import Entity, Op, pack_json, put_json, unpack_json

DISPATCH_QUEUE = "event-dispatch"
DISPATCH_PARKED_QUEUE = (
    "event-dispatch-parked"  # retries while the bus refuses, where no trigger counts them (outage.py)
)
EVENT_ROW = "event:"
CURSOR_ROW = "events:"
# Row keys end with the stream's key (its PartitionKey) so that no two partitions share a RowKey: Azurite finds an
# entity through its RowKey index first and then scans the matches for the PartitionKey, so a RowKey that every
# partition has (`event:00000001`, `events`) made each read and write O(streams) locally (docs/performance.md).


class PublishError(Exception):
    """The event bus did not take a message (unreachable, refused, or no confirmation)."""


class Publisher(Protocol):
    """An event bus adapter. `publish` returns once the bus has the message durably, or raises PublishError."""

    async def prepare(self) -> None:
        """Make every exchange exist, so that consumers can bind before the first event (raises PublishError)."""

    async def publish(self, event: Event) -> None: ...

    async def close(self) -> None: ...


# Streams whose rows are kept in another family's table, and the tag their row keys start with there: a task
# group's partition is in the Tasks table (shared/domain/groups.py), so that a group whose id is its task's shares
# that task's partition (and transactions), where the tag keeps the two streams' rows apart.
STORED_WITH: dict[str, tuple[str, str]] = {"TaskGroups": ("Tasks", "group-")}


@dataclass(frozen=True)
class Stream:
    table: str  # the family: "Tasks" or "TaskGroups" (named in dispatch requests and event ids)
    key: str  # the PartitionKey: a taskId or a taskGroupId

    @property
    def label(self) -> str:
        return f"{self.table}/{self.key}"

    @property
    def storage(self) -> str:
        """The table the stream's rows are in."""
        return STORED_WITH.get(self.table, (self.table, ""))[0]

    @property
    def event_prefix(self) -> str:
        """What its event rows' keys start with; the end of their range is this with ";" for its last ":"."""
        return STORED_WITH.get(self.table, ("", ""))[1] + EVENT_ROW

    def holds(self, entity: Entity) -> bool:
        """Whether `entity` is one of this stream's event rows."""
        key = entity.row_key
        prefix = self.event_prefix
        return key.startswith(prefix) and key[len(prefix) + 8 :] == ":" + self.key


def event_row_key(stream: Stream, seq: int) -> str:
    return f"{stream.event_prefix}{seq:08d}:{stream.key}"


def cursor_row_key(stream: Stream) -> str:
    return STORED_WITH.get(stream.table, ("", ""))[1] + CURSOR_ROW + stream.key


def event_entity(stream: Stream, seq: int, event: Event) -> Entity:
    return Entity(
        stream.key,
        event_row_key(stream, seq),
        {
            "exchange": event.exchange,
            "routingKey": event.routing_key,
            "time": event.time,
            **pack_json("payload", event.payload),
            **pack_json("cc", event.cc),
        },
    )


def event_of(table: str, entity: Entity) -> Event:
    data = entity.data
    return Event(
        data["exchange"],
        data["routingKey"],
        unpack_json("payload", data),
        unpack_json("cc", data),
        data.get("time", ""),
        f"{table}/{entity.partition_key}/{seq_of(entity)}",
    )


def seq_of(entity: Entity) -> int:
    """The number of an event row (`[tag]event:<seq>:<key>`)."""
    start = entity.row_key.index(":") + 1
    return int(entity.row_key[start : start + 8])


def event_ops(stream: Stream, first_seq: int, events: Iterable[Event]) -> list[Op]:
    """The inserts that record `events` as `first_seq`, `first_seq + 1`, ... (part of the change's transaction)."""
    # Upserts: rows left behind by a deleted entity of the same key (a crash while expiring it) are overwritten.
    return [Op("upsert", event_entity(stream, first_seq + i, e)) for i, e in enumerate(events)]


def cursor_entity(
    stream: Stream,
    dispatched: int,
    lease_until: str = "",
    etag: str | None = None,
    *,
    hold: Hold | None = None,
    hold_seq: int = 0,
) -> Entity:
    """The cursor row; with `hold`, a writer's lease that its publication mark may certify up to `hold_seq`
    (shared/outbox/marks.py)."""
    data: dict[str, Any] = {"dispatched": dispatched, "leaseUntil": lease_until}
    if hold is not None:
        data.update(holder=hold.holder, holdNo=hold.number, holdSeq=hold_seq)
    return Entity(stream.key, cursor_row_key(stream), data, etag)


@dataclass(frozen=True)
class DispatchRequest:
    """The `event-dispatch` message: publish `table`/`key`'s events up to `seq`."""

    table: str
    key: str
    seq: int
    since: str  # when the change was about to be written
    attempt: int = 0  # publish failures so far (the put-back delay grows with it)

    @classmethod
    def of(cls, stream: Stream, seq: int, since: dt.datetime) -> DispatchRequest:
        """The request for `stream`'s events up to `seq`, of a change about to be written at `since`."""
        return cls(stream.table, stream.key, seq, timeutil.iso(since))

    @property
    def stream(self) -> Stream:
        return Stream(self.table, self.key)

    def encode(self) -> bytes:
        return put_json(asdict(self))

    @classmethod
    def decode(cls, body: Any) -> DispatchRequest:
        try:
            return cls(
                str(body["table"]), str(body["key"]), int(body["seq"]), str(body["since"]), int(body.get("attempt", 0))
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"malformed dispatch request: {body!r}") from exc


def encode_requests(requests: list[DispatchRequest]) -> bytes:
    """One `event-dispatch` message: a request alone, or several as `{"batch": [...]}`."""
    if len(requests) == 1:
        return requests[0].encode()
    return put_json({"batch": [asdict(r) for r in requests]})


def decode_requests(body: Any) -> list[DispatchRequest]:
    """The requests of an `event-dispatch` message (either form); ValueError when malformed."""
    if isinstance(body, dict) and "batch" in body:
        if not isinstance(body["batch"], list) or not body["batch"]:
            raise ValueError(f"malformed dispatch batch: {body!r}")
        return [DispatchRequest.decode(item) for item in body["batch"]]
    return [DispatchRequest.decode(body)]


@dataclass(frozen=True)
class Cursor:
    dispatched: int
    lease_until: str
    etag: str | None
    hold: Hold | None = None  # a writer's lease, which its mark may certify up to `hold_seq`
    hold_seq: int = 0

    def leased(self, now: dt.datetime) -> bool:
        return bool(self.lease_until) and timeutil.parse(self.lease_until) > now

    @classmethod
    def of(cls, entity: Entity | None) -> Cursor:
        """The cursor row as stored (before asking whether a mark certifies its hold); a stream without one has
        published nothing."""
        if entity is None:
            return cls(0, "", None)
        data = entity.data
        holder = str(data.get("holder") or "")
        return cls(
            int(data["dispatched"]),
            str(data.get("leaseUntil") or ""),
            entity.etag,
            Hold(holder, int(data.get("holdNo", 0))) if holder else None,
            int(data.get("holdSeq", 0)),
        )

    def certified(self) -> Cursor:
        """The cursor once its hold's mark covers it: published up to `hold_seq`, the lease given up."""
        return Cursor(max(self.dispatched, self.hold_seq), "", self.etag)
