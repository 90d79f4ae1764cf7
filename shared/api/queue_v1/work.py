"""Queue API v1: workers taking and finishing work (pollTaskUrls, claimWork, claimTask, reclaimTask, report*)."""

from __future__ import annotations

from typing import Any

from shared import timeutil
from shared.api import answers
from shared.api.queue_v1.common import QueueCall, api
from shared.domain.tasks import ReasonResolved, ResolvedState
from shared.operations.claims import Claim


def _answer(call: QueueCall, claim: Claim, *, include_task: bool = True) -> dict[str, Any]:
    return answers.claim(claim, call.context.claims.credentials(claim), include_task=include_task)


@api.route(
    "GET",
    "/poll-task-url/<taskQueueId>",
    name="pollTaskUrls",
    title="Get Urls to Poll Pending Tasks",
    scopes="queue:poll-task-urls:<taskQueueId>",
    output="poll-task-urls-response-ext",
    stability="experimental",
)
async def poll_task_urls(call: QueueCall) -> dict[str, Any]:
    """Signed URLs to get and delete the task queue's pending hints straight from Azure Queue Storage, highest
    priority first (`docs/polling.md`); hand what a poll returned to claimWork as `xmlMessage`."""
    await call.authorize()
    urls, expires = await call.context.polling.poll_task_urls(call.params["taskQueueId"])
    return {
        "queues": [{"signedPollUrl": poll, "signedDeleteUrl": delete} for poll, delete in urls],
        "expires": timeutil.iso(expires),
    }


@api.route(
    "POST",
    "/claim-work/<taskQueueId>",
    name="claimWork",
    title="Claim Work",
    scopes={"AllOf": ["queue:claim-work:<taskQueueId>", "queue:worker-id:<workerGroup>/<workerId>"]},
    input="claim-work-request-ext",
    output="claim-work-response",
)
async def claim_work(call: QueueCall) -> dict[str, Any]:
    """Long-polls the pending queues for up to 20 s; or, given `xmlMessage` (this queue's extension: what a
    signedPollUrl of pollTaskUrls returned), claims the runs those signed hints name, at once."""
    body = call.body
    await call.authorize(workerGroup=body["workerGroup"], workerId=body["workerId"])
    task_queue_id = call.params["taskQueueId"]
    if "xmlMessage" in body:
        claims = await call.context.polling.claim_polled(
            task_queue_id, body["workerGroup"], body["workerId"], body["tasks"], body["xmlMessage"]
        )
    else:
        claims = await call.context.work.claim_work(
            task_queue_id, body["workerGroup"], body["workerId"], body["tasks"], gone=call.client_gone
        )
    return {"tasks": [_answer(call, c) for c in claims]}


@api.route(
    "POST",
    "/task/<taskId>/runs/<runId>/claim",
    name="claimTask",
    title="Claim Task",
    scopes={"AllOf": ["queue:claim-task:<provisionerId>/<workerType>", "queue:worker-id:<workerGroup>/<workerId>"]},
    input="task-claim-request",
    output="task-claim-response",
    stability="deprecated",
)
async def claim_task(call: QueueCall) -> dict[str, Any]:
    task_id, body = call.params["taskId"], call.body
    definition = (await call.context.queries.task(task_id)).definition
    await call.authorize(
        provisionerId=definition["provisionerId"],
        workerType=definition["workerType"],
        workerGroup=body["workerGroup"],
        workerId=body["workerId"],
    )
    claim = await call.context.claims.claim_task(
        task_id, definition["taskQueueId"], call.run_id(), body["workerGroup"], body["workerId"]
    )
    return _answer(call, claim)


@api.route(
    "POST",
    "/task/<taskId>/runs/<runId>/reclaim",
    name="reclaimTask",
    title="Reclaim task",
    scopes="queue:reclaim-task:<taskId>/<runId>",
    output="task-reclaim-response",
)
async def reclaim_task(call: QueueCall) -> dict[str, Any]:
    await call.authorize()
    claim = await call.context.claims.reclaim_task(call.params["taskId"], call.run_id())
    return _answer(call, claim, include_task=False)


async def _resolve(call: QueueCall, state: ResolvedState, reason: ReasonResolved) -> dict[str, Any]:
    await call.authorize()
    return answers.status(await call.context.lifecycle.resolve(call.params["taskId"], call.run_id(), state, reason))


@api.route(
    "POST",
    "/task/<taskId>/runs/<runId>/completed",
    name="reportCompleted",
    title="Report Run Completed",
    scopes="queue:resolve-task:<taskId>/<runId>",
    output="task-status-response",
)
async def report_completed(call: QueueCall) -> dict[str, Any]:
    return await _resolve(call, "completed", "completed")


@api.route(
    "POST",
    "/task/<taskId>/runs/<runId>/failed",
    name="reportFailed",
    title="Report Run Failed",
    scopes="queue:resolve-task:<taskId>/<runId>",
    output="task-status-response",
)
async def report_failed(call: QueueCall) -> dict[str, Any]:
    return await _resolve(call, "failed", "failed")


@api.route(
    "POST",
    "/task/<taskId>/runs/<runId>/exception",
    name="reportException",
    title="Report Task Exception",
    scopes="queue:resolve-task:<taskId>/<runId>",
    input="task-exception-request",
    output="task-status-response",
)
async def report_exception(call: QueueCall) -> dict[str, Any]:
    return await _resolve(call, "exception", call.body["reason"])
