"""The local host's HTTP protocol: uvicorn's h11 protocol with Taskcluster's JSON errors and the bounds a server
facing anyone needs (docs/security.md), which uvicorn leaves open:

- a connection limit (`QUEUE_HTTP_MAX_CONNECTIONS`), and a share of it per peer address
  (`QUEUE_HTTP_PER_PEER_SHARE`): a connection beyond either makes room by closing the slowest client's: of the
  connections whose request (head or body) has been coming for a second or more, the one that sent the fewest
  bytes a second since it began, however recent its last byte; when every connection is being served it is
  answered 503 with `Retry-After` and closed at once, before it can hold anything. Slow clients cannot fill the
  slots: they are the first to go, a byte every 0.8 s as surely as one a minute;
- a header-read timeout (`QUEUE_HTTP_HEADER_TIMEOUT`): a connection must send a whole request head within this
  many seconds of opening (or of its previous answer, when kept alive), however slowly the bytes come, or it is
  closed (slow-loris connections otherwise stay open for ever);
- a body's pace: while a request body is read, a connection that sends nothing for `QUEUE_HTTP_BODY_TIMEOUT`
  seconds, or after `QUEUE_HTTP_BODY_GRACE` seconds averages less than `QUEUE_HTTP_MIN_BODY_RATE` bytes a
  second, is closed (a body trickled a byte at a time would otherwise hold its slot for ever; a large upload
  that keeps sending is not cut);
- an answer's pace: while an answer waits in the connection's buffer for its client to read it, the same bounds
  hold the other way: nothing read for `QUEUE_HTTP_BODY_TIMEOUT` seconds, or after the grace less than the
  minimum rate on average, and the connection is aborted, its buffered answer dropped (a client that never reads
  a 19 MB page held it in memory for ever, and after its answer was handed over its connection left the counts);
  a connection counts until it is gone, and one closed by a bound is aborted, not left flushing to nobody;
- the request head's size (shared/api/framework.py `MAX_HEAD_BYTES`): h11 refuses a head that arrives in pieces
  past it, the application one that arrived whole.
"""

from __future__ import annotations

import asyncio
import collections
import math
from typing import Any, ClassVar, cast

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from shared import errors, strict_json
from shared.api.framework import MAX_HEAD_BYTES, error_body

WATCH_INTERVAL = 0.25  # seconds between two looks at a connection's bounds (what each can overrun them by)
# A connection makes room for another only once its request has been coming this long: one just opened, whose
# bytes a busy host has not read yet, looks idle but is not. A whole head takes a real client milliseconds.
EVICTABLE_AFTER = 1.0


class InvalidHttpRequest(errors.InvalidRequestArguments):
    """The request is not valid HTTP/1.1 ({problem}): the request line and headers must be well-formed and at most
    {limit} bytes in all"""


class TooManyConnections(errors.ServiceUnavailable):
    """This host holds {limit} connections, its limit: try again shortly"""


class TooManyFromPeer(errors.ServiceUnavailable):
    """This host holds {limit} connections from your address, its share of the host's {total}: try again shortly"""


def _json(problem: errors.QueueError) -> bytes:
    return strict_json.dumps(error_body(problem, method="unknown", params={}, payload=None))


class _Counted:
    """The connection's transport, counting the bytes written to it (what its client has read is that count less
    what is still buffered)."""

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport, self.written = transport, 0

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += len(data)
        self._transport.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class BoundedH11(H11Protocol):
    """uvicorn's h11 protocol, answering in Taskcluster's error format, with connection limits and read bounds
    (set on the class by `configure` before the server starts).

    The bounds are checked by a watch that looks at each connection every WATCH_INTERVAL, whatever state it
    reached and however (a request pipelined behind another starts in the middle of a read), rather than by
    timers armed at chosen transitions, which each new shape of slow request slipped past: a connection waiting
    for a head gets `header_timeout`; one whose body is being read must send a byte every `body_timeout` and,
    after `body_grace`, at least `min_body_rate` bytes a second on average (the time the application is not
    reading, e.g. an upload waiting for a slot, does not count); one the server is answering is not bounded here.
    A connection over a limit (the host's, or its address's share) makes room by closing the connection that has
    waited longest for its client (one waiting for a head or a body, for a second at least); only when none is,
    every connection being served or just opened, is the new one refused (503). Which one makes room is judged by
    how long its request has been coming and at what rate (`pace`), not by its last byte: a byte every 0.8 s kept
    a connection looking fresh to a last-byte rule for ever."""

    max_connections: ClassVar[int] = 1000
    per_peer: ClassVar[int] = 500
    header_timeout: ClassVar[float] = 10.0
    body_timeout: ClassVar[float] = 10.0
    min_body_rate: ClassVar[float] = 16 * 1024
    body_grace: ClassVar[float] = 30.0
    by_peer: ClassVar[collections.Counter[str]] = collections.Counter()  # open connections per peer address
    held: ClassVar[set[BoundedH11]] = set()  # the open connections, to choose which makes room

    @classmethod
    def configure(
        cls,
        *,
        max_connections: int,
        header_timeout: float,
        body_timeout: float = 10.0,
        per_peer_share: float = 0.5,
        min_body_rate: float = 16 * 1024,
        body_grace: float = 30.0,
    ) -> type[BoundedH11]:
        per_peer = max(1, math.ceil(max_connections * per_peer_share))
        return type(
            "ConfiguredBoundedH11",
            (cls,),
            {
                "max_connections": max_connections,
                "header_timeout": header_timeout,
                "body_timeout": body_timeout,
                "min_body_rate": min_body_rate,
                "body_grace": body_grace,
                "per_peer": per_peer,
                "by_peer": collections.Counter(),
                "held": set(),
            },
        )

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.counted = _Counted(transport)
        self.transport = cast(asyncio.Transport, self.counted)
        self._send_since: float | None = None  # since when an answer waits in the buffer for its client
        self._read_at_send = 0  # what the client had read then
        self._last_read, self._read_progress_at = 0, 0.0
        self._watch: asyncio.TimerHandle | None = None
        self.peer: str | None = None
        now = self.loop.time()
        self.heard = self.waiting_since = now  # when a byte last came; since when a head is awaited
        self._body_since: float | None = None  # when the body being read began (paused time excluded)
        self._received = self._body_start = 0  # bytes received in all; when the body began
        self._received_since_wait = 0  # bytes received in all when the wait for this request began
        peer = transport.get_extra_info("peername")
        address = str(peer[0]) if isinstance(peer, tuple) and peer else "unknown"
        problem = self._make_room(address)
        if problem is not None:
            body = _json(problem)
            transport.write(
                b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
                b"retry-after: %d\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%s"
                % (problem.retry_after, len(body), body)
            )
            transport.close()
            return
        self.peer = address
        self.by_peer[address] += 1
        self.held.add(self)
        self._watch = self.loop.call_later(WATCH_INTERVAL, self._check)

    def _make_room(self, address: str) -> errors.ServiceUnavailable | None:
        """Close the connection waiting longest for its client when the host's limit or the address's share is
        reached; the reason to refuse this one when none is waiting."""
        if self.by_peer[address] >= self.per_peer and not self._evict([c for c in self.held if c.peer == address]):
            return TooManyFromPeer(limit=self.per_peer, total=self.max_connections)
        if len(self.held) >= self.max_connections and not self._evict(list(self.held)):
            return TooManyConnections(limit=self.max_connections)
        return None

    def _evict(self, among: list[BoundedH11]) -> bool:
        now = self.loop.time()
        waiting = [c for c in among if c.waits_for_client() and now - c.waiting_since >= EVICTABLE_AFTER]
        if not waiting:
            return False
        min(waiting, key=lambda c: (c.pace(now), c.waiting_since)).close_now()
        return True

    def pace(self, now: float) -> float:
        """Bytes a second its client has sent since the request (or the wait for one) began."""
        return (self._received - self._received_since_wait) / max(now - self.waiting_since, 1e-3)

    def waits_for_client(self) -> bool:
        state = self.conn.their_state
        return state is h11.IDLE or (state is h11.SEND_BODY and not self.flow.read_paused)

    def close_now(self) -> None:
        """Abort now, dropping what is buffered for a client that is not reading it, and give up the connection's
        place at once (its `connection_lost` comes later)."""
        self._release()
        self.transport.abort()

    def _release(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        self.held.discard(self)
        if self.peer is not None:
            self.by_peer[self.peer] -= 1
            if self.by_peer[self.peer] <= 0:
                del self.by_peer[self.peer]
            self.peer = None

    def _check(self) -> None:
        """The watch: close the connection if the request its client is sending, or the reading of the answer it
        was sent, is over a bound."""
        self._watch = None
        now = self.loop.time()
        if self._answer_unread(now):
            self.close_now()  # the client does not read its answer, or crawls: drop it
            return
        if self.transport.is_closing():
            if self.transport.get_write_buffer_size():
                self._watch = self.loop.call_later(WATCH_INTERVAL, self._check)  # flushing: watched until gone
            return
        if self._send_since is not None:
            self.waiting_since = now  # the next head is not awaited while the answer is still being read
        state = self.conn.their_state
        if state is not h11.SEND_BODY:
            self._body_since = None
        if state is h11.IDLE:
            if now - self.waiting_since > self.header_timeout:
                self.close_now()  # no whole request head in time: nothing to answer
                return
        elif state is h11.SEND_BODY:
            if self._body_since is None:
                self._body_since, self._body_start = now, self._received
            if self.flow.read_paused:  # the application is not reading (an upload waiting for a slot)
                self._body_since += WATCH_INTERVAL
                self.heard = now
            elif self._body_too_slow(now):
                self.close_now()  # the body stopped coming, or crawls: the request is abandoned
                return
        self._watch = self.loop.call_later(WATCH_INTERVAL, self._check)

    def _answer_unread(self, now: float) -> bool:
        """Whether an answer buffered for the client has had nothing read for `body_timeout`, or after the grace
        less than `min_body_rate` a second on average."""
        pending = self.transport.get_write_buffer_size()
        if not pending:
            self._send_since = None
            return False
        read = self.counted.written - pending
        if self._send_since is None:
            self._send_since, self._read_at_send = now, read
            self._last_read, self._read_progress_at = read, now
            return False
        if read > self._last_read:
            self._last_read, self._read_progress_at = read, now
        if now - self._read_progress_at > self.body_timeout:
            return True
        late = now - self._send_since - self.body_grace
        return late > 0 and read - self._read_at_send < self.min_body_rate * late

    def _body_too_slow(self, now: float) -> bool:
        assert self._body_since is not None
        if now - self.heard > self.body_timeout:
            return True
        late = now - self._body_since - self.body_grace
        return late > 0 and self._received - self._body_start < self.min_body_rate * late

    def data_received(self, data: bytes) -> None:
        self.heard = self.loop.time()
        self._received += len(data)
        super().data_received(data)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self.waiting_since = self.heard = self.loop.time()  # kept alive: the next head has as long to come
        self._received_since_wait = self._received

    def connection_lost(self, exc: Exception | None) -> None:
        self._release()
        super().connection_lost(exc)

    def send_400_response(self, msg: str) -> None:
        """uvicorn answers a request it cannot parse (malformed, or a head over the limit) with a plain-text 400;
        Taskcluster's clients and tools expect its JSON error format."""
        body = _json(InvalidHttpRequest(problem=msg.rstrip("."), limit=MAX_HEAD_BYTES))
        response = h11.Response(
            status_code=400,
            reason=b"Bad Request",
            headers=[
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        )
        for event in (response, h11.Data(data=body), h11.EndOfMessage()):
            self.transport.write(self.conn.send(event) or b"")
        self.transport.close()
