"""The reference worker (`python -m worker`) against a local host on Azurite: real commands end to end (success,
failure, timeout, cancel mid-run, SIGTERM, malformed payload), artifacts and logs uploaded to Blob Storage."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest
import taskcluster

from tests.acceptance.conftest import QUICK_CLAIMS
from tests.acceptance.helpers import PY, WorkerProcess, submit
from tests.conftest import (
    slugid,
    task_definition,
    task_queue_id,
    wait_for,
)


@pytest.fixture(scope="module")
def host(host_factory):
    # The worker reclaims with a third of its claim left: under injected storage faults (QUEUE_TEST_STORAGE_FAULTS),
    # or on a loaded machine (a CI run lost one so), a reclaim can take more than the 1 s a 3 s claim leaves it.
    return host_factory(claim_timeout=6, worker_info_interval=0, **QUICK_CLAIMS)


@pytest.fixture(scope="module")
def tq() -> str:
    return task_queue_id()


@pytest.fixture(scope="module")
def worker(host, tq, tmp_path_factory) -> Iterator[WorkerProcess]:
    process = WorkerProcess(host, tq, tmp_path_factory.mktemp("worker"))
    yield process
    process.stop()


def resolved(queue, task_id: str, timeout: float = 30) -> dict:
    return wait_for(
        lambda: (s := queue.status(task_id)["status"]) and s["state"] in ("completed", "failed", "exception") and s,
        timeout=timeout,
        interval=0.3,
    )


def artifact_text(host, task_id: str, name: str, run: str = "0") -> str:
    url = taskcluster.Queue({"rootUrl": host.root_url}).buildUrl("getArtifact", task_id, run, name)
    response = httpx.get(url, follow_redirects=True)
    assert response.status_code == 200, (name, response.status_code, response.text[:300])
    return response.text


def test_commands_run_end_to_end(host, tq, worker):
    queue = host.client()
    ok = submit(
        queue,
        tq,
        {
            "command": [
                PY,
                "-c",
                "import os; print('hello from', os.environ['TASK_ID']); "
                "open('out.txt', 'w').write('result:' + os.environ['GREETING'])",
            ],
            "env": {"GREETING": "hi"},
            "artifacts": [
                {"name": "public/out.txt", "path": "out.txt", "contentType": "text/plain"},
                {"name": "public/missing.txt", "path": "nowhere.txt"},
            ],
        },
    )
    failing = submit(queue, tq, {"command": "echo failing now; exit 3"})
    slow = submit(queue, tq, {"command": ["sleep", "30"], "maxRunTime": 1})
    malformed = submit(queue, tq, {"command": 5})
    assert resolved(queue, ok)["state"] == "completed"
    assert f"hello from {ok}" in artifact_text(host, ok, "public/logs/live.log")
    assert artifact_text(host, ok, "public/out.txt") == "result:hi"
    missing = httpx.get(
        taskcluster.Queue({"rootUrl": host.root_url}).buildUrl("getArtifact", ok, "0", "public/missing.txt")
    )
    assert missing.status_code == 424 and missing.json()["reason"] == "file-missing-on-worker"
    assert resolved(queue, failing)["state"] == "failed"
    log = artifact_text(host, failing, "public/logs/live.log")
    assert "failing now" in log and "exit code 3" in log
    status = resolved(queue, slow, timeout=20)
    assert status["state"] == "failed"
    assert "maxRunTime of 1 s exceeded" in artifact_text(host, slow, "public/logs/live.log")
    status = resolved(queue, malformed)
    assert (status["state"], status["runs"][0]["reasonResolved"]) == ("exception", "malformed-payload")
    assert "`command` must be" in artifact_text(host, malformed, "public/logs/live.log")
    out = worker.output()
    assert f"{ok}/0  resolved completed" in out and f"{malformed}/0  resolved exception/malformed-payload" in out


def test_the_live_log_is_readable_while_the_task_runs_and_whole_once_resolved(host, tq, worker):
    queue = host.client()
    task_id = submit(
        queue,
        tq,
        {"command": [PY, "-u", "-c", "import time\nfor i in range(10):\n    print('tick', i)\n    time.sleep(0.4)"]},
    )
    wait_for(lambda: "tick 2" in _text_or_empty(host, task_id), timeout=30, interval=0.3)
    early = artifact_text(host, task_id, "public/logs/live.log")
    assert queue.status(task_id)["status"]["state"] == "running" and "exit code" not in early
    # A range read of the growing blob gives what came after.
    url = taskcluster.Queue({"rootUrl": host.root_url}).buildUrl("getArtifact", task_id, "0", "public/logs/live.log")
    rest = httpx.get(url, follow_redirects=True, headers={"Range": f"bytes={len(early.encode())}-"})
    assert rest.status_code in (206, 416)
    assert resolved(queue, task_id)["state"] == "completed"
    final = artifact_text(host, task_id, "public/logs/live.log")
    assert final.startswith(early) and "tick 9" in final and "exit code 0" in final
    assert artifact_text(host, task_id, "public/logs/live.log") == final  # sealed once the run is resolved


def _text_or_empty(host, task_id: str) -> str:
    url = taskcluster.Queue({"rootUrl": host.root_url}).buildUrl("getArtifact", task_id, "0", "public/logs/live.log")
    response = httpx.get(url, follow_redirects=True)
    return response.text if response.status_code == 200 else ""


def test_a_task_cancelled_mid_run_is_stopped_and_the_worker_goes_on(host, tq, worker, tmp_path):
    queue = host.client()
    marker = tmp_path / "still-running"
    long = submit(
        queue,
        tq,
        {
            "command": [
                PY,
                "-c",
                f"import time\nfor i in range(60):\n    time.sleep(0.5)\n    open({str(marker)!r}, 'w').write(str(i))",
            ]
        },
    )
    wait_for(lambda: queue.status(long)["status"]["state"] == "running" and marker.exists(), timeout=30)
    queue.cancelTask(long)
    # The next reclaim (a third of the 6 s claim before it lapses) answers 409: the worker kills the command.
    wait_for(lambda: f"{long}/0  killed: the run was cancelled" in worker.output(), timeout=15)
    size = marker.read_text()
    time.sleep(1.5)
    assert marker.read_text() == size  # the command no longer runs
    status = queue.status(long)["status"]
    assert (status["state"], status["runs"][0]["reasonResolved"]) == ("exception", "canceled")
    after = submit(queue, tq, {"command": "true"})
    assert resolved(queue, after)["state"] == "completed"


def test_a_cancel_reaches_a_long_claimed_command_within_seconds(host_factory, tmp_path):
    """With claims of 10 minutes the first reclaim is ~7 minutes away: the worker learns of the cancel from the
    task's status, read every --cancel-check seconds, kills the command and reports nothing."""
    host = host_factory(claim_timeout=600, claim_work_wait=1, claim_work_poll_interval=0.2)
    queue, own_tq = host.client(), task_queue_id()
    worker = WorkerProcess(host, own_tq, tmp_path, "--cancel-check", "1")
    try:
        marker = tmp_path / "still-running"
        script = f"import time\nfor i in range(600):\n    time.sleep(0.2)\n    open({str(marker)!r}, 'w').write(str(i))"
        task_id = submit(queue, own_tq, {"command": [PY, "-c", script]})
        wait_for(lambda: queue.status(task_id)["status"]["state"] == "running" and marker.exists(), timeout=30)
        queue.cancelTask(task_id)
        wait_for(lambda: f"{task_id}/0  killed: the run was cancelled" in worker.output(), timeout=10)
        size = marker.read_text()
        time.sleep(1)
        assert marker.read_text() == size  # the command no longer runs
        run = queue.status(task_id)["status"]["runs"][0]
        assert (run["state"], run["reasonResolved"]) == ("exception", "canceled")  # as the cancel left it
        assert f"{task_id}/0  resolved" not in worker.output() and "could not report" not in worker.output()
    finally:
        worker.stop()


def test_the_workers_own_failure_is_reported_internal_error(host, tq, worker):
    queue = host.client()
    task_id = slugid()
    worker.work_dir.mkdir(parents=True, exist_ok=True)
    (worker.work_dir / f"{task_id}-0").write_text("in the way")  # the task's folder cannot be made
    queue.createTask(task_id, task_definition(taskQueueId=tq, payload={"command": "true"}))
    status = resolved(queue, task_id)
    assert (status["runs"][0]["state"], status["runs"][0]["reasonResolved"]) == ("exception", "internal-error")
    assert f"{task_id}/0  worker error" in worker.output()


def test_long_tasks_are_reclaimed(host, tq, worker):
    queue = host.client()
    task_id = submit(queue, tq, {"command": ["sleep", "13"]})  # more than twice the 6 s claim
    status = resolved(queue, task_id, timeout=60)
    assert status["state"] == "completed" and len(status["runs"]) == 1


def test_sigterm_stops_running_tasks_as_worker_shutdown(host, tmp_path):
    queue = host.client()
    tq = task_queue_id()
    process = WorkerProcess(host, tq, tmp_path)
    try:
        task_id = submit(queue, tq, {"command": ["sleep", "60"]}, retries=1)
        wait_for(lambda: queue.status(task_id)["status"]["state"] == "running", timeout=30)
        started = time.monotonic()
        assert process.stop() == 0, process.output()
        assert time.monotonic() - started < 20, process.output()
    finally:
        process.stop()
    status = queue.status(task_id)["status"]
    assert status["runs"][0]["reasonResolved"] == "worker-shutdown"
    assert status["runs"][1]["state"] == "pending"  # retried
    assert "killed: the worker is shutting down" in artifact_text(host, task_id, "public/logs/live.log")
    assert "stopped" in process.output()


def test_claim_work_mode(host, tmp_path):
    queue = host.client()
    tq = task_queue_id()
    process = WorkerProcess(host, tq, tmp_path, "--claim-work", "--max-tasks", "1")
    try:
        task_id = submit(queue, tq, {"command": "echo via claimWork"})
        assert resolved(queue, task_id)["state"] == "completed"
        assert process.process.wait(30) == 0  # --max-tasks 1: it stops by itself
    finally:
        process.stop()
    assert "via claimWork" in artifact_text(host, task_id, "public/logs/live.log")
    assert "finding work by claimWork" in process.output()


def test_an_idle_worker_exits_once_the_work_it_found_is_done(host, tmp_path):
    """Issue #87: as a scaled job's execution, the reference worker takes the work there is and exits 0 once no
    task has run and no work was found for --idle-exit seconds; with nothing to do it exits after that long."""
    queue = host.client()
    tq = task_queue_id()
    tasks = [submit(queue, tq, {"command": f"echo job {n}"}) for n in range(3)]
    process = WorkerProcess(host, tq, tmp_path, "--idle-exit", "2")
    try:
        assert process.process.wait(60) == 0, process.output()
    finally:
        process.stop()
    assert [queue.status(t)["status"]["state"] for t in tasks] == ["completed"] * 3  # done before it left
    assert "idle for 2 s: exiting (3 runs taken)" in process.output()
    idle_tq = task_queue_id()
    started = time.monotonic()
    idle = WorkerProcess(host, idle_tq, tmp_path, "--idle-exit", "1")
    try:
        assert idle.process.wait(30) == 0, idle.output()
    finally:
        idle.stop()
    assert time.monotonic() - started < 15, idle.output()  # the interpreter's start, one poll, a second idle
    assert "idle for 1 s: exiting (0 runs taken)" in idle.output()
