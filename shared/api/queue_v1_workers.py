"""Queue API v1: worker information, task queue counts and listings (registered on queue_v1's route table).

Provisioners, worker types, task queues and workers become known when a worker asks for work (claimWork,
claimTask, a polled claim), as in Taskcluster; `shared/domain/workers.py` says how their writes are throttled.
"""

from __future__ import annotations

from typing import Any

from shared import errors, timeutil
from shared.api.framework import Call
from shared.api.queue_v1 import _paging, api
from shared.domain.workers import WorkerInfo

WORKER = "/provisioners/<provisionerId>/worker-types/<workerType>/workers/<workerGroup>/<workerId>"


async def _workers(call: Call) -> WorkerInfo:
    """Authorize the call; the worker information it reads or changes, its tables ready."""
    await call.authorize()
    await call.service.ensure_storage()
    return call.service.workers


def _task_queue(call: Call) -> str:
    return call.params.get("taskQueueId") or f"{call.params['provisionerId']}/{call.params['workerType']}"


@api.route("GET", "/provisioners", name="listProvisioners", title="Get a list of all active provisioners",
           scopes="queue:list-provisioners", output="list-provisioners-response", stability="deprecated")
async def list_provisioners(call: Call) -> dict[str, Any]:
    return await (await _workers(call)).list_provisioners(**_paging(call))


@api.route("GET", "/provisioners/<provisionerId>", name="getProvisioner", title="Get an active provisioner",
           scopes="queue:get-provisioner:<provisionerId>", output="provisioner-response", stability="deprecated")
async def get_provisioner(call: Call) -> dict[str, Any]:
    return await (await _workers(call)).get_provisioner(call.params["provisionerId"])


@api.route("GET", "/provisioners/<provisionerId>/worker-types", name="listWorkerTypes",
           title="Get a list of all active worker-types", scopes="queue:list-worker-types:<provisionerId>",
           output="list-workertypes-response", stability="deprecated")
async def list_worker_types(call: Call) -> dict[str, Any]:
    return await (await _workers(call)).list_worker_types(call.params["provisionerId"], **_paging(call))


@api.route("GET", "/provisioners/<provisionerId>/worker-types/<workerType>", name="getWorkerType",
           title="Get a worker-type", scopes="queue:get-worker-type:<provisionerId>/<workerType>",
           output="workertype-response", stability="deprecated")
async def get_worker_type(call: Call) -> dict[str, Any]:
    return await (await _workers(call)).get_worker_type(call.params["provisionerId"], call.params["workerType"])


@api.route("GET", "/task-queues", name="listTaskQueues", title="Get a list of all active task queues",
           scopes="queue:list-task-queues", output="list-taskqueues-response")
async def list_task_queues(call: Call) -> dict[str, Any]:
    return await (await _workers(call)).list_task_queues(**_paging(call))


@api.route("GET", "/task-queues/<taskQueueId>", name="getTaskQueue", title="Get a task queue",
           scopes="queue:get-task-queue:<taskQueueId>", output="taskqueue-response")
async def get_task_queue(call: Call) -> dict[str, Any]:
    return await (await _workers(call)).get_task_queue(call.params["taskQueueId"])


@api.route("GET", "/provisioners/<provisionerId>/worker-types/<workerType>/workers", name="listWorkers",
           title="Get a list of all active workers of a workerType",
           scopes="queue:list-workers:<provisionerId>/<workerType>", output="list-workers-response",
           stability="deprecated")
async def list_workers(call: Call) -> dict[str, Any]:
    """`?quarantined=true` lists only quarantined workers, `false` only the others."""
    raw = call.query.get("quarantined")
    if raw not in (None, "true", "false"):
        raise errors.InvalidRequestArguments("quarantined must be `true` or `false`, not `{value}`", value=raw)
    return await (await _workers(call)).list_workers(_task_queue(call), quarantined=None if raw is None
                                                     else raw == "true", **_paging(call))


@api.route("GET", WORKER, name="getWorker", title="Get a worker",
           scopes="queue:get-worker:<provisionerId>/<workerType>/<workerGroup>/<workerId>",
           output="worker-response", stability="deprecated")
async def get_worker(call: Call) -> dict[str, Any]:
    return await (await _workers(call)).get_worker(_task_queue(call), call.params["workerGroup"],
                                                   call.params["workerId"])


@api.route("PUT", WORKER, name="quarantineWorker", title="Quarantine a worker",
           scopes="queue:quarantine-worker:<provisionerId>/<workerType>/<workerGroup>/<workerId>",
           input="quarantine-worker-request", output="worker-response", stability="experimental")
async def quarantine_worker(call: Call) -> dict[str, Any]:
    """Until `quarantineUntil` the worker gets no work (claimWork waits and answers `[]`, claimTask 409); a time
    in the past lifts the quarantine. Takes effect within 5 seconds on every process."""
    return await (await _workers(call)).quarantine(
        _task_queue(call), call.params["workerGroup"], call.params["workerId"],
        timeutil.normalize(call.body["quarantineUntil"]), call.body.get("quarantineInfo", ""),
        call.caller.client_id or "anonymous")


@api.route("PUT", "/provisioners/<provisionerId>/worker-types/<workerType>/<workerGroup>/<workerId>",
           name="declareWorker", title="Declare a worker",
           scopes="queue:declare-worker:<provisionerId>/<workerType>/<workerGroup>/<workerId>",
           input="update-worker-request", output="worker-response", stability="experimental")
async def declare_worker(call: Call) -> dict[str, Any]:
    return await (await _workers(call)).declare(_task_queue(call), call.params["workerGroup"],
                                                call.params["workerId"], timeutil.normalize(call.body["expires"]))


@api.route("GET", "/pending/<taskQueueId>", name="pendingTasks", title="Get Number of Pending Tasks",
           scopes="queue:pending-count:<taskQueueId>", output="pending-tasks-response", stability="deprecated")
async def pending_tasks(call: Call) -> dict[str, Any]:
    """Approximate: the messages in the task queue's pending queues, as Azure counts them."""
    await call.authorize()
    counts = await call.service.task_queue_counts(call.params["taskQueueId"])
    return {k: counts[k] for k in ("provisionerId", "workerType", "taskQueueId", "pendingTasks")}


@api.route("GET", "/task-queues/<taskQueueId>/counts", name="taskQueueCounts",
           title="Get Number of Pending and Claimed Tasks",
           scopes={"AllOf": ["queue:pending-count:<taskQueueId>", "queue:claimed-count:<taskQueueId>"]},
           output="task-queue-counts-response")
async def task_queue_counts(call: Call) -> dict[str, Any]:
    """`pendingTasks` is approximate (the pending queues' message counts); `claimedTasks` counts claimed runs."""
    await call.authorize()
    return await call.service.task_queue_counts(call.params["taskQueueId"])


@api.route("GET", "/task-queues/<taskQueueId>/pending", name="listPendingTasks", title="List Pending Tasks",
           scopes="queue:pending-list:<taskQueueId>", output="list-pending-tasks-response",
           stability="experimental")
async def list_pending_tasks(call: Call) -> dict[str, Any]:
    await call.authorize()
    return await call.service.task_queue_runs(call.params["taskQueueId"], "pending", **_paging(call))


@api.route("GET", "/task-queues/<taskQueueId>/claimed", name="listClaimedTasks", title="List Claimed Tasks",
           scopes="queue:claimed-list:<taskQueueId>", output="list-claimed-tasks-response",
           stability="experimental")
async def list_claimed_tasks(call: Call) -> dict[str, Any]:
    await call.authorize()
    return await call.service.task_queue_runs(call.params["taskQueueId"], "running", **_paging(call))
