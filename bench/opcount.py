"""Storage operations per task lifecycle, counted on the in-memory connector (no timing: what each step costs
in calls, which on Azure is the bill and the partition load, and on Azurite most of the time).

    .venv/bin/python -m bench.opcount

Counts createTask, claimWork (one task, in a task queue of the `lowest` priority), reportCompleted, and the
handling of the resolution message, for a task with no dependencies in a new group and in an existing group.
"""

from __future__ import annotations

import asyncio
import collections
import datetime as dt
from typing import Any

from shared import timeutil
from shared.domain.messages import RESOLVED_QUEUE, ResolvedCheck
from shared.service import QueueService
from shared.settings import load_settings
from shared.storage.memory import MemoryQueues, MemoryTables


class Counting:
    """Wraps a store; counts each call by (store, operation)."""

    def __init__(self, inner: Any, kind: str, counts: collections.Counter[str]) -> None:
        self._inner, self._kind, self._counts = inner, kind, counts

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr) or name.startswith("_") or name in ("process_url", "clear"):
            return attr

        async def counted(*args: Any, **kwargs: Any) -> Any:
            self._counts[f"{self._kind}.{name}"] += 1
            return await attr(*args, **kwargs)
        return counted


def definition(task_queue: str, group: str) -> dict[str, Any]:
    now = timeutil.now()
    return {"taskQueueId": task_queue, "taskGroupId": group, "schedulerId": "-", "projectId": "none",
            "created": timeutil.iso(now), "deadline": timeutil.iso(now + dt.timedelta(hours=1)),
            "expires": timeutil.iso(now + dt.timedelta(days=1)), "payload": {}, "dependencies": [],
            "requires": "all-completed", "routes": [], "priority": "lowest", "retries": 5, "scopes": [],
            "tags": {}, "extra": {}, "metadata": {"name": "n", "description": "d", "owner": "o@example.com",
                                                  "source": "https://example.com"}}


async def main() -> None:
    counts: collections.Counter[str] = collections.Counter()
    settings = load_settings(storage="memory", root_access_token="x" * 30, claim_work_wait=0)
    service = QueueService(settings, Counting(MemoryTables(), "table", counts),  # type: ignore[arg-type]
                           Counting(MemoryQueues(), "queue", counts))  # type: ignore[arg-type]
    await service.ensure_storage()
    group = timeutil.slugid()
    for label in ("first task of a group", "next task of the group"):
        task_id = timeutil.slugid()
        steps: dict[str, collections.Counter[str]] = {}
        counts.clear()
        await service.create_task(task_id, definition("prov/bench", group))
        steps["createTask"], counts = counts, collections.Counter()
        service.tables._counts = service.queues._counts = counts  # type: ignore[attr-defined]
        claimed = await service.claim_work("prov/bench", "wg", "w1", 1)
        assert claimed and claimed[0]["status"]["taskId"] == task_id
        steps["claimWork"], counts = counts, collections.Counter()
        service.tables._counts = service.queues._counts = counts  # type: ignore[attr-defined]
        await service.resolve(task_id, 0, "completed", "completed")
        steps["reportCompleted"], counts = counts, collections.Counter()
        service.tables._counts = service.queues._counts = counts  # type: ignore[attr-defined]
        [message] = await service.queues._inner.receive(RESOLVED_QUEUE, 1, 30)  # type: ignore[attr-defined]
        await service.resolve_dependencies(ResolvedCheck.decode(message.json()))
        steps["resolution (trigger)"], counts = counts, collections.Counter()
        service.tables._counts = service.queues._counts = counts  # type: ignore[attr-defined]
        total = sum(sum(c.values()) for c in steps.values())
        print(f"{label}: {total} storage calls")
        for step, c in steps.items():
            print(f"  {step:22} {sum(c.values()):3}  " + ", ".join(f"{k} {v}" for k, v in sorted(c.items())))


if __name__ == "__main__":
    asyncio.run(main())
