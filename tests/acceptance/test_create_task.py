"""createTask, task, status, tasks, statuses through the official client."""

from __future__ import annotations

import datetime as dt

import httpx
import pytest

from shared import timeutil
from tests.conftest import expect_error, slugid, task_definition, task_queue_id


def test_defaults_are_applied_and_returned(queue):
    task_id = slugid()
    definition = task_definition()
    status = queue.createTask(task_id, definition)["status"]
    assert status["state"] == "pending"
    assert status["runs"] == [
        {"runId": 0, "state": "pending", "reasonCreated": "scheduled", "scheduled": status["runs"][0]["scheduled"]}
    ]
    task = queue.task(task_id)
    provisioner, worker_type = definition["taskQueueId"].split("/")
    assert task["provisionerId"] == provisioner and task["workerType"] == worker_type
    assert task["schedulerId"] == "-"
    assert task["projectId"] == "none"
    assert task["taskGroupId"] == task_id
    assert task["priority"] == "lowest"
    assert task["retries"] == 5 and status["retriesLeft"] == 5
    assert task["dependencies"] == [] and task["routes"] == [] and task["scopes"] == []
    assert task["requires"] == "all-completed"
    assert task["tags"] == {} and task["extra"] == {}
    deadline = timeutil.parse(definition["deadline"])
    assert timeutil.parse(task["expires"]) == deadline + dt.timedelta(days=365)
    assert queue.status(task_id)["status"] == status


def test_provisioner_and_worker_type_give_the_task_queue(queue):
    task_id = slugid()
    definition = task_definition(taskQueueId=None, provisionerId="prov-x", workerType="wt-y")
    status = queue.createTask(task_id, definition)["status"]
    assert status["taskQueueId"] == "prov-x/wt-y"
    assert queue.task(task_id)["taskQueueId"] == "prov-x/wt-y"


def test_same_definition_again_is_idempotent(queue):
    task_id = slugid()
    definition = task_definition()
    first = queue.createTask(task_id, definition)["status"]
    again = queue.createTask(task_id, definition)["status"]
    assert again == first


def test_same_definition_with_other_date_formats_is_idempotent(queue):
    task_id = slugid()
    now = timeutil.now().replace(microsecond=123000)
    deadline = now + dt.timedelta(hours=2)
    definition = task_definition(
        created=now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"), deadline=deadline.strftime("%Y-%m-%dT%H:%M:%S.123+00:00")
    )
    first = queue.createTask(task_id, definition)["status"]
    variant = dict(definition, created=timeutil.iso(now), deadline=timeutil.iso(deadline))
    assert queue.createTask(task_id, variant)["status"] == first


def test_different_definition_conflicts_and_changes_nothing(queue):
    task_id = slugid()
    definition = task_definition()
    queue.createTask(task_id, definition)
    other = dict(definition, payload={"command": ["something", "else"]})
    body = expect_error(409, "RequestConflict", queue.createTask, task_id, other)
    assert task_id in body["message"]
    assert queue.task(task_id)["payload"] == definition["payload"]


def test_task_group_belongs_to_one_scheduler(queue):
    group = slugid()
    queue.createTask(slugid(), task_definition(taskGroupId=group, schedulerId="sched-a"))
    queue.createTask(slugid(), task_definition(taskGroupId=group, schedulerId="sched-a"))
    lost = slugid()
    expect_error(
        409, "RequestConflict", queue.createTask, lost, task_definition(taskGroupId=group, schedulerId="sched-b")
    )
    expect_error(404, "ResourceNotFound", queue.status, lost)


def _now_plus(**delta: float) -> str:
    return timeutil.iso(timeutil.now() + dt.timedelta(**delta))


@pytest.mark.parametrize(
    "overrides, fragment",
    [
        ({"created": _now_plus(minutes=-20)}, "within 15 minutes"),
        ({"created": _now_plus(minutes=20), "deadline": _now_plus(minutes=30)}, "within 15 minutes"),
        ({"deadline": _now_plus(minutes=-1)}, "in the past"),
        ({"deadline": _now_plus(days=5, minutes=20)}, "at most 5 days"),
        ({"expires": _now_plus(minutes=30)}, "expires must not be before deadline"),
        ({"scopes": ["queue:foo:**"]}, "must not end in `**`"),
        ({"taskQueueId": "prov-a/wt-a", "provisionerId": "prov-b", "workerType": "wt-a"}, "does not match"),
        ({"taskQueueId": None}, "Either taskQueueId"),
        ({"taskQueueId": None, "provisionerId": "prov-only"}, "Either taskQueueId"),
    ],
    ids=[
        "created-past",
        "created-future",
        "deadline-past",
        "deadline-too-far",
        "expires-before-deadline",
        "double-star-scope",
        "task-queue-mismatch",
        "no-task-queue",
        "no-worker-type",
    ],
)
def test_invalid_definitions_are_refused_and_leave_nothing(queue, overrides, fragment):
    task_id = slugid()
    body = expect_error(400, "InputError", queue.createTask, task_id, task_definition(**overrides))
    assert fragment in body["message"]
    assert body["requestInfo"]["method"] == "createTask"
    assert body["requestInfo"]["params"] == {"taskId": task_id}
    expect_error(404, "ResourceNotFound", queue.status, task_id)


@pytest.mark.parametrize(
    "overrides",
    [
        {"priority": "normal"},  # removed from the modern API
        {"retries": 50},
        {"payload": "not an object"},
        {"metadata": {"name": "x"}},
        {"routes": ["x" * 250]},
        {"taskQueueId": "prov/UPPER"},
        {"unknownField": 1},
        {"deadline": "tomorrow"},
    ],
)
def test_schema_violations_are_input_validation_errors(queue, overrides):
    task_id = slugid()
    body = expect_error(400, "InputValidationError", queue.createTask, task_id, task_definition(**overrides))
    assert "create-task-request" in body["message"]
    expect_error(404, "ResourceNotFound", queue.status, task_id)


def test_invalid_task_id_is_invalid_request_arguments(queue):
    body = expect_error(400, "InvalidRequestArguments", queue.createTask, "not-a-slugid", task_definition())
    assert "taskId" in body["message"]


def test_malformed_json_is_refused(queue_host):
    task_id = slugid()
    response = httpx.put(
        f"{queue_host.root_url}/api/queue/v1/task/{task_id}",
        content=b"{not json",
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 400
    assert response.json()["code"] == "MalformedPayload"
    assert httpx.get(f"{queue_host.root_url}/api/queue/v1/task/{task_id}/status").status_code == 404


def test_unknown_routes_and_methods_are_404(queue_host):
    for method, path in [
        ("GET", "/api/queue/v1/no-such-thing"),
        ("DELETE", f"/api/queue/v1/task/{slugid()}"),
        ("GET", "/api/other/v1/ping"),
    ]:
        response = httpx.request(method, queue_host.root_url + path)
        assert response.status_code == 404
        assert response.json()["code"] == "ResourceNotFound"
        assert "requestInfo" in response.json()


def test_missing_task_is_404(queue):
    task_id = slugid()
    body = expect_error(404, "ResourceNotFound", queue.task, task_id)
    assert task_id in body["message"]
    expect_error(404, "ResourceNotFound", queue.status, task_id)


def test_large_payload_is_stored_whole(queue):
    task_id = slugid()
    payload = {"blob": "x" * 150_000, "items": list(range(5000))}
    queue.createTask(task_id, task_definition(payload=payload))
    assert queue.task(task_id)["payload"] == payload


def test_too_large_task_is_413(queue):
    body = expect_error(
        413, "InputTooLarge", queue.createTask, slugid(), task_definition(payload={"blob": "x" * 500_000})
    )
    assert "at most" in body["message"]


def test_tasks_and_statuses_return_known_tasks_in_order(queue):
    ids = [slugid() for _ in range(3)]
    for task_id in ids:
        queue.createTask(task_id, task_definition())
    unknown = slugid()
    tasks = queue.tasks({"taskIds": [ids[2], unknown, ids[0], ids[1]]})
    assert [t["taskId"] for t in tasks["tasks"]] == [ids[2], ids[0], ids[1]]
    assert tasks["tasks"][0]["task"] == queue.task(ids[2])
    statuses = queue.statuses({"taskIds": [unknown, ids[1]]})
    assert [s["taskId"] for s in statuses["statuses"]] == [ids[1]]
    assert statuses["statuses"][0]["status"]["state"] == "pending"


def test_dependency_must_exist(queue):
    missing = slugid()
    task_id = slugid()
    body = expect_error(400, "InputError", queue.createTask, task_id, task_definition(dependencies=[missing]))
    assert missing in body["message"]
    expect_error(404, "ResourceNotFound", queue.status, task_id)


def test_task_queue_ids_are_separate(queue):
    a, b = task_queue_id(), task_queue_id()
    queue.createTask(slugid(), task_definition(taskQueueId=a))
    assert queue.claimWork(b, {"workerGroup": "g", "workerId": "w", "tasks": 1})["tasks"] == []
