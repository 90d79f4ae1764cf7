"""The shapes of the Queue and Object APIs' answers, built from what the operations return (Taskcluster's
response schemas, named beside each)."""

from __future__ import annotations

from typing import Any

from shared import timeutil
from shared.domain.artifacts import CONTENT_TYPE_HEADER, Artifact
from shared.domain.events import Event, exchange_name
from shared.domain.groups import TaskGroup
from shared.domain.objects import StoredObject
from shared.domain.tasks import DEFINITION_FIELDS, Task
from shared.domain.workers import Provisioner, TaskQueueInfo, Worker
from shared.operations.artifact_reads import Location
from shared.operations.artifacts import Created
from shared.operations.claims import Claim
from shared.operations.objects import Download, Upload
from shared.operations.queries import QueuedRun


def page(key: str, items: list[Any], token: str | None, **head: Any) -> dict[str, Any]:
    """A listing: `head` fields, the items under `key`, and `continuationToken` when there is more."""
    out: dict[str, Any] = {**head, key: items}
    if token:
        out["continuationToken"] = token
    return out


def definition(task: Task) -> dict[str, Any]:
    """task.yml: the definition's fields, in the order the API returns them."""
    stored: dict[str, Any] = dict(task.definition)
    return {key: stored[key] for key in DEFINITION_FIELDS}


def status(task: Task) -> dict[str, Any]:
    """task-status-response"""
    return {"status": task.status()}


def definition_and_status(task: Task) -> dict[str, Any]:
    return {"task": definition(task), "status": task.status()}


BRIEF_FIELDS = ("dependencies", "requires", "schedulerId", "projectId", "taskGroupId", "created", "deadline")


def brief_and_status(task: Task) -> dict[str, Any]:
    """An item of list-task-group-brief-response: what a page listing a group shows of a definition."""
    stored: dict[str, Any] = dict(task.definition)
    metadata = stored.get("metadata") or {}
    brief = {key: stored[key] for key in BRIEF_FIELDS if key in stored}
    brief["metadata"] = {"name": metadata.get("name", ""), "owner": metadata.get("owner", "")}
    return {"task": brief, "status": task.status()}


def claim(claimed: Claim, credentials: dict[str, str], *, include_task: bool) -> dict[str, Any]:
    """An item of claim-work-response (with the task), or task-reclaim-response (without)."""
    run = claimed.run
    out: dict[str, Any] = {
        "status": claimed.task.status(),
        "runId": claimed.run_id,
        "workerGroup": run.worker_group,
        "workerId": run.worker_id,
        "takenUntil": timeutil.iso(run.taken_until) if run.taken_until else None,
        "credentials": credentials,
    }
    if include_task:
        out["task"] = definition(claimed.task)
    return out


def event(seq: int, recorded: Event, namespace: str) -> dict[str, Any]:
    """An item of list-events-response."""
    return {
        "seq": seq,
        "exchange": exchange_name(recorded.exchange, namespace),
        "routingKey": recorded.routing_key,
        "routes": list(recorded.cc),
        "time": recorded.time,
        "payload": recorded.payload,
    }


def group(found: TaskGroup) -> dict[str, Any]:
    """task-group-response"""
    out: dict[str, Any] = {
        "taskGroupId": found.task_group_id,
        "schedulerId": found.scheduler_id,
        "expires": timeutil.iso(found.expires),
    }
    if found.sealed:
        out["sealed"] = timeutil.iso(found.sealed)
    return out


def queued_run(item: QueuedRun, state: str) -> dict[str, Any]:
    """An item of list-pending-tasks-response / list-claimed-tasks-response."""
    run = item.task.runs[item.run_id]
    out: dict[str, Any] = {"taskId": item.task.task_id, "runId": item.run_id, "task": definition(item.task)}
    if state == "pending":
        out["inserted"] = timeutil.iso(run.scheduled)
    else:
        out.update(
            workerGroup=run.worker_group,
            workerId=run.worker_id,
            claimed=timeutil.iso(run.started) if run.started else None,
        )
    return out


def artifact(found: Artifact) -> dict[str, Any]:
    """artifact-response (storageType `azure` included: this queue's extension)."""
    out: dict[str, Any] = {
        "storageType": found.storage_type,
        "name": found.name,
        "expires": timeutil.iso(found.expires),
        "contentType": found.content_type,
    }
    if "contentLength" in found.details:
        out["contentLength"] = found.details["contentLength"]
    return out


def created_artifact(created: Created) -> dict[str, Any]:
    """create-artifact-response: where and how the data is uploaded."""
    made = created.artifact
    if made.storage_type == "object" and created.credentials is not None:
        return {
            "storageType": "object",
            "name": made.details["object"],
            "projectId": made.details["projectId"],
            "uploadId": made.details["uploadId"],
            "expires": timeutil.iso(made.expires),
            "credentials": created.credentials,
        }
    if created.put_url is None or created.put_url_expires is None:
        return {"storageType": made.storage_type}
    out: dict[str, Any] = {
        "storageType": made.storage_type,
        "putUrl": created.put_url,
        "expires": timeutil.iso(created.put_url_expires),
        "contentType": made.content_type,
    }
    if made.storage_type == "azure" and "uploadId" in made.details:  # this queue's form: a finish step
        # A single PUT sends both; a block upload sends the content type with its block list.
        out.update(
            uploadId=made.details["uploadId"],
            headers={"x-ms-blob-type": "BlockBlob", CONTENT_TYPE_HEADER: made.content_type},
        )
    return out


def artifact_content(found: Artifact, location: Location | None) -> dict[str, Any]:
    """artifact-content-response: where the data is fetched. A blob (`azure`, `s3`) is described as `s3`: a URL
    to GET without credentials, which is what that branch means and what the official download helpers know."""
    if found.storage_type == "error" or location is None:
        return {"storageType": "error", "reason": found.details["reason"], "message": found.details["message"]}
    if found.storage_type == "object":
        return {"storageType": "object", "name": location.object_name, "credentials": location.credentials}
    return {"storageType": "reference" if found.storage_type == "reference" else "s3", "url": location.url}


def created_upload(upload: Upload) -> dict[str, Any]:
    """object/create-upload-response"""
    stored = upload.stored
    method: dict[str, Any] = {}
    if upload.method == "dataInline":
        method = {"dataInline": True}
    elif upload.method == "putUrl" and upload.put_url and upload.put_url_expires:
        method = {
            "putUrl": {
                "url": upload.put_url,
                "expires": timeutil.iso(upload.put_url_expires),
                "headers": upload.headers or {},
            }
        }
    return {
        "projectId": stored.project_id,
        "uploadId": stored.upload_id,
        "expires": timeutil.iso(stored.expires),
        "uploadMethod": method,
    }


def download(found: Download) -> dict[str, Any]:
    """object/download-object-response"""
    if found.method == "simple":
        return {"method": "simple", "url": found.url}
    return {"method": "getUrl", "url": found.url, "expires": timeutil.iso(found.expires), "hashes": found.hashes}


def stored_object(found: StoredObject) -> dict[str, Any]:
    """object/get-object-response"""
    return {"projectId": found.project_id, "expires": timeutil.iso(found.expires), "hashes": found.hashes}


# Taskcluster v106's provisioner, worker type and worker answers carry `actions` (always `[]`: none could be
# declared for years), which its web-server and UI require; later Taskcluster dropped them, and ignores them.
NO_ACTIONS: list[dict[str, Any]] = []


def provisioner(found: Provisioner) -> dict[str, Any]:
    """provisioner-response"""
    return {
        "provisionerId": found.provisioner_id,
        "description": found.description,
        "stability": found.stability,
        "expires": timeutil.iso(found.expires),
        "lastDateActive": timeutil.iso(found.last_date_active),
        "actions": list(NO_ACTIONS),
    }


def task_queue(found: TaskQueueInfo) -> dict[str, Any]:
    """taskqueue-response"""
    return {
        "taskQueueId": found.task_queue_id,
        "description": found.description,
        "stability": found.stability,
        "expires": timeutil.iso(found.expires),
        "lastDateActive": timeutil.iso(found.last_date_active),
    }


def worker_type(found: TaskQueueInfo) -> dict[str, Any]:
    """workertype-response"""
    provisioner_id, worker_type_ = found.task_queue_id.split("/", 1)
    return {"provisionerId": provisioner_id, "workerType": worker_type_, **task_queue(found)}


def worker(found: Worker) -> dict[str, Any]:
    """worker-response"""
    provisioner_id, worker_type_ = found.task_queue_id.split("/", 1)
    out: dict[str, Any] = {
        "provisionerId": provisioner_id,
        "workerType": worker_type_,
        "taskQueueId": found.task_queue_id,
        "workerGroup": found.worker_group,
        "workerId": found.worker_id,
        "recentTasks": found.recent_tasks,
        "expires": timeutil.iso(found.expires),
        "firstClaim": timeutil.iso(found.first_claim),
        "quarantineDetails": found.quarantine_details,
        "actions": list(NO_ACTIONS),
    }
    if found.quarantine_until:
        out["quarantineUntil"] = timeutil.iso(found.quarantine_until)
    if found.last_date_active:
        out["lastDateActive"] = timeutil.iso(found.last_date_active)
    return out


def worker_item(found: Worker) -> dict[str, Any]:
    """An item of list-workers-response."""
    out: dict[str, Any] = {
        "workerGroup": found.worker_group,
        "workerId": found.worker_id,
        "firstClaim": timeutil.iso(found.first_claim),
    }
    if found.quarantine_until:
        out["quarantineUntil"] = timeutil.iso(found.quarantine_until)
    if found.recent_tasks:
        out["latestTask"] = found.recent_tasks[-1]
    if found.last_date_active:
        out["lastDateActive"] = timeutil.iso(found.last_date_active)
    return out
