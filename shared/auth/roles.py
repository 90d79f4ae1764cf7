"""Roles: kept in the `Roles` table, read whole into each process and trusted for `cache_seconds`, and used to
expand the scopes of every caller (shared/auth/expansion.py) at authentication.

Expanded sets are remembered per set of scopes expanded, in a map bounded in entries and bytes
(`EXPANSIONS_KEPT`, `EXPANSIONS_BYTES`), and forgotten whenever the roles are read again. A role write is checked
against all the other roles as they are stored: its scopes are a bounded set (shared/scopes.py), `<..>` stands at
most once in a scope of a role whose id ends in `*`, it closes no cycle, no role's expansion could exceed
MAX_EXPANDED_SCOPES, and all roles together stay within MAX_ROLES and MAX_ROLES_CHARS (what each process keeps).

A deployment starts with some roles (`RoleSeed`: the `anonymous` role every caller assumes, shared/auth/anonymous.py).
Each is planted once in the deployment's life, before a process first reads the roles: with it a row `seeded` in the
role's partition, written in the same transaction, says it was done, so that a role an operator deleted or changed
stays as they left it, and one they created before stays theirs.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass

from shared import errors, timeutil
from shared.auth.expansion import (
    MAX_EXPANDED_SCOPES,
    PARAM,
    ExpansionTooLarge,
    RoleIndex,
    assumed,
    expansion_steps,
    run_async,
)
from shared.auth.role_graph import check_steps
from shared.bounded import Bounded
from shared.scopes import ScopeSet, normalize, problems_of
from shared.storage.base import Entity, Op, TableStore, pack_json, query_all, unpack_json
from shared.storage.keys import MAX_KEY_UNITS, decode_key, encode_key, key_units

log = logging.getLogger("queue.auth")

ROLES_TABLE = "Roles"
ROLE_ROW = "role"
SEEDED_ROW = "seeded"  # beside a role's row: the role a deployment starts with was planted (never listed as a role)
ROLE_ID_PATTERN = re.compile(r"[\x20-\x7e]{1,500}")  # Taskcluster's roleId: printable ASCII
EXPANSIONS_KEPT = 10_000  # expanded sets remembered per process
EXPANSIONS_BYTES = 32 * 1024 * 1024  # ... and their bytes, about
MAX_ROLES = 10_000  # roles a deployment may hold (each process reads them all)
MAX_ROLES_CHARS = 10_000_000  # characters of all roles' scopes together
MAX_DESCRIPTION = 10_240  # characters of a role's or client's description (the request schemas say so too)


@dataclass(frozen=True)
class Role:
    role_id: str
    scopes: tuple[str, ...]
    description: str
    created: dt.datetime
    last_modified: dt.datetime
    etag: str | None = None


@dataclass(frozen=True)
class RoleSeed:
    """A role a deployment starts with: created once, at its first start, if no role of that id exists."""

    role_id: str
    scopes: tuple[str, ...]
    description: str


class RoleNotFound(errors.ResourceNotFound):
    """Role `{roleId}` not found"""


class RoleExists(errors.RequestConflict):
    """Role `{roleId}` already exists with other scopes or description"""


class InvalidRole(errors.InputError):
    """Role `{roleId}` cannot be stored: {problem}"""


def _key(role_id: str) -> str | None:
    """The role's PartitionKey; None when it would be too long for a key."""
    key = encode_key(role_id)
    return key if key_units(key) <= MAX_KEY_UNITS else None


def _check_form(role_id: str, wanted: Sequence[str], description: str) -> None:
    """InvalidRole unless the id, the scopes and the description have their forms and bounds."""
    if not ROLE_ID_PATTERN.fullmatch(role_id):
        raise InvalidRole(roleId=role_id[:600], problem="a roleId is 1 to 500 printable ASCII characters")
    if _key(role_id) is None:
        raise InvalidRole(
            roleId=role_id,
            problem=f"its key, with `/ \\ # ? %` escaped as three characters each, would pass {MAX_KEY_UNITS}",
        )
    problems = problems_of(wanted, "scopes")
    if len(description) > MAX_DESCRIPTION:
        problems.append(f"the description holds {len(description)} characters: at most {MAX_DESCRIPTION}")
    if problems:
        raise InvalidRole(roleId=role_id, problem="; ".join(problems))


def _check_parameters(role_id: str, scopes: Sequence[str]) -> None:
    """InvalidRole unless `<..>` stands only in a `*` role's scopes, once a scope, not right after a `*`."""
    for scope in scopes:
        if PARAM in scope and not role_id.endswith("*"):
            raise InvalidRole(roleId=role_id, problem=f"`{scope}`: only roles whose id ends in `*` may use `<..>`")
        if scope.count(PARAM) > 1 or scope.endswith("*" + PARAM):
            raise InvalidRole(roleId=role_id, problem=f"`{scope}`: `<..>` may stand once, and not right after a `*`")


def stored_scopes(data: dict[str, object]) -> tuple[str, ...]:
    """A client's or role's scopes as stored: packed over properties (`scopes_0`...), or in one `scopes` property
    (rows written before scopes were packed)."""
    if "scopesChunks" in data:
        return tuple(unpack_json("scopes", data))
    return tuple(json.loads(str(data["scopes"])))


def _expansion_weight(key: tuple[str, ...], value: ScopeSet | ExpansionTooLarge) -> int:
    """Bytes of the input's and the expansion's strings (their lengths and ~50 bytes each), and the set's
    tuple, frozenset and index (~50 bytes per scope): at C speed, for sets of 50,000."""
    held = value.scopes if isinstance(value, ScopeSet) else ()
    return sum(map(len, key)) + 50 * len(key) + sum(map(len, held)) + 100 * len(held) + 1000


class RoleStore:
    def __init__(self, tables: TableStore, *, cache_seconds: float = 10.0, seeds: Sequence[RoleSeed] = ()) -> None:
        self.tables = tables
        self.cache_seconds = cache_seconds
        self.seeds = tuple(seeds)
        self._planted = not self.seeds
        self._planting = asyncio.Lock()
        self._index: RoleIndex | None = None
        self._read_at = 0.0
        self._expansions: Bounded[tuple[str, ...], ScopeSet | ExpansionTooLarge] = Bounded(
            EXPANSIONS_KEPT, max_bytes=EXPANSIONS_BYTES, weigh=_expansion_weight
        )
        self._ready = False

    async def _ensure(self) -> None:
        """The table, and the seeds planted: before anything reads or writes a role (a delete before the first
        read would otherwise be undone by the planting that follows)."""
        if not self._ready:
            await self.tables.ensure_tables([ROLES_TABLE])
            self._ready = True
        if not self._planted:
            await self._plant()

    @staticmethod
    def _from_entity(entity: Entity) -> Role:
        data = entity.data
        return Role(
            decode_key(entity.partition_key),
            stored_scopes(data),
            data.get("description", ""),
            timeutil.parse(data["created"]),
            timeutil.parse(data["lastModified"]),
            entity.etag,
        )

    async def _stored(self) -> list[Role]:
        found = await query_all(self.tables, ROLES_TABLE, "RowKey eq @rk", {"rk": ROLE_ROW})
        return sorted((self._from_entity(e) for e in found), key=lambda r: r.role_id)

    async def list(self) -> list[Role]:
        await self._ensure()
        return await self._stored()

    async def get(self, role_id: str) -> Role:
        key = _key(role_id)
        if key is None:  # no role is stored under a key that long
            raise RoleNotFound(roleId=role_id[:600])
        await self._ensure()
        entity = await self.tables.get(ROLES_TABLE, key, ROLE_ROW)
        if entity is None:
            raise RoleNotFound(roleId=role_id)
        return self._from_entity(entity)

    async def _all(self) -> RoleIndex:
        """Every role's scopes, indexed, as read at most `cache_seconds` ago."""
        if self._index is None or time.monotonic() - self._read_at > self.cache_seconds:
            self._index = RoleIndex({r.role_id: r.scopes for r in await self.list()})
            self._read_at = time.monotonic()
            self._expansions.clear()
        return self._index

    async def expand(self, scopes: tuple[str, ...]) -> ScopeSet:
        """`scopes` with what their `assume:` scopes give, normalized; ExpansionTooLarge (400) beyond the bounds
        of shared/auth/expansion.py. Remembered per `scopes` until the roles are read again."""
        if any(assumed(s) is not None for s in scopes):
            index = await self._all()
        else:
            index = None
        found = self._expansions.get(scopes)
        if found is None:
            try:
                if index is None:
                    found = ScopeSet(scopes)
                else:
                    found = await run_async(ScopeSet.steps(await run_async(expansion_steps(scopes, index))))
            except ExpansionTooLarge as exc:
                found = exc  # remembered too: another request with these scopes is refused without the work
            self._expansions.put(scopes, found)
        if isinstance(found, ExpansionTooLarge):
            raise found
        return found

    def _forget(self) -> None:
        self._index = None

    async def _plant(self) -> None:
        """The seeds not planted yet, each with its `seeded` row in one transaction (one read a seed, once a
        process). A seed the stored roles refuse (a cycle through it) is left unplanted and logged: its role is
        then absent, which grants nothing."""
        async with self._planting:
            if self._planted:
                return
            for seed in self.seeds:
                await self._plant_one(seed)
            self._planted = True

    async def _plant_one(self, seed: RoleSeed) -> None:
        key = encode_key(seed.role_id)
        if await self.tables.get(ROLES_TABLE, key, SEEDED_ROW) is not None:
            return
        try:
            scopes = await self._check(seed.role_id, seed.scopes, seed.description)
        except InvalidRole as exc:
            log.error("the role a deployment starts with cannot be created: %s", exc.message)
            return
        now = timeutil.iso(timeutil.now())
        role = Entity(key, ROLE_ROW, self._data(scopes, seed.description, now, now))
        marker = Entity(key, SEEDED_ROW, {"planted": now})
        if await self.tables.transact(ROLES_TABLE, [Op("insert", role), Op("insert", marker)]):
            log.info("role %s created with the %d scopes a deployment starts with", seed.role_id, len(scopes))
            self._forget()
        else:  # the role was there already (an operator's, kept as it is), or another process planted both
            await self.tables.insert(ROLES_TABLE, marker)

    async def _check(self, role_id: str, wanted: Sequence[str], description: str) -> tuple[str, ...]:
        """The role's scopes, normalized, if the role may be stored with them; InvalidRole (400) if not."""
        _check_form(role_id, wanted, description)
        scopes = normalize(wanted)
        _check_parameters(role_id, scopes)
        stored = {r.role_id: r.scopes for r in await self._stored()}
        stored[role_id] = scopes
        if len(stored) > MAX_ROLES:
            raise InvalidRole(roleId=role_id, problem=f"a deployment holds at most {MAX_ROLES} roles")
        chars = sum(len(s) for held in stored.values() for s in held)
        if chars > MAX_ROLES_CHARS:
            raise InvalidRole(
                roleId=role_id,
                problem=f"the roles would hold {chars} characters of scopes in all: at most {MAX_ROLES_CHARS}",
            )
        try:
            found = await run_async(check_steps(RoleIndex(stored)))
        except ExpansionTooLarge as exc:
            raise InvalidRole(roleId=role_id, problem="checking the roles with it " + exc.message) from None
        if found.cycle is not None:
            raise InvalidRole(
                roleId=role_id, problem="roles may not assume each other in a cycle: " + " -> ".join(found.cycle)
            )
        too_large = sorted(r for r, bound in found.bounds.items() if bound > MAX_EXPANDED_SCOPES)
        if too_large:
            raise InvalidRole(
                roleId=role_id,
                problem=f"`assume:{too_large[0]}` could expand to more than "
                f"{MAX_EXPANDED_SCOPES} scopes (counted along every path of roles it assumes), the "
                "bound of an expansion",
            )
        return scopes

    @staticmethod
    def _data(scopes: tuple[str, ...], description: str, created: str, modified: str) -> dict[str, object]:
        return {
            **pack_json("scopes", list(scopes)),
            "description": description,
            "created": created,
            "lastModified": modified,
        }

    async def create(self, role_id: str, wanted: Sequence[str], description: str) -> Role:
        """A new role; the same request again answers the role as it is (Taskcluster's createRole)."""
        await self._ensure()
        scopes = await self._check(role_id, wanted, description)
        now = timeutil.iso(timeutil.now())
        data = self._data(scopes, description, now, now)
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
        scopes = await self._check(role_id, wanted, description)
        while True:
            current = await self.get(role_id)
            data = self._data(scopes, description, timeutil.iso(current.created), timeutil.iso(timeutil.now()))
            stored = await self.tables.replace(ROLES_TABLE, Entity(encode_key(role_id), ROLE_ROW, data, current.etag))
            if stored is not None:
                self._forget()
                return self._from_entity(stored)

    async def delete(self, role_id: str) -> None:
        """Deleting a role that does not exist is not an error (Taskcluster's deleteRole)."""
        key = _key(role_id)
        if key is None:
            return
        await self._ensure()
        await self.tables.delete(ROLES_TABLE, key, ROLE_ROW)
        self._forget()
