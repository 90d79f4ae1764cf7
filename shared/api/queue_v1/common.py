"""What the Queue API v1 route modules share: the route table, the queue a call serves, paging, and the scope
templates several routes use."""

from __future__ import annotations

from typing import Any

from shared import errors
from shared.api import monitoring
from shared.api.routing import Api, Call
from shared.runtime import Queue

api = Api("queue", "v1")
monitoring.register(api)
QueueCall = Call[Queue]
PAGING = {"continuationToken": "^.*$", "limit": "^[0-9]+$"}  # the query of every listing


def paging(call: QueueCall) -> dict[str, Any]:
    """`continuationToken` and `limit` (1 to 1000, default 1000) from the query string."""
    raw = call.query.get("limit", "1000")
    if not raw.isdigit() or not 1 <= int(raw) <= 1000:
        raise errors.InvalidRequestArguments("limit must be a whole number from 1 to 1000, not `{limit}`", limit=raw)
    return {"limit": int(raw), "continuation": call.query.get("continuationToken") or None}


def project_or_scheduler(action: str) -> dict[str, Any]:
    """The modern scope expression of an action on a task: by scheduler and group, by project, or the legacy
    scope with the scheduler's `assume:`."""
    return {
        "AnyOf": [
            f"queue:{action}:<schedulerId>/<taskGroupId>/<taskId>",
            f"queue:{action}-in-project:<projectId>",
            {"AllOf": [f"queue:{action}", "assume:scheduler-id:<schedulerId>/<taskGroupId>"]},
        ]
    }


async def authorize_for_task(call: QueueCall) -> str:
    """Authorize a request whose scopes name the stored task's schedulerId, taskGroupId or projectId."""
    task_id = call.params["taskId"]
    definition = (await call.context.queries.task(task_id)).definition
    await call.authorize(
        **{
            key: definition[key]
            for key in ("schedulerId", "taskGroupId", "projectId", "provisionerId", "workerType", "taskQueueId")
        }
    )
    return task_id
