"""The reference worker run beside the local queue (`make run WORKER=...`): one process, or a pool of executions
scaled as a Container Apps job would scale them (`SCALE=jobs`, local_host/jobs.py). Each in its own session, so
that Ctrl-C reaches the host only; stopped by PID."""

from __future__ import annotations

import argparse
import functools
import itertools
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from local_host.host import PROJECT
from local_host.jobs import JobRule, JobsBeside, JobScaler, fullest_pending_queue
from shared.runtime import data_stores
from shared.settings import Settings


def start_jobs(
    args: argparse.Namespace, settings: Settings, start: Callable[..., subprocess.Popen[bytes]]
) -> JobsBeside:
    """The worker pool as a scaled job (local_host/jobs.py): executions of the reference worker started for the
    task queue's pending work, each exiting when idle."""
    rule = JobRule(args.worker, args.max_executions, args.polling_interval, idle_exit=args.idle_exit)
    _, queues = data_stores(settings)
    executions = itertools.count(1)

    def execution() -> subprocess.Popen[bytes]:
        return start(1, "--idle-exit", f"{rule.idle_exit:g}", worker_id=f"job-{next(executions)}", quiet=True)

    count = functools.partial(fullest_pending_queue, queues, rule.task_queue_id, settings.pending_shards)
    print(
        f"worker pool {rule.task_queue_id} as a job: up to {rule.max_executions} executions, the pending queues "
        f"read every {rule.polling_interval:g} s, each execution exits after {rule.idle_exit:g} s idle",
        flush=True,
    )
    return JobsBeside(JobScaler(rule, count, execution, say=lambda line: print(line, flush=True)), queues)


def start_worker(
    task_queue_id: str,
    capacity: int,
    *extra: str,
    root_url: str,
    client_id: str,
    token: str,
    data_dir: Path,
    worker_id: str | None = None,
    quiet: bool = False,
) -> subprocess.Popen[bytes]:
    """The reference worker beside the queue (its own session, so Ctrl-C reaches the host only; stopped by PID)."""
    env = {
        **os.environ,
        "TASKCLUSTER_ROOT_URL": root_url,
        "TASKCLUSTER_CLIENT_ID": client_id,
        "TASKCLUSTER_ACCESS_TOKEN": token,
    }
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "worker",
            "--task-queue",
            task_queue_id,
            "--capacity",
            str(capacity),
            "--worker-group",
            "local",
            "--work-dir",
            str(data_dir / "worker"),
            *(["--worker-id", worker_id] if worker_id else []),
            *extra,
        ],
        cwd=PROJECT,
        env=env,
        start_new_session=True,
    )
    if not quiet:
        print(f"reference worker (pid {process.pid}) taking tasks of {task_queue_id}", flush=True)
    return process


def stop_worker(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM (it reports its running tasks worker-shutdown, then exits), SIGKILL after 60 s; once."""
    if process.returncode is not None:
        return
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
    print(f"reference worker (pid {process.pid}) stopped", flush=True)
