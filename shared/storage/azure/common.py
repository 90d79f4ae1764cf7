"""What the Azure SDK adapters share: one keep-alive aiohttp session per store, a cached client per table,
queue or container, the account name, key and endpoint that sign SAS URLs, and the retried call (the SDK's own
retries are off for tables and queues: shared/storage/retry.py retries them, as it does the REST adapter's)."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
from azure.core.exceptions import HttpResponseError, ServiceRequestError, ServiceResponseError
from azure.core.pipeline.transport import AioHttpTransport

from shared.bounded import Bounded
from shared.connections import Service, StorageConnection
from shared.errors import InternalServerError
from shared.storage.retry import (
    USER_AGENT,
    RetryPolicy,
    Verdict,
    error_verdict,
    status_verdict,
    with_retries,
    without_silent_resend,
)

# Signed URLs start a little in the past: Azure refuses a SAS whose start is ahead of its own clock.
SAS_CLOCK_SKEW = dt.timedelta(minutes=15)
CLIENTS_KEPT = 1_000  # SDK clients kept per service (one per table, queue or container)


def shared_transport(policy: RetryPolicy) -> tuple[aiohttp.ClientSession, AioHttpTransport]:
    # One keep-alive session for every client; trust_env=False: the default re-reads proxy settings
    # from the environment on every request, which measurably costs CPU (DESIGN.md).
    session = without_silent_resend(aiohttp.ClientSession(trust_env=False, connector=aiohttp.TCPConnector(limit=200)))
    return session, AioHttpTransport(
        session=session, session_owner=False, connection_timeout=policy.connect_timeout, read_timeout=policy.timeout
    )


REFUSALS = (404, 409, 412)  # absent, exists, changed: answers of a conditional call, not failures


@dataclass(frozen=True)
class Refused:
    """A call answered 404, 409 or 412 (or an error code a caller names): a value, not an exception."""

    status: int
    code: str | None


def _judge(result: Any, failure: BaseException | None) -> Verdict:
    if failure is None:
        return Verdict(retry=False)
    if isinstance(failure, HttpResponseError) and failure.status_code is not None:
        headers = getattr(failure.response, "headers", None) or {}
        code = getattr(failure, "error_code", None)  # an enum of the SDK's (TableErrorCode.SERVER_BUSY), or text
        return status_verdict(failure.status_code, getattr(code, "value", code), headers.get("Retry-After"))
    if isinstance(failure, ServiceRequestError):
        # azure-core wraps every aiohttp client error so, a connection dropped mid-request too: only a failed
        # connect says the request never left.
        cause = getattr(failure, "inner_exception", None) or failure.__cause__
        return error_verdict(failure, sent=not isinstance(cause, aiohttp.ClientConnectorError))
    if isinstance(failure, ServiceResponseError | aiohttp.ClientError | asyncio.TimeoutError | OSError):
        return error_verdict(failure)
    return Verdict(retry=False)


def with_keywords(method: Callable[..., Awaitable[Any]]) -> Callable[[dict[str, Any]], Awaitable[Any]]:
    """`method` called with the options as keyword arguments (what `retried` calls)."""
    return lambda options: method(**options)


async def retried(
    policy: RetryPolicy,
    operation: str,
    id_option: str,
    call: Callable[[dict[str, Any]], Awaitable[Any]],
    *,
    refusals: tuple[int, ...] = REFUSALS,
    refusal: Callable[[HttpResponseError], bool] | None = None,
) -> tuple[Any, bool]:
    """`call(options)` (the options carry the request id) with retries; its result, or `Refused` for an answer
    in `refusals` (or one `refusal` accepts), and whether an earlier attempt may have been applied."""

    async def attempt(request_id: str) -> Any:
        try:
            return await call({id_option: request_id})
        except HttpResponseError as exc:
            if exc.status_code in refusals or (refusal is not None and refusal(exc)):
                return Refused(exc.status_code or 0, getattr(exc, "error_code", None))
            raise

    done = await with_retries(policy, operation, attempt, _judge)
    return done.value, done.ambiguous


def as_connection(connection: str | StorageConnection) -> StorageConnection:
    return StorageConnection(connection_string=connection) if isinstance(connection, str) else connection


class Clients:
    """One service client per store, a cached client per table or queue, one shared keep-alive session.
    Created on first use, inside the running event loop (aiohttp sessions belong to a loop)."""

    def __init__(
        self,
        connection: StorageConnection,
        service: Service,
        service_type: Any,
        child: str,
        policy: RetryPolicy,
        **options: Any,
    ) -> None:
        self._connection, self._kind = connection, service
        self._service_type, self._child = service_type, child
        self._policy, self._options = policy, options
        self._service: Any = None
        # A client per table, queue or container, at most CLIENTS_KEPT (pending queues are per task queue): they
        # share the service client's transport, so one forgotten needs no closing.
        self._clients: Bounded[str, Any] = Bounded(CLIENTS_KEPT)
        self._session: aiohttp.ClientSession | None = None

    def get(self, name: str) -> Any:
        client = self._clients.get(name)
        if client is None:
            if self._service is None:
                self._session, transport = shared_transport(self._policy)
                self._service = self._connection.service_client(
                    self._service_type, self._kind, transport=transport, user_agent=USER_AGENT, **self._options
                )
            client = getattr(self._service, self._child)(name)
            self._clients.put(name, client)
        return client

    @property
    def service(self) -> Any:
        if self._service is None:
            self.get("$probe")  # creates the service client (a child client costs nothing until used)
        return self._service

    async def close(self) -> None:
        for client in self._clients.values():
            await client.close()
        if self._service is not None:
            await self._service.close()
        if self._session is not None:
            await self._session.close()
        self._clients.clear()
        self._service = self._session = None


class SigningKeyMissing(InternalServerError):
    """{what} cannot be signed: {reason}"""


class Signer:
    """Account name, key and endpoint, to sign SAS URLs: parsed from a connection string (by a sync client, no
    I/O), or taken from an identity-based connection (whose key, if any, is configured apart)."""

    def __init__(self, connection: StorageConnection, service: Service, sync_client_type: Any) -> None:
        if connection.connection_string is None:
            self.account, self.key = connection.account_name(service), connection.account_key
            self.endpoint = connection.endpoint(service)
            return
        parsed = sync_client_type.from_connection_string(connection.connection_string)
        self.account = parsed.account_name or ""
        self.key = getattr(parsed.credential, "account_key", None)
        self.endpoint = parsed.url.split("?", 1)[0].rstrip("/")
        parsed.close()

    def require_key(self, what: str, reason: str) -> str:
        if not self.key:
            raise SigningKeyMissing(what=what, reason=reason)
        return str(self.key)


class DelegationKeys:
    """User delegation keys that the app's identity asks of one storage service, to sign SAS without an account
    key: each valid for LIFETIME (Azure allows up to 7 days) and renewed RENEW before it ends or before a SAS
    that would outlive it, so no signed URL outlives its key. Callers that need a new key at once share one
    request."""

    LIFETIME = dt.timedelta(days=6)
    RENEW = dt.timedelta(days=1)

    def __init__(
        self,
        fetch: Callable[[dt.datetime, dt.datetime], Awaitable[Any]],
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ) -> None:
        self._fetch, self._clock = fetch, clock
        self._key: Any = None
        self._ends = dt.datetime.min.replace(tzinfo=dt.UTC)
        self._asking: asyncio.Future[Any] | None = None

    async def key(self, needed_until: dt.datetime) -> Any:
        """A key valid beyond `needed_until` (the expiry of the SAS it will sign)."""
        now = self._clock()
        if self._key is not None and self._ends - self.RENEW >= max(now, needed_until):
            return self._key
        if self._asking is None:
            self._asking = asyncio.ensure_future(self._renew(now))
        asking = self._asking
        try:
            return await asyncio.shield(asking)
        finally:
            if asking.done() and self._asking is asking:
                self._asking = None

    async def _renew(self, now: dt.datetime) -> Any:
        ends = now + self.LIFETIME
        key = await self._fetch(now - SAS_CLOCK_SKEW, ends)
        self._key, self._ends = key, ends
        return key
