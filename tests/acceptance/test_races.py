"""Concurrent workers, in threads and across several local host processes: each run is claimed exactly once."""

from __future__ import annotations

import threading
from collections import Counter

import pytest

from tests.conftest import slugid, task_definition, task_queue_id


def drain(clients, task_queue, expected, per_call=4, workers_per_client=8):
    """Workers claim until every expected task is claimed; returns every (taskId, runId, workerId) claim."""
    claims: list[tuple[str, int, str]] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def worker(client, worker_id):
        try:
            empty_rounds = 0
            while empty_rounds < 2:
                got = client.claimWork(task_queue, {"workerGroup": "race", "workerId": worker_id, "tasks": per_call})[
                    "tasks"
                ]
                with lock:
                    claims.extend((c["status"]["taskId"], c["runId"], worker_id) for c in got)
                    done = len({c[0] for c in claims}) >= expected
                empty_rounds = 0 if got else empty_rounds + 1
                if done:
                    return
        except BaseException as exc:
            errors.append(exc)

    threads = [
        threading.Thread(target=worker, args=(client, f"w-{i}-{j}"))
        for i, client in enumerate(clients)
        for j in range(workers_per_client)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    return claims


def create_tasks(queue, task_queue, count):
    ids = [slugid() for _ in range(count)]
    for task_id in ids:
        queue.createTask(task_id, task_definition(taskQueueId=task_queue))
    return ids


def check_claimed_exactly_once(queue, ids, claims):
    counts = Counter((task_id, run_id) for task_id, run_id, _ in claims)
    doubled = {k: v for k, v in counts.items() if v > 1}
    assert not doubled, f"claimed more than once: {doubled}"
    assert {task_id for task_id, _, _ in claims} == set(ids)
    by_task = {task_id: worker for task_id, _, worker in claims}
    for status in queue.statuses({"taskIds": ids})["statuses"]:
        run = status["status"]["runs"][0]
        assert len(status["status"]["runs"]) == 1 and run["state"] == "running"
        assert run["workerId"] == by_task[status["taskId"]]


def test_concurrent_claim_work_in_one_host(queue, queue_host):
    tq = task_queue_id()
    ids = create_tasks(queue, tq, 60)
    claims = drain([queue_host.client()], tq, len(ids))
    check_claimed_exactly_once(queue, ids, claims)


@pytest.fixture(scope="module")
def second_host(host_factory):
    return host_factory(claim_work_wait=2, claim_work_poll_interval=0.2)


def test_concurrent_claim_work_across_two_host_processes(queue, queue_host, second_host):
    tq = task_queue_id()
    # Both hosts ready first (storage checked, the task queue's queues known), so neither can drain the queue
    # while the other is still starting up.
    for host in (queue_host, second_host):
        host.client().claimWork(tq, {"workerGroup": "race", "workerId": "warm-up", "tasks": 1})
    ids = create_tasks(queue, tq, 120)
    claims = drain([queue_host.client(), second_host.client()], tq, len(ids), workers_per_client=6)
    check_claimed_exactly_once(queue, ids, claims)
    assert len({worker.split("-")[1] for _, _, worker in claims}) == 2, "both hosts handed out work"


def test_duplicated_hints_never_double_claim(queue, queue_host, second_host):
    # Creating the same task again puts another pending hint for the same run: two hints, one run.
    tq = task_queue_id()
    ids = create_tasks(queue, tq, 20)
    for task_id in ids:
        queue.createTask(task_id, queue.task(task_id) | {})
    claims = drain([queue_host.client(), second_host.client()], tq, len(ids), workers_per_client=4)
    check_claimed_exactly_once(queue, ids, claims)


def test_concurrent_reports_resolve_once(queue, queue_host):
    task_id = slugid()
    queue.createTask(task_id, task_definition())
    queue.claimTask(task_id, "0", {"workerGroup": "g", "workerId": "w"})
    outcomes: list[str] = []

    def report(kind):
        client = queue_host.client()
        try:
            getattr(client, kind)(task_id, "0")
            outcomes.append(kind)
        except Exception as exc:
            outcomes.append(f"{kind}:{getattr(exc, 'status_code', exc)}")

    threads = [threading.Thread(target=report, args=(k,)) for k in ["reportCompleted", "reportFailed"] * 4]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    state = queue.status(task_id)["status"]["runs"][0]["state"]
    winner = "reportCompleted" if state == "completed" else "reportFailed"
    assert outcomes.count(winner) == 4
    assert all(o == winner or o.endswith(":409") for o in outcomes), outcomes
