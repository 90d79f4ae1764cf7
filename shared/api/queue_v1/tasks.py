"""Queue API v1: tasks (definitions, statuses, createTask, schedule, rerun, cancel, dependents, events, priority)."""

from __future__ import annotations

from typing import Any

from shared.api import answers
from shared.api.queue_v1.common import (
    PAGING,
    QueueCall,
    api,
    authorize_for_task,
    paging,
    project_or_scheduler,
)
from shared.domain.tasks import PRIORITIES


@api.route(
    "GET", "/task/<taskId>", name="task", title="Get Task Definition", scopes="queue:get-task:<taskId>", output="task"
)
async def get_task(call: QueueCall) -> dict[str, Any]:
    await call.authorize()
    return answers.definition(await call.context.queries.task(call.params["taskId"]))


@api.route(
    "GET",
    "/task/<taskId>/status",
    name="status",
    title="Get task status",
    scopes="queue:status:<taskId>",
    output="task-status-response",
)
async def get_status(call: QueueCall) -> dict[str, Any]:
    await call.authorize()
    return answers.status(await call.context.queries.task(call.params["taskId"]))


@api.route(
    "POST",
    "/tasks",
    name="tasks",
    title="Get Multiple Task Definitions",
    scopes={"AllOf": [{"for": "taskId", "in": "taskIds", "each": "queue:get-task:<taskId>"}]},
    input="tasks-request",
    output="tasks-response",
    stability="experimental",
)
async def get_tasks(call: QueueCall) -> dict[str, Any]:
    await call.authorize(taskIds=call.context.queries.bounded(call.body["taskIds"]))
    tasks = await call.context.queries.tasks_of(call.body["taskIds"])
    return {"tasks": [{"taskId": t.task_id, "task": t.definition} for t in tasks]}


@api.route(
    "POST",
    "/tasks/status",
    name="statuses",
    title="Get Multiple Task Statuses",
    scopes={"AllOf": [{"for": "taskId", "in": "taskIds", "each": "queue:status:<taskId>"}]},
    input="tasks-request",
    output="tasks-statuses-response",
    stability="experimental",
)
async def get_statuses(call: QueueCall) -> dict[str, Any]:
    await call.authorize(taskIds=call.context.queries.bounded(call.body["taskIds"]))
    tasks = await call.context.queries.tasks_of(call.body["taskIds"])
    return {"statuses": [{"taskId": t.task_id, "status": t.status()} for t in tasks]}


CREATE_TASK_SCOPES = {
    "AllOf": [
        {"for": "scope", "in": "scopes", "each": "<scope>"},
        {"for": "route", "in": "routes", "each": "queue:route:<route>"},
        "queue:create-task:project:<projectId>",
        "queue:scheduler-id:<schedulerId>",
        {
            "AnyOf": [
                {
                    "for": "priority",
                    "in": "priorities",
                    "each": "queue:create-task:<priority>:<provisionerId>/<workerType>",
                }
            ]
        },
    ]
}


@api.route(
    "PUT",
    "/task/<taskId>",
    name="createTask",
    title="Create New Task",
    scopes=CREATE_TASK_SCOPES,
    input="create-task-request",
    output="task-status-response",
)
async def create_task(call: QueueCall) -> dict[str, Any]:
    body = call.body
    tq = body.get("taskQueueId") or f"{body.get('provisionerId')}/{body.get('workerType')}"
    prov, _, wt = tq.partition("/")
    # A scope for a higher priority permits every lower one ("highest" permits all).
    priorities = PRIORITIES[: PRIORITIES.index(body["priority"]) + 1]
    await call.authorize(
        scopes=body["scopes"],
        routes=body["routes"],
        projectId=body["projectId"],
        schedulerId=body["schedulerId"],
        priorities=list(priorities),
        provisionerId=prov,
        workerType=wt,
    )
    return answers.status(await call.context.creation.create_task(call.params["taskId"], body))


@api.route(
    "POST",
    "/task/<taskId>/schedule",
    name="scheduleTask",
    title="Schedule Defined Task",
    scopes=project_or_scheduler("schedule-task"),
    output="task-status-response",
)
async def schedule_task(call: QueueCall) -> dict[str, Any]:
    return answers.status(await call.context.lifecycle.schedule_task(await authorize_for_task(call)))


@api.route(
    "POST",
    "/task/<taskId>/rerun",
    name="rerunTask",
    title="Rerun a Resolved Task",
    scopes=project_or_scheduler("rerun-task"),
    output="task-status-response",
)
async def rerun_task(call: QueueCall) -> dict[str, Any]:
    return answers.status(await call.context.lifecycle.rerun_task(await authorize_for_task(call)))


@api.route(
    "POST",
    "/task/<taskId>/rerun-when-ready",
    name="rerunTaskWhenReady",
    title="Rerun a Resolved Task Once Its Dependencies Completed",
    scopes=project_or_scheduler("rerun-task"),
    output="task-status-response",
    stability="experimental",
)
async def rerun_task_when_ready(call: QueueCall) -> dict[str, Any]:
    """Not in Taskcluster: rerunTask, but a task whose dependencies have not all completed (resolved, for
    `all-resolved`) is not run now: it gets its new run when the last of them completes, as a task that waits for
    its dependencies is scheduled; until then its status is unchanged. Rerunning a failed build and the tests its
    failure cancelled (the inspector's "Rerun failed") so runs no test ahead of the build. Same scopes and errors
    as rerunTask."""
    task, _ = await call.context.reruns.rerun_when_ready(await authorize_for_task(call))
    return answers.status(task)


@api.route(
    "POST",
    "/task/<taskId>/cancel",
    name="cancelTask",
    title="Cancel Task",
    scopes=project_or_scheduler("cancel-task"),
    output="task-status-response",
)
async def cancel_task(call: QueueCall) -> dict[str, Any]:
    return answers.status(await call.context.lifecycle.cancel_task(await authorize_for_task(call)))


@api.route(
    "GET",
    "/task/<taskId>/dependents",
    name="listDependentTasks",
    title="List Dependent Tasks",
    scopes="queue:list-dependent-tasks:<taskId>",
    output="list-dependent-tasks-response",
    query=PAGING,
)
async def list_dependent_tasks(call: QueueCall) -> dict[str, Any]:
    await call.authorize()
    task_id = call.params["taskId"]
    tasks, token = await call.context.queries.dependents(task_id, **paging(call))
    return answers.page("tasks", [answers.definition_and_status(t) for t in tasks], token, taskId=task_id)


@api.route(
    "GET",
    "/task/<taskId>/events",
    name="listTaskEvents",
    title="List Task Events",
    scopes="queue:status:<taskId>",
    output="list-events-response",
    stability="experimental",
    query=PAGING,
)
async def list_task_events(call: QueueCall) -> dict[str, Any]:
    """Not in Taskcluster: the task's recorded events in order, also when no event bus is configured."""
    await call.authorize()
    task_id = call.params["taskId"]
    events, token = await call.context.queries.task_events(task_id, **paging(call))
    namespace = call.context.settings.pulse_namespace
    return answers.page("events", [answers.event(seq, e, namespace) for seq, e in events], token, taskId=task_id)


@api.route(
    "POST",
    "/task/<taskId>/priority",
    name="changeTaskPriority",
    title="Change Task Priority",
    scopes={"AnyOf": ["queue:change-task-priority:<taskId>", "queue:change-task-priority-in-queue:<taskQueueId>"]},
    input="change-task-priority-request",
    output="task-status-response",
    stability="experimental",
)
async def change_task_priority(call: QueueCall) -> dict[str, Any]:
    task_id = await authorize_for_task(call)
    return answers.status(await call.context.lifecycle.change_task_priority(task_id, call.body["newPriority"]))
