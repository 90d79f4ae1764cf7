"""Command line of the reference worker.

    python -m worker --task-queue my-provisioner/my-worker-type --worker-group local --worker-id w1 --capacity 2

Credentials and rootUrl come from TASKCLUSTER_ROOT_URL, TASKCLUSTER_CLIENT_ID, TASKCLUSTER_ACCESS_TOKEN (and
TASKCLUSTER_CERTIFICATE for temporary credentials), as for the official clients. The worker needs the scopes
`queue:claim-work:<taskQueueId>`, `queue:worker-id:<workerGroup>/<workerId>` and, to poll with signed URLs,
`queue:poll-task-urls:<taskQueueId>`. SIGTERM or Ctrl-C stops it: running tasks end as exception/worker-shutdown.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from pathlib import Path

from worker.runner import main_loop
from worker.task_run import Options


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m worker", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--task-queue", required=True, help="taskQueueId to take tasks from (provisioner/type)")
    parser.add_argument("--worker-group", default="local", help="workerGroup (default: local)")
    parser.add_argument(
        "--worker-id",
        default=socket.gethostname().split(".")[0][:38] or "worker",
        help="workerId (default: the host name)",
    )
    parser.add_argument("--capacity", type=int, default=1, help="tasks run at once (default: 1)")
    parser.add_argument(
        "--claim-work",
        action="store_true",
        help="find work with claimWork (long-poll) instead of polling with signed URLs",
    )
    parser.add_argument(
        "--work-dir",
        type=Path,
        default=Path(os.environ.get("TMPDIR", "/tmp")) / "tc-queue-worker",
        help="where each task gets a folder of its own",
    )
    parser.add_argument("--max-tasks", type=int, default=None, help="stop after this many runs")
    parser.add_argument(
        "--idle-exit",
        type=float,
        default=None,
        metavar="SECONDS",
        help="exit 0 once no task has run and no work was found for this long (a scaled job's execution; "
        "default: never)",
    )
    parser.add_argument(
        "--cancel-check",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="read a running task's status this often, to stop it within seconds of a cancel "
        "(default: 5; 0: only at the next reclaim)",
    )
    parser.add_argument(
        "--root-url",
        default=os.environ.get("TASKCLUSTER_ROOT_URL"),
        help="the queue's rootUrl (default: $TASKCLUSTER_ROOT_URL)",
    )
    args = parser.parse_args(argv)
    if not args.root_url:
        parser.error("--root-url or TASKCLUSTER_ROOT_URL is required")
    if args.capacity < 1:
        parser.error("--capacity must be at least 1")
    credentials = {
        k: v
        for k, v in {
            "clientId": os.environ.get("TASKCLUSTER_CLIENT_ID"),
            "accessToken": os.environ.get("TASKCLUSTER_ACCESS_TOKEN"),
            "certificate": os.environ.get("TASKCLUSTER_CERTIFICATE"),
        }.items()
        if v
    }
    if "clientId" not in credentials or "accessToken" not in credentials:
        parser.error("TASKCLUSTER_CLIENT_ID and TASKCLUSTER_ACCESS_TOKEN are required")
    options = Options(
        root_url=args.root_url.rstrip("/"),
        credentials=credentials,
        task_queue_id=args.task_queue,
        worker_group=args.worker_group,
        worker_id=args.worker_id,
        capacity=args.capacity,
        mode="claim-work" if args.claim_work else "poll",
        work_dir=args.work_dir,
        max_tasks=args.max_tasks,
        idle_exit=args.idle_exit,
        cancel_check=max(0.0, args.cancel_check),
    )
    return main_loop(options)


if __name__ == "__main__":
    sys.exit(main())
