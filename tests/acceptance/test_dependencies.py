"""Dependencies through the official client: resolution follows the reverse edges via the resolved queue."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

from shared import timeutil
from shared.domain.dependencies import DEPENDENCIES_TABLE, IN_ROW, REQUIREMENTS_TABLE
from shared.domain.messages import RESOLVED_QUEUE, ResolvedCheck
from tests.conftest import expect_error, shards_of, slugid, stores_of, task_definition, task_queue_id, wait_for

WORKER = {"workerGroup": "wg-1", "workerId": "worker-1"}


def state(queue, task_id):
    return queue.status(task_id)["status"]["state"]


def run_to(queue, task_id, outcome="completed"):
    """Claim run 0 of a pending task and resolve it."""
    queue.claimTask(task_id, "0", WORKER)
    if outcome == "completed":
        queue.reportCompleted(task_id, "0")
    elif outcome == "failed":
        queue.reportFailed(task_id, "0")
    else:
        queue.reportException(task_id, "0", {"reason": outcome})


def create(queue, **overrides):
    task_id = slugid()
    queue.createTask(task_id, task_definition(**overrides))
    return task_id


def test_chain(queue):
    a = create(queue)
    b = create(queue, dependencies=[a])
    c = create(queue, dependencies=[b])
    assert state(queue, b) == "unscheduled" and state(queue, c) == "unscheduled"
    run_to(queue, a)
    wait_for(lambda: state(queue, b) == "pending")
    assert state(queue, c) == "unscheduled"
    status = queue.status(b)["status"]
    assert status["runs"][0]["reasonCreated"] == "scheduled"
    run_to(queue, b)
    wait_for(lambda: state(queue, c) == "pending")


def test_fan_in_waits_for_every_dependency(queue):
    a, b = create(queue), create(queue)
    c = create(queue, dependencies=[a, b])
    run_to(queue, a)
    time.sleep(1.5)
    assert state(queue, c) == "unscheduled"
    run_to(queue, b)
    wait_for(lambda: state(queue, c) == "pending")


def test_fan_out_across_several_resolution_messages(queue):
    # More dependents than one resolution message handles (250), so the work is split into pages.
    root = create(queue)
    tq = task_queue_id()
    dependents = [create(queue, dependencies=[root], taskQueueId=tq) for _ in range(300)]
    run_to(queue, root)

    def all_pending():
        statuses = queue.statuses({"taskIds": dependents})["statuses"]
        return all(s["status"]["state"] == "pending" for s in statuses)

    wait_for(all_pending, timeout=60, interval=0.5)
    claimed = set()
    while len(claimed) < 300:
        got = queue.claimWork(tq, {**WORKER, "tasks": 32})["tasks"]
        assert got, "every dependent is claimable"
        claimed |= {c["status"]["taskId"] for c in got}
    assert claimed == set(dependents)


def test_all_completed_versus_all_resolved(queue):
    for outcome in ("failed", "malformed-payload"):
        dep = create(queue)
        strict = create(queue, dependencies=[dep])  # requires all-completed (the default)
        lenient = create(queue, dependencies=[dep], requires="all-resolved")
        run_to(queue, dep, outcome)
        wait_for(lambda lenient=lenient: state(queue, lenient) == "pending")
        time.sleep(0.5)
        assert state(queue, strict) == "unscheduled"


def test_canceled_dependency(queue):
    dep = create(queue)
    strict = create(queue, dependencies=[dep])
    lenient = create(queue, dependencies=[dep], requires="all-resolved")
    queue.cancelTask(dep)
    wait_for(lambda: state(queue, lenient) == "pending")
    assert state(queue, strict) == "unscheduled"
    # scheduleTask overrides the dependencies.
    assert queue.scheduleTask(strict)["status"]["state"] == "pending"


def test_a_retried_dependency_resolves_its_dependents_only_when_final(queue):
    dep = create(queue, retries=1)
    waiting = create(queue, dependencies=[dep])
    queue.claimTask(dep, "0", WORKER)
    queue.reportException(dep, "0", {"reason": "worker-shutdown"})  # retried: not resolved
    time.sleep(1.5)
    assert state(queue, waiting) == "unscheduled"
    queue.claimTask(dep, "1", WORKER)
    queue.reportCompleted(dep, "1")
    wait_for(lambda: state(queue, waiting) == "pending")


def test_missing_or_short_lived_dependencies_are_refused_and_leave_nothing(queue, queue_host):
    existing = create(queue)
    missing = slugid()
    refused = slugid()
    body = expect_error(400, "InputError", queue.createTask, refused, task_definition(dependencies=[existing, missing]))
    assert missing in body["message"]
    expect_error(404, "ResourceNotFound", queue.status, refused)
    assert queue.listDependentTasks(existing)["tasks"] == []  # its dependents marker is not listed

    async def rows(table: str, partition: str) -> list[str]:
        tables, queues = stores_of(queue_host.env)
        try:
            return [e.row_key for e in (await tables.query(table, "PartitionKey eq @pk", {"pk": partition})).entities]
        finally:
            await tables.close()
            await queues.close()

    # Nothing names the missing task (no marker of it), nor the refused one.
    assert asyncio.run(rows(DEPENDENCIES_TABLE, missing)) == []
    assert asyncio.run(rows(REQUIREMENTS_TABLE, refused)) == []
    now = timeutil.now()
    short = create(
        queue,
        deadline=timeutil.iso(now + __import__("datetime").timedelta(hours=1)),
        expires=timeutil.iso(now + __import__("datetime").timedelta(hours=2)),
    )
    body = expect_error(
        400,
        "InputError",
        queue.createTask,
        refused,
        task_definition(dependencies=[short], deadline=timeutil.iso(now + __import__("datetime").timedelta(hours=3))),
    )
    assert "expire before" in body["message"]
    assert queue.listDependentTasks(short)["tasks"] == []


def test_list_dependent_tasks_pages(queue):
    dep = create(queue)
    dependents = {create(queue, dependencies=[dep]) for _ in range(5)}
    seen, token, pages = [], None, 0
    while True:
        query = {"limit": 2, **({"continuationToken": token} if token else {})}
        page = queue.listDependentTasks(dep, query=query)
        assert page["taskId"] == dep and len(page["tasks"]) <= 2
        seen += [t["status"]["taskId"] for t in page["tasks"]]
        assert all(t["task"]["dependencies"] == [dep] for t in page["tasks"])
        pages += 1
        token = page.get("continuationToken")
        if not token:
            break
    assert set(seen) == dependents and len(seen) == 5 and pages >= 3
    expect_error(404, "ResourceNotFound", queue.listDependentTasks, slugid())
    expect_error(400, "InvalidRequestArguments", queue.listDependentTasks, dep, query={"limit": "0"})


def test_duplicated_resolution_messages_change_nothing(queue, queue_host):
    dep = create(queue)
    waiting = create(queue, dependencies=[dep])
    run_to(queue, dep)
    wait_for(lambda: state(queue, waiting) == "pending")
    queue.claimTask(waiting, "0", WORKER)
    before = queue.status(waiting)["status"]

    async def inject():
        tables, queues = stores_of(queue_host.env, "sdk")
        try:
            group = queue.task(dep)["taskGroupId"]
            for _ in range(3):
                await queues.put(
                    shards_of(queue_host.env).check_queue(RESOLVED_QUEUE, dep),
                    ResolvedCheck(dep, 0, group, None, timeutil.now()).encode(),
                )
        finally:
            await queues.close()
            await tables.close()

    asyncio.run(inject())
    time.sleep(2.5)
    assert queue.status(waiting)["status"] == before


def test_dependency_created_after_its_dependency_resolved_counts_at_once(queue):
    dep = create(queue)
    run_to(queue, dep, "failed")
    lenient = create(queue, dependencies=[dep], requires="all-resolved")
    assert state(queue, lenient) == "pending"
    strict = create(queue, dependencies=[dep])
    assert state(queue, strict) == "unscheduled"


def requirement_rows(queue_host, task_id: str) -> list[str]:
    async def rows() -> list[str]:
        tables, queues = stores_of(queue_host.env)
        try:
            found: list[str] = []
            token: str | None = None
            while True:  # pages of up to 1,000
                page = await tables.query(
                    REQUIREMENTS_TABLE, "PartitionKey eq @pk", {"pk": task_id}, continuation=token
                )
                found += [e.row_key for e in page.entities]
                if (token := page.continuation) is None:
                    return found
        finally:
            await tables.close()
            await queues.close()

    return asyncio.run(rows())


def test_fan_in_of_more_dependencies_than_a_page_keeps_its_list_on_its_row(queue, queue_host):
    # 150 edges: more than one page of edges written at once (ATTACH_AT_ONCE), kept on the row (IN_ROW).
    tq = task_queue_id()
    deps = [create(queue, taskQueueId=tq) for _ in range(150)]
    waiting = create(queue, dependencies=deps)
    assert len(queue.task(waiting)["dependencies"]) == 150
    assert requirement_rows(queue_host, waiting) == []
    for dep in deps[:-1]:
        run_to(queue, dep)
    time.sleep(1.5)
    assert state(queue, waiting) == "unscheduled"
    run_to(queue, deps[-1])
    wait_for(lambda: state(queue, waiting) == "pending")


def test_fan_in_of_more_dependencies_than_a_row_holds_keeps_requirement_rows(queue, queue_host):
    # IN_ROW + 1 (all-resolved: canceled dependencies satisfy it, one call each): Taskcluster's requirement rows,
    # written 100 to a transaction, each deleted by its dependency's resolution.
    tq = task_queue_id()
    with ThreadPoolExecutor(8) as pool:
        deps = list(pool.map(lambda _: create(queue, taskQueueId=tq), range(IN_ROW + 1)))
        waiting = create(queue, dependencies=deps, requires="all-resolved")
        assert len(requirement_rows(queue_host, waiting)) == IN_ROW + 1
        list(pool.map(queue.cancelTask, deps[:-1]))
    wait_for(lambda: requirement_rows(queue_host, waiting) == deps[-1:], timeout=60)
    assert state(queue, waiting) == "unscheduled"
    queue.cancelTask(deps[-1])
    wait_for(lambda: state(queue, waiting) == "pending")
