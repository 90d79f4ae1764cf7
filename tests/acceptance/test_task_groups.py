"""Task groups and priorities through the official client."""

from __future__ import annotations

import datetime as dt
import time

import httpx
import pytest

from shared import timeutil
from tests.conftest import expect_error, slugid, task_definition, task_queue_id, wait_for

WORKER = {"workerGroup": "wg-1", "workerId": "worker-1"}


def in_group(queue, group, count, **overrides):
    ids = []
    for _ in range(count):
        task_id = slugid()
        queue.createTask(task_id, task_definition(taskGroupId=group, **overrides))
        ids.append(task_id)
    return ids


def test_get_and_list_task_group(queue):
    group = slugid()
    ids = in_group(queue, group, 2, schedulerId="my-scheduler")
    info = queue.getTaskGroup(group)
    assert info["taskGroupId"] == group and info["schedulerId"] == "my-scheduler" and "sealed" not in info
    listing = queue.listTaskGroup(group)
    assert {t["status"]["taskId"] for t in listing["tasks"]} == set(ids)
    assert listing["schedulerId"] == "my-scheduler" and listing["expires"] == info["expires"]
    assert all(t["task"]["taskGroupId"] == group for t in listing["tasks"])
    expect_error(404, "ResourceNotFound", queue.getTaskGroup, slugid())
    expect_error(404, "ResourceNotFound", queue.listTaskGroup, slugid())


def test_the_brief_listing_is_the_listing_cut_down_to_what_a_page_shows(queue):
    """listTaskGroupBrief (this queue's extension): the same tasks, statuses and paging as listTaskGroup, each
    definition cut to its name, owner, dependencies, requires, scheduler, project, group, created and deadline."""
    group = slugid()
    first = in_group(queue, group, 1, payload={"env": {"BIG": "x" * 3000}}, routes=["index.a.b"])[0]
    ids = [first, *in_group(queue, group, 4, dependencies=[first], payload={"env": {"BIG": "x" * 3000}})]
    root = queue.options["rootUrl"]
    seen, token, brief_bytes = [], None, 0
    while True:
        answer = httpx.get(
            f"{root}/api/queue/v1/task-group/{group}/brief",
            params={"limit": 2, **({"continuationToken": token} if token else {})},
        )
        assert answer.status_code == 200, answer.text
        brief_bytes += len(answer.content)
        page = answer.json()
        assert len(page["tasks"]) <= 2 and page["schedulerId"] == queue.getTaskGroup(group)["schedulerId"]
        for item in page["tasks"]:
            whole = queue.task(item["status"]["taskId"])
            assert item["status"] == queue.status(item["status"]["taskId"])["status"]
            assert item["task"]["metadata"] == {"name": whole["metadata"]["name"], "owner": whole["metadata"]["owner"]}
            assert set(item["task"]) == {
                "metadata",
                "dependencies",
                "requires",
                "schedulerId",
                "projectId",
                "taskGroupId",
                "created",
                "deadline",
            }
            assert all(item["task"][k] == whole[k] for k in item["task"] if k != "metadata")
        seen += [t["status"]["taskId"] for t in page["tasks"]]
        token = page.get("continuationToken")
        if not token:
            break
    assert sorted(seen) == sorted(ids)
    whole_bytes = len(httpx.get(f"{root}/api/queue/v1/task-group/{group}/list").content)
    assert brief_bytes * 3 < whole_bytes
    assert httpx.get(f"{root}/api/queue/v1/task-group/{slugid()}/brief").status_code == 404


def test_list_task_group_pages(queue):
    group = slugid()
    ids = in_group(queue, group, 5)
    seen, token = [], None
    while True:
        page = queue.listTaskGroup(group, query={"limit": 2, **({"continuationToken": token} if token else {})})
        assert len(page["tasks"]) <= 2
        seen += [t["status"]["taskId"] for t in page["tasks"]]
        token = page.get("continuationToken")
        if not token:
            break
    assert sorted(seen) == sorted(ids)
    expect_error(400, "InvalidRequestArguments", queue.listTaskGroup, group, query={"limit": "1001"})


def test_group_expiry_grows_with_its_tasks(queue):
    group = slugid()
    now = timeutil.now()
    later = timeutil.iso(now + dt.timedelta(days=400))
    in_group(queue, group, 1)
    first = queue.getTaskGroup(group)["expires"]
    in_group(queue, group, 1, expires=later)
    grown = queue.getTaskGroup(group)["expires"]
    # Outliving its last task by an hour at most (as Taskcluster's groups do: shared/domain/groups.py).
    assert first < later <= grown <= timeutil.iso(timeutil.parse(later) + dt.timedelta(hours=1))


def test_sealed_group_takes_no_more_tasks(queue):
    group = slugid()
    in_group(queue, group, 1)
    sealed = queue.sealTaskGroup(group)
    assert sealed["sealed"] and queue.getTaskGroup(group)["sealed"] == sealed["sealed"]
    assert queue.sealTaskGroup(group)["sealed"] == sealed["sealed"]  # sealing again keeps the first time
    late = slugid()
    body = expect_error(409, "RequestConflict", queue.createTask, late, task_definition(taskGroupId=group))
    assert "sealed" in body["message"]
    expect_error(404, "ResourceNotFound", queue.status, late)
    expect_error(404, "ResourceNotFound", queue.sealTaskGroup, slugid())


def test_cancel_task_group(queue):
    group = slugid()
    done, running, pending = in_group(queue, group, 3)
    waiting = slugid()
    queue.createTask(waiting, task_definition(taskGroupId=group, dependencies=[pending]))
    queue.claimTask(done, "0", WORKER)
    queue.reportCompleted(done, "0")
    queue.claimTask(running, "0", WORKER)
    expect_error(409, "RequestConflict", queue.cancelTaskGroup, group)  # not sealed
    queue.sealTaskGroup(group)
    result = queue.cancelTaskGroup(group)
    assert result["taskGroupId"] == group and result["taskGroupSize"] == 4
    assert sorted(result["taskIds"]) == sorted([running, pending, waiting]) and result["cancelledCount"] == 3
    for task_id in (running, pending, waiting):
        run = queue.status(task_id)["status"]["runs"][-1]
        assert run["state"] == "exception" and run["reasonResolved"] == "canceled"
    assert queue.status(done)["status"]["state"] == "completed"
    again = queue.cancelTaskGroup(group)
    assert again["cancelledCount"] == 0 and again["taskIds"] == []


def test_group_resolves_when_its_last_task_resolves(queue, queue_host):
    group = slugid()
    a, b = in_group(queue, group, 2)
    for task_id in (a, b):
        queue.claimTask(task_id, "0", WORKER)

    def resolved_events():
        url = f"{queue_host.root_url}/api/queue/v1/task-group/{group}/events"
        events = httpx.get(url).json()["events"]
        return [e for e in events if e["exchange"].endswith("/task-group-resolved")]

    queue.reportCompleted(a, "0")
    time.sleep(1.5)
    assert resolved_events() == []  # b is still running
    queue.reportFailed(b, "0")
    [event] = wait_for(resolved_events)  # recorded by the resolution of the last task (at least once)
    assert event["routingKey"] == f"primary.{group}.-._"
    assert event["payload"]["taskGroupId"] == group and "sealed" not in event["payload"]


def test_a_rerun_makes_its_resolved_group_unresolved_until_it_resolves_again(queue, queue_host):
    """Issue #85 ("state words go stale after reruns"): a task rerun in a resolved group was not unresolved again,
    so the push read "finished" while it ran. Its group is unresolved until the rerun resolves, and is then resolved
    again, as Taskcluster announces a group resolved again after a rerun (or a task added)."""
    group = slugid()
    a, b = in_group(queue, group, 2)
    for task_id in (a, b):
        queue.claimTask(task_id, "0", WORKER)
    url = f"{queue_host.root_url}/api/queue/v1/task-group/{group}/events"

    def resolved_events():
        return [e for e in httpx.get(url).json()["events"] if e["exchange"].endswith("/task-group-resolved")]

    from taskcluster.client import createApiClient

    reference = httpx.get(f"{queue_host.root_url}/references/queue/v1/api.json").json()
    served = createApiClient("Served", {"reference": reference})(queue.options)

    def push():
        [found] = [
            g for g in served.listRecentTaskGroups(query={"limit": 100})["taskGroups"] if g["taskGroupId"] == group
        ]
        return found

    queue.reportCompleted(a, "0")
    queue.reportFailed(b, "0")
    wait_for(lambda: len(resolved_events()) == 1)
    wait_for(lambda: not push()["unresolved"], timeout=15)
    queue.rerunTask(b)
    wait_for(lambda: push()["unresolved"] and push()["counts"]["unresolved"] == 1, timeout=15)  # b runs again
    assert len(resolved_events()) == 1
    queue.claimTask(b, "1", WORKER)
    queue.reportCompleted(b, "1")
    wait_for(lambda: len(resolved_events()) == 2)
    wait_for(lambda: not push()["unresolved"], timeout=15)


def test_change_task_priority_requeues_pending_work(queue):
    tq = task_queue_id()
    first, second = slugid(), slugid()
    queue.createTask(first, task_definition(taskQueueId=tq, priority="high"))
    queue.createTask(second, task_definition(taskQueueId=tq, priority="lowest"))
    status = queue.changeTaskPriority(second, {"newPriority": "highest"})["status"]
    assert status["priority"] == "highest" and queue.task(second)["priority"] == "highest"
    order = [queue.claimWork(tq, {**WORKER, "tasks": 1})["tasks"][0]["status"]["taskId"] for _ in range(2)]
    assert order == [second, first]
    assert queue.claimWork(tq, {**WORKER, "tasks": 1})["tasks"] == []  # the old hint claims nothing
    expect_error(409, "RequestConflict", queue.changeTaskPriority, second, {"newPriority": "highest"})
    queue.reportCompleted(second, "0")
    expect_error(409, "RequestConflict", queue.changeTaskPriority, second, {"newPriority": "low"})
    expect_error(400, "InputValidationError", queue.changeTaskPriority, first, {"newPriority": "normal"})
    expect_error(404, "ResourceNotFound", queue.changeTaskPriority, slugid(), {"newPriority": "low"})


def test_change_task_group_priority(queue):
    group = slugid()
    tq = task_queue_id()
    ids = in_group(queue, group, 3, taskQueueId=tq, schedulerId="s1")
    queue.claimTask(ids[0], "0", WORKER)
    queue.reportCompleted(ids[0], "0")
    result = queue.changeTaskGroupPriority(group, {"newPriority": "very-high"})
    assert result == {
        "taskGroupId": group,
        "schedulerId": "s1",
        "newPriority": "very-high",
        "tasksAffected": 2,
        "taskIds": result["taskIds"],
    }
    assert sorted(result["taskIds"]) == sorted(ids[1:])
    assert {queue.task(t)["priority"] for t in ids[1:]} == {"very-high"}
    assert queue.task(ids[0])["priority"] == "lowest"


@pytest.fixture(scope="module")
def expiring_host(host_factory):
    return host_factory(expiry_schedule="*/1 * * * * *", expiry_delay=0, deadline_delay=0, claim_work_wait=1)


def test_expired_tasks_groups_and_edges_are_deleted(expiring_host):
    queue = expiring_host.client()
    # The host's first createTask is slow (cold start); on a busy machine it took more than the 2 s deadline
    # below, and the dependent task was refused for a deadline in the past. So the keeper goes first.
    keeper = slugid()
    queue.createTask(keeper, task_definition())
    now = timeutil.now()
    short = {
        "created": timeutil.iso(now),
        "deadline": timeutil.iso(now + dt.timedelta(seconds=3)),
        "expires": timeutil.iso(now + dt.timedelta(seconds=4)),
    }
    group = slugid()
    dep = slugid()
    queue.createTask(dep, task_definition(taskGroupId=group, **short))
    waiting = slugid()
    queue.createTask(waiting, task_definition(taskGroupId=group, dependencies=[dep], **short))
    storage = expiring_host.env
    # its events are recorded
    assert {f"task:{dep}", f"events:{dep}", f"event:00000001:{dep}"} <= _row_keys(storage, "Tasks", dep)
    wait_for(lambda: _gone(queue, dep) and _gone(queue, waiting), timeout=20, interval=0.5)
    # The group goes after its last member's task row, in the same expiry pass: a moment later.
    wait_for(lambda: _gone(queue, group, call=queue.getTaskGroup), timeout=10, interval=0.2)
    expect_error(404, "ResourceNotFound", queue.listTaskGroup, group)
    expect_error(404, "ResourceNotFound", queue.listDependentTasks, dep)
    assert queue.status(keeper)["status"]["state"] == "pending"

    # Their events and dispatch cursors went with them, the group's too.
    def left() -> set[str]:
        return (
            _row_keys(storage, "Tasks", dep) | _row_keys(storage, "Tasks", waiting) | _row_keys(storage, "Tasks", group)
        )

    try:
        wait_for(lambda: not left(), timeout=20, interval=0.5)
    except AssertionError:
        raise AssertionError(f"rows left: {sorted(left())}") from None


def _row_keys(env, table, partition):
    """The row keys of a partition, in the account (of a sharded host's) that holds it."""
    import asyncio

    from shared.storage.base import query_all
    from tests.conftest import stores_of

    async def keys():
        tables, queues = stores_of(env)
        try:
            return {e.row_key for e in await query_all(tables, table, "PartitionKey eq @pk", {"pk": partition})}
        finally:
            await tables.close()
            await queues.close()

    return asyncio.run(keys())


def _gone(queue, task_id, call=None):
    from taskcluster.exceptions import TaskclusterRestFailure

    try:
        (call or queue.status)(task_id)
    except TaskclusterRestFailure as exc:
        return exc.status_code == 404
    return False
