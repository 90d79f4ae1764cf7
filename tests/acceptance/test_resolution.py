"""reportCompleted / reportFailed / reportException, retries, rerunTask, cancelTask, scheduleTask."""

from __future__ import annotations

import pytest

from tests.conftest import expect_error, slugid, task_definition

WORKER = {"workerGroup": "wg-1", "workerId": "worker-1"}


def running_task(queue, **overrides):
    task_id = slugid()
    queue.createTask(task_id, task_definition(**overrides))
    queue.claimTask(task_id, "0", WORKER)
    return task_id


@pytest.mark.parametrize("report, state", [("reportCompleted", "completed"), ("reportFailed", "failed")])
def test_report_resolves_the_run_and_is_idempotent(queue, report, state):
    task_id = running_task(queue)
    status = getattr(queue, report)(task_id, "0")["status"]
    run = status["runs"][0]
    assert status["state"] == state and run["state"] == state and run["reasonResolved"] == state
    assert "resolved" in run and "takenUntil" in run
    assert getattr(queue, report)(task_id, "0")["status"] == status  # the same report again


def test_conflicting_resolutions_are_409(queue):
    task_id = running_task(queue)
    queue.reportCompleted(task_id, "0")
    expect_error(409, "RequestConflict", queue.reportFailed, task_id, "0")
    expect_error(409, "RequestConflict", queue.reportException, task_id, "0", {"reason": "internal-error"})
    assert queue.status(task_id)["status"]["runs"][0]["state"] == "completed"


def test_reports_on_a_run_that_is_not_running_are_409(queue):
    task_id = slugid()
    queue.createTask(task_id, task_definition())
    expect_error(409, "RequestConflict", queue.reportCompleted, task_id, "0")
    expect_error(409, "RequestConflict", queue.reportFailed, task_id, "0")
    expect_error(409, "RequestConflict", queue.reportException, task_id, "0", {"reason": "worker-shutdown"})
    assert queue.status(task_id)["status"]["state"] == "pending"
    expect_error(404, "ResourceNotFound", queue.reportCompleted, task_id, "3")
    expect_error(404, "ResourceNotFound", queue.reportCompleted, slugid(), "0")


@pytest.mark.parametrize("reason, reason_created", [("worker-shutdown", "retry"), ("intermittent-task", "task-retry")])
def test_retryable_exceptions_add_a_pending_run(queue, reason, reason_created):
    task_id = running_task(queue, retries=2)
    status = queue.reportException(task_id, "0", {"reason": reason})["status"]
    assert status["state"] == "pending"
    assert status["retriesLeft"] == 1
    assert [r["state"] for r in status["runs"]] == ["exception", "pending"]
    assert status["runs"][0]["reasonResolved"] == reason
    assert status["runs"][1]["reasonCreated"] == reason_created
    # The same report again is a no-op even though a retry run was added.
    assert queue.reportException(task_id, "0", {"reason": reason})["status"] == status
    expect_error(409, "RequestConflict", queue.reportException, task_id, "0", {"reason": "internal-error"})


@pytest.mark.parametrize("reason", ["malformed-payload", "resource-unavailable", "internal-error"])
def test_other_exceptions_are_final(queue, reason):
    task_id = running_task(queue, retries=3)
    status = queue.reportException(task_id, "0", {"reason": reason})["status"]
    assert status["state"] == "exception" and len(status["runs"]) == 1
    assert status["runs"][0]["reasonResolved"] == reason
    assert status["retriesLeft"] == 3


def test_retries_run_out(queue):
    task_id = running_task(queue, retries=1)
    queue.reportException(task_id, "0", {"reason": "worker-shutdown"})
    queue.claimTask(task_id, "1", WORKER)
    status = queue.reportException(task_id, "1", {"reason": "worker-shutdown"})["status"]
    assert status["state"] == "exception" and len(status["runs"]) == 2 and status["retriesLeft"] == 0


def test_superseded_is_not_a_reportable_reason(queue):
    task_id = running_task(queue)
    expect_error(400, "InputValidationError", queue.reportException, task_id, "0", {"reason": "superseded"})
    assert queue.status(task_id)["status"]["state"] == "running"


def test_rerun_adds_a_run_and_resets_retries(queue):
    task_id = running_task(queue, retries=2)
    queue.reportException(task_id, "0", {"reason": "worker-shutdown"})  # retriesLeft 1
    queue.claimTask(task_id, "1", WORKER)
    queue.reportFailed(task_id, "1")
    status = queue.rerunTask(task_id)["status"]
    assert status["state"] == "pending" and status["runs"][2]["reasonCreated"] == "rerun"
    assert status["retriesLeft"] == 2
    assert queue.rerunTask(task_id)["status"] == status  # already pending: a no-op
    queue.claimTask(task_id, "2", WORKER)
    assert queue.rerunTask(task_id)["status"]["state"] == "running"  # running: a no-op too


def test_rerun_stops_at_50_runs(queue):
    task_id = running_task(queue, retries=0)
    queue.reportCompleted(task_id, "0")
    for run_id in range(1, 50):
        status = queue.rerunTask(task_id)["status"]
        queue.claimTask(task_id, str(run_id), WORKER)
        queue.reportCompleted(task_id, str(run_id))
    assert len(status["runs"]) == 50
    body = expect_error(409, "RequestConflict", queue.rerunTask, task_id)
    assert "50" in body["message"]
    assert len(queue.status(task_id)["status"]["runs"]) == 50


def test_rerun_and_cancel_of_missing_task_are_404(queue):
    for call in (queue.rerunTask, queue.cancelTask, queue.scheduleTask):
        expect_error(404, "ResourceNotFound", call, slugid())


def test_cancel_pending_task(queue):
    task_id = slugid()
    queue.createTask(task_id, task_definition())
    status = queue.cancelTask(task_id)["status"]
    assert status["state"] == "exception"
    assert status["runs"][0]["reasonResolved"] == "canceled" and status["runs"][0]["reasonCreated"] == "scheduled"
    assert queue.cancelTask(task_id)["status"] == status
    expect_error(409, "RequestConflict", queue.claimTask, task_id, "0", WORKER)


def test_cancel_running_task_stops_the_worker(queue):
    task_id = running_task(queue)
    status = queue.cancelTask(task_id)["status"]
    assert status["runs"][0]["state"] == "exception" and status["runs"][0]["reasonResolved"] == "canceled"
    expect_error(409, "RequestConflict", queue.reclaimTask, task_id, "0")
    expect_error(409, "RequestConflict", queue.reportCompleted, task_id, "0")


def test_cancel_unscheduled_task_adds_an_exception_run(queue):
    task_id = slugid()
    queue.createTask(task_id, task_definition(dependencies=[task_id]))  # self-dependency: unscheduled
    assert queue.status(task_id)["status"]["state"] == "unscheduled"
    status = queue.cancelTask(task_id)["status"]
    assert status["runs"] == [
        {
            "runId": 0,
            "state": "exception",
            "reasonCreated": "exception",
            "reasonResolved": "canceled",
            "scheduled": status["runs"][0]["scheduled"],
            "resolved": status["runs"][0]["resolved"],
        }
    ]


def test_cancel_resolved_task_changes_nothing(queue):
    task_id = running_task(queue)
    done = queue.reportCompleted(task_id, "0")["status"]
    assert queue.cancelTask(task_id)["status"] == done


def test_schedule_task_schedules_an_unscheduled_task_once(queue):
    task_id = slugid()
    definition = task_definition(dependencies=[task_id])
    assert queue.createTask(task_id, definition)["status"]["runs"] == []
    status = queue.scheduleTask(task_id)["status"]
    assert status["state"] == "pending" and status["runs"][0]["reasonCreated"] == "scheduled"
    assert queue.scheduleTask(task_id)["status"] == status
    claims = queue.claimWork(definition["taskQueueId"], {**WORKER, "tasks": 1})["tasks"]
    assert [c["status"]["taskId"] for c in claims] == [task_id]


def test_task_with_completed_dependency_is_scheduled_at_once(queue):
    dependency = running_task(queue)
    queue.reportCompleted(dependency, "0")
    task_id = slugid()
    status = queue.createTask(task_id, task_definition(dependencies=[dependency]))["status"]
    assert status["state"] == "pending"
    pending_dep = slugid()
    queue.createTask(pending_dep, task_definition())
    waiting = slugid()
    assert queue.createTask(waiting, task_definition(dependencies=[pending_dep]))["status"]["state"] == "unscheduled"
