"""Taskcluster's generic-worker (v97, its insecure engine, a static config) and the `taskcluster` CLI, built
unchanged from the Go module proxy (tests/taskcluster-go), against this queue on Azurite: claimWork, reclaims,
the command's log and its file artifacts (`s3`, and `object` with `createObjectArtifacts`), completed and
failed, a cancelled task stopped, and the CLI reading what they left. Its live log (a `livelog` server listening
on every interface) is off; the backing log is what it uploads either way.

generic-worker reclaims 3 minutes before `takenUntil`, sets no reclaim timer under 30 s away, and learns of a
cancel at its reclaim (it has no other way), so the host's claims last 212 s: the first reclaim comes 32 s after
a claim."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import taskcluster
import taskcluster.download

from tests.acceptance.conftest import QUICK_CLAIMS, assert_memory_flat, streamed_sha256
from tests.conftest import (
    PROJECT,
    ROOT_ACCESS_TOKEN,
    ROOT_CLIENT_ID,
    slugid,
    stop_process,
    task_definition,
    task_queue_id,
    wait_for,
)

GO_TOOLS = PROJECT / ".tools" / "go" / "bin"
GENERIC_WORKER = GO_TOOLS / "generic-worker"
CLI = GO_TOOLS / "taskcluster"
# Skipped without Go on a developer's machine; `.ci/run` sets QUEUE_TEST_REQUIRE_GO_TOOLS (Makefile builds them).
pytestmark = pytest.mark.skipif(
    not GENERIC_WORKER.exists() and not os.environ.get("QUEUE_TEST_REQUIRE_GO_TOOLS"),
    reason="generic-worker not built (needs Go: make test builds it)",
)
CLAIM_TIMEOUT = 212


@pytest.fixture(scope="module")
def host(host_factory):
    return host_factory(claim_timeout=CLAIM_TIMEOUT, **QUICK_CLAIMS)


class GenericWorker:
    def __init__(self, host, base: Path, *, object_artifacts: bool, **config_overrides: Any) -> None:
        self.task_queue = task_queue_id()
        provisioner, worker_type = self.task_queue.split("/")
        base.mkdir(parents=True, exist_ok=True)
        key = base / "ed25519.key"
        subprocess.run(
            [str(GENERIC_WORKER), "new-ed25519-keypair", "--file", str(key)], check=True, capture_output=True
        )
        config = {
            "rootURL": host.root_url,
            "clientId": ROOT_CLIENT_ID,
            "accessToken": ROOT_ACCESS_TOKEN,
            "ed25519SigningKeyLocation": str(key),
            "provisionerId": provisioner,
            "workerType": worker_type,
            "workerGroup": "gw-group",
            "workerId": "gw-1",
            "publicIP": "127.0.0.1",
            "tasksDir": str(base / "tasks"),
            "cachesDir": str(base / "caches"),
            "downloadsDir": str(base / "dl"),
            "createObjectArtifacts": object_artifacts,
            "enableLiveLog": False,
            "enableTaskclusterProxy": False,
            "enableInteractive": False,
            "enableLoopbackAudio": False,
            "enableLoopbackVideo": False,
            "disableReboots": True,
            "shutdownMachineOnIdle": False,
            "shutdownMachineOnInternalError": False,
            "requiredDiskSpaceMegabytes": 10,
            "idleTimeoutSecs": 0,
            "sentryProject": "",
            **config_overrides,
        }
        (base / "config.json").write_text(json.dumps(config))
        self.log = base / "generic-worker.log"
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen(
                [str(GENERIC_WORKER), "run", "--config", str(base / "config.json")],
                cwd=base,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        stop_process(self.process, 10)


@pytest.fixture(scope="module")
def s3_worker(host, tmp_path_factory) -> Iterator[GenericWorker]:
    worker = GenericWorker(host, tmp_path_factory.mktemp("gw-s3"), object_artifacts=False)
    yield worker
    worker.stop()


@pytest.fixture(scope="module")
def object_worker(host, tmp_path_factory) -> Iterator[GenericWorker]:
    worker = GenericWorker(host, tmp_path_factory.mktemp("gw-object"), object_artifacts=True)
    yield worker
    worker.stop()


def submit(queue, worker: GenericWorker, script: str, artifacts: list[dict] | None = None, scopes=(), **payload) -> str:
    task_id = slugid()
    queue.createTask(
        task_id,
        task_definition(
            taskQueueId=worker.task_queue,
            scopes=list(scopes),
            payload={
                "command": [["/bin/bash", "-c", script]],
                "maxRunTime": 120,
                "features": {"liveLog": False},
                "artifacts": artifacts or [],
                **payload,
            },
        ),
    )
    return task_id


def resolved(queue, task_id: str, worker: GenericWorker, timeout: float = 60) -> dict:
    def done() -> bool:
        return queue.status(task_id)["status"]["state"] in ("completed", "failed", "exception")

    try:
        wait_for(done, timeout=timeout)
    except AssertionError:
        raise AssertionError(f"task {task_id} not resolved; generic-worker said:\n{worker.output()[-4000:]}") from None
    return queue.status(task_id)["status"]


def download(host, task_id: str, name: str) -> bytes:
    anonymous = taskcluster.Queue({"rootUrl": host.root_url, "maxRetries": 0})
    buf, _ = taskcluster.download.downloadArtifactToBuf(taskId=task_id, name=name, queueService=anonymous)
    return bytes(buf)


BINARY = bytes((i * 37 + 11) % 256 for i in range(5 * 1024 * 1024 + 17))
MAKE_FILES = (
    "mkdir -p out && echo 'built by generic-worker' > out/result.txt && "
    "python3 -c \"open('out/target.bin','wb').write(bytes((i*37+11)%256 for i in range(5*1024*1024+17)))\""
)
FILES = [
    {"type": "file", "path": "out/result.txt", "name": "public/build/result.txt"},
    {"type": "file", "path": "out/target.bin", "name": "public/build/target.bin"},
]


# With `createObjectArtifacts`, generic-worker's Go object client PUTs its body chunked (Go sends no length for
# its reader), which Blob Storage refuses: its putUrl is the queue's own (shared/operations/object_uploads.py).
@pytest.mark.parametrize("kind", ["s3", "object"])
def test_generic_worker_runs_a_task_and_uploads_its_log_and_artifacts(host, request, kind):
    worker = request.getfixturevalue(f"{kind}_worker")
    queue = host.client()
    task_id = submit(queue, worker, f"echo hello from the task; {MAKE_FILES}", FILES)
    status = resolved(queue, task_id, worker)
    assert [(r["state"], r.get("reasonResolved")) for r in status["runs"]] == [("completed", "completed")], (
        worker.output()[-4000:]
    )
    listed = {a["name"]: a["storageType"] for a in queue.listArtifacts(task_id, "0")["artifacts"]}
    assert listed == {
        "public/logs/live_backing.log": kind,
        "public/build/result.txt": kind,
        "public/build/target.bin": kind,
    }
    assert download(host, task_id, "public/build/result.txt") == b"built by generic-worker\n"
    assert download(host, task_id, "public/build/target.bin") == BINARY
    log = download(host, task_id, "public/logs/live_backing.log").decode()  # it gzips logs, declared in the PUT
    assert "hello from the task" in log and "=== Task Finished ===" in log


def test_generic_worker_reports_a_failed_command(host, s3_worker):
    queue = host.client()
    task_id = submit(queue, s3_worker, "echo 'error: the build broke' >&2; exit 3")
    status = resolved(queue, task_id, s3_worker)
    assert [(r["state"], r.get("reasonResolved")) for r in status["runs"]] == [("failed", "failed")]
    assert "error: the build broke" in download(host, task_id, "public/logs/live_backing.log").decode()


def test_generic_worker_reclaims_a_long_task_and_stops_a_cancelled_one(host, s3_worker, tmp_path):
    queue = host.client()
    long_task = submit(queue, s3_worker, "sleep 36; echo slept")
    wait_for(lambda: queue.status(long_task)["status"]["state"] == "running", timeout=30)
    first = queue.status(long_task)["status"]["runs"][0]["takenUntil"]
    status = resolved(queue, long_task, s3_worker, timeout=60)
    assert status["runs"][0]["reasonResolved"] == "completed"
    assert status["runs"][0]["takenUntil"] > first  # its reclaim, 32 s in, took the claim further
    assert f"Reclaimed task {long_task} successfully" in s3_worker.output()
    marker = tmp_path / "ticks"
    cancelled = submit(queue, s3_worker, f"for i in $(seq 240); do echo $i > {marker}; sleep 0.5; done")
    wait_for(lambda: marker.exists(), timeout=30)
    queue.cancelTask(cancelled)
    # Its next reclaim (32 s after the claim) answers 409: generic-worker kills the command.
    wait_for(lambda: f"Resolving task {cancelled}" in s3_worker.output(), timeout=60)
    ticks = marker.read_text()
    time.sleep(1.5)
    assert marker.read_text() == ticks and int(ticks) < 200  # killed, long before its 120 s
    run = queue.status(cancelled)["status"]["runs"][0]
    assert (run["state"], run["reasonResolved"]) == ("exception", "canceled")  # as the cancel left it
    after = submit(queue, s3_worker, "echo still working")
    assert resolved(queue, after, s3_worker)["state"] == "completed"


def test_generic_worker_asks_purge_cache_before_a_task_and_drops_a_purged_cache(host, s3_worker):
    """generic-worker asks purge-cache (purgeRequests) before a task with a writable cache: answered, no warning
    in the task's log, and a cache purged between two tasks is gone in the second."""
    queue = host.client()
    cache = f"gw-cache-{slugid()[:8].lower()}"
    mounted = {"mounts": [{"cacheName": cache, "directory": "cached"}]}
    scopes = [f"generic-worker:cache:{cache}"]
    check = "if test -f cached/marker; then echo cache-kept; else echo cache-empty; fi"
    tasks = [submit(queue, s3_worker, f"{check}; echo made > cached/marker", scopes=scopes, **mounted)]
    tasks.append(submit(queue, s3_worker, check, scopes=scopes, **mounted))
    logs = []
    for task_id in tasks:
        assert resolved(queue, task_id, s3_worker)["state"] == "completed", s3_worker.output()[-4000:]
        logs.append(download(host, task_id, "public/logs/live_backing.log").decode())
    root = {"clientId": ROOT_CLIENT_ID, "accessToken": ROOT_ACCESS_TOKEN}
    taskcluster.PurgeCache({"rootUrl": host.root_url, "credentials": root}).purgeCache(
        s3_worker.task_queue, {"cacheName": cache}
    )
    purged = submit(queue, s3_worker, check, scopes=scopes, **mounted)
    assert resolved(queue, purged, s3_worker)["state"] == "completed"
    logs.append(download(host, purged, "public/logs/live_backing.log").decode())
    assert ["cache-empty" in logs[0], "cache-kept" in logs[1], "cache-empty" in logs[2]] == [True, True, True], logs
    assert not any("purgecache service" in log or "purge-cache" in log.lower() for log in logs), logs


def test_the_taskcluster_cli_reads_and_acts_on_this_queue(host, s3_worker, tmp_path):
    queue = host.client()
    task_id = submit(queue, s3_worker, MAKE_FILES, FILES)
    resolved(queue, task_id, s3_worker)
    env = {
        **os.environ,
        "TASKCLUSTER_ROOT_URL": host.root_url,
        "TASKCLUSTER_CLIENT_ID": ROOT_CLIENT_ID,
        "TASKCLUSTER_ACCESS_TOKEN": ROOT_ACCESS_TOKEN,
    }

    def cli(*args: str) -> str:
        done = subprocess.run([str(CLI), *args], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        return done.stdout

    assert cli("task", "status", task_id).strip() == "completed 'completed'"
    assert cli("task", "artifacts", task_id).split() == sorted(
        ["public/build/result.txt", "public/build/target.bin", "public/logs/live_backing.log"]
    )
    assert "=== Task Finished ===" in cli("task", "log", task_id)
    assert f"{task_id} " in cli("group", "list", "--all", task_id) and "completed: 1" in cli("group", "status", task_id)
    cli("download", "artifact", task_id, "public/build/target.bin", "target.bin")
    assert (tmp_path / "target.bin").read_bytes() == BINARY
    assert json.loads(cli("api", "queue", "ping"))["alive"] is True
    pending = slugid()
    queue.createTask(pending, task_definition(taskQueueId=task_queue_id()))  # no worker takes it
    cli("task", "cancel", pending)
    assert queue.status(pending)["status"]["state"] == "exception"
    cli("task", "rerun", pending)
    assert queue.status(pending)["status"]["runs"][-1]["state"] == "pending"


# The evidence is a gigabyte (QUEUE_TEST_BIG_ARTIFACT_MIB=1024); make test uploads 64 MiB.
BIG_MIB = int(os.environ.get("QUEUE_TEST_BIG_ARTIFACT_MIB", "64"))


def test_generic_worker_uploads_a_large_s3_artifact_with_the_hosts_memory_flat(host, s3_worker):
    """An s3 artifact's PUT passes through the HTTP function in chunks (HTTP streams): the host's peak memory
    grows by a few staged blocks, not by the artifact."""
    queue = host.client()
    host.reset_peak_rss()
    before = host.rss_mb()
    script = f"head -c {BIG_MIB}M /dev/urandom > big.bin && sha256sum big.bin"
    task_id = submit(queue, s3_worker, script, [{"type": "file", "path": "big.bin", "name": "public/big.bin"}])
    status = resolved(queue, task_id, s3_worker, timeout=60 + BIG_MIB / 4)
    assert [(r["state"], r.get("reasonResolved")) for r in status["runs"]] == [("completed", "completed")], (
        s3_worker.output()[-4000:]
    )
    assert_memory_flat(host, before, BIG_MIB)
    log = download(host, task_id, "public/logs/live_backing.log").decode()
    assert streamed_sha256(host, task_id, "public/big.bin") in log  # what sha256sum printed in the task


def test_generic_worker_as_a_scaled_jobs_execution_takes_its_task_and_exits(host, tmp_path):
    """Issue #87: generic-worker in a job execution's role (docs/worker.md): with `numberOfTasksToRun: 1` it exits 0
    once its task is resolved; with nothing to take (a stale hint's execution) `idleTimeoutSecs` ends it, exit 68
    (its IDLE_TIMEOUT)."""
    queue = host.client()
    one = GenericWorker(host, tmp_path / "one", object_artifacts=False, numberOfTasksToRun=1, idleTimeoutSecs=60)
    try:
        task_id = submit(queue, one, "echo one task")
        assert resolved(queue, task_id, one)["state"] == "completed"
        assert one.process.wait(60) == 0, one.output()[-3000:]
    finally:
        one.stop()
    idle = GenericWorker(host, tmp_path / "idle", object_artifacts=False, numberOfTasksToRun=1, idleTimeoutSecs=2)
    try:
        assert idle.process.wait(90) == 68, idle.output()[-3000:]
    finally:
        idle.stop()
