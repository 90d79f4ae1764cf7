"""The local host's HTTP protocol: uvicorn's h11 protocol with Taskcluster's JSON errors and the bounds a server
facing anyone needs (docs/security.md), which uvicorn leaves open:

- a connection limit (`QUEUE_HTTP_MAX_CONNECTIONS`), and a share of it per peer address
  (`QUEUE_HTTP_PER_PEER_SHARE`): a connection beyond either is answered 503 with `Retry-After` and closed at once,
  before it can hold anything, so one peer cannot take every slot;
- a header-read timeout (`QUEUE_HTTP_HEADER_TIMEOUT`): a connection must send a whole request head within this
  many seconds of opening (or of its previous answer, when kept alive), however slowly the bytes come, or it is
  closed (slow-loris connections otherwise stay open for ever);
- a body idle timeout (`QUEUE_HTTP_BODY_TIMEOUT`): while a request body is read, a connection that sends nothing
  for this many seconds is closed (a body trickled a chunk at a time would otherwise hold its slot for ever; a
  large upload that keeps sending is not cut);
- the request head's size (shared/api/framework.py `MAX_HEAD_BYTES`): h11 refuses a head that arrives in pieces
  past it, the application one that arrived whole.
"""

from __future__ import annotations

import asyncio
import collections
import math
from collections.abc import Callable
from typing import ClassVar

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from shared import errors, strict_json
from shared.api.framework import MAX_HEAD_BYTES, error_body


class InvalidHttpRequest(errors.InvalidRequestArguments):
    """The request is not valid HTTP/1.1 ({problem}): the request line and headers must be well-formed and at most
    {limit} bytes in all"""


class TooManyConnections(errors.ServiceUnavailable):
    """This host holds {limit} connections, its limit: try again shortly"""


class TooManyFromPeer(errors.ServiceUnavailable):
    """This host holds {limit} connections from your address, its share of the host's {total}: try again shortly"""


def _json(problem: errors.QueueError) -> bytes:
    return strict_json.dumps(error_body(problem, method="unknown", params={}, payload=None))


class BoundedH11(H11Protocol):
    """uvicorn's h11 protocol, answering in Taskcluster's error format, with connection limits and read timeouts
    (set on the class by `configure` before the server starts)."""

    max_connections: ClassVar[int] = 1000
    per_peer: ClassVar[int] = 500
    header_timeout: ClassVar[float] = 10.0
    body_timeout: ClassVar[float] = 10.0
    by_peer: ClassVar[collections.Counter[str]] = collections.Counter()  # open connections per peer address

    @classmethod
    def configure(
        cls, *, max_connections: int, header_timeout: float, body_timeout: float = 10.0, per_peer_share: float = 0.5
    ) -> type[BoundedH11]:
        per_peer = max(1, math.ceil(max_connections * per_peer_share))
        return type(
            "ConfiguredBoundedH11",
            (cls,),
            {
                "max_connections": max_connections,
                "header_timeout": header_timeout,
                "body_timeout": body_timeout,
                "per_peer": per_peer,
                "by_peer": collections.Counter(),
            },
        )

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._timer: asyncio.TimerHandle | None = None
        self._peer: str | None = None
        peer = transport.get_extra_info("peername")
        address = str(peer[0]) if isinstance(peer, tuple) and peer else "unknown"
        problem: errors.ServiceUnavailable | None = None
        if len(self.connections) > self.max_connections:
            problem = TooManyConnections(limit=self.max_connections)
        elif self.by_peer[address] >= self.per_peer:
            problem = TooManyFromPeer(limit=self.per_peer, total=self.max_connections)
        if problem is not None:
            body = _json(problem)
            transport.write(
                b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
                b"retry-after: %d\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%s"
                % (problem.retry_after, len(body), body)
            )
            transport.close()
            return
        self._peer = address
        self.by_peer[address] += 1
        self._arm(self.header_timeout, self._head_timed_out)

    def _arm(self, seconds: float, then: Callable[[], None]) -> None:
        self._cancel_timer()
        self._timer = self.loop.call_later(seconds, then)

    def _cancel_timer(self) -> None:
        timer = getattr(self, "_timer", None)
        if timer is not None:
            timer.cancel()
            self._timer = None

    def _head_timed_out(self) -> None:
        self._timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.close()  # no whole request head in time: nothing to answer

    def _body_timed_out(self) -> None:
        self._timer = None
        if self.conn.their_state is not h11.SEND_BODY or self.transport.is_closing():
            return
        if self.flow.read_paused:  # the application is not reading yet (an upload waiting for a slot): not idle
            self._arm(self.body_timeout, self._body_timed_out)
            return
        self.transport.close()  # the body stopped coming: the request is abandoned (the app sees a disconnect)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is h11.SEND_BODY:
            self._arm(self.body_timeout, self._body_timed_out)  # each piece of the body restarts the wait
        elif self.conn.their_state is not h11.IDLE:  # a whole request came
            self._cancel_timer()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self._arm(self.header_timeout, self._head_timed_out)  # kept alive: the next head has as long to come

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timer()
        if self._peer is not None:
            self.by_peer[self._peer] -= 1
            if self.by_peer[self._peer] <= 0:
                del self.by_peer[self._peer]
            self._peer = None
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
