"""A full audit of the invariants (docs/invariants.md), for tests, the soak script and operators
(`python -m local_host audit`).

The reconciler checks what may have gone wrong cheaply, as it runs; this reads everything: every task, its
events, its group rows, its index row and its dependents. Run it on a queue at rest (`settled`: nothing in
flight), where each invariant must hold exactly; on a busy queue pass `settled=False`, which leaves out the
checks a change in flight would fail for a moment (a resolution not followed yet, events not dispatched yet).

What it cannot see: whether a message is in a queue (a queue cannot be searched, and hidden messages cannot be
read). Those invariants are kept by construction (each message is put before the change it guards) and by the
reconciler; at rest there is no pending or running run to need one.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass

from shared.domain.deadlines import DEADLINES_TABLE
from shared.domain.dependencies import REQUIREMENTS_TABLE
from shared.domain.expiry import TASK_EXPIRY_TABLE
from shared.domain.groups import ACTIVE, GROUP_STREAMS, GROUPS_TABLE
from shared.domain.queue_runs import TASK_QUEUE_RUNS_TABLE
from shared.domain.tasks import RESOLVED_STATES, TASK_ROW, TASK_ROW_END, TASKS_TABLE, Task
from shared.maintenance.reconciler import Reconciler
from shared.operations.writes.stores import Stores
from shared.outbox.rows import Stream
from shared.storage.base import Entity

CONCURRENCY = 16


@dataclass(frozen=True)
class Violation:
    invariant: str
    task_id: str
    detail: str

    def __str__(self) -> str:
        return f"{self.invariant}: {self.task_id}: {self.detail}"


@dataclass
class Audit:
    tasks: int
    runs: int
    states: Counter[str]
    violations: list[Violation]


async def _all(stores: Stores, table: str, filter: str, parameters: dict[str, str]) -> AsyncIterator[Entity]:
    token: str | None = None
    while True:
        page = await stores.tables.query(table, filter, parameters, limit=1000, continuation=token)
        for entity in page.entities:
            yield entity
        token = page.continuation
        if token is None:
            return


async def audit(stores: Stores, *, settled: bool = True) -> Audit:
    await stores.ready()
    tasks = [
        Task.from_entity(e)
        async for e in _all(
            stores, TASKS_TABLE, "RowKey ge @lo and RowKey lt @hi", {"lo": TASK_ROW, "hi": TASK_ROW_END}
        )
    ]
    by_id = {t.task_id: t for t in tasks}
    # Whose deadline rows are there (read whole: the bucket a row is in depends on the host's deadline delay).
    deadline_rows = {e.row_key async for e in _all(stores, DEADLINES_TABLE, "PartitionKey ge @lo", {"lo": ""})}
    violations: list[Violation] = []
    limit = asyncio.Semaphore(CONCURRENCY)

    async def one(task: Task) -> None:
        async with limit:
            violations.extend(await _check_task(stores, task, by_id, deadline_rows, settled))

    await asyncio.gather(*(one(t) for t in tasks))
    violations.extend(await _check_groups(stores, by_id, settled))
    return Audit(
        len(tasks),
        sum(len(t.runs) for t in tasks),
        Counter(t.state for t in tasks),
        sorted(violations, key=lambda v: (v.invariant, v.task_id)),
    )


async def _check_task(
    stores: Stores, task: Task, by_id: dict[str, Task], deadline_rows: set[str], settled: bool
) -> list[Violation]:
    """Every invariant of one task (`settled`: those that hold only once the service is idle too)."""
    found = _run_violations(task)
    found += await _event_violations(stores, task, settled)
    found += await _expiry_violations(stores, task, deadline_rows)
    found += await _group_and_index_violations(stores, task, settled)
    if task.state in RESOLVED_STATES and settled:
        found += await _dependent_violations(stores, task, by_id)
    return found


def _run_violations(task: Task) -> list[Violation]:
    """Runs: only the last may be unresolved."""
    return [
        Violation("runs", task.task_id, f"run {run_id} is {run.state} but is not the last run")
        for run_id, run in enumerate(task.runs[:-1])
        if not run.resolved_state
    ]


async def _event_violations(stores: Stores, task: Task, settled: bool) -> list[Violation]:
    """Events: numbered 1..eventSeq without a gap; each run claimed (task-running) at most once; dispatched."""
    found: list[Violation] = []
    task_id = task.task_id
    events, token = [], None
    while True:
        page, token = await stores.events.list(Stream(TASKS_TABLE, task_id), limit=1000, continuation=token)
        events.extend(page)
        if token is None:
            break
    seqs = [seq for seq, _ in events]
    if seqs != list(range(1, task.event_seq + 1)):
        found.append(
            Violation("events-recorded", task_id, f"event rows {seqs[:5]}... do not number 1..{task.event_seq}")
        )
    claims = Counter(int(e.payload.get("runId", -1)) for _, e in events if e.exchange == "task-running")
    found += [
        Violation("claimed-once", task_id, f"run {run_id} was claimed {count} times")
        for run_id, count in claims.items()
        if count > 1
    ]
    started = sum(1 for run in task.runs if run.started)
    if started != sum(claims.values()):
        found.append(
            Violation(
                "events-recorded", task_id, f"{started} runs started but {sum(claims.values())} task-running events"
            )
        )
    if settled and stores.events.dispatching:
        cursor = await stores.events.cursor(Stream(TASKS_TABLE, task_id))
        if cursor.dispatched != task.event_seq:
            found.append(
                Violation("events-dispatched", task_id, f"{cursor.dispatched} of {task.event_seq} events dispatched")
            )
    return found


async def _expiry_violations(stores: Stores, task: Task, deadline_rows: set[str]) -> list[Violation]:
    """Expiry: its deadline row (carrying `expires`) until its deadline is checked, then its expiry entry."""
    task_id = task.task_id
    if (
        task_id not in deadline_rows
        and await stores.tables.get(TASK_EXPIRY_TABLE, stores.expiry.partition(task_id, task.expires), task_id) is None
    ):
        return [
            Violation(
                "expiry-indexed", task_id, "neither a TaskDeadlines row nor a TaskExpiry entry: it would never expire"
            )
        ]
    return []


async def _group_and_index_violations(stores: Stores, task: Task, settled: bool) -> list[Violation]:
    """Its group's active set holds it while it is unresolved; its task queue's run index holds its pending or
    running run, and (settled) nothing once it is resolved."""
    found: list[Violation] = []
    task_id = task.task_id

    def violated(invariant: str, detail: str) -> None:
        found.append(Violation(invariant, task_id, detail))

    group_id = task.definition["taskGroupId"]
    active = await stores.tables.get(GROUPS_TABLE, group_id, ACTIVE + task_id) is not None
    index = await stores.tables.get(
        TASK_QUEUE_RUNS_TABLE, stores.queue_runs.runs_partition(task.task_queue_id, task_id), task_id
    )
    resolved = task.state in RESOLVED_STATES
    if not resolved and not active:
        violated("group-active", "unresolved but not in its group's active set")
    if resolved and active and settled:
        violated("resolution-followed", "resolved but still in its group's active set")
    if task.state in ("pending", "running"):
        if index is None or index.data.get("state") != task.state or int(index.data["runId"]) != task.last_run_id:
            violated("run-index", f"{task.state} run {task.last_run_id} has no matching TaskQueueRuns row")
    elif index is not None and settled:
        violated("run-index", f"{task.state} but its TaskQueueRuns row says {index.data.get('state')}")
    return found


async def _dependent_violations(stores: Stores, task: Task, by_id: dict[str, Task]) -> list[Violation]:
    """A resolved task's dependents that it satisfies no longer wait for it, and one that waits for nothing has
    a run."""
    found: list[Violation] = []
    token = None
    while True:
        edges, token = await stores.deps.dependents(task.task_id, limit=1000, continuation=token, here=True)
        for edge in edges:
            dependent = by_id.get(edge.task_id)
            if dependent is None or dependent.runs or (edge.require == "completed" and task.state != "completed"):
                continue
            detail = await _still_blocked(stores, task, dependent)
            if detail is not None:
                found.append(Violation("dependents-released", dependent.task_id, detail))
        if token is None:
            return found


async def _still_blocked(stores: Stores, task: Task, dependent: Task) -> str | None:
    """Why a dependent without a run that `task` satisfies is a violation: it still waits for `task`, or it
    waits for nothing and has no run; None when it rightly waits (for others)."""
    unresolved = dependent.state not in RESOLVED_STATES
    if dependent.waiting is not None:  # what it waits for kept on its row
        if task.task_id in dependent.waiting:
            return f"still waits for {task.task_id}, which is {task.state}"
        return "waits for nothing but has no run" if not dependent.waiting and unresolved else None
    if await stores.tables.get(REQUIREMENTS_TABLE, dependent.task_id, task.task_id) is not None:
        return f"still waits for {task.task_id}, which is {task.state}"
    if unresolved and not await stores.deps.blocked(dependent.task_id):
        return "waits for nothing but has no run"
    return None


async def _check_groups(stores: Stores, by_id: dict[str, Task], settled: bool) -> list[Violation]:
    """A group whose members are all resolved has said so (task-group-resolved); no active row is a phantom."""
    found: list[Violation] = []
    groups: dict[str, list[Task]] = {}
    for task in by_id.values():
        groups.setdefault(task.definition["taskGroupId"], []).append(task)
    for group_id, members in groups.items():
        active = [
            e.row_key[len(ACTIVE) :]
            async for e in _all(
                stores,
                GROUPS_TABLE,
                "PartitionKey eq @pk and RowKey ge @lo and RowKey lt @hi",
                {"pk": group_id, "lo": ACTIVE, "hi": "a;"},
            )
        ]
        phantoms = [t for t in active if t not in by_id]
        if phantoms and settled:
            found.append(Violation("group-active", group_id, f"active rows of tasks that do not exist: {phantoms}"))
        if settled and not active and all(t.state in RESOLVED_STATES for t in members):
            events, _ = await stores.events.list(Stream(GROUP_STREAMS, group_id), limit=1000, continuation=None)
            if not any(e.exchange == "task-group-resolved" for _, e in events):
                found.append(Violation("group-resolved", group_id, "every task resolved, but no task-group-resolved"))
        group = await stores.groups.get(group_id)
        if settled and stores.events.dispatching and group is not None:
            cursor = await stores.events.cursor(Stream(GROUP_STREAMS, group_id))
            if cursor.dispatched != group.event_seq:
                found.append(
                    Violation(
                        "events-dispatched",
                        group_id,
                        f"{cursor.dispatched} of the group's {group.event_seq} events dispatched",
                    )
                )
    return found


async def run_audit_command(stores: Stores, reconciler: Reconciler | None = None) -> int:
    """`python -m local_host audit [--reconcile]`: print the counts and every violation (after a reconciler pass,
    when given one); 1 if any."""
    try:
        if reconciler is not None:
            report = await reconciler.run()
            print(f"reconciler: {report.summary()}")
        result = await audit(stores, settled=False)
    finally:
        await stores.close()
    states = ", ".join(f"{k} {v}" for k, v in sorted(result.states.items()))
    print(f"tasks {result.tasks} ({states or 'none'}), runs {result.runs}, violations {len(result.violations)}")
    for violation in result.violations:
        print(f"  {violation}")
    return 1 if result.violations else 0
