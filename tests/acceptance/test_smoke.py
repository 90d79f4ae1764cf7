from __future__ import annotations

from tests.conftest import slugid, task_definition


def test_create_claim_complete(queue):
    task_id = slugid()
    definition = task_definition()
    status = queue.createTask(task_id, definition)["status"]
    assert status["state"] == "pending"
    claims = queue.claimWork(definition["taskQueueId"], {"workerGroup": "wg", "workerId": "w1", "tasks": 1})
    assert [c["status"]["taskId"] for c in claims["tasks"]] == [task_id]
    done = queue.reportCompleted(task_id, "0")
    assert done["status"]["state"] == "completed"
