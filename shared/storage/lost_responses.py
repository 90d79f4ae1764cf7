"""What a conditional answer means after a lost response: the first attempt of a call may have been applied
although its answer never came (shared/storage/retry.py calls such a call *ambiguous*); a retry then finds the
effect of that first attempt and answers as if someone else had been first. These helpers tell the two apart,
so that each call ends in the outcome its first attempt had:

- an insert that finds `EntityAlreadyExists`: ours if the row holds exactly what we wrote;
- an ETag-conditional replace or merge that finds `412` (or a replace that finds `404`): ours if the row holds
  what we wrote (a row changed again since by someone else is a lost race, as it would have been anyway: callers
  re-read and are idempotent);
- a delete that finds `404`: deleted (by us, or since);
- a transaction that failed on a condition: ours if every row is as the transaction left it.

A queue message put twice (a put whose answer was lost, then retried) cannot be told apart: Azure Queue Storage
has no idempotency key. Both messages are hints that their handlers re-read state for, so the second is harmless
(docs/invariants.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from shared.storage.base import Entity, Op

Reader = Callable[[str, str, str], Awaitable[Entity | None]]  # get(table, partition key, row key)


def holds(written: dict[str, Any], stored: dict[str, Any], *, merge: bool = False) -> bool:
    """Whether a stored row holds what was written (a None property is not stored; with `merge`, the row may
    hold more)."""
    wanted = {k: v for k, v in written.items() if v is not None}
    if merge:
        return all(stored.get(k) == v for k, v in wanted.items())
    return wanted == {k: v for k, v in stored.items() if v is not None}


async def written_by_us(get: Reader, table: str, entity: Entity, *, merge: bool = False) -> Entity | None:
    """The row, with its ETag, if it holds what `entity` wrote; None if it does not (or is gone)."""
    stored = await get(table, entity.partition_key, entity.row_key)
    if stored is not None and holds(entity.data, stored.data, merge=merge):
        return stored
    return None


async def transaction_applied(get: Reader, table: str, ops: list[Op]) -> list[str | None] | None:
    """Each operation's ETag if every row is as the transaction left it; None if any is not."""

    async def one(op: Op) -> tuple[bool, str | None]:
        stored = await get(table, op.entity.partition_key, op.entity.row_key)
        if op.kind == "delete":
            return stored is None, None
        if stored is None or not holds(op.entity.data, stored.data, merge=op.kind == "merge"):
            return False, None
        return True, stored.etag

    found = await asyncio.gather(*(one(op) for op in ops))
    return [etag for _, etag in found] if all(ok for ok, _ in found) else None
