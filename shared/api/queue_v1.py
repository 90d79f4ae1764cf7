"""Queue API v1: routes, scope templates (modern Taskcluster's, reference section 1b) and handlers.

Handlers parse, authorize, call one service operation and return its result; the rules live in the service.
"""

from __future__ import annotations

import time
from typing import Any

from shared import errors, polling
from shared.api.framework import Api, Call
from shared.domain.tasks import PRIORITIES

api = Api("queue", "v1")
STARTED = time.monotonic()


def _project_or_scheduler(action: str) -> dict[str, Any]:
    return {"AnyOf": [
        f"queue:{action}:<schedulerId>/<taskGroupId>/<taskId>",
        f"queue:{action}-in-project:<projectId>",
        {"AllOf": [f"queue:{action}", "assume:scheduler-id:<schedulerId>/<taskGroupId>"]},
    ]}


def _task_params(definition: dict[str, Any]) -> dict[str, Any]:
    return {key: definition[key] for key in ("schedulerId", "taskGroupId", "projectId", "provisionerId",
                                             "workerType", "taskQueueId")}


@api.route("GET", "/ping", name="ping", title="Ping Server", scopes=None)
async def ping(call: Call) -> dict[str, Any]:
    return {"alive": True, "uptime": round(time.monotonic() - STARTED, 3)}


@api.route("GET", "/__heartbeat__", name="heartbeat", title="Heartbeat", scopes=None)
async def heartbeat(call: Call) -> dict[str, Any]:
    return {}


@api.route("GET", "/task/<taskId>", name="task", title="Get Task Definition",
           scopes="queue:get-task:<taskId>", output="task")
async def get_task(call: Call) -> dict[str, Any]:
    await call.authorize()
    return await call.service.task(call.params["taskId"])


@api.route("GET", "/task/<taskId>/status", name="status", title="Get task status",
           scopes="queue:status:<taskId>", output="task-status-response")
async def get_status(call: Call) -> dict[str, Any]:
    await call.authorize()
    return {"status": await call.service.status(call.params["taskId"])}


@api.route("POST", "/tasks", name="tasks", title="Get Multiple Task Definitions",
           scopes={"AllOf": [{"for": "taskId", "in": "taskIds", "each": "queue:get-task:<taskId>"}]},
           input="tasks-request", output="tasks-response", stability="experimental")
async def get_tasks(call: Call) -> dict[str, Any]:
    await call.authorize(taskIds=call.body["taskIds"])
    tasks = await call.service.load_many(call.body["taskIds"])
    return {"tasks": [{"taskId": t.task_id, "task": t.definition} for t in tasks]}


@api.route("POST", "/tasks/status", name="statuses", title="Get Multiple Task Statuses",
           scopes={"AllOf": [{"for": "taskId", "in": "taskIds", "each": "queue:status:<taskId>"}]},
           input="tasks-request", output="tasks-statuses-response", stability="experimental")
async def get_statuses(call: Call) -> dict[str, Any]:
    await call.authorize(taskIds=call.body["taskIds"])
    tasks = await call.service.load_many(call.body["taskIds"])
    return {"statuses": [{"taskId": t.task_id, "status": t.status()} for t in tasks]}


CREATE_TASK_SCOPES = {"AllOf": [
    {"for": "scope", "in": "scopes", "each": "<scope>"},
    {"for": "route", "in": "routes", "each": "queue:route:<route>"},
    "queue:create-task:project:<projectId>",
    "queue:scheduler-id:<schedulerId>",
    {"AnyOf": [{"for": "priority", "in": "priorities",
                "each": "queue:create-task:<priority>:<provisionerId>/<workerType>"}]},
]}


@api.route("PUT", "/task/<taskId>", name="createTask", title="Create New Task", scopes=CREATE_TASK_SCOPES,
           input="create-task-request", output="task-status-response")
async def create_task(call: Call) -> dict[str, Any]:
    body = call.body
    tq = body.get("taskQueueId") or f"{body.get('provisionerId')}/{body.get('workerType')}"
    prov, _, wt = tq.partition("/")
    # A scope for a higher priority permits every lower one ("highest" permits all).
    priorities = PRIORITIES[:PRIORITIES.index(body["priority"]) + 1]
    await call.authorize(scopes=body["scopes"], routes=body["routes"], projectId=body["projectId"],
                         schedulerId=body["schedulerId"], priorities=list(priorities),
                         provisionerId=prov, workerType=wt)
    return {"status": await call.service.create_task(call.params["taskId"], body)}


async def _authorize_for_task(call: Call) -> str:
    """Authorize a request whose scopes name the stored task's schedulerId, taskGroupId or projectId."""
    task_id = call.params["taskId"]
    await call.authorize(**_task_params(await call.service.task(task_id)))
    return task_id


@api.route("POST", "/task/<taskId>/schedule", name="scheduleTask", title="Schedule Defined Task",
           scopes=_project_or_scheduler("schedule-task"), output="task-status-response")
async def schedule_task(call: Call) -> dict[str, Any]:
    return {"status": await call.service.schedule_task(await _authorize_for_task(call))}


@api.route("POST", "/task/<taskId>/rerun", name="rerunTask", title="Rerun a Resolved Task",
           scopes=_project_or_scheduler("rerun-task"), output="task-status-response")
async def rerun_task(call: Call) -> dict[str, Any]:
    return {"status": await call.service.rerun_task(await _authorize_for_task(call))}


@api.route("POST", "/task/<taskId>/cancel", name="cancelTask", title="Cancel Task",
           scopes=_project_or_scheduler("cancel-task"), output="task-status-response")
async def cancel_task(call: Call) -> dict[str, Any]:
    return {"status": await call.service.cancel_task(await _authorize_for_task(call))}


@api.route("GET", "/poll-task-url/<taskQueueId>", name="pollTaskUrls", title="Get Urls to Poll Pending Tasks",
           scopes="queue:poll-task-urls:<taskQueueId>", output="poll-task-urls-response-ext",
           stability="experimental")
async def poll_task_urls(call: Call) -> dict[str, Any]:
    """Signed URLs to get and delete the task queue's pending hints straight from Azure Queue Storage, highest
    priority first (`docs/polling.md`); hand what a poll returned to claimWork as `xmlMessage`."""
    await call.authorize()
    return await polling.poll_task_urls(call.service, call.params["taskQueueId"])


@api.route("POST", "/claim-work/<taskQueueId>", name="claimWork", title="Claim Work",
           scopes={"AllOf": ["queue:claim-work:<taskQueueId>", "queue:worker-id:<workerGroup>/<workerId>"]},
           input="claim-work-request-ext", output="claim-work-response")
async def claim_work(call: Call) -> dict[str, Any]:
    """Long-polls the pending queues for up to 20 s; or, given `xmlMessage` (this queue's extension: what a
    signedPollUrl of pollTaskUrls returned), claims the runs those signed hints name, at once."""
    body = call.body
    await call.authorize(workerGroup=body["workerGroup"], workerId=body["workerId"])
    task_queue_id = call.params["taskQueueId"]
    if "xmlMessage" in body:
        claims = await polling.claim_polled(call.service, task_queue_id, body["workerGroup"], body["workerId"],
                                            body["tasks"], body["xmlMessage"])
        return {"tasks": [call.service.claim_response(c, include_task=True) for c in claims]}
    return {"tasks": await call.service.claim_work(task_queue_id, body["workerGroup"], body["workerId"],
                                                   body["tasks"], gone=call.client_gone)}


@api.route("POST", "/task/<taskId>/runs/<runId>/claim", name="claimTask", title="Claim Task",
           scopes={"AllOf": ["queue:claim-task:<provisionerId>/<workerType>",
                             "queue:worker-id:<workerGroup>/<workerId>"]},
           input="task-claim-request", output="task-claim-response", stability="deprecated")
async def claim_task(call: Call) -> dict[str, Any]:
    task_id, body = call.params["taskId"], call.body
    definition = await call.service.task(task_id)
    await call.authorize(provisionerId=definition["provisionerId"], workerType=definition["workerType"],
                         workerGroup=body["workerGroup"], workerId=body["workerId"])
    return await call.service.claim_task(task_id, definition["taskQueueId"], call.run_id(), body["workerGroup"],
                                         body["workerId"])


@api.route("POST", "/task/<taskId>/runs/<runId>/reclaim", name="reclaimTask", title="Reclaim task",
           scopes="queue:reclaim-task:<taskId>/<runId>", output="task-reclaim-response")
async def reclaim_task(call: Call) -> dict[str, Any]:
    await call.authorize()
    return await call.service.reclaim_task(call.params["taskId"], call.run_id())


async def _resolve(call: Call, state: str, reason: str) -> dict[str, Any]:
    await call.authorize()
    return {"status": await call.service.resolve(call.params["taskId"], call.run_id(), state, reason)}


@api.route("POST", "/task/<taskId>/runs/<runId>/completed", name="reportCompleted", title="Report Run Completed",
           scopes="queue:resolve-task:<taskId>/<runId>", output="task-status-response")
async def report_completed(call: Call) -> dict[str, Any]:
    return await _resolve(call, "completed", "completed")


@api.route("POST", "/task/<taskId>/runs/<runId>/failed", name="reportFailed", title="Report Run Failed",
           scopes="queue:resolve-task:<taskId>/<runId>", output="task-status-response")
async def report_failed(call: Call) -> dict[str, Any]:
    return await _resolve(call, "failed", "failed")


@api.route("POST", "/task/<taskId>/runs/<runId>/exception", name="reportException",
           title="Report Task Exception", scopes="queue:resolve-task:<taskId>/<runId>",
           input="task-exception-request", output="task-status-response")
async def report_exception(call: Call) -> dict[str, Any]:
    return await _resolve(call, "exception", call.body["reason"])


def _paging(call: Call) -> dict[str, Any]:
    """`continuationToken` and `limit` (1 to 1000, default 1000) from the query string."""
    raw = call.query.get("limit", "1000")
    if not raw.isdigit() or not 1 <= int(raw) <= 1000:
        raise errors.InvalidRequestArguments("limit must be a whole number from 1 to 1000, not `{limit}`", limit=raw)
    return {"limit": int(raw), "continuation": call.query.get("continuationToken") or None}


@api.route("GET", "/task/<taskId>/dependents", name="listDependentTasks", title="List Dependent Tasks",
           scopes="queue:list-dependent-tasks:<taskId>", output="list-dependent-tasks-response")
async def list_dependent_tasks(call: Call) -> dict[str, Any]:
    await call.authorize()
    return await call.service.list_dependents(call.params["taskId"], **_paging(call))


@api.route("GET", "/task/<taskId>/events", name="listTaskEvents", title="List Task Events",
           scopes="queue:status:<taskId>", output="list-events-response", stability="experimental")
async def list_task_events(call: Call) -> dict[str, Any]:
    """Not in Taskcluster: the task's recorded events in order, also when no event bus is configured."""
    await call.authorize()
    return await call.service.task_events(call.params["taskId"], **_paging(call))


@api.route("GET", "/task-group/<taskGroupId>/events", name="listTaskGroupEvents", title="List Task Group Events",
           scopes="queue:list-task-group:<taskGroupId>", output="list-events-response", stability="experimental")
async def list_task_group_events(call: Call) -> dict[str, Any]:
    """Not in Taskcluster: the task group's recorded events (sealed, resolved, priority changed) in order."""
    await call.authorize()
    return await call.service.task_group_events(call.params["taskGroupId"], **_paging(call))


@api.route("POST", "/task/<taskId>/priority", name="changeTaskPriority", title="Change Task Priority",
           scopes={"AnyOf": ["queue:change-task-priority:<taskId>",
                             "queue:change-task-priority-in-queue:<taskQueueId>"]},
           input="change-task-priority-request", output="task-status-response", stability="experimental")
async def change_task_priority(call: Call) -> dict[str, Any]:
    task_id = await _authorize_for_task(call)
    return {"status": await call.service.change_task_priority(task_id, call.body["newPriority"])}


@api.route("GET", "/task-group/<taskGroupId>/list", name="listTaskGroup", title="List Task Group",
           scopes="queue:list-task-group:<taskGroupId>", output="list-task-group-response")
async def list_task_group(call: Call) -> dict[str, Any]:
    await call.authorize()
    return await call.service.list_task_group(call.params["taskGroupId"], **_paging(call))


@api.route("GET", "/task-group/<taskGroupId>", name="getTaskGroup", title="Get Task Group",
           scopes="queue:list-task-group:<taskGroupId>", output="task-group-response")
async def get_task_group(call: Call) -> dict[str, Any]:
    await call.authorize()
    return await call.service.task_group(call.params["taskGroupId"])


async def _authorize_for_group(call: Call) -> str:
    """Authorize a request whose scopes name the group's schedulerId."""
    group_id = call.params["taskGroupId"]
    group = await call.service.task_group(group_id)
    await call.authorize(schedulerId=group["schedulerId"])
    return group_id


@api.route("POST", "/task-group/<taskGroupId>/seal", name="sealTaskGroup", title="Seal Task Group",
           scopes="queue:seal-task-group:<schedulerId>/<taskGroupId>", output="task-group-response",
           stability="experimental")
async def seal_task_group(call: Call) -> dict[str, Any]:
    return await call.service.seal_task_group(await _authorize_for_group(call))


@api.route("POST", "/task-group/<taskGroupId>/cancel", name="cancelTaskGroup", title="Cancel Task Group",
           scopes="queue:cancel-task-group:<schedulerId>/<taskGroupId>", output="cancel-task-group-response",
           stability="experimental")
async def cancel_task_group(call: Call) -> dict[str, Any]:
    return await call.service.cancel_task_group(await _authorize_for_group(call))


@api.route("POST", "/task-group/<taskGroupId>/priority", name="changeTaskGroupPriority",
           title="Change Task Group Priority", scopes="queue:change-task-group-priority:<schedulerId>/<taskGroupId>",
           input="change-task-priority-request", output="task-group-priority-change-response",
           stability="experimental")
async def change_task_group_priority(call: Call) -> dict[str, Any]:
    group_id = await _authorize_for_group(call)
    return await call.service.change_task_group_priority(group_id, call.body["newPriority"])


from shared.api import queue_v1_artifacts, queue_v1_workers  # noqa: E402,F401  (register their routes on `api`)
