"""What the Azure SDK adapters share: one keep-alive aiohttp session per store, a cached client per table,
queue or container, and the account name, key and endpoint that sign SAS URLs."""

from __future__ import annotations

import datetime as dt
from typing import Any

import aiohttp
from azure.core.pipeline.transport import AioHttpTransport

from shared.connections import Service, StorageConnection
from shared.errors import InternalServerError

# Signed URLs start a little in the past: Azure refuses a SAS whose start is ahead of its own clock.
SAS_CLOCK_SKEW = dt.timedelta(minutes=15)


def shared_transport() -> tuple[aiohttp.ClientSession, AioHttpTransport]:
    # One keep-alive session for every client; trust_env=False: the default re-reads proxy settings
    # from the environment on every request, which measurably costs CPU (DESIGN.md).
    session = aiohttp.ClientSession(trust_env=False, connector=aiohttp.TCPConnector(limit=200))
    return session, AioHttpTransport(session=session, session_owner=False)


def as_connection(connection: str | StorageConnection) -> StorageConnection:
    return StorageConnection(connection_string=connection) if isinstance(connection, str) else connection


class Clients:
    """One service client per store, a cached client per table or queue, one shared keep-alive session.
    Created on first use, inside the running event loop (aiohttp sessions belong to a loop)."""

    def __init__(self, connection: StorageConnection, service: Service, service_type: Any, child: str) -> None:
        self._connection, self._kind = connection, service
        self._service_type, self._child = service_type, child
        self._service: Any = None
        self._clients: dict[str, Any] = {}
        self._session: aiohttp.ClientSession | None = None

    def get(self, name: str) -> Any:
        client = self._clients.get(name)
        if client is None:
            if self._service is None:
                self._session, transport = shared_transport()
                self._service = self._connection.service_client(self._service_type, self._kind, transport=transport)
            client = self._clients[name] = getattr(self._service, self._child)(name)
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
