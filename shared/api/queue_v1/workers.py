"""Queue API v1: worker information, task queue counts and listings (registered on queue_v1's route table).

Provisioners, worker types, task queues and workers become known when a worker asks for work (claimWork,
claimTask, a polled claim), as in Taskcluster; `shared/domain/workers.py` says how their writes are throttled. The
task queues tasks were created for, polled or not, are listed apart (listSeenTaskQueues, this queue's extension).
"""

from __future__ import annotations

from typing import Any

from shared import errors, timeutil
from shared.api import answers
from shared.api.queue_v1.common import PAGING, QueueCall, api, paging
from shared.stores.workers import WorkerInfo

WORKER_QUERY = {**PAGING, "quarantined": "^(true|false)$"}
WORKER = "/provisioners/<provisionerId>/worker-types/<workerType>/workers/<workerGroup>/<workerId>"


async def _workers(call: QueueCall) -> WorkerInfo:
    """Authorize the call; the worker information it reads or changes, its tables ready."""
    await call.authorize()
    await call.context.stores.ready()
    return call.context.stores.workers


async def _counts(call: QueueCall) -> dict[str, Any]:
    task_queue_id = call.params["taskQueueId"]
    pending, claimed = await call.context.queries.task_queue_counts(task_queue_id)
    provisioner_id, worker_type = task_queue_id.split("/", 1)
    return {
        "provisionerId": provisioner_id,
        "workerType": worker_type,
        "taskQueueId": task_queue_id,
        "pendingTasks": pending,
        "claimedTasks": claimed,
    }


async def _runs(call: QueueCall, state: str) -> dict[str, Any]:
    """listPendingTasks / listClaimedTasks."""
    await call.authorize()
    runs, token = await call.context.queries.task_queue_runs(call.params["taskQueueId"], state, **paging(call))
    return answers.page("tasks", [answers.queued_run(r, state) for r in runs], token)


def _task_queue(call: QueueCall) -> str:
    return call.params.get("taskQueueId") or f"{call.params['provisionerId']}/{call.params['workerType']}"


@api.route(
    "GET",
    "/provisioners",
    name="listProvisioners",
    title="Get a list of all active provisioners",
    scopes="queue:list-provisioners",
    output="list-provisioners-response",
    stability="deprecated",
    query=PAGING,
)
async def list_provisioners(call: QueueCall) -> dict[str, Any]:
    provisioners, token = await (await _workers(call)).list_provisioners(**paging(call))
    return answers.page("provisioners", [answers.provisioner(p) for p in provisioners], token)


@api.route(
    "GET",
    "/provisioners/<provisionerId>",
    name="getProvisioner",
    title="Get an active provisioner",
    scopes="queue:get-provisioner:<provisionerId>",
    output="provisioner-response",
    stability="deprecated",
)
async def get_provisioner(call: QueueCall) -> dict[str, Any]:
    return answers.provisioner(await (await _workers(call)).get_provisioner(call.params["provisionerId"]))


@api.route(
    "GET",
    "/provisioners/<provisionerId>/worker-types",
    name="listWorkerTypes",
    title="Get a list of all active worker-types",
    scopes="queue:list-worker-types:<provisionerId>",
    output="list-workertypes-response",
    stability="deprecated",
    query=PAGING,
)
async def list_worker_types(call: QueueCall) -> dict[str, Any]:
    queues, token = await (await _workers(call)).list_worker_types(call.params["provisionerId"], **paging(call))
    return answers.page("workerTypes", [answers.worker_type(q) for q in queues], token)


@api.route(
    "GET",
    "/provisioners/<provisionerId>/worker-types/<workerType>",
    name="getWorkerType",
    title="Get a worker-type",
    scopes="queue:get-worker-type:<provisionerId>/<workerType>",
    output="workertype-response",
    stability="deprecated",
)
async def get_worker_type(call: QueueCall) -> dict[str, Any]:
    found = await (await _workers(call)).get_task_queue(_task_queue(call))
    return {**answers.worker_type(found), "actions": list(answers.NO_ACTIONS)}


@api.route(
    "GET",
    "/task-queues",
    name="listTaskQueues",
    title="Get a list of all active task queues",
    scopes="queue:list-task-queues",
    output="list-taskqueues-response",
    query=PAGING,
)
async def list_task_queues(call: QueueCall) -> dict[str, Any]:
    queues, token = await (await _workers(call)).list_task_queues(**paging(call))
    return answers.page("taskQueues", [answers.task_queue(q) for q in queues], token)


@api.route(
    "GET",
    "/task-queues-seen",
    name="listSeenTaskQueues",
    title="List the task queues tasks were created for",
    scopes="queue:list-task-queues",
    output="list-seen-task-queues-response",
    stability="experimental",
    query=PAGING,
)
async def list_seen_task_queues(call: QueueCall) -> dict[str, Any]:
    """Not in Taskcluster: every task queue that tasks were created for, whether or not a worker ever asked for
    work from it (listTaskQueues lists only those), with when a task was last created for it (written at most
    every 6 hours by each process). What a deployment waits for that no worker takes shows here; the inspector's
    start page counts each."""
    seen, token = await (await _workers(call)).list_seen_task_queues(**paging(call))
    items = [{"taskQueueId": q, "lastTaskCreated": timeutil.iso(at)} for q, at in seen]
    return answers.page("taskQueues", items, token)


@api.route(
    "GET",
    "/task-queues/<taskQueueId>",
    name="getTaskQueue",
    title="Get a task queue",
    scopes="queue:get-task-queue:<taskQueueId>",
    output="taskqueue-response",
)
async def get_task_queue(call: QueueCall) -> dict[str, Any]:
    return answers.task_queue(await (await _workers(call)).get_task_queue(call.params["taskQueueId"]))


@api.route(
    "GET",
    "/provisioners/<provisionerId>/worker-types/<workerType>/workers",
    name="listWorkers",
    title="Get a list of all active workers of a workerType",
    scopes="queue:list-workers:<provisionerId>/<workerType>",
    output="list-workers-response",
    stability="deprecated",
    query=WORKER_QUERY,
)
async def list_workers(call: QueueCall) -> dict[str, Any]:
    """`?quarantined=true` lists only quarantined workers, `false` only the others."""
    raw = call.query.get("quarantined")
    if raw not in (None, "true", "false"):
        raise errors.InvalidRequestArguments("quarantined must be `true` or `false`, not `{value}`", value=raw)
    workers, token = await (await _workers(call)).list_workers(
        _task_queue(call), quarantined=None if raw is None else raw == "true", **paging(call)
    )
    return answers.page("workers", [answers.worker_item(w) for w in workers], token)


@api.route(
    "GET",
    WORKER,
    name="getWorker",
    title="Get a worker",
    scopes="queue:get-worker:<provisionerId>/<workerType>/<workerGroup>/<workerId>",
    output="worker-response",
    stability="deprecated",
)
async def get_worker(call: QueueCall) -> dict[str, Any]:
    return answers.worker(
        await (await _workers(call)).get_worker(_task_queue(call), call.params["workerGroup"], call.params["workerId"])
    )


@api.route(
    "PUT",
    WORKER,
    name="quarantineWorker",
    title="Quarantine a worker",
    scopes="queue:quarantine-worker:<provisionerId>/<workerType>/<workerGroup>/<workerId>",
    input="quarantine-worker-request",
    output="worker-response",
    stability="experimental",
)
async def quarantine_worker(call: QueueCall) -> dict[str, Any]:
    """Until `quarantineUntil` the worker gets no work (claimWork waits and answers `[]`, claimTask 409); a time
    in the past lifts the quarantine. Takes effect within 5 seconds on every process."""
    return answers.worker(
        await (await _workers(call)).quarantine(
            _task_queue(call),
            call.params["workerGroup"],
            call.params["workerId"],
            timeutil.to_ms(timeutil.parse(call.body["quarantineUntil"])),
            call.body.get("quarantineInfo", ""),
            call.caller.client_id or "anonymous",
        )
    )


@api.route(
    "PUT",
    "/provisioners/<provisionerId>/worker-types/<workerType>/<workerGroup>/<workerId>",
    name="declareWorker",
    title="Declare a worker",
    scopes="queue:declare-worker:<provisionerId>/<workerType>/<workerGroup>/<workerId>",
    input="update-worker-request",
    output="worker-response",
    stability="experimental",
)
async def declare_worker(call: QueueCall) -> dict[str, Any]:
    return answers.worker(
        await (await _workers(call)).declare(
            _task_queue(call),
            call.params["workerGroup"],
            call.params["workerId"],
            timeutil.to_ms(timeutil.parse(call.body["expires"])),
        )
    )


@api.route(
    "GET",
    "/pending/<taskQueueId>",
    name="pendingTasks",
    title="Get Number of Pending Tasks",
    scopes="queue:pending-count:<taskQueueId>",
    output="pending-tasks-response",
    stability="deprecated",
)
async def pending_tasks(call: QueueCall) -> dict[str, Any]:
    """The task queue's pending runs, counted exactly (the index every change of a run's state updates)."""
    await call.authorize()
    return {k: v for k, v in (await _counts(call)).items() if k != "claimedTasks"}


@api.route(
    "GET",
    "/task-queues/<taskQueueId>/counts",
    name="taskQueueCounts",
    title="Get Number of Pending and Claimed Tasks",
    scopes={"AllOf": ["queue:pending-count:<taskQueueId>", "queue:claimed-count:<taskQueueId>"]},
    output="task-queue-counts-response",
)
async def task_queue_counts(call: QueueCall) -> dict[str, Any]:
    """The task queue's pending and claimed runs, counted exactly in the same index."""
    await call.authorize()
    return await _counts(call)


@api.route(
    "GET",
    "/task-queues/<taskQueueId>/pending",
    name="listPendingTasks",
    title="List Pending Tasks",
    scopes="queue:pending-list:<taskQueueId>",
    output="list-pending-tasks-response",
    stability="experimental",
    query=PAGING,
)
async def list_pending_tasks(call: QueueCall) -> dict[str, Any]:
    return await _runs(call, "pending")


@api.route(
    "GET",
    "/task-queues/<taskQueueId>/claimed",
    name="listClaimedTasks",
    title="List Claimed Tasks",
    scopes="queue:claimed-list:<taskQueueId>",
    output="list-claimed-tasks-response",
    stability="experimental",
    query=PAGING,
)
async def list_claimed_tasks(call: QueueCall) -> dict[str, Any]:
    return await _runs(call, "running")
