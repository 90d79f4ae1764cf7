"""Storage operations per task lifecycle, counted on the in-memory connector (no timing: what each step costs
in calls, which on Azure is the bill and the partition load, and on Azurite most of the time).

    .venv/bin/python -m bench.opcount

Counts createTask, claimWork (one task, in a task queue of the `lowest` priority), reportCompleted, and what its
process does after the answer (the index row's delete; the resolution, then its message's delete), for a task with
no dependencies that is its own group (its taskGroupId its taskId, the default), then in a new group and in an
existing group. One task at a time: the calls that many concurrent requests share (index rows, receives) count
whole here; `bench.lifecycle` counts them under load.
"""

from __future__ import annotations

import asyncio
import collections
import datetime as dt
from typing import Any

from shared import timeutil, validation
from shared.runtime import Queue, build_queue
from shared.settings import load_settings
from shared.storage.memory import MemoryQueues, MemoryTables


class Counting:
    """Wraps a store; counts each call by (store, operation) in `counts` (which may be replaced between steps);
    `inner` is the store itself, for calls that should not count."""

    def __init__(self, inner: Any, kind: str, counts: collections.Counter[str]) -> None:
        self.inner, self.kind, self.counts = inner, kind, counts

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if not callable(attr) or name.startswith("_") or name in ("process_url", "clear"):
            return attr

        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.counts[f"{self.kind}.{name}"] += 1
            return await attr(*args, **kwargs)

        return counted


def definition(task_queue: str, group: str) -> dict[str, Any]:
    """A task's definition as createTask hands it to the operations: its schema's defaults filled in."""
    now = timeutil.now()
    body = {
        "taskQueueId": task_queue,
        "taskGroupId": group,
        "created": timeutil.iso(now),
        "deadline": timeutil.iso(now + dt.timedelta(hours=1)),
        "expires": timeutil.iso(now + dt.timedelta(days=1)),
        "payload": {},
        "metadata": {"name": "n", "description": "d", "owner": "o@example.com", "source": "https://example.com"},
    }
    problems = validation.errors_of("create-task-request", body, fill_defaults=True)
    assert not problems, problems
    return body


async def counted_service() -> tuple[Queue, Counting, Counting]:
    """A queue on the memory connector whose table and queue calls are counted in one Counter (`counts`)."""
    counts: collections.Counter[str] = collections.Counter()
    settings = load_settings(storage="memory", root_access_token="x" * 30, claim_work_wait=0)
    tables, queues = Counting(MemoryTables(), "table", counts), Counting(MemoryQueues(), "queue", counts)
    service = build_queue(settings, tables, queues)  # type: ignore[arg-type]
    await service.stores.ready()
    return service, tables, queues


async def main() -> None:
    service, tables, queues = await counted_service()
    counts = tables.counts
    group = timeutil.slugid()
    for label, task_group in (
        ("", None),  # a first lifecycle: the worker's records, the empty priority queues
        ("a task that is its own group (as bench.lifecycle's)", None),
        ("first task of a group", group),
        ("next task of the group", group),
    ):
        task_id = timeutil.slugid()
        steps: dict[str, collections.Counter[str]] = {}
        counts.clear()
        await service.creation.create_task(task_id, definition("prov/bench", task_group or task_id))
        steps["createTask"], counts = counts, collections.Counter()
        tables.counts = queues.counts = counts
        claimed = await service.work.claim_work("prov/bench", "wg", "w1", 1)
        await service.stores.settled()  # the consumed hint's delete, which the request does not wait for
        assert claimed and claimed[0].task.task_id == task_id
        steps["claimWork"], counts = counts, collections.Counter()
        tables.counts = queues.counts = counts
        await service.lifecycle.resolve(task_id, 0, "completed", "completed")
        steps["reportCompleted"], counts = counts, collections.Counter()
        tables.counts = queues.counts = counts
        # After the answer: the index row's delete, and the resolution (the group; dependents, had it any),
        # done here, then its message deleted (the run's claim check turned into it, hidden meanwhile).
        await service.stores.settled()
        steps["after its answer"], counts = counts, collections.Counter()
        tables.counts = queues.counts = counts
        if not label:
            continue
        total = sum(sum(c.values()) for c in steps.values())
        print(f"{label}: {total} storage calls")
        for step, c in steps.items():
            print(f"  {step:22} {sum(c.values()):3}  " + ", ".join(f"{k} {v}" for k, v in sorted(c.items())))


async def graph() -> None:
    """A task in a graph: in a group of many, with a dependency (a root it waits for), and a dependent of its own;
    each step's calls, the resolutions after each answer included."""
    service, tables, queues = await counted_service()
    counts = tables.counts
    group = timeutil.slugid()
    await service.creation.create_task(timeutil.slugid(), definition("prov/other", group))  # the group exists
    await service.stores.settled()
    root, middle, leaf = timeutil.slugid(), timeutil.slugid(), timeutil.slugid()
    steps: list[tuple[str, collections.Counter[str]]] = []

    async def step(label: str, work: Any) -> Any:
        nonlocal counts
        counts = collections.Counter()
        tables.counts = queues.counts = counts
        result = await work
        await service.stores.settled()  # what each answer leaves to do after it (tidying, resolutions)
        steps.append((label, counts))
        return result

    await step("createTask root", service.creation.create_task(root, definition("prov/graph", group)))
    await step(
        "createTask middle (needs root)",
        service.creation.create_task(middle, {**definition("prov/graph", group), "dependencies": [root]}),
    )
    await step(
        "createTask leaf (needs middle)",
        service.creation.create_task(leaf, {**definition("prov/graph", group), "dependencies": [middle]}),
    )
    for name, task_id in (("root", root), ("middle", middle), ("leaf", leaf)):
        claimed = await step(f"claimWork {name}", service.work.claim_work("prov/graph", "wg", "w1", 1))
        assert claimed and claimed[0].task.task_id == task_id, name
        await step(
            f"reportCompleted {name}, and after", service.lifecycle.resolve(task_id, 0, "completed", "completed")
        )
    print("a graph: root -> middle -> leaf, in a group of many")
    for label, c in steps:
        print(f"  {label:36} {sum(c.values()):3}  " + ", ".join(f"{k} {v}" for k, v in sorted(c.items())))
    middle_calls = sum(
        sum(c.values())
        for label, c in steps
        if label.startswith(("createTask middle", "claimWork middle", "reportCompleted middle"))
    )
    print(f"  the middle task, in all (create, claim, complete and the resolution of its dependent): {middle_calls}")


if __name__ == "__main__":
    asyncio.run(main())
    asyncio.run(graph())
