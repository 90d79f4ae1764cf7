"""What scaling workers from zero costs a task (issue #87): a worker pool run as a scaled job would be on Azure
(local_host/jobs.py: the pending queues read every `--polling-interval`, reference workers started for the pending
work up to `--max-executions`, each exiting after `--idle-exit` idle), against its own Azurite and local host.

    .venv/bin/python -m bench.jobs [--bursts 3] [--tasks 20] [--polling-interval 30] [--idle-exit 30]

Each burst creates `--tasks` tasks at once after the pool has gone back to zero, at a random moment of the rule's
period. Printed per burst: how long from
createTask to the first run's start (p50 / max, by the server's timestamps), how many workers were started for it
and how many tasks each took; and the worker-seconds the pool ran against the seconds its tasks ran.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import taskcluster

from bench.lifecycle import percentile, start_embedded, stop_all
from local_host.jobs import JobRule, JobsBeside, JobScaler, fullest_pending_queue
from shared.connections import StorageConnection
from shared.storage import queue_store

PROJECT = Path(__file__).resolve().parent.parent


def seconds(later: str, earlier: str) -> float:
    return (dt.datetime.fromisoformat(later) - dt.datetime.fromisoformat(earlier)).total_seconds()


class Measured:
    """The model in a thread of its own, and each execution's lifetime."""

    def __init__(self, rule: JobRule, root_url: str, credentials: dict[str, str], storage: str, work: Path) -> None:
        connection = StorageConnection.from_environ("QUEUE_STORAGE", {"QUEUE_STORAGE": storage})
        assert connection is not None
        self.queues = queue_store(connection, traced=False)
        self.rule, self.root_url, self.credentials, self.work = rule, root_url, credentials, work
        self.lifetimes: list[list[float]] = []  # each execution's start and end (monotonic seconds)
        self.scaler = JobScaler(
            rule, lambda: fullest_pending_queue(self.queues, rule.task_queue_id), self._start, say=lambda _: None
        )
        self.beside = JobsBeside(self.scaler, self.queues)

    def _start(self) -> subprocess.Popen[bytes]:
        n = len(self.lifetimes)
        env = {
            **os.environ,
            "TASKCLUSTER_ROOT_URL": self.root_url,
            "TASKCLUSTER_CLIENT_ID": self.credentials["clientId"],
            "TASKCLUSTER_ACCESS_TOKEN": self.credentials["accessToken"],
        }
        command = [sys.executable, "-m", "worker", "--task-queue", self.rule.task_queue_id, "--worker-group", "jobs"]
        command += ["--worker-id", f"job-{n}", "--work-dir", str(self.work / str(n))]
        command += ["--idle-exit", f"{self.rule.idle_exit:g}"]
        process = subprocess.Popen(command, cwd=PROJECT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        lifetime = [time.monotonic()]
        self.lifetimes.append(lifetime)

        def ended() -> None:
            process.wait()
            lifetime.append(time.monotonic())

        threading.Thread(target=ended, daemon=True).start()
        return process

    def running(self) -> int:
        return sum(1 for lifetime in self.lifetimes if len(lifetime) == 1)

    def stop(self) -> None:
        self.beside.stop()


def burst(queue: Any, pool: Measured, tasks: int) -> dict[str, Any]:
    """`tasks` tasks created at once, run by the pool from zero; what they waited and what ran."""
    started_before = pool.scaler.started
    ids = [taskcluster.slugId() for _ in range(tasks)]
    deadline = taskcluster.stringDate(taskcluster.fromNow("1 hour"))
    for task_id in ids:
        queue.createTask(
            task_id,
            {
                "taskQueueId": pool.rule.task_queue_id,
                "created": taskcluster.stringDate(dt.datetime.now(dt.UTC)),
                "deadline": deadline,
                "payload": {"command": "echo bench"},
                "metadata": {
                    "name": "bench",
                    "description": "bench.jobs",
                    "owner": "bench@example.com",
                    "source": "https://example.com",
                },
            },
        )
    while not all(queue.status(t)["status"]["state"] == "completed" for t in ids):
        time.sleep(0.5)
    statuses = [queue.status(t)["status"] for t in ids]
    waits = sorted(seconds(s["runs"][0]["started"], s["runs"][0]["scheduled"]) for s in statuses)
    while pool.running():
        time.sleep(0.5)
    return {"waits": waits, "workers": pool.scaler.started - started_before}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bursts", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=20, help="tasks created at once in each burst")
    parser.add_argument("--polling-interval", type=float, default=30.0, help="seconds between the rule's readings")
    parser.add_argument("--idle-exit", type=float, default=30.0, help="an execution's idle time before it exits")
    parser.add_argument("--max-executions", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1, help="of the pauses before each burst")
    args = parser.parse_args()
    stops: list[Any] = []
    try:
        connection: list[str] = []
        root_url, credentials, _ = start_embedded(stops, in_memory=True, connection=connection)
        work = Path(tempfile.mkdtemp(prefix="bench-jobs-"))
        rule = JobRule("bench/jobs", args.max_executions, args.polling_interval, idle_exit=args.idle_exit)
        pool = Measured(rule, root_url, credentials, connection[0], work)
        stops.append(pool.stop)
        queue = taskcluster.Queue({"rootUrl": root_url, "credentials": credentials})
        print(
            f"pool of up to {rule.max_executions} executions, read every {rule.polling_interval:g} s, each exiting "
            f"after {rule.idle_exit:g} s idle; {args.bursts} bursts of {args.tasks} tasks, each from zero"
        )
        began = time.monotonic()
        pace = random.Random(args.seed)
        for n in range(args.bursts):
            time.sleep(pace.uniform(0, rule.polling_interval))  # a push comes at any moment of the rule's period
            got = burst(queue, pool, args.tasks)
            waits = got["waits"]
            print(
                f"burst {n + 1}: createTask to running p50 {percentile(waits, 50):.1f} s, max {waits[-1]:.1f} s; "
                f"{got['workers']} workers started ({args.tasks / max(1, got['workers']):.1f} tasks each)"
            )
        worker_seconds = sum(lifetime[1] - lifetime[0] for lifetime in pool.lifetimes)  # every one has ended
        print(
            f"workers ran {worker_seconds:.0f} worker-seconds in {time.monotonic() - began:.0f} s "
            f"({len(pool.lifetimes)} executions); an always-on pool of {rule.max_executions} would have run "
            f"{rule.max_executions * (time.monotonic() - began):.0f}"
        )
    finally:
        stop_all(stops)
    return 0


if __name__ == "__main__":
    sys.exit(main())
