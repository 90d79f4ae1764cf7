"""Queue API v1: task groups (listTaskGroup, getTaskGroup, seal, cancel, priority, events, the recent ones)."""

from __future__ import annotations

from typing import Any

from shared.api import answers
from shared.api.queue_v1.common import PAGING, QueueCall, api, paging


async def _authorize_for_group(call: QueueCall) -> str:
    """Authorize a request whose scopes name the group's schedulerId."""
    group_id = call.params["taskGroupId"]
    group = await call.context.groups.get(group_id)
    await call.authorize(schedulerId=group.scheduler_id)
    return group_id


@api.route(
    "GET",
    "/task-group/<taskGroupId>/list",
    name="listTaskGroup",
    title="List Task Group",
    scopes="queue:list-task-group:<taskGroupId>",
    output="list-task-group-response",
    query=PAGING,
)
async def list_task_group(call: QueueCall) -> dict[str, Any]:
    await call.authorize()
    group, tasks, token = await call.context.groups.members(call.params["taskGroupId"], **paging(call))
    return answers.page("tasks", [answers.definition_and_status(t) for t in tasks], token, **answers.group(group))


@api.route(
    "GET",
    "/task-group/<taskGroupId>/brief",
    name="listTaskGroupBrief",
    title="List Task Group, Brief",
    scopes="queue:list-task-group:<taskGroupId>",
    output="list-task-group-brief-response",
    stability="experimental",
    query=PAGING,
)
async def list_task_group_brief(call: QueueCall) -> dict[str, Any]:
    """Not in Taskcluster: listTaskGroup's pages with each definition cut down to what a page listing a group shows
    (its name and owner, dependencies, requires, scheduler, project, created, deadline), its status whole: the
    inspector's group page reads a Firefox push in a third of the bytes. Paged as listTaskGroup, same tokens."""
    await call.authorize()
    group, tasks, token = await call.context.groups.members(call.params["taskGroupId"], **paging(call))
    return answers.page("tasks", [answers.brief_and_status(t) for t in tasks], token, **answers.group(group))


@api.route(
    "GET",
    "/task-group/<taskGroupId>",
    name="getTaskGroup",
    title="Get Task Group",
    scopes="queue:list-task-group:<taskGroupId>",
    output="task-group-response",
)
async def get_task_group(call: QueueCall) -> dict[str, Any]:
    await call.authorize()
    return answers.group(await call.context.groups.get(call.params["taskGroupId"]))


@api.route(
    "POST",
    "/task-group/<taskGroupId>/seal",
    name="sealTaskGroup",
    title="Seal Task Group",
    scopes="queue:seal-task-group:<schedulerId>/<taskGroupId>",
    output="task-group-response",
    stability="experimental",
)
async def seal_task_group(call: QueueCall) -> dict[str, Any]:
    return answers.group(await call.context.groups.seal(await _authorize_for_group(call)))


@api.route(
    "POST",
    "/task-group/<taskGroupId>/cancel",
    name="cancelTaskGroup",
    title="Cancel Task Group",
    scopes="queue:cancel-task-group:<schedulerId>/<taskGroupId>",
    output="cancel-task-group-response",
    stability="experimental",
)
async def cancel_task_group(call: QueueCall) -> dict[str, Any]:
    group_id = await _authorize_for_group(call)
    cancelled = await call.context.groups.cancel(group_id)
    return {
        "taskGroupId": group_id,
        "taskGroupSize": cancelled.size,
        "cancelledCount": len(cancelled.task_ids),
        "taskIds": cancelled.task_ids,
    }


@api.route(
    "POST",
    "/task-group/<taskGroupId>/priority",
    name="changeTaskGroupPriority",
    title="Change Task Group Priority",
    scopes="queue:change-task-group-priority:<schedulerId>/<taskGroupId>",
    input="change-task-priority-request",
    output="task-group-priority-change-response",
    stability="experimental",
)
async def change_task_group_priority(call: QueueCall) -> dict[str, Any]:
    group_id = await _authorize_for_group(call)
    new_priority = call.body["newPriority"]
    changed = await call.context.groups.change_priority(group_id, new_priority)
    return {
        "taskGroupId": group_id,
        "schedulerId": changed.group.scheduler_id,
        "newPriority": new_priority,
        "tasksAffected": len(changed.task_ids),
        "taskIds": changed.task_ids,
    }


@api.route(
    "GET",
    "/task-group/<taskGroupId>/events",
    name="listTaskGroupEvents",
    title="List Task Group Events",
    scopes="queue:list-task-group:<taskGroupId>",
    output="list-events-response",
    stability="experimental",
    query=PAGING,
)
async def list_task_group_events(call: QueueCall) -> dict[str, Any]:
    """Not in Taskcluster: the task group's recorded events (sealed, resolved, priority changed) in order."""
    await call.authorize()
    group_id = call.params["taskGroupId"]
    events, token = await call.context.groups.events(group_id, **paging(call))
    namespace = call.context.settings.pulse_namespace
    return answers.page("events", [answers.event(seq, e, namespace) for seq, e in events], token, taskGroupId=group_id)


@api.route(
    "GET",
    "/task-group/<taskGroupId>/failures",
    name="listTaskGroupFailures",
    title="List the Failed Tasks of a Task Group",
    scopes="queue:list-task-group:<taskGroupId>",
    output="list-task-group-failures-response",
    stability="experimental",
    query=PAGING,
)
async def list_task_group_failures(call: QueueCall) -> dict[str, Any]:
    """Not in Taskcluster: the group's tasks whose newest run failed or ended in an exception, and for each marked to
    rerun once its dependencies complete (rerunTaskWhenReady), the dependencies it waits for; read from the group's
    own rows, not from every task (a failure is recorded by its resolution's follow-up, a moment after the report's
    answer)."""
    await call.authorize()
    group_id = call.params["taskGroupId"]
    await call.context.groups.get(group_id)  # 404 for an unknown group
    found, token = await call.context.groups.failures(group_id, **paging(call))
    return answers.page("tasks", [f.to_json() for f in found], token, taskGroupId=group_id)


@api.route(
    "GET",
    "/task-groups/recent",
    name="listRecentTaskGroups",
    title="List the Recent Task Groups",
    scopes="queue:list-recent-task-groups",
    output="list-recent-task-groups-response",
    stability="experimental",
    query={"limit": "^[0-9]+$"},
)
async def list_recent_task_groups(call: QueueCall) -> dict[str, Any]:
    """Not in Taskcluster: the task groups of more than one task (pushes) of the last 7 days, the most recent first
    (up to `limit`, 20 unless given, at most 100), each with whether it is sealed, whether any task of it is
    unresolved, its decision task (the task it is named after: name, owner, source), the project and revision that
    built, from its Treeherder or Index route, environment or source, and its counts (unresolved, failed, exception,
    waiting to rerun: listTaskGroupFailures). A group is listed once its second task joined it (the first one not
    named after it, otherwise). Its own scope, outside the anonymous role a deployment starts with (it lists every
    push, private ones too); answered from a listing at most 5 seconds old."""
    await call.authorize()
    limit = min(max(int(call.query.get("limit") or 20), 1), 100)
    return {"taskGroups": await call.context.groups.recent(limit)}
