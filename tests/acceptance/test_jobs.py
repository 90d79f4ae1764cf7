"""A worker pool run as a scaled job (issue #87) against a local host: the model of KEDA's rule
(local_host/jobs.py) reads the pool's pending queues on Azurite and starts reference workers with `--idle-exit`.
Nothing runs while nothing is pending; the work pending starts the workers that take it; they leave when idle."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from local_host.jobs import JobRule, JobsBeside, JobScaler, fullest_pending_queue
from tests.acceptance.helpers import admin, submit
from tests.conftest import (
    PROJECT,
    ROOT_ACCESS_TOKEN,
    ROOT_CLIENT_ID,
    shards_of,
    stores_of,
    task_queue_id,
    wait_for,
)

MOST = 3  # executions at once
IDLE = 1.5  # an execution's idle time before it exits


@pytest.fixture(scope="module")
def host(host_factory):
    # Claims of 3 s, so that a killed execution's task is retried within seconds.
    return host_factory(claim_timeout=3, claim_work_wait=1, claim_work_poll_interval=0.2)


class Pool:
    """The model run as `make run WORKER=<pool> SCALE=jobs` runs it beside the host (JobsBeside)."""

    def __init__(self, host, tq: str, work: Path, credentials: tuple[str, str] = (ROOT_CLIENT_ID, ROOT_ACCESS_TOKEN)):
        self.host, self.tq, self.work, self.credentials = host, tq, work, credentials
        self.rule = JobRule(tq, max_executions=MOST, polling_interval=0.3, idle_exit=IDLE)
        _, self.queues = stores_of(host.env)
        shards = shards_of(host.env).pending
        self.logs: list[Path] = []
        self.scaler = JobScaler(
            self.rule, lambda: fullest_pending_queue(self.queues, tq, shards), self._start, say=lambda _: None
        )
        self.beside = JobsBeside(self.scaler, self.queues)

    def _start(self) -> subprocess.Popen[bytes]:
        n = len(self.logs)
        log = self.work / f"execution-{n}.log"
        self.logs.append(log)
        env = {
            **os.environ,
            "TASKCLUSTER_ROOT_URL": self.host.root_url,
            "TASKCLUSTER_CLIENT_ID": self.credentials[0],
            "TASKCLUSTER_ACCESS_TOKEN": self.credentials[1],
            "PYTHONUNBUFFERED": "1",
        }
        # As infra/app/worker-pool.bicep runs it (its --worker-id: the execution's host name there).
        command = [sys.executable, "-m", "worker", "--task-queue", self.tq, "--worker-group", "jobs", "--claim-work"]
        command += ["--worker-id", f"job-{n}", "--work-dir", str(self.work / f"tasks-{n}"), "--idle-exit", str(IDLE)]
        with open(log, "wb") as out:
            return subprocess.Popen(command, cwd=PROJECT, env=env, stdout=out, stderr=subprocess.STDOUT)

    def running(self) -> int:
        return sum(1 for p in list(self.scaler.running) if p.poll() is None)

    def output(self) -> str:
        return "\n".join(f"--- {log.name}\n{log.read_text(errors='replace')[-1500:]}" for log in self.logs)

    def stop(self) -> None:
        self.beside.stop()


@pytest.fixture
def pool(host, tmp_path) -> Iterator[Pool]:
    made = Pool(host, task_queue_id(), tmp_path)
    yield made
    made.stop()


@pytest.fixture
def pool_as_its_client(host, tmp_path) -> Iterator[Pool]:
    """A pool whose executions run as the client `tc-queue-admin pools create` made for it, as on Azure."""
    tq, name = task_queue_id(), f"p{uuid.uuid4().hex[:12]}"
    made = admin(host, "pools", "create", name, "--task-queue", tq, "--worker-group", "jobs", "--image", "local")
    assert made.returncode == 0, made.stderr
    entry = json.loads(made.stdout)
    token = re.search(r"shown this once: (\S+)", made.stderr)
    assert token and entry["clientId"] == f"worker-pool/{name}", made.stderr
    running = Pool(host, tq, tmp_path, credentials=(entry["clientId"], token[1]))
    yield running
    running.stop()


def states(queue, tasks: list[str]) -> list[tuple[str, int]]:
    return [((s := queue.status(t)["status"])["state"], len(s["runs"])) for t in tasks]


def test_fifty_tasks_start_the_workers_that_take_them_and_none_is_left_running(host, pool_as_its_client):
    pool = pool_as_its_client
    queue = host.client()
    wait_for(lambda: pool.scaler.readings >= 3, timeout=10)
    assert pool.scaler.started == 0 and pool.running() == 0  # nothing pending: no worker
    tasks = [submit(queue, pool.tq, {"command": f"echo task {n}"}) for n in range(50)]
    wait_for(lambda: all(state == "completed" for state, _ in states(queue, tasks)), timeout=120)
    assert states(queue, tasks) == [("completed", 1)] * 50, pool.output()  # each exactly once
    wait_for(lambda: pool.running() == 0, timeout=30)  # each left once idle
    assert pool.scaler.started >= 1 and pool.scaler.peak <= MOST
    pool.scaler.reap()
    assert pool.scaler.exit_codes == {0: pool.scaler.started}, pool.output()
    taken = sum(int(line.split("(")[1].split()[0]) for line in pool.output().splitlines() if "idle for" in line)
    assert taken == 50, pool.output()


def test_a_stale_hint_starts_at_most_one_worker_that_leaves_without_a_task(host, tmp_path):
    queue = host.client()
    tq = task_queue_id()
    cancelled = submit(queue, tq, {"command": "echo never"})
    queue.cancelTask(cancelled)  # its pending hint stays in the queue until a worker reads it
    made = Pool(host, tq, tmp_path)
    try:
        wait_for(lambda: made.scaler.started >= 1, timeout=10)
        wait_for(lambda: made.running() == 0, timeout=30)
        assert made.scaler.started == 1, made.output()
        assert "idle for 1.5 s: exiting (0 runs taken)" in made.output()
    finally:
        made.stop()
    assert queue.status(cancelled)["status"]["runs"][0]["reasonResolved"] == "canceled"


def test_a_worker_killed_mid_task_leaves_it_to_claim_expiry_and_another_takes_it(host, pool):
    queue = host.client()
    task_id = submit(queue, pool.tq, {"command": ["sleep", "2"]}, retries=2)
    wait_for(lambda: queue.status(task_id)["status"]["state"] == "running", timeout=30)
    victim: Any = pool.scaler.running[0]
    victim.kill()  # no report: the claim expires (3 s) and the retry's hint starts another execution
    status = wait_for(
        lambda: (s := queue.status(task_id)["status"])["state"] == "completed" and s, timeout=60, interval=0.3
    )
    assert [r["reasonResolved"] for r in status["runs"]] == ["claim-expired", "completed"], pool.output()
    assert pool.scaler.started >= 2
