"""The `push<N>` scenario of bench.lifecycle: a CI push as taskgraph submits it, then worker pools drain it.

A decision task is created and claimed; then taskgraph's own `create_tasks` (taskcluster-taskgraph, the code
Firefox-style projects run in their decision tasks: 50 createTask calls at a time, each task once its
dependencies are submitted) creates a graph of N tasks in the decision task's group, every task with routes,
scopes, `extra`, a payload with artifacts and relative timestamps: docker images, toolchains (on docker images),
32 builds (on toolchains and an image), chunked tests (on a build and an image), a signing task per build, a
summary per build waiting for all its test chunks, and an upload waiting for every signing task (a fan-in). The
tasks without a dependency in the graph wait for the decision task, which is completed once `create_tasks`
returns; then a pool of workers per kind claims and completes everything. Afterwards every task must have one
run, completed.
"""

from __future__ import annotations

import datetime as dt
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import taskcluster

from shared import timeutil

KINDS = ("docker-image", "toolchain", "build", "test", "signing", "summary", "upload")
PLATFORMS = 32
DOCKER_IMAGES, TOOLCHAINS = 20, 40
POOLS = {"docker-image": 2, "toolchain": 2, "build": 3, "test": 5, "signing": 2, "summary": 1, "upload": 1}


def shape(size: int) -> dict[str, int]:
    """How many tasks of each kind a push of about `size` tasks has (tests take what the others leave)."""
    fixed = DOCKER_IMAGES + TOOLCHAINS + 3 * PLATFORMS + 1
    chunks = max(1, (size - fixed) // PLATFORMS)
    return {
        "docker-image": DOCKER_IMAGES,
        "toolchain": TOOLCHAINS,
        "build": PLATFORMS,
        "test": chunks * PLATFORMS,
        "signing": PLATFORMS,
        "summary": PLATFORMS,
        "upload": 1,
    }


def build_graph(size: int, provisioner: str) -> tuple[Any, dict[str, str], dict[str, int]]:
    """taskgraph's TaskGraph (tasks keyed by taskId), label -> taskId, and the count per kind."""
    from taskgraph.graph import Graph
    from taskgraph.task import Task
    from taskgraph.taskgraph import TaskGraph

    counts = shape(size)
    chunks = counts["test"] // PLATFORMS
    labels: dict[str, list[str]] = {kind: [] for kind in KINDS}
    deps: dict[str, list[str]] = {}

    def add(kind: str, label: str, needs: list[str]) -> None:
        labels[kind].append(label)
        deps[label] = needs

    for i in range(DOCKER_IMAGES):
        add("docker-image", f"docker-image-{i}", [])
    for i in range(TOOLCHAINS):
        add("toolchain", f"toolchain-{i}", [f"docker-image-{i % DOCKER_IMAGES}"])
    for p in range(PLATFORMS):
        add(
            "build",
            f"build-p{p}",
            [f"toolchain-{(3 * p + k) % TOOLCHAINS}" for k in range(3)] + [f"docker-image-{p % DOCKER_IMAGES}"],
        )
    for p in range(PLATFORMS):
        for c in range(chunks):
            add("test", f"test-p{p}-{c + 1}", [f"build-p{p}", f"docker-image-{(p + c) % DOCKER_IMAGES}"])
        add("signing", f"signing-p{p}", [f"build-p{p}"])
        add("summary", f"summary-p{p}", [f"test-p{p}-{c + 1}" for c in range(chunks)])
    add("upload", "upload", [f"signing-p{p}" for p in range(PLATFORMS)])
    label_to_taskid = {label: timeutil.slugid() for label in deps}
    tasks: dict[str, Any] = {}
    edges: set[tuple[str, str, str]] = set()
    for kind, kind_labels in labels.items():
        for label in kind_labels:
            task_id = label_to_taskid[label]
            needs = [label_to_taskid[d] for d in deps[label]]
            edges.update((task_id, dep, "dep") for dep in needs)
            tasks[task_id] = Task(kind, label, {"kind": kind}, _definition(kind, label, needs, provisioner))
    return TaskGraph(tasks, Graph(set(tasks), edges)), label_to_taskid, counts


def _definition(kind: str, label: str, dependencies: list[str], provisioner: str) -> dict[str, Any]:
    """A task as a taskgraph transform leaves it: timestamps relative (create_tasks resolves them), index and
    treeherder routes, scopes, a docker-worker-like payload with artifacts, treeherder `extra`."""
    return {
        "provisionerId": provisioner,
        "workerType": kind,
        "created": {"relative-datestamp": "0 seconds"},
        "deadline": {"relative-datestamp": "1 day"},
        "expires": {"relative-datestamp": "28 days"},
        "dependencies": list(dependencies),
        "requires": "all-completed",
        "priority": "low",
        "routes": [f"index.bench.v2.push.latest.{kind}.{label}", "tc-treeherder.v2.bench.0123456789abcdef.42"],
        "scopes": [f"secrets:get:project/bench/{kind}", "queue:get-artifact:project/bench/*"],
        "payload": {
            "image": "bench/image:latest",
            "maxRunTime": 3600,
            "command": ["run-task", "--", label],
            "env": {"MOZ_BUILD_DATE": "20261125000000", "TASKCLUSTER_CACHES": "/builds/worker/checkouts"},
            "artifacts": {
                "public/build": {
                    "type": "directory",
                    "path": "/builds/worker/artifacts",
                    "expires": {"relative-datestamp": "28 days"},
                }
            },
        },
        "extra": {
            "index": {"rank": 1764000000},
            "parent": "decision",
            "treeherder": {
                "machine": {"platform": label.split("-")[-1]},
                "symbol": label[:20],
                "tier": 1,
                "jobKind": "test",
            },
        },
        "tags": {"kind": kind, "label": label, "createdForUser": "bench@example.com"},
        "metadata": {
            "name": label,
            "description": f"{kind} task of a benchmark push",
            "owner": "bench@example.com",
            "source": "https://example.com/bench/taskcluster/kinds/" + kind,
        },
    }


class Pool:
    """`threads` workers claiming from one task queue (4 at a time) and completing each claim, until `target`."""

    def __init__(self, client: Callable[..., taskcluster.Queue], task_queue: str, threads: int, target: int) -> None:
        self.client, self.task_queue, self.target = client, task_queue, target
        self.completed = 0
        self.lock = threading.Lock()
        self.done = threading.Event()
        if target == 0:
            self.done.set()
        self.threads = [threading.Thread(target=self._work, args=(i,), daemon=True) for i in range(threads)]
        for thread in self.threads:
            thread.start()

    def _work(self, i: int) -> None:
        queue = self.client()
        while not self.done.is_set():
            claims = queue.claimWork(self.task_queue, {"workerGroup": "bench", "workerId": f"w{i}", "tasks": 4})[
                "tasks"
            ]
            for claim in claims:
                self.client(claim["credentials"]).reportCompleted(claim["status"]["taskId"], str(claim["runId"]))
                with self.lock:
                    self.completed += 1
                    if self.completed >= self.target:
                        self.done.set()


def progress(size: int, what: str, count: Callable[[], int]) -> threading.Event:
    """A line on stderr every 15 s until the event is set: a push of 10,000 runs for minutes."""
    stop, started = threading.Event(), time.perf_counter()

    def report() -> None:
        while not stop.wait(15):
            print(
                f"  push {size}: {what} {count()} after {time.perf_counter() - started:.0f} s",
                file=sys.stderr,
                flush=True,
            )

    threading.Thread(target=report, daemon=True).start()
    return stop


def scenario_push(
    client: Callable[..., taskcluster.Queue],
    size: int,
    root_url: str,
    credentials: dict[str, str],
    mark: Callable[[], None] = lambda: None,
    created_mark: Callable[[], None] = lambda: None,
) -> str:
    """Create and run the push; `created_mark` is called once it is created, `mark` once it ran, before the check
    that reads every task (whose calls and CPU are the benchmark's, not the push's)."""
    from taskgraph import create
    from taskgraph.util import taskcluster as tc_util

    provisioner = f"push-{uuid.uuid4().hex[:8]}"
    taskgraph, label_to_taskid, counts = build_graph(size, provisioner)
    total = sum(counts.values())
    decision = timeutil.slugid()
    now = timeutil.now()
    queue = client()
    queue.createTask(
        decision,
        {
            "taskQueueId": f"{provisioner}/decision",
            "taskGroupId": decision,
            "schedulerId": "bench-level-3",
            "created": timeutil.iso(now),
            "deadline": timeutil.iso(now + dt.timedelta(days=1)),
            "payload": {},
            "metadata": {
                "name": "Decision Task",
                "description": "the push's decision task",
                "owner": "bench@example.com",
                "source": "https://example.com/bench",
            },
        },
    )
    [claim] = queue.claimWork(f"{provisioner}/decision", {"workerGroup": "bench", "workerId": "decision", "tasks": 1})[
        "tasks"
    ]

    def text(value: str | bytes) -> str:
        return value.decode() if isinstance(value, bytes) else value  # the client may have encoded them

    os.environ.update(
        {
            "TASKCLUSTER_ROOT_URL": root_url,
            "TASKCLUSTER_CLIENT_ID": text(credentials["clientId"]),
            "TASKCLUSTER_ACCESS_TOKEN": text(credentials["accessToken"]),
        }
    )
    for cached in (tc_util.get_taskcluster_client, tc_util.get_root_url, tc_util.get_session):
        getattr(cached, "cache_clear", lambda: None)()  # taskgraph remembers its client and rootUrl
    started = time.perf_counter()
    stop = progress(total, "creating", lambda: total)
    create.create_tasks({"trust-domain": "bench"}, taskgraph, label_to_taskid, {"level": "3"}, decision)
    stop.set()
    create_seconds = time.perf_counter() - started
    created_mark()
    client(claim["credentials"]).reportCompleted(decision, "0")
    started = time.perf_counter()
    pools = [Pool(client, f"{provisioner}/{kind}", POOLS[kind], counts[kind]) for kind in KINDS]
    stop = progress(total, "completed", lambda: sum(p.completed for p in pools))
    for pool in pools:
        pool.done.wait(timeout=3600)
    run_seconds = time.perf_counter() - started
    stop.set()
    mark()
    ids = list(label_to_taskid.values())
    bad = []
    for i in range(0, len(ids), 500):
        for status in queue.statuses({"taskIds": ids[i : i + 500]})["statuses"]:
            runs = status["status"]["runs"]
            if len(runs) != 1 or runs[0]["state"] != "completed":
                bad.append(status["taskId"])
    workers = sum(POOLS.values())
    kinds = ", ".join(f"{counts[k]} {k}" for k in KINDS)
    return (
        f"push {total} ({kinds}): taskgraph's create_tasks (50 at a time) created them in "
        f"{create_seconds:.1f} s ({total / create_seconds:.0f} tasks/s); run by {workers} workers in pools per "
        f"kind in {run_seconds:.1f} s ({total / run_seconds:.0f} tasks/s); completed exactly once: "
        f"{total - len(bad)}, other: {len(bad)}"
    )
