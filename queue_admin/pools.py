"""`tc-queue-admin pools`: a worker pool run as an event-driven Container Apps job (infra/, docs/worker-pools.md).

    tc-queue-admin pools entry builders --task-queue proj/builder --worker-group azure --image REGISTRY/worker:TAG
    tc-queue-admin pools create builders --task-queue proj/builder --worker-group azure --image ... \\
        --scope "secrets:get:project/builder/*"

`entry` prints the pool's entry of infra's `workerPools` parameter (JSON): the job's settings and its scale rules,
one per pending queue of the task queue (each priority, each of QUEUE_PENDING_SHARDS), each naming the data account
(of QUEUE_STORAGE_SHARDS) that holds it: names that only this code computes, so they are printed here rather than
written by hand. `create` also creates the pool's client `worker-pool/<name>` (with the scopes a worker of the pool
needs, and those given) and prints its access token once, for the Key Vault secret `worker-pool-<name>` the job
reads through its own identity.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

from shared.domain.messages import pending_queue
from shared.domain.tasks import PRIORITIES
from shared.storage.sharded import queue_account

# A Container Apps job is named `caj-<name>` (at most 32 characters) and its secret `worker-pool-<name>`.
POOL_NAME = re.compile(r"[a-z][a-z0-9-]{0,26}[a-z0-9]")
IDENTIFIER = re.compile(r"[a-zA-Z0-9_-]{1,38}")  # a provisionerId, workerType or workerGroup, as Taskcluster's
DEFAULTS: dict[str, Any] = {
    "cpu": "1.0",  # vCPU of an execution (Consumption: 0.25 to 4, memory 2 GiB a vCPU)
    "memory": "2Gi",
    "maxExecutions": 10,  # the most executions at once
    "pollingInterval": 30,  # seconds between the rule's readings (KEDA's default)
    "idleExit": 60,  # seconds an execution waits for work before it exits 0
    "replicaTimeout": 86400,  # seconds an execution may run at most (a task's maxRunTime is shorter)
}


class PoolError(ValueError):
    """A pool's setting that infra/ would not take."""


def client_id(name: str) -> str:
    return f"worker-pool/{name}"


def secret_name(name: str) -> str:
    return f"worker-pool-{name}"


def pool_scopes(task_queue_id: str, worker_group: str, extra: list[str]) -> list[str]:
    """What a worker of the pool needs: claim the task queue's work as any worker of its group; then `extra`
    (what its tasks need, e.g. secrets)."""
    return [f"queue:claim-work:{task_queue_id}", f"queue:worker-id:{worker_group}/*", *extra]


def scale_rules(
    task_queue_id: str, *, pending_shards: int, storage_shards: int, priorities: list[str]
) -> list[dict[str, Any]]:
    """One azure-queue rule per pending queue of the task queue, highest priority first: its name and the index
    of the data account that holds it (0: the data account, i: its i-th further account)."""
    return [
        {"queueName": name, "account": queue_account(name, storage_shards)}
        for priority in priorities
        for name in (pending_queue(task_queue_id, priority, shard) for shard in range(pending_shards))
    ]


def pool_entry(args: argparse.Namespace) -> dict[str, Any]:
    """The pool's entry of infra's `workerPools` parameter, checked as infra/ and the queue would check it."""
    if not POOL_NAME.fullmatch(args.name):
        raise PoolError(f"pool name {args.name!r}: 2-28 of a-z, 0-9 and '-', starting with a letter")
    parts = args.task_queue.split("/")
    if len(parts) != 2 or not all(IDENTIFIER.fullmatch(p) for p in parts):
        raise PoolError(f"task queue {args.task_queue!r}: <provisionerId>/<workerType>, each 1-38 of [a-zA-Z0-9_-]")
    if not IDENTIFIER.fullmatch(args.worker_group):
        raise PoolError(f"worker group {args.worker_group!r}: 1-38 of [a-zA-Z0-9_-]")
    priorities = args.priorities.split(",") if args.priorities else list(PRIORITIES)
    unknown = [p for p in priorities if p not in PRIORITIES]
    if unknown:
        raise PoolError(f"unknown priorities {unknown}: {', '.join(PRIORITIES)}")
    if not 1 <= args.pending_shards <= 16 or not 1 <= args.storage_shards <= 64:
        raise PoolError("--pending-shards is 1 to 16 and --storage-shards 1 to 64, as infra/'s parameters")
    if not 1 <= args.max_executions <= 1000 or not 10 <= args.polling_interval <= 3600 or args.idle_exit < 1:
        raise PoolError("--max-executions is 1 to 1000, --polling-interval 10 to 3600 s, --idle-exit at least 1 s")
    return {
        "name": args.name,
        "taskQueueId": args.task_queue,
        "workerGroup": args.worker_group,
        "clientId": client_id(args.name),
        "image": args.image,
        **DEFAULTS,
        "maxExecutions": args.max_executions,
        "pollingInterval": args.polling_interval,
        "idleExit": args.idle_exit,
        "rules": scale_rules(
            args.task_queue,
            pending_shards=args.pending_shards,
            storage_shards=args.storage_shards,
            priorities=priorities,
        ),
    }


def add_commands(kinds: Any) -> None:
    """`pools entry` and `pools create` on the command line's kinds."""
    pools = kinds.add_parser("pools", help="a worker pool as a Container Apps job: its infra/ entry and client")
    actions = pools.add_subparsers(dest="action", required=True)
    for name, about in (
        ("entry", "print the pool's entry of infra's workerPools parameter (no call to the queue)"),
        ("create", "create the pool's client worker-pool/<name> (its token printed once) and print its entry"),
    ):
        one = actions.add_parser(name, help=about)
        one.add_argument("name", help="the pool's name: 2-28 of a-z, 0-9 and '-'")
        one.add_argument("--task-queue", required=True, help="the taskQueueId it serves (provisioner/type)")
        one.add_argument("--worker-group", required=True, help="the workerGroup its workers claim as")
        one.add_argument("--image", required=True, help="the worker's container image (worker/Containerfile)")
        one.add_argument("--max-executions", type=int, default=DEFAULTS["maxExecutions"])
        one.add_argument("--polling-interval", type=int, default=DEFAULTS["pollingInterval"], metavar="SECONDS")
        one.add_argument("--idle-exit", type=int, default=DEFAULTS["idleExit"], metavar="SECONDS")
        one.add_argument("--pending-shards", type=int, default=1, help="the deployment's pendingShards (default 1)")
        one.add_argument("--storage-shards", type=int, default=1, help="the deployment's storageShards (default 1)")
        one.add_argument("--priorities", default="", help="comma-separated: only these priorities' queues")
        one.add_argument(
            "--scope", action="append", default=[], dest="scopes", metavar="SCOPE", help="a scope its tasks need"
        )
        one.add_argument("--expires", default="1 year", help="when the client stops working (default: 1 year)")
        if name == "create":
            one.add_argument("--token-file", type=Path, help="write the access token here (mode 600), not out")
