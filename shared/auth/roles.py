"""Roles: kept in the `Roles` table, read whole into each process and trusted for `cache_seconds`, and used to
expand the scopes of every caller (shared/auth/expansion.py) at authentication.

Expansions are remembered per set of `assume:` scopes, at most MAX_EXPANSIONS of them, and forgotten whenever
the roles are read again. A role write is checked against all the other roles as they are stored: it may not
close a cycle, and `<..>` may only stand once in a scope of a role whose id ends in `*`.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from shared import errors, timeutil
from shared.auth.expansion import PARAM, assumed, expand, find_cycle, normalize
from shared.storage.base import Entity, TableStore, decode_key, encode_key, query_all

ROLES_TABLE = "Roles"
ROLE_ROW = "role"
ROLE_ID_PATTERN = re.compile(r"[\x20-\x7e]{1,500}")  # Taskcluster's roleId: printable ASCII
MAX_EXPANSIONS = 10_000


@dataclass(frozen=True)
class Role:
    role_id: str
    scopes: tuple[str, ...]
    description: str
    created: dt.datetime
    last_modified: dt.datetime
    etag: str | None = None


class RoleNotFound(errors.ResourceNotFound):
    """Role `{roleId}` not found"""


class RoleExists(errors.RequestConflict):
    """Role `{roleId}` already exists with other scopes or description"""


class InvalidRole(errors.InputError):
    """Role `{roleId}` cannot be stored: {problem}"""


class RoleStore:
    def __init__(self, tables: TableStore, *, cache_seconds: float = 10.0) -> None:
        self.tables = tables
        self.cache_seconds = cache_seconds
        self._roles: dict[str, tuple[str, ...]] | None = None
        self._read_at = 0.0
        self._expansions: OrderedDict[tuple[str, ...], tuple[str, ...]] = OrderedDict()
        self._ready = False

    async def _ensure(self) -> None:
        if not self._ready:
            await self.tables.ensure_tables([ROLES_TABLE])
            self._ready = True

    @staticmethod
    def _from_entity(entity: Entity) -> Role:
        data = entity.data
        return Role(decode_key(entity.partition_key), tuple(json.loads(data["scopes"])), data.get("description", ""),
                    timeutil.parse(data["created"]), timeutil.parse(data["lastModified"]), entity.etag)

    async def list(self) -> list[Role]:
        await self._ensure()
        found = await query_all(self.tables, ROLES_TABLE, "RowKey eq @rk", {"rk": ROLE_ROW})
        return sorted((self._from_entity(e) for e in found), key=lambda r: r.role_id)

    async def get(self, role_id: str) -> Role:
        await self._ensure()
        entity = await self.tables.get(ROLES_TABLE, encode_key(role_id), ROLE_ROW)
        if entity is None:
            raise RoleNotFound(roleId=role_id)
        return self._from_entity(entity)

    async def _all(self) -> dict[str, tuple[str, ...]]:
        """Every role's scopes, as read at most `cache_seconds` ago."""
        if self._roles is None or time.monotonic() - self._read_at > self.cache_seconds:
            self._roles = {r.role_id: r.scopes for r in await self.list()}
            self._read_at = time.monotonic()
            self._expansions.clear()
        return self._roles

    async def expand(self, scopes: tuple[str, ...]) -> tuple[str, ...]:
        """`scopes` with what their `assume:` scopes give (normalized); unchanged when none assumes anything."""
        assuming = tuple(sorted(s for s in scopes if assumed(s) is not None))
        if not assuming:
            return normalize(scopes)
        roles = await self._all()
        granted = self._expansions.get(assuming)
        if granted is None:
            granted = expand(assuming, roles)
            self._expansions[assuming] = granted
            if len(self._expansions) > MAX_EXPANSIONS:
                self._expansions.popitem(last=False)
        else:
            self._expansions.move_to_end(assuming)
        return normalize((*scopes, *granted))

    def _forget(self) -> None:
        self._roles = None

    async def _check(self, role_id: str, scopes: Sequence[str]) -> None:
        if not ROLE_ID_PATTERN.fullmatch(role_id):
            raise InvalidRole(roleId=role_id, problem="a roleId is 1 to 500 printable ASCII characters")
        for scope in scopes:
            if PARAM in scope and not role_id.endswith("*"):
                raise InvalidRole(roleId=role_id, problem=f"`{scope}`: only roles whose id ends in `*` may use "
                                  "`<..>`")
            if scope.count(PARAM) > 1 or scope.endswith("*" + PARAM):
                raise InvalidRole(roleId=role_id, problem=f"`{scope}`: `<..>` may stand once, and not right "
                                  "after a `*`")
        stored = {r.role_id: r.scopes for r in await self.list()}
        stored[role_id] = tuple(scopes)
        cycle = find_cycle(stored)
        if cycle is not None:
            raise InvalidRole(roleId=role_id, problem="roles may not assume each other in a cycle: "
                              + " -> ".join(cycle))

    async def create(self, role_id: str, wanted: Sequence[str], description: str) -> Role:
        """A new role; the same request again answers the role as it is (Taskcluster's createRole)."""
        await self._ensure()
        scopes = normalize(wanted)
        await self._check(role_id, scopes)
        now = timeutil.iso(timeutil.now())
        data = {"scopes": json.dumps(scopes), "description": description, "created": now, "lastModified": now}
        stored = await self.tables.insert(ROLES_TABLE, Entity(encode_key(role_id), ROLE_ROW, data))
        self._forget()
        if stored is not None:
            return self._from_entity(stored)
        existing = await self.get(role_id)
        if existing.scopes != scopes or existing.description != description:
            raise RoleExists(roleId=role_id)
        return existing

    async def update(self, role_id: str, wanted: Sequence[str], description: str) -> Role:
        await self._ensure()
        scopes = normalize(wanted)
        await self._check(role_id, scopes)
        while True:
            current = await self.get(role_id)
            data = {"scopes": json.dumps(scopes), "description": description,
                    "created": timeutil.iso(current.created), "lastModified": timeutil.iso(timeutil.now())}
            stored = await self.tables.replace(ROLES_TABLE, Entity(encode_key(role_id), ROLE_ROW, data,
                                                                   current.etag))
            if stored is not None:
                self._forget()
                return self._from_entity(stored)

    async def delete(self, role_id: str) -> None:
        """Deleting a role that does not exist is not an error (Taskcluster's deleteRole)."""
        await self._ensure()
        await self.tables.delete(ROLES_TABLE, encode_key(role_id), ROLE_ROW)
        self._forget()
