"""Listing pages of task definitions bounded in bytes as well as in items (issue 83, N3): a page of 1,000 tasks of
400 kB definitions is 400 MB for one anonymous request. A listing reads its keys as before (a page of the store:
small rows) and loads the tasks behind them a batch at a time; once the tasks loaded weigh PAGE_BYTES, the page
ends there and its continuation says where within the store's page the next one starts: that page's own token,
how many of its keys to pass over, and the key it starts at (a key gone meanwhile is passed over by the count).

A page that fits is answered with the store's token unchanged, so only a page cut in bytes carries the new form
(`cut:`), which the previous release refuses with 400 InvalidContinuation (a client paging across a rolling
update restarts its listing). What a task weighs is its stored row's size (`Task.stored_bytes`), known without
serializing it twice."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from shared import strict_json
from shared.domain.tasks import Task
from shared.storage.keys import InvalidContinuation

PAGE_BYTES = 8 * 1024 * 1024  # what a page of definitions weighs at most, but for its last batch
FIRST_BATCH = 16  # keys loaded before any size is known
MOST_BATCH = 32  # keys loaded at once (LOAD_CONCURRENCY): a page passes PAGE_BYTES by at most this many tasks
CUT = "cut:"
MAX_SKIP = 1000  # keys of one store page (Taskcluster's maxLimit, and Azure Tables' most in one answer)

Key = TypeVar("Key")
Item = TypeVar("Item")


@dataclass(frozen=True)
class Cut:
    """Where a page cut in bytes ended within the store's page that began at `store_token`."""

    store_token: str | None
    skip: int
    next_key: str


def cut_token(cut: Cut) -> str:
    data = {"From": cut.store_token, "Skip": cut.skip, "Next": cut.next_key}
    return CUT + base64.urlsafe_b64encode(json.dumps(data, separators=(",", ":")).encode()).decode()


def read_cut(token: str | None) -> Cut | None:
    """The cut a `cut:` token names; None for any other token (the store's own, read by the store)."""
    if token is None or not token.startswith(CUT):
        return None
    body = token[len(CUT) :]
    try:
        data = strict_json.loads(base64.urlsafe_b64decode(body.encode("ascii") + b"=" * (-len(body) % 4)))
        cut = Cut(data["From"], data["Skip"], data["Next"])
    except (ValueError, TypeError, KeyError, UnicodeError, binascii.Error):
        raise InvalidContinuation(token=token[:100]) from None
    if not (
        (cut.store_token is None or (isinstance(cut.store_token, str) and not cut.store_token.startswith(CUT)))
        and isinstance(cut.skip, int)
        and not isinstance(cut.skip, bool)
        and 0 < cut.skip <= MAX_SKIP
        and isinstance(cut.next_key, str)
        and len(cut.next_key) <= 1024
    ):
        raise InvalidContinuation(token=token[:100])
    return cut


ListKeys = Callable[[int, str | None], Awaitable[tuple[list[Key], str | None]]]


async def bounded_page(
    list_keys: ListKeys[Key],
    load: Callable[[list[Key]], Awaitable[Sequence[Item]]],
    key_of: Callable[[Key], str],
    weight: Callable[[Item], int],
    *,
    limit: int,
    continuation: str | None,
    budget: int = PAGE_BYTES,
) -> tuple[list[Item], str | None]:
    """A page of at most `limit` items that weighs at most `budget` but for its last batch (at least one batch:
    an item heavier than the budget still makes progress), and its continuation."""
    cut = read_cut(continuation)
    if cut is None:
        keys, next_token = await list_keys(min(limit, MAX_SKIP), continuation)
        store_token, start = continuation, 0
    else:
        keys, next_token, store_token, start = await _resume(list_keys, limit, cut, key_of)
    keys = keys[start:]
    items: list[Item] = []
    used, heaviest, at = 0, 1, 0
    while at < len(keys):
        room = (budget - used) // heaviest
        batch = keys[at : at + max(1, min(FIRST_BATCH if not items else MOST_BATCH, room))]
        loaded = await load(batch)
        items.extend(loaded)
        at += len(batch)
        for item in loaded:
            used += weight(item)
            heaviest = max(heaviest, weight(item))
        if used >= budget and at < len(keys):
            return items, cut_token(Cut(store_token, start + at, key_of(keys[at])))
    return items, next_token


MOST_REREADS = 8  # store pages a cut page reads to find where it resumes, before answering an empty page


async def _resume(
    list_keys: ListKeys[Key], limit: int, cut: Cut, key_of: Callable[[Key], str]
) -> tuple[list[Key], str | None, str | None, int]:
    """The store page a cut page resumes in, its next token, its own token and where among its keys: at the cut's
    next key, or (gone meanwhile) after as many keys as the cut passed. A store page read again may come back
    shorter than before (Azure answers fewer rows than asked with a continuation), so keys the cut passed that
    are not in it are passed over on the pages after it; after MOST_REREADS pages, an empty page whose
    continuation says what is left to pass over."""
    token, skip = cut.store_token, cut.skip
    for _ in range(MOST_REREADS):
        keys, next_token = await list_keys(min(limit + skip, MAX_SKIP), token)
        for at, key in enumerate(keys):
            if key_of(key) == cut.next_key:
                return keys, next_token, token, at
        if len(keys) >= skip or next_token is None:
            return keys, next_token, token, min(skip, len(keys))
        skip -= len(keys)
        token = next_token
    return [], cut_token(Cut(token, skip, cut.next_key)), token, 0


def task_weight(task: Task) -> int:
    """What a task adds to a listing's answer, about: its stored row's characters."""
    return task.stored_bytes


async def tasks_page(
    list_ids: ListKeys[str],
    load_many: Callable[[list[str]], Awaitable[Sequence[Task]]],
    *,
    limit: int,
    continuation: str | None,
    budget: int,
) -> tuple[list[Task], str | None]:
    """A bounded page of the tasks a listing of taskIds names (listTaskGroup, listDependentTasks)."""
    return await bounded_page(
        list_ids, load_many, str, task_weight, limit=limit, continuation=continuation, budget=budget
    )
