"""The local host's HTTP protocol: uvicorn's h11 protocol with Taskcluster's JSON errors and three bounds a server
facing anyone needs (docs/security.md), which uvicorn leaves open:

- a connection limit (`QUEUE_HTTP_MAX_CONNECTIONS`): a connection beyond it is answered 503 with `Retry-After`
  and closed at once, before it can hold anything;
- a header-read timeout (`QUEUE_HTTP_HEADER_TIMEOUT`): a connection must send a whole request head within this
  many seconds of opening (or of its previous answer, when kept alive), however slowly the bytes come, or it is
  closed (slow-loris connections otherwise stay open for ever);
- the request head's size (shared/api/framework.py `MAX_HEAD_BYTES`): h11 refuses a head that arrives in pieces
  past it, the application one that arrived whole.
"""

from __future__ import annotations

import asyncio
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


def _json(problem: errors.QueueError) -> bytes:
    return strict_json.dumps(error_body(problem, method="unknown", params={}, payload=None))


class BoundedH11(H11Protocol):
    """uvicorn's h11 protocol, answering in Taskcluster's error format, with a connection limit and a header-read
    timeout (set on the class by `configure` before the server starts)."""

    max_connections: ClassVar[int] = 1000
    header_timeout: ClassVar[float] = 10.0

    @classmethod
    def configure(cls, *, max_connections: int, header_timeout: float) -> type[BoundedH11]:
        return type("ConfiguredBoundedH11", (cls,), {"max_connections": max_connections,
                                                     "header_timeout": header_timeout})

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head_timer: asyncio.TimerHandle | None = None
        if len(self.connections) > self.max_connections:
            problem = TooManyConnections(limit=self.max_connections)
            body = _json(problem)
            transport.write(b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
                            b"retry-after: %d\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%s"
                            % (problem.retry_after, len(body), body))
            transport.close()
            return
        self._arm_head_timer()

    def _arm_head_timer(self) -> None:
        self._cancel_head_timer()
        self._head_timer = self.loop.call_later(self.header_timeout, self._head_timed_out)

    def _cancel_head_timer(self) -> None:
        timer = getattr(self, "_head_timer", None)
        if timer is not None:
            timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.close()  # no whole request head in time: nothing to answer

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:  # a whole request head came
            self._cancel_head_timer()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self._arm_head_timer()  # kept alive: the next head has the same time to come

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        super().connection_lost(exc)

    def send_400_response(self, msg: str) -> None:
        """uvicorn answers a request it cannot parse (malformed, or a head over the limit) with a plain-text 400;
        Taskcluster's clients and tools expect its JSON error format."""
        body = _json(InvalidHttpRequest(problem=msg.rstrip("."), limit=MAX_HEAD_BYTES))
        response = h11.Response(status_code=400, reason=b"Bad Request", headers=[
            (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
            (b"connection", b"close")])
        for event in (response, h11.Data(data=body), h11.EndOfMessage()):
            self.transport.write(self.conn.send(event) or b"")
        self.transport.close()
