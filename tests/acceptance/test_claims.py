"""claimWork, claimTask and reclaimTask through the official client."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import time

import pytest

from shared import timeutil
from tests.conftest import expect_error, shards_of, slugid, stores_of, task_definition, task_queue_id, wait_for

WORKER = {"workerGroup": "wg-1", "workerId": "worker-1"}


def claim_work(queue, task_queue, count=1, worker=WORKER):
    return queue.claimWork(task_queue, {**worker, "tasks": count})["tasks"]


def test_claim_work_claims_a_pending_task(queue):
    tq = task_queue_id()
    task_id = slugid()
    definition = task_definition(taskQueueId=tq, scopes=["secrets:get:x"])
    queue.createTask(task_id, definition)
    [claim] = claim_work(queue, tq)
    assert claim["status"]["taskId"] == task_id
    assert claim["runId"] == 0
    assert claim["workerGroup"] == "wg-1" and claim["workerId"] == "worker-1"
    assert claim["task"] == queue.task(task_id)
    run = claim["status"]["runs"][0]
    assert run["state"] == "running" and run["takenUntil"] == claim["takenUntil"]
    assert run["workerGroup"] == "wg-1" and run["workerId"] == "worker-1" and "started" in run
    assert queue.status(task_id)["status"]["state"] == "running"
    # Nothing more to claim: the same work is not handed out twice.
    assert claim_work(queue, tq) == []


def test_claim_credentials_are_taskcluster_temporary_credentials(queue, queue_host):
    tq = task_queue_id()
    task_id = slugid()
    queue.createTask(task_id, task_definition(taskQueueId=tq, scopes=["secrets:get:x", "docker-worker:cap"]))
    [claim] = claim_work(queue, tq)
    creds = claim["credentials"]
    taken_until = timeutil.parse(claim["takenUntil"])
    seconds = taken_until.timestamp()
    expected_seconds = str(int(seconds)) if seconds == int(seconds) else repr(round(seconds, 3))
    assert creds["clientId"] == f"task-client/{task_id}/0/on/wg-1/worker-1/until/{expected_seconds}"
    cert = json.loads(creds["certificate"])
    assert set(cert) == {"version", "scopes", "start", "expiry", "seed", "signature", "issuer"}
    assert cert["version"] == 1 and cert["issuer"] == "root" and len(cert["seed"]) == 44
    assert cert["expiry"] == round(taken_until.timestamp() * 1000)
    assert cert["scopes"] == [
        f"queue:reclaim-task:{task_id}/0",
        f"queue:resolve-task:{task_id}/0",
        f"queue:create-artifact:{task_id}/0",
        "secrets:get:x",
        "docker-worker:cap",
    ]
    # Checked with the algorithm Taskcluster's auth service uses (signaturevalidator.js).
    issuer_token = queue_host.env["QUEUE_ROOT_ACCESS_TOKEN"].encode()
    lines = [
        "version:1",
        f"clientId:{creds['clientId']}",
        f"issuer:{cert['issuer']}",
        f"seed:{cert['seed']}",
        f"start:{cert['start']}",
        f"expiry:{cert['expiry']}",
        "scopes:",
        *cert["scopes"],
    ]
    signature = base64.b64encode(hmac.new(issuer_token, "\n".join(lines).encode(), hashlib.sha256).digest())
    assert cert["signature"] == signature.decode()
    token = base64.urlsafe_b64encode(hmac.new(issuer_token, cert["seed"].encode(), hashlib.sha256).digest())
    assert creds["accessToken"] == token.decode().rstrip("=")


def test_claim_work_takes_highest_priority_first_then_fifo(queue, queue_host):
    """Highest priority first; within a priority, first in first out, as far as one pending queue goes: with
    QUEUE_PENDING_SHARDS each priority's hints are spread over shards by taskId and read from a random shard
    first (docs/deploy.md), so only the priorities' order holds."""
    tq = task_queue_id()
    created = {}
    for name, priority in [
        ("low-1", "lowest"),
        ("high-1", "high"),
        ("low-2", "lowest"),
        ("top", "highest"),
        ("high-2", "high"),
        ("medium", "medium"),
    ]:
        created[name] = slugid()
        queue.createTask(created[name], task_definition(taskQueueId=tq, priority=priority))
    order = [claim_work(queue, tq)[0]["status"]["taskId"] for _ in range(6)]
    names = [{v: k for k, v in created.items()}[t] for t in order]
    if shards_of(queue_host.env).pending > 1:
        names = [name.split("-")[0] for name in names]
        assert names == ["top", "high", "high", "medium", "low", "low"]
    else:
        assert names == ["top", "high-1", "high-2", "medium", "low-1", "low-2"]


def test_claim_work_claims_several_at_once(queue):
    tq = task_queue_id()
    ids = {slugid() for _ in range(5)}
    for task_id in ids:
        queue.createTask(task_id, task_definition(taskQueueId=tq))
    claims = claim_work(queue, tq, count=3)
    assert len(claims) == 3
    rest = claim_work(queue, tq, count=32)
    assert {c["status"]["taskId"] for c in claims + rest} == ids
    assert len(rest) == 2


@pytest.mark.parametrize("count", [0, 33])
def test_claim_work_asks_for_1_to_32_tasks(queue, count):
    expect_error(400, "InputValidationError", queue.claimWork, task_queue_id(), {**WORKER, "tasks": count})


def test_claim_work_long_polls_then_returns_nothing(queue):
    started = time.monotonic()
    assert claim_work(queue, task_queue_id()) == []
    assert time.monotonic() - started >= 1.9  # the test host's QUEUE_CLAIM_WORK_WAIT is 2 s


def test_claim_work_returns_work_that_arrives_while_waiting(queue, queue_host):
    import threading

    tq = task_queue_id()
    task_id = slugid()
    result = {}
    waiter = threading.Thread(target=lambda: result.update(tasks=claim_work(queue_host.client(), tq)))
    waiter.start()
    time.sleep(0.5)
    queue.createTask(task_id, task_definition(taskQueueId=tq))
    waiter.join(10)
    assert [c["status"]["taskId"] for c in result["tasks"]] == [task_id]


def test_claim_task_by_same_worker_is_idempotent_and_others_conflict(queue):
    task_id = slugid()
    queue.createTask(task_id, task_definition())
    first = queue.claimTask(task_id, "0", WORKER)
    assert first["status"]["runs"][0]["state"] == "running"
    again = queue.claimTask(task_id, "0", WORKER)
    assert again["takenUntil"] == first["takenUntil"]
    assert again["credentials"]["clientId"] == first["credentials"]["clientId"]
    expect_error(
        409, "RequestConflict", queue.claimTask, task_id, "0", {"workerGroup": "wg-1", "workerId": "someone-else"}
    )
    assert queue.status(task_id)["status"]["runs"][0]["workerId"] == "worker-1"


def test_claim_task_errors(queue):
    task_id = slugid()
    queue.createTask(task_id, task_definition())
    expect_error(404, "ResourceNotFound", queue.claimTask, slugid(), "0", WORKER)
    expect_error(404, "ResourceNotFound", queue.claimTask, task_id, "1", WORKER)
    expect_error(400, "InvalidRequestArguments", queue.claimTask, task_id, "x", WORKER)
    expect_error(400, "InputValidationError", queue.claimTask, task_id, "0", {"workerGroup": "wg"})


def test_claimed_work_is_not_offered_again_by_claim_work(queue):
    tq = task_queue_id()
    task_id = slugid()
    queue.createTask(task_id, task_definition(taskQueueId=tq))
    queue.claimTask(task_id, "0", WORKER)
    assert claim_work(queue, tq, worker={"workerGroup": "wg-2", "workerId": "w-2"}) == []
    assert queue.status(task_id)["status"]["runs"][0]["workerId"] == "worker-1"


def test_reclaim_moves_taken_until_forward_with_fresh_credentials(queue):
    tq = task_queue_id()
    task_id = slugid()
    queue.createTask(task_id, task_definition(taskQueueId=tq))
    [claim] = claim_work(queue, tq)
    time.sleep(0.05)
    reclaim = queue.reclaimTask(task_id, "0")
    assert set(reclaim) == {"status", "runId", "workerGroup", "workerId", "takenUntil", "credentials"}
    assert reclaim["takenUntil"] > claim["takenUntil"]
    assert reclaim["status"]["runs"][0]["takenUntil"] == reclaim["takenUntil"]
    assert reclaim["credentials"]["accessToken"] != claim["credentials"]["accessToken"]
    assert reclaim["credentials"]["clientId"].endswith(
        str(timeutil.parse(reclaim["takenUntil"]).timestamp()).rstrip("0").rstrip(".")
    )


def test_reclaim_conflicts_once_the_run_is_resolved_or_not_running(queue):
    task_id = slugid()
    queue.createTask(task_id, task_definition())
    expect_error(409, "RequestConflict", queue.reclaimTask, task_id, "0")  # pending, not claimed
    queue.claimTask(task_id, "0", WORKER)
    queue.reportCompleted(task_id, "0")
    expect_error(409, "RequestConflict", queue.reclaimTask, task_id, "0")
    expect_error(404, "ResourceNotFound", queue.reclaimTask, task_id, "1")
    expect_error(404, "ResourceNotFound", queue.reclaimTask, slugid(), "0")


def test_a_finished_task_leaves_no_claim_check_queued(own_hosts, own_azurite):
    """On Azurite, through the API: reportCompleted deletes the task's claim check (once it has answered: the
    request does not wait for that), and a reclaim the check of the
    claim it renewed (Azurite scans every held message on every queue call). The deadline's message is its
    bucket's, shared by the tasks whose deadlines fall in that second: it stays until then."""
    from shared.domain.messages import CLAIM_QUEUE, DEADLINE_QUEUE

    host = own_hosts(claim_work_wait=1)
    queue = host.client()
    definition = task_definition()
    task_id = slugid()
    queue.createTask(task_id, definition)
    queue.claimWork(definition["taskQueueId"], {"tasks": 1, "workerGroup": "g", "workerId": "w"})
    queue.reclaimTask(task_id, "0")

    async def counts():
        tables, queues = stores_of(host.env)
        shards = shards_of(host.env)
        try:
            return [
                sum([await queues.approximate_count(q) for q in shards.check_queues(base)])
                for base in (CLAIM_QUEUE, DEADLINE_QUEUE)
            ]
        finally:
            await queues.close()
            await tables.close()

    assert asyncio.run(counts()) == [1, 1]  # the renewed claim's check and the deadline bucket's message
    queue.reportCompleted(task_id, "0")
    wait_for(lambda: asyncio.run(counts()) == [0, 1], timeout=5)  # deleted right after the answer, not before
