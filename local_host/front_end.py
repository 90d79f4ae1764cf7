"""Azure's limits on a request before it reaches the Functions app, modelled by the local host, so that a test
shows a too-large or too-slow request answered as Azure answers it.

- **Body size**: the Functions host refuses a body over `FUNCTIONS_REQUEST_BODY_SIZE_LIMIT` (Kestrel's
  `MaxRequestBodySize`): `413` with no body, at once when the declared `Content-Length` is over, else when the
  bytes received pass it (the app then sees the client gone). `QUEUE_HTTP_REQUEST_BODY_LIMIT` here.
- **Time**: the front end gives a request 230 s to be answered ("Regardless of the function app timeout setting,
  230 seconds is the maximum amount of time that an HTTP triggered function can take to respond to a request",
  Microsoft's HTTP trigger reference), then answers `502` itself and drops the connection to the app; the
  function runs on unheard. `QUEUE_HTTP_ANSWER_WITHIN` here.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("local_host")
Message = dict[str, Any]


@dataclass(frozen=True)
class FrontEndLimits:
    body_limit: int
    answer_within: float


class FrontEnd:
    """ASGI middleware: the front end's limits around `app`."""

    def __init__(self, app: Any, limits: FrontEndLimits) -> None:
        self.app, self.limits = app, limits

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.limits.body_limit:
            await _answer(send, 413)
            return
        exchange = _Exchange(receive, send, self.limits.body_limit)
        # A timer rather than a task of its own per request: most answers start long before it.
        timer = asyncio.get_running_loop().call_later(self.limits.answer_within, exchange.too_late, self.limits)
        try:
            await self.app(scope, exchange.receive, exchange.send)
        finally:
            timer.cancel()
            if exchange.cutting is not None:
                await exchange.cutting


@dataclass
class _Exchange:
    """One request between the client and the app: bytes counted, the answer's start seen, and once the front
    end has answered (cut), the app's messages dropped and the client gone to it."""

    _receive: Any
    _send: Any
    body_limit: int
    received: int = 0
    is_cut: bool = False
    started: bool = False
    cutting: asyncio.Future[None] | None = None

    async def receive(self) -> Message:
        if self.is_cut:
            return {"type": "http.disconnect"}
        message: Message = await self._receive()
        if message["type"] == "http.request":
            self.received += len(message.get("body", b""))
            if self.received > self.body_limit:
                await self.cut(413)
                return {"type": "http.disconnect"}
        return message

    async def send(self, message: Message) -> None:
        if self.is_cut:
            return
        if message["type"] == "http.response.start":
            self.started = True
        await self._send(message)

    def too_late(self, limits: FrontEndLimits) -> None:
        """The front end's time is up: unless the answer has started, `502` now, and the app hears no more."""
        if not self.started and not self.is_cut:
            log.warning("no answer within %.0f s: 502, as Azure's front end answers", limits.answer_within)
            self.cutting = asyncio.ensure_future(self.cut(502))

    async def cut(self, status: int) -> None:
        if self.is_cut:
            return
        self.is_cut = True
        if not self.started:
            self.started = True
            await _answer(self._send, status)


async def _answer(send: Any, status: int) -> None:
    headers = [(b"content-length", b"0"), (b"connection", b"close")]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": b""})


def _content_length(scope: dict[str, Any]) -> int | None:
    for key, value in scope["headers"]:
        if key.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
