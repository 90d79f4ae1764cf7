"""Worker information through the official client on Azurite: provisioners, worker types, task queues and workers
appear when workers ask for work; quarantine; declareWorker; counts and listings of pending and claimed tasks."""

from __future__ import annotations

import datetime as dt
import time

import pytest

from shared import timeutil
from tests.acceptance.conftest import QUICK_CLAIMS
from tests.conftest import expect_error, slugid, task_definition, task_queue_id, wait_for

WORKER = {"workerGroup": "wg-1", "workerId": "worker-1"}
OTHER = {"workerGroup": "wg-1", "workerId": "worker-2"}


@pytest.fixture(scope="module")
def host(host_factory):
    # Every claim written at once (production buffers them for a minute), expiry every second.
    return host_factory(
        worker_info_interval=0,
        **QUICK_CLAIMS,
        expiry_schedule="*/1 * * * * *",
        expiry_delay=0,
    )


@pytest.fixture
def queue(host):
    return host.client()


def claim_one(queue, tq, worker=WORKER):
    return queue.claimWork(tq, {**worker, "tasks": 1})["tasks"]


def test_a_worker_asking_for_work_makes_itself_its_queue_and_provisioner_known(queue):
    tq = task_queue_id()
    prov, wt = tq.split("/")
    expect_error(404, "ResourceNotFound", queue.getTaskQueue, tq)
    task_id = slugid()
    queue.createTask(task_id, task_definition(taskQueueId=tq))
    [claim] = claim_one(queue, tq)
    assert prov in [p["provisionerId"] for p in queue.listProvisioners()["provisioners"]]
    assert queue.getProvisioner(prov)["stability"] == "experimental"
    # Taskcluster v106's web-server requires `actions` on these (its main dropped them): always empty.
    assert all(p["actions"] == [] for p in queue.listProvisioners()["provisioners"])
    assert queue.getProvisioner(prov)["actions"] == queue.getWorkerType(prov, wt)["actions"] == []
    types = queue.listWorkerTypes(prov)["workerTypes"]
    assert any(t["provisionerId"] == prov and t["workerType"] == wt and t["taskQueueId"] == tq for t in types)
    assert queue.getWorkerType(prov, wt)["taskQueueId"] == tq
    assert tq in [q["taskQueueId"] for q in queue.listTaskQueues()["taskQueues"]]
    info = queue.getTaskQueue(tq)
    assert timeutil.parse(info["expires"]) > timeutil.now() + dt.timedelta(days=4)
    worker = queue.getWorker(prov, wt, WORKER["workerGroup"], WORKER["workerId"])
    assert worker["recentTasks"] == [{"taskId": task_id, "runId": claim["runId"]}]
    assert worker["taskQueueId"] == tq and "quarantineUntil" not in worker and worker["actions"] == []
    [listed] = queue.listWorkers(prov, wt)["workers"]
    assert listed["latestTask"] == {"taskId": task_id, "runId": 0} and listed["workerId"] == WORKER["workerId"]
    expect_error(404, "ResourceNotFound", queue.getWorker, prov, wt, "wg-1", "nobody")
    expect_error(404, "ResourceNotFound", queue.getProvisioner, "no-such-provisioner")
    expect_error(404, "ResourceNotFound", queue.getWorkerType, prov, "no-such-type")


def test_quarantined_worker_gets_no_work_until_lifted(queue):
    tq = task_queue_id()
    prov, wt = tq.split("/")
    assert claim_one(queue, tq) == []  # makes the worker known
    expect_error(
        404,
        "ResourceNotFound",
        queue.quarantineWorker,
        prov,
        wt,
        "wg-1",
        "unknown",
        {"quarantineUntil": timeutil.iso(timeutil.now() + dt.timedelta(hours=1))},
    )
    until = timeutil.iso(timeutil.now() + dt.timedelta(hours=1))
    worker = queue.quarantineWorker(
        prov, wt, WORKER["workerGroup"], WORKER["workerId"], {"quarantineUntil": until, "quarantineInfo": "bad disk"}
    )
    assert worker["quarantineUntil"] == until
    assert worker["quarantineDetails"][-1]["quarantineInfo"] == "bad disk"
    assert worker["quarantineDetails"][-1]["clientId"] == "root"
    task_id = slugid()
    queue.createTask(task_id, task_definition(taskQueueId=tq))
    started = time.monotonic()
    assert claim_one(queue, tq) == []
    assert time.monotonic() - started >= 0.9  # it waited the whole long-poll
    expect_error(409, "RequestConflict", queue.claimTask, task_id, "0", WORKER)
    assert [w["workerId"] for w in queue.listWorkers(prov, wt, query={"quarantined": "true"})["workers"]] == [
        WORKER["workerId"]
    ]
    assert claim_one(queue, tq, OTHER)[0]["status"]["taskId"] == task_id  # the others still get work
    assert [w["workerId"] for w in queue.listWorkers(prov, wt, query={"quarantined": "false"})["workers"]] == [
        OTHER["workerId"]
    ]
    queue.quarantineWorker(
        prov,
        wt,
        WORKER["workerGroup"],
        WORKER["workerId"],
        {"quarantineUntil": timeutil.iso(timeutil.now() - dt.timedelta(seconds=1))},
    )
    second = slugid()
    queue.createTask(second, task_definition(taskQueueId=tq))
    assert claim_one(queue, tq)[0]["status"]["taskId"] == second


def test_declare_worker_and_expiry_of_stale_entries(queue):
    tq = task_queue_id()
    prov, wt = tq.split("/")
    soon = timeutil.iso(timeutil.now() + dt.timedelta(seconds=1))
    declared = queue.declareWorker(prov, wt, "wg-9", "declared", {"expires": soon})
    assert declared["expires"] == soon and declared["recentTasks"] == []
    queue.declareWorker(prov, wt, "wg-9", "kept", {"expires": soon})
    queue.quarantineWorker(
        prov, wt, "wg-9", "kept", {"quarantineUntil": timeutil.iso(timeutil.now() + dt.timedelta(hours=1))}
    )
    # The expiry timer (every second here) deletes the expired entry, but not a quarantined one.
    wait_for(lambda: len(queue.listWorkers(prov, wt)["workers"]) == 1, timeout=20, interval=0.5)
    assert queue.getWorker(prov, wt, "wg-9", "kept")["workerId"] == "kept"
    expect_error(404, "ResourceNotFound", queue.getWorker, prov, wt, "wg-9", "declared")


def test_counts_and_listings_of_pending_and_claimed_tasks(queue):
    tq = task_queue_id()
    ids = [slugid() for _ in range(3)]
    for task_id in ids:
        queue.createTask(task_id, task_definition(taskQueueId=tq))
    assert queue.pendingTasks(tq)["pendingTasks"] == 3
    assert queue.taskQueueCounts(tq) == {
        "provisionerId": tq.split("/")[0],
        "workerType": tq.split("/")[1],
        "taskQueueId": tq,
        "pendingTasks": 3,
        "claimedTasks": 0,
    }
    [claim] = claim_one(queue, tq)
    claimed_id = claim["status"]["taskId"]
    assert queue.taskQueueCounts(tq)["pendingTasks"] == 2 and queue.taskQueueCounts(tq)["claimedTasks"] == 1
    pending = queue.listPendingTasks(tq)["tasks"]
    assert sorted(t["taskId"] for t in pending) == sorted(set(ids) - {claimed_id})
    assert all(t["runId"] == 0 and t["task"]["taskQueueId"] == tq and t["inserted"] for t in pending)
    [running] = queue.listClaimedTasks(tq)["tasks"]
    assert running["taskId"] == claimed_id and running["workerId"] == WORKER["workerId"]
    assert running["claimed"] == claim["status"]["runs"][0]["started"]
    first = queue.listPendingTasks(tq, query={"limit": 1})
    assert len(first["tasks"]) <= 1 and "continuationToken" in first
    rest = queue.listPendingTasks(tq, query={"limit": 5, "continuationToken": first["continuationToken"]})
    assert sorted(t["taskId"] for t in first["tasks"] + rest["tasks"]) == sorted(t["taskId"] for t in pending)
    queue.reportCompleted(claimed_id, "0")
    assert queue.listClaimedTasks(tq)["tasks"] == [] and queue.taskQueueCounts(tq)["claimedTasks"] == 0
    queue.cancelTask(pending[0]["taskId"])
    assert [t["taskId"] for t in queue.listPendingTasks(tq)["tasks"]] == [pending[1]["taskId"]]


def test_scopes_guard_worker_information(host):
    from tests.conftest import queue_client

    tq = task_queue_id()
    prov, wt = tq.split("/")
    narrow = queue_client(host.root_url, authorizedScopes=[f"queue:get-worker-type:{prov}/*"])
    expect_error(403, "InsufficientScopes", narrow.listProvisioners)
    expect_error(403, "InsufficientScopes", narrow.taskQueueCounts, tq)
    expect_error(
        403,
        "InsufficientScopes",
        narrow.quarantineWorker,
        prov,
        wt,
        "g",
        "w",
        {"quarantineUntil": timeutil.iso(timeutil.now())},
    )
    expect_error(404, "ResourceNotFound", narrow.getWorkerType, prov, wt)  # allowed, and unknown
