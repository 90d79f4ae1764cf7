"""Which queues the queue triggers listen to: each check queue's K shards (QUEUE_CHECK_SHARDS), each in the
account that holds it, named by the connection setting of that account (QUEUE_STORAGE, QUEUE_STORAGE_1, ...).

Read from the environment when the app is imported, as the Functions host registers triggers once per start: a
change of shards takes a restart (an app setting change restarts the app on Azure).
"""

from __future__ import annotations

import os

from shared.storage.sharded import queue_account, shard_name

CONNECTION = "QUEUE_STORAGE"


def _count(name: str) -> int:
    """A shard count from the environment; something unreadable counts as 1 here, and the settings' own check
    reports it on the first request or trigger (the app must still import)."""
    try:
        return max(1, int(os.environ.get(name) or 1))
    except ValueError:
        return 1


def connection(queue: str) -> str:
    """The connection setting of the account holding `queue`."""
    account = queue_account(queue, _count("QUEUE_STORAGE_SHARDS"))
    return CONNECTION if account == 0 else f"{CONNECTION}_{account}"


def trigger_queues(base: str) -> list[tuple[str, str, str]]:
    """(function name suffix, queue, connection) of each shard of check queue `base`: "" for the first (whose
    function keeps its name of old), `_s<j>` for the others."""
    shards = [shard_name(base, j) for j in range(_count("QUEUE_CHECK_SHARDS"))]
    return [("" if j == 0 else f"_s{j}", queue, connection(queue)) for j, queue in enumerate(shards)]
