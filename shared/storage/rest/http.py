"""The lean storage client's HTTP: the account's endpoint and credentials (Shared Key signing, or a managed
identity's bearer token), one keep-alive aiohttp session per store with a span per request, retries with backoff
and timeouts (shared/storage/retry.py), and the dates requests and responses carry. Used by the table and queue
stores of this package."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as dt
import email.utils
import hashlib
import hmac
import time
import urllib.parse
from typing import Any, NamedTuple

import aiohttp
from multidict import CIMultiDict
from opentelemetry import trace
from yarl import URL

from shared.connections import STORAGE_SCOPE, Service, StorageConnection, async_credential
from shared.storage.retry import (
    USER_AGENT,
    RetryPolicy,
    Verdict,
    error_verdict,
    status_verdict,
    with_retries,
    without_silent_resend,
)

CONDITION_FAILED = (404, 409, 412)  # absent, exists, changed: answers, not errors


class StorageError(Exception):
    """A storage request failed in a way the caller does not expect as an answer."""

    def __init__(self, method: str, url: str, status: int, code: str | None, body: str) -> None:
        super().__init__(f"{method} {url} -> {status} {code or ''}: {body[:300]}")
        self.status, self.code = status, code


def parse_connection_string(text: str) -> dict[str, str]:
    parts = (item.split("=", 1) for item in text.split(";") if "=" in item)
    return {key.strip(): value.strip() for key, value in parts}


class Account:
    """Endpoint and credentials of one service of an account; signs requests."""

    def __init__(self, connection: StorageConnection, service: Service) -> None:
        self.key: bytes | None = None
        self._credential: Any = None
        self._token: tuple[str, float] | None = None
        self._token_lock = asyncio.Lock()
        if connection.connection_string is not None:
            values = parse_connection_string(connection.connection_string)
            if "AccountName" not in values:
                raise ValueError(
                    "the REST client needs a connection string with AccountName and AccountKey; "
                    "use QUEUE_STORAGE_CLIENT=sdk for other forms"
                )
            self.account = values["AccountName"]
            endpoint = values.get(f"{service.capitalize()}Endpoint")
            if not endpoint:
                protocol = values.get("DefaultEndpointsProtocol", "https")
                suffix = values.get("EndpointSuffix", "core.windows.net")
                endpoint = f"{protocol}://{self.account}.{service}.{suffix}"
            self.endpoint = endpoint.rstrip("/")
            if values.get("AccountKey"):
                self.key = base64.b64decode(values["AccountKey"])
            elif values.get("SharedAccessSignature"):
                raise ValueError(
                    "a connection string with a SharedAccessSignature is not supported by the REST "
                    "client; use QUEUE_STORAGE_CLIENT=sdk"
                )
        else:
            self.endpoint = connection.endpoint(service)
            self.account = connection.account_name(service)
            self._credential = async_credential(connection.client_id)
        self.base_path = urllib.parse.urlsplit(self.endpoint).path.rstrip("/")  # "/devstoreaccount1" on Azurite

    def url(self, full_path: str, query: dict[str, str] | None) -> str:
        """The request URL of an already encoded path (`base_path` included), with its query."""
        url = self.endpoint[: len(self.endpoint) - len(self.base_path)] + full_path
        return f"{url}?{urllib.parse.urlencode(query, quote_via=urllib.parse.quote)}" if query else url

    def sign(self, string_to_sign: str) -> str:
        assert self.key is not None
        return base64.b64encode(hmac.new(self.key, string_to_sign.encode(), hashlib.sha256).digest()).decode()

    async def bearer(self) -> str:
        now = time.time()
        if self._token is None or self._token[1] - 300 < now:
            async with self._token_lock:
                if self._token is None or self._token[1] - 300 < now:
                    token = await self._credential.get_token(STORAGE_SCOPE)
                    self._token = (token.token, float(token.expires_on))
        return f"Bearer {self._token[0]}"


KEEPALIVE_SECONDS = 4.0


class Answer(NamedTuple):
    status: int
    headers: CIMultiDict[str]
    body: bytes
    ambiguous: bool = False  # an attempt before this answer may have been applied (its answer was lost)


def _judge(answer: Answer | None, failure: BaseException | None) -> Verdict:
    if failure is None:
        assert answer is not None
        return status_verdict(answer.status, answer.headers.get("x-ms-error-code"), answer.headers.get("Retry-After"))
    if isinstance(failure, aiohttp.ClientConnectorError):
        return error_verdict(failure, sent=False)  # no connection: the request never left
    if isinstance(failure, aiohttp.ClientError | asyncio.TimeoutError | OSError):
        return error_verdict(failure)
    return Verdict(retry=False)


class Http:
    """One aiohttp session per store, made inside the running event loop on first use; a client span per request
    (a dependency in Application Insights) when `traced` and telemetry is configured (a no-op otherwise). Every
    call is retried by `policy`, each attempt within its timeouts, with the same `x-ms-client-request-id`."""

    def __init__(self, traced: bool = True, policy: RetryPolicy | None = None) -> None:
        self._session: aiohttp.ClientSession | None = None
        self.tracer = trace.get_tracer("queue.storage") if traced else None
        self.policy = policy or RetryPolicy()
        self._timeout = aiohttp.ClientTimeout(total=self.policy.timeout, sock_connect=self.policy.connect_timeout)

    async def send(
        self,
        method: str,
        url: str,
        *,
        name: str,
        data: bytes | str | None,
        headers: dict[str, str],
        operation: str,
        request_id: str | None = None,
    ) -> Answer:
        """`headers` carry `x-ms-client-request-id` when they are signed with it (`request_id`, then)."""
        target = URL(url, encoded=True)

        async def attempt(request_id: str) -> Answer:
            sent = {**headers, "x-ms-client-request-id": request_id, "User-Agent": USER_AGENT}
            # Without a configured tracer provider a span is a no-op that still costs ~5 % of a request's CPU.
            if self.tracer is None or isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
                async with self.session.request(
                    method, target, data=data, headers=sent, timeout=self._timeout
                ) as response:
                    return Answer(response.status, CIMultiDict(response.headers), await response.read())
            with self.tracer.start_as_current_span(
                f"{method} {name}",
                kind=trace.SpanKind.CLIENT,
                attributes={
                    "http.method": method,
                    "http.url": url.split("?", 1)[0],
                    "net.peer.name": target.host or "",
                    "net.peer.port": target.port or 0,
                },
            ) as span:
                async with self.session.request(
                    method, target, data=data, headers=sent, timeout=self._timeout
                ) as response:
                    span.set_attribute("http.status_code", response.status)
                    return Answer(response.status, CIMultiDict(response.headers), await response.read())

        done = await with_retries(self.policy, operation, attempt, _judge, request_id)
        return done.value._replace(ambiguous=done.ambiguous) if done.ambiguous else done.value

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            # trust_env=False: reading proxy settings on every request costs CPU (DESIGN.md). Idle connections
            # are dropped after 4 s, before Azurite's server closes them (5 s): a request sent on a connection
            # the server is closing fails with "connection reset" (seen under the benchmark).
            connector = aiohttp.TCPConnector(limit=200, keepalive_timeout=KEEPALIVE_SECONDS)
            self._session = without_silent_resend(
                aiohttp.ClientSession(
                    trust_env=False, connector=connector, skip_auto_headers=("User-Agent", "Content-Type")
                )
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


_date_second, _date_text = 0, ""  # the HTTP date of the current second: formatted once a second, not per request


def http_date() -> str:
    global _date_second, _date_text
    second = int(time.time())
    if second != _date_second:
        _date_second, _date_text = second, email.utils.formatdate(second, usegmt=True)
    return _date_text


_MONTHS = {
    name: number
    for number, name in enumerate(
        ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), start=1
    )
}


def rfc1123(text: str | None) -> dt.datetime | None:
    """An HTTP date as storage writes it (`Mon, 23 Nov 2026 02:00:08 GMT`), by position: email.utils' parser
    was 2 % of the host's CPU in a fan-out (three dates per put). Any other form goes to that parser."""
    if not text:
        return None
    if len(text) == 29 and text[3:5] == ", " and text[25:] == " GMT" and text[8:11] in _MONTHS:
        with contextlib.suppress(ValueError):
            return dt.datetime(
                int(text[12:16]),
                _MONTHS[text[8:11]],
                int(text[5:7]),
                int(text[17:19]),
                int(text[20:22]),
                int(text[23:25]),
                tzinfo=dt.UTC,
            )
    return email.utils.parsedate_to_datetime(text)
