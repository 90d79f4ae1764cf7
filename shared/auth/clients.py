"""Clients: the root client from settings, and clients kept in the `Clients` table.

Access tokens are never stored. A client's token is derived as HMAC-SHA256(QUEUE_TOKEN_SECRET, clientId and a
random nonce kept in its row); resetting a client draws a new nonce. Someone who reads the table learns no
token, and Hawk can still check requests (it needs the token itself, so a one-way hash would not do).

What a process read is trusted for `cache_seconds`, in two bounded maps: clients found (KNOWN_CLIENTS entries,
KNOWN_CLIENTS_BYTES) and clientIds not found (UNKNOWN_CLIENTS, so that requests naming made-up clients cannot
push real ones out). Only a clientId that matches Taskcluster's pattern is looked up or remembered.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import hmac
import re
import secrets
import time
from dataclasses import dataclass, field

from shared import errors, timeutil
from shared.auth.roles import MAX_DESCRIPTION, stored_scopes
from shared.bounded import Bounded, text_weight
from shared.scopes import problems_of
from shared.storage.base import Entity, TableStore, pack_json, query_all
from shared.storage.keys import MAX_KEY_UNITS, decode_key, encode_key, fitting_key, key_units

CLIENTS_TABLE = "Clients"
CLIENT_ROW = "client"
CLIENT_ID_PATTERN = re.compile(r"[A-Za-z0-9!@/:.+|_-]{1,256}")  # Taskcluster's clientId pattern (fullmatch)
KNOWN_CLIENTS = 10_000  # clients a process remembers having read
KNOWN_CLIENTS_BYTES = 16 * 1024 * 1024  # ... and their bytes, about
UNKNOWN_CLIENTS = 1_000  # clientIds a process remembers not finding


@dataclass(frozen=True)
class Client:
    client_id: str
    access_token: str = field(repr=False)
    scopes: tuple[str, ...]
    expires: dt.datetime | None = None
    disabled: bool = False
    description: str = ""
    created: dt.datetime | None = None
    last_modified: dt.datetime | None = None
    last_rotated: dt.datetime | None = None

    def usable(self, now: dt.datetime) -> str | None:
        """Why the client cannot authenticate now, or None."""
        if self.disabled:
            return f"client `{self.client_id}` is disabled"
        if self.expires is not None and self.expires <= now:
            return f"client `{self.client_id}` expired at {timeutil.iso(self.expires)}"
        return None


class ClientExists(errors.RequestConflict):
    """Client `{clientId}` already exists"""


class ClientNotFound(errors.ResourceNotFound):
    """Client `{clientId}` not found"""


def _key(client_id: str) -> str | None:
    """The client's PartitionKey; None when it would be too long for a key (no client is stored under it)."""
    key = encode_key(client_id)
    return key if key_units(key) <= MAX_KEY_UNITS else None


class ClientStore:
    def __init__(
        self,
        tables: TableStore,
        *,
        token_secret: str | None,
        root_client_id: str,
        root_access_token: str,
        cache_seconds: float = 10.0,
    ) -> None:
        self.tables = tables
        # How long a process trusts what it read: a reset, disable or delete takes effect within this.
        self.cache_seconds = cache_seconds
        self._secret = token_secret
        self._root = Client(root_client_id, root_access_token, ("*",))
        self._known: Bounded[str, tuple[float, Client]] = Bounded(
            KNOWN_CLIENTS,
            max_bytes=KNOWN_CLIENTS_BYTES,
            weigh=lambda key, value: text_weight(key, value[1].scopes, value[1].description) + 200,
        )
        self._unknown: Bounded[str, float] = Bounded(UNKNOWN_CLIENTS, weigh=lambda key, _: text_weight(key))
        self._ready = False

    def _derive(self, client_id: str, nonce: str) -> str:
        if not self._secret:
            raise errors.SettingsError(problems="QUEUE_TOKEN_SECRET is needed for clients other than root")
        mac = hmac.new(self._secret.encode(), f"{client_id}\n{nonce}".encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac).decode().rstrip("=")

    async def _ensure(self) -> None:
        if not self._ready:
            await self.tables.ensure_tables([CLIENTS_TABLE])
            self._ready = True

    def _from_entity(self, entity: Entity) -> Client:
        data = entity.data
        expires = timeutil.parse(data["expires"]) if data.get("expires") else None
        client_id = decode_key(entity.partition_key)

        def when(key: str) -> dt.datetime | None:
            return timeutil.parse(data[key]) if data.get(key) else None

        return Client(
            client_id,
            self._derive(client_id, data["nonce"]),
            stored_scopes(data),
            expires,
            bool(data.get("disabled")),
            data.get("description", ""),
            when("created"),
            when("lastModified") or when("created"),
            when("lastRotated") or when("created"),
        )

    def _forget(self, client_id: str) -> None:
        self._known.pop(client_id)
        self._unknown.pop(client_id)

    async def get(self, client_id: str) -> Client | None:
        """The client (None if there is none, or `client_id` is not a valid clientId), as read at most
        `cache_seconds` ago."""
        if client_id == self._root.client_id:
            return self._root
        if not self._secret or not CLIENT_ID_PATTERN.fullmatch(client_id):
            return None
        now = time.monotonic()
        known = self._known.get(client_id)
        if known is not None and known[0] > now:
            return known[1]
        missing = self._unknown.get(client_id)
        if missing is not None and missing > now:
            return None
        key = _key(client_id)
        if key is None:  # no stored client has such a key
            return None
        await self._ensure()
        entity = await self.tables.get(CLIENTS_TABLE, key, CLIENT_ROW)
        self._forget(client_id)
        if entity is None:
            self._unknown.put(client_id, now + self.cache_seconds)
            return None
        client = self._from_entity(entity)
        self._known.put(client_id, (now + self.cache_seconds, client))
        return client

    async def must_get(self, client_id: str) -> Client:
        """The client as stored now (not from the cache); 404 ClientNotFound."""
        self._forget(client_id)
        client = await self.get(client_id)
        if client is None:
            raise ClientNotFound(clientId=client_id)
        return client

    @staticmethod
    def _checked(client_id: str, scopes: list[str], description: str) -> list[str]:
        """The scopes, sorted and unique, if a client may hold them with this description; 400 if not."""
        problems = problems_of(scopes, "scopes")
        if len(description) > MAX_DESCRIPTION:
            problems.append(f"the description holds {len(description)} characters: at most {MAX_DESCRIPTION}")
        if problems:
            raise errors.InputError(
                "Client `{clientId}` cannot be stored: {problems}", clientId=client_id, problems="; ".join(problems)
            )
        return sorted(set(scopes))

    async def create(
        self, client_id: str, scopes: list[str], *, expires: dt.datetime | None = None, description: str = ""
    ) -> Client:
        if not CLIENT_ID_PATTERN.fullmatch(client_id) or client_id == self._root.client_id:
            raise errors.InputError("Invalid clientId `{clientId}`", clientId=client_id[:300])
        fitting_key(encode_key(client_id), f"clientId `{client_id[:80]}`")
        if not self._secret:
            raise errors.SettingsError(problems="QUEUE_TOKEN_SECRET is needed for clients other than root")
        kept = self._checked(client_id, scopes, description)
        await self._ensure()
        nonce = secrets.token_urlsafe(24)
        now = timeutil.iso(timeutil.now())
        data = {
            "nonce": nonce,
            **pack_json("scopes", kept),
            "description": description,
            "expires": timeutil.iso(expires) if expires else "",
            "disabled": False,
            "created": now,
            "lastModified": now,
            "lastRotated": now,
        }
        stored = await self.tables.insert(CLIENTS_TABLE, Entity(encode_key(client_id), CLIENT_ROW, data))
        if stored is None:
            raise ClientExists(clientId=client_id)
        self._forget(client_id)
        return self._from_entity(stored)

    async def _modify(self, client_id: str, **changes: object) -> Client:
        key = _key(client_id)
        if key is None:
            raise ClientNotFound(clientId=client_id)
        await self._ensure()
        while True:
            entity = await self.tables.get(CLIENTS_TABLE, key, CLIENT_ROW)
            if entity is None:
                raise ClientNotFound(clientId=client_id)
            changes.setdefault("lastModified", timeutil.iso(timeutil.now()))
            data = {**entity.data, **changes}
            if "scopesChunks" in changes:  # packed anew: the old row's own form goes
                data = {k: v for k, v in data.items() if k in changes or not k.startswith("scopes")}
            updated = Entity(entity.partition_key, CLIENT_ROW, data, entity.etag)
            stored = await self.tables.replace(CLIENTS_TABLE, updated)
            if stored is not None:
                self._forget(client_id)
                return self._from_entity(stored)

    async def reset(self, client_id: str) -> Client:
        """A new access token; the old one stops working (within `cache_seconds` in other processes)."""
        return await self._modify(client_id, nonce=secrets.token_urlsafe(24), lastRotated=timeutil.iso(timeutil.now()))

    async def update(
        self, client_id: str, *, scopes: list[str], description: str, expires: dt.datetime | None
    ) -> Client:
        """New scopes, description and expiry (Taskcluster's updateClient)."""
        if client_id == self._root.client_id:
            raise errors.InputError(
                "The root client `{clientId}` is set by QUEUE_ROOT_CLIENT_ID and cannot be changed here",
                clientId=client_id,
            )
        kept = self._checked(client_id, scopes, description)
        return await self._modify(
            client_id,
            **pack_json("scopes", kept),
            description=description,
            expires=timeutil.iso(expires) if expires else "",
        )

    async def set_disabled(self, client_id: str, disabled: bool) -> Client:
        return await self._modify(client_id, disabled=disabled)

    async def delete(self, client_id: str) -> bool:
        key = _key(client_id)
        if key is None:
            return False
        await self._ensure()
        self._forget(client_id)
        return await self.tables.delete(CLIENTS_TABLE, key, CLIENT_ROW)

    async def list(self) -> list[Client]:
        await self._ensure()
        found = await query_all(self.tables, CLIENTS_TABLE, "RowKey eq @rk", {"rk": CLIENT_ROW})
        return sorted((self._from_entity(e) for e in found), key=lambda c: c.client_id)
