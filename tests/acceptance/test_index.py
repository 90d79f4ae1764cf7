"""The Index through code nobody here wrote: the official Python client's `Index` class (every method), taskgraph's
helpers and its `index-search` optimization over two pushes, and a host killed between a completion and its
indexing."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import threading
import time
from collections.abc import Callable, Iterator

import httpx
import pytest
import taskcluster

from shared import timeutil
from shared.faults import EXIT_STATUS
from tests.amqp import broker_reachable
from tests.conftest import (
    ROOT_ACCESS_TOKEN,
    ROOT_CLIENT_ID,
    HostProcess,
    expect_error,
    slugid,
    task_definition,
    task_queue_id,
    wait_for,
)

WORKER = {"workerGroup": "wg-1", "workerId": "worker-1"}
ROOT = {"clientId": ROOT_CLIENT_ID, "accessToken": ROOT_ACCESS_TOKEN}


@pytest.fixture
def queue(host):
    return host.client()


@pytest.fixture
def index(host):
    return taskcluster.Index({"rootUrl": host.root_url, "credentials": ROOT, "maxRetries": 0})


def anonymous_index(host):
    return taskcluster.Index({"rootUrl": host.root_url, "maxRetries": 0})


def in_days(days=1):
    return timeutil.iso(timeutil.now() + dt.timedelta(days=days))


def ns():
    """A namespace of the test's own."""
    return "t" + slugid().replace("-", "x").replace("_", "y").lower()


def run_task(queue, outcome="completed", artifacts=(), **overrides):
    """Create, claim and resolve a task (uploading `artifacts`: (name, bytes) while it runs); its taskId."""
    task_id = slugid()
    definition = task_definition(**overrides)
    queue.createTask(task_id, definition)
    [claim] = queue.claimWork(definition["taskQueueId"], {"tasks": 1, **WORKER})["tasks"]
    assert claim["status"]["taskId"] == task_id
    for name, data in artifacts:
        created = queue.createArtifact(
            task_id, "0", name, {"storageType": "s3", "expires": in_days(), "contentType": "application/json"}
        )
        assert httpx.put(created["putUrl"], content=data, headers={"content-type": "application/json"}).status_code in (
            200,
            201,
        )
    if outcome == "completed":
        queue.reportCompleted(task_id, "0")
    else:
        queue.reportFailed(task_id, "0")
    return task_id


def found(index, path):
    with contextlib.suppress(taskcluster.exceptions.TaskclusterRestFailure):
        return index.findTask(path)
    return None


def test_a_completed_task_is_indexed_at_its_routes_with_extra_index(queue, index):
    space = ns()
    expires = in_days(3)
    task_id = run_task(
        queue,
        routes=[f"index.{space}.rev.abc.linux64", f"index.{space}.latest.linux64", f"index.{space}..malformed"],
        extra={"index": {"rank": 1764000000, "data": {"revision": "abc"}, "expires": expires}},
    )
    failed = run_task(queue, outcome="failed", routes=[f"index.{space}.failed.linux64"])
    entry = wait_for(lambda: found(index, f"{space}.latest.linux64"))
    assert entry == {
        "namespace": f"{space}.latest.linux64",
        "taskId": task_id,
        "rank": 1764000000,
        "data": {"revision": "abc"},
        "expires": expires,
    }
    assert index.findTask(f"{space}.rev.abc.linux64")["taskId"] == task_id
    assert queue.status(failed)["status"]["state"] == "failed"
    expect_error(404, "ResourceNotFound", index.findTask, f"{space}.failed.linux64")
    names = {n["name"] for n in index.listNamespaces(space)["namespaces"]}
    assert names == {"rev", "latest"}  # the failed task made no namespace, the malformed route nothing


def test_every_method_of_the_official_client(host, queue, index):
    space = ns()
    assert index.ping()["alive"] is True
    task_ids = [
        run_task(queue, artifacts=[("public/info.json", b'{"ok": 1}'), ("private/secret.json", b'{"s": 2}')])
        for _ in range(3)
    ]
    expires = in_days(2)
    for i, task_id in enumerate(task_ids):
        answer = index.insertTask(
            f"{space}.builds.b{i}", {"taskId": task_id, "rank": i, "data": {"i": i}, "expires": expires}
        )
        assert answer == {
            "namespace": f"{space}.builds.b{i}",
            "taskId": task_id,
            "rank": i,
            "data": {"i": i},
            "expires": expires,
        }
    # A lower rank does not displace the entry: the answer is the entry that stays.
    kept = index.insertTask(f"{space}.builds.b2", {"taskId": task_ids[0], "rank": 1, "data": {}, "expires": expires})
    assert kept["taskId"] == task_ids[2]
    assert index.findTask(f"{space}.builds.b1")["taskId"] == task_ids[1]

    pages, token = [], None
    while True:
        page = index.listTasks(f"{space}.builds", query={"limit": 2, **({"continuationToken": token} if token else {})})
        pages.append(page["tasks"])
        token = page.get("continuationToken")
        if not token:
            break
    assert sorted(t["taskId"] for p in pages for t in p) == sorted(task_ids) and max(map(len, pages)) <= 2
    assert [n["namespace"] for n in index.listNamespaces(space)["namespaces"]] == [f"{space}.builds"]
    root = []
    token = None
    while True:  # the root namespace lists this test's namespace among the others
        page = index.listNamespaces("", query={"limit": 1000, **({"continuationToken": token} if token else {})})
        root += [n["namespace"] for n in page["namespaces"]]
        token = page.get("continuationToken")
        if not token:
            break
    assert space in root

    asked = {"indexes": [f"{space}.builds.b0", f"{space}.missing", f"{space}.builds.b2"]}
    batch = index.findTasksAtIndex(payload=asked, query={"limit": 2})
    assert [t["taskId"] for t in batch["tasks"]] == [task_ids[0]] and batch["continuationToken"]
    rest = index.findTasksAtIndex(payload=asked, query={"limit": 2, "continuationToken": batch["continuationToken"]})
    assert [t["taskId"] for t in rest["tasks"]] == [task_ids[2]] and "continuationToken" not in rest
    # A caller without credentials looks up at most 100 paths a request, whatever `limit` says.
    many = {"indexes": [f"{space}.missing.m{i}" for i in range(250)] + [f"{space}.builds.b0"]}
    anonymous = anonymous_index(host)
    first = anonymous.findTasksAtIndex(payload=many, query={"limit": 1000})
    assert first["tasks"] == [] and first["continuationToken"]
    found, token, pages = [], first["continuationToken"], 1
    while token:
        page = anonymous.findTasksAtIndex(payload=many, query={"limit": 1000, "continuationToken": token})
        found, token, pages = found + page["tasks"], page.get("continuationToken"), pages + 1
    assert [t["taskId"] for t in found] == [task_ids[0]] and pages == 3

    # Artifacts by index path: public ones through the Queue's URL, others straight to the data.
    public = index.findArtifactFromTask(f"{space}.builds.b1", "public/info.json")["response"]
    assert public.status_code == 303
    assert public.headers["location"].startswith(f"{host.root_url}/api/queue/v1/task/{task_ids[1]}/artifacts/")
    assert httpx.get(public.headers["location"], follow_redirects=True).json() == {"ok": 1}
    private = index.findArtifactFromTask(f"{space}.builds.b1", "private/secret.json")["response"]
    assert httpx.get(private.headers["location"]).json() == {"s": 2}
    expect_error(
        403,
        "InsufficientScopes",
        anonymous_index(host).findArtifactFromTask,
        f"{space}.builds.b1",
        "private/secret.json",
    )
    anonymous_public = anonymous_index(host).findArtifactFromTask(f"{space}.builds.b1", "public/info.json")
    assert anonymous_public["response"].status_code == 303

    index.deleteTask(f"{space}.builds.b0")
    expect_error(404, "ResourceNotFound", index.findTask, f"{space}.builds.b0")
    index.deleteTask(f"{space}.builds.b0")  # nothing there: still fine

    # 32 KiB of data in any script (six times as many characters as escaped JSON) is kept whole.
    wide = {"note": "漢" * 10_000, "emoji": "🦀" * 500}
    index.insertTask(f"{space}.wide", {"taskId": task_ids[0], "rank": 0, "data": wide, "expires": expires})
    assert index.findTask(f"{space}.wide")["data"] == wide

    # The deprecated POST forms, as older clients send them (the current client has no method for them).
    for path, key in ((f"namespaces/{space}", "namespaces"), (f"tasks/{space}.builds", "tasks")):
        answer = httpx.post(f"{host.root_url}/api/index/v1/{path}", json={"limit": 10})
        assert answer.status_code == 200 and answer.json()[key], answer.text


def test_refusals_in_taskclusters_error_format(host, index):
    space = ns()
    anonymous = anonymous_index(host)
    body = {"taskId": slugid(), "rank": 0, "data": {}, "expires": in_days()}
    expect_error(403, "InsufficientScopes", anonymous.insertTask, f"{space}.x", body)
    expect_error(403, "InsufficientScopes", anonymous.deleteTask, f"{space}.x")
    for bad in (f"{space}..x", f"{space}.a b", "x" * 256, ".".join(["w"] * 65)):
        error = expect_error(400, "InvalidRequestArguments", index.insertTask, bad, body)
        assert "is not an index path" in error["message"]
    expect_error(400, "InvalidRequestArguments", index.findTask, f"{space}..x")
    expect_error(400, "InputError", index.insertTask, f"{space}.big", {**body, "data": {"x": "y" * 40_000}})
    expect_error(400, "InputValidationError", index.insertTask, f"{space}.x", {**body, "rank": "high"})
    expect_error(400, "InvalidRequestArguments", index.listTasks, space, query={"limit": "1001"})
    expect_error(400, "InvalidRequestArguments", index.listTasks, space, query={"continuationToken": "%%%"})
    expect_error(400, "InputError", index.findTasksAtIndex, {"indexes": [f"{space}.p{i}" for i in range(1001)]})
    expect_error(404, "ResourceNotFound", anonymous.findTask, f"{space}.nothing")
    # Nothing was written by any of them.
    assert index.listNamespaces(space)["namespaces"] == []


def test_two_tasks_racing_for_one_path_leave_the_higher_rank(host, queue, index):
    space = ns()
    ids = {rank: slugid() for rank in range(12)}
    errors = []

    def insert(rank):
        try:
            taskcluster.Index({"rootUrl": host.root_url, "credentials": ROOT, "maxRetries": 0}).insertTask(
                f"{space}.latest", {"taskId": ids[rank], "rank": rank, "data": {}, "expires": in_days()}
            )
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=insert, args=(rank,)) for rank in ids]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert index.findTask(f"{space}.latest")["taskId"] == ids[11]
    # Two completed tasks at one route: the higher rank stays, though the lower completes last.
    high = run_task(queue, routes=[f"index.{space}.route"], extra={"index": {"rank": 10}})
    wait_for(lambda: found(index, f"{space}.route"))
    low = run_task(queue, routes=[f"index.{space}.route", f"index.{space}.marker"], extra={"index": {"rank": 3}})
    wait_for(lambda: found(index, f"{space}.marker"))  # the lower one's completion was indexed
    time.sleep(0.5)  # its other route beside it
    assert index.findTask(f"{space}.route")["taskId"] == high != low


# --- taskgraph ---------------------------------------------------------------------------------------------------


@pytest.fixture
def taskgraph_env(host, monkeypatch) -> Iterator[None]:
    from taskgraph.util import taskcluster as tc_util

    monkeypatch.setenv("TASKCLUSTER_ROOT_URL", host.root_url)
    monkeypatch.setenv("TASKCLUSTER_CLIENT_ID", ROOT_CLIENT_ID)
    monkeypatch.setenv("TASKCLUSTER_ACCESS_TOKEN", ROOT_ACCESS_TOKEN)
    monkeypatch.delenv("TASKCLUSTER_PROXY_URL", raising=False)

    def clear() -> None:
        for cached in (tc_util.get_taskcluster_client, tc_util.get_root_url, tc_util.get_session):
            getattr(cached, "cache_clear", lambda: None)()  # taskgraph remembers its client and rootUrl

    clear()
    yield
    clear()


def test_taskgraphs_helpers(queue, index, taskgraph_env):
    from taskgraph.util import taskcluster as tc_util

    space = ns()
    first = run_task(
        queue,
        routes=[f"index.{space}.toolchain.clang"],
        expires=in_days(2),
        artifacts=[("public/build/manifest.json", b'{"tool": "clang"}')],
    )
    second = run_task(queue, routes=[f"index.{space}.toolchain.gcc"], expires=in_days(3))
    wait_for(lambda: found(index, f"{space}.toolchain.gcc") and found(index, f"{space}.toolchain.clang"))
    assert tc_util.find_task_id(f"{space}.toolchain.clang") == first
    assert tc_util.find_task_id_batched(
        [f"{space}.toolchain.clang", f"{space}.toolchain.gcc", f"{space}.toolchain.none"]
    ) == {f"{space}.toolchain.clang": first, f"{space}.toolchain.gcc": second}
    assert tc_util.get_artifact_from_index(f"{space}.toolchain.clang", "public/build/manifest.json") == {
        "tool": "clang"
    }
    assert tc_util.list_tasks(f"{space}.toolchain") == [first, second]  # sorted by expiry, as taskgraph sorts
    with pytest.raises(taskcluster.exceptions.TaskclusterRestFailure):
        tc_util.find_task_id(f"{space}.toolchain.none")


def _cached_push(space: str, tq: str):
    """A target graph as taskgraph's transforms leave it: a docker image and a toolchain cached by index path
    (`index-search`), and a build that uses the toolchain."""
    from taskgraph.graph import Graph
    from taskgraph.task import Task
    from taskgraph.taskgraph import TaskGraph

    provisioner, worker_type = tq.split("/")

    def definition(label, routes):
        return {
            "provisionerId": provisioner,
            "workerType": worker_type,
            "created": {"relative-datestamp": "0 seconds"},
            "deadline": {"relative-datestamp": "1 day"},
            "expires": {"relative-datestamp": "28 days"},
            "payload": {},
            "routes": routes,
            "metadata": {
                "name": label,
                "description": label,
                "owner": "ci@example.com",
                "source": "https://example.com/ci",
            },
        }

    image_path, toolchain_path = f"{space}.cache.docker-image.v1.h1", f"{space}.cache.toolchain.v1.h2"
    tasks = {
        "docker-image": Task(
            "docker-image",
            "docker-image",
            {},
            definition("docker-image", [f"index.{image_path}"]),
            optimization={"index-search": [image_path]},
        ),
        "toolchain": Task(
            "toolchain",
            "toolchain",
            {},
            definition("toolchain", [f"index.{toolchain_path}"]),
            optimization={"index-search": [toolchain_path]},
            dependencies={"docker-image": "docker-image"},
        ),
        "build": Task("build", "build", {}, definition("build", []), dependencies={"toolchain": "toolchain"}),
    }
    edges = {("toolchain", "docker-image", "docker-image"), ("build", "toolchain", "toolchain")}
    return TaskGraph(tasks, Graph(set(tasks), edges))


def _push(queue, space, tq):
    """One push: a decision task optimizes the graph against the Index and submits what is left with taskgraph's
    `create_tasks`, then completes; workers run everything pending. label -> taskId, and what was submitted."""
    from taskgraph import create
    from taskgraph.optimize.base import optimize_task_graph

    decision = slugid()
    queue.createTask(
        decision,
        task_definition(taskQueueId=f"{tq.split('/')[0]}/decision", taskGroupId=decision, schedulerId="ci-level-3"),
    )
    [claim] = queue.claimWork(f"{tq.split('/')[0]}/decision", {"tasks": 1, **WORKER})["tasks"]
    target = _cached_push(space, tq)
    optimized, label_to_taskid = optimize_task_graph(target, set(target.tasks), {"level": "3"}, set(), decision)
    create.create_tasks({"trust-domain": "ci"}, optimized, label_to_taskid, {"level": "3"}, decision)
    queue.reportCompleted(claim["status"]["taskId"], "0")
    submitted = {t.label for t in optimized.tasks.values()}
    for _ in submitted:
        [work] = wait_for(lambda: queue.claimWork(tq, {"tasks": 1, **WORKER})["tasks"], timeout=30)
        queue.reportCompleted(work["status"]["taskId"], "0")
    return label_to_taskid, submitted


def test_index_search_reuses_the_first_pushs_cached_tasks(queue, index, taskgraph_env):
    space, tq = ns(), task_queue_id()
    first, submitted = _push(queue, space, tq)
    assert submitted == {"docker-image", "toolchain", "build"}
    wait_for(lambda: found(index, f"{space}.cache.toolchain.v1.h2"))
    second, submitted = _push(queue, space, tq)
    assert submitted == {"build"}  # the image and the toolchain were found in the Index
    assert second["docker-image"] == first["docker-image"] and second["toolchain"] == first["toolchain"]
    assert first["toolchain"] in queue.task(second["build"])["dependencies"]
    assert queue.status(second["build"])["status"]["state"] == "completed"


# --- a host dying between the completion and its indexing ------------------------------------------------------

BUSES = [
    pytest.param({}, id="no-bus"),
    pytest.param(
        {"event_bus": "amqp", "pulse_namespace": "index-tests"},
        id="amqp",
        marks=pytest.mark.skipif(
            not broker_reachable() and not os.environ.get("QUEUE_TEST_REQUIRE_BROKER"),
            reason="no AMQP broker on 127.0.0.1:5672",
        ),
    ),
]


@pytest.mark.parametrize("bus", BUSES)
def test_a_host_killed_before_indexing_leaves_it_to_the_workers_retry(
    own_hosts: Callable[..., HostProcess], bus: dict[str, str]
) -> None:
    """The completion is guarded by the run's claim check, and its answer waits for its Index entry: a host killed
    before indexing answers nothing, and the worker's retry of its report, served by another host, finds the run
    completed and follows it up, indexing included, before answering."""
    space = ns()
    survivor = own_hosts(resolution_grace=2, **bus)
    queue = survivor.client()
    index = taskcluster.Index({"rootUrl": survivor.root_url, "credentials": ROOT, "maxRetries": 0})
    task_id = slugid()
    definition = task_definition(routes=[f"index.{space}.killed"])
    queue.createTask(task_id, definition)
    queue.claimTask(task_id, "0", WORKER)
    doomed = own_hosts(resolution_grace=2, faults="before-indexing", **bus)
    with contextlib.suppress(Exception):
        doomed.client().reportCompleted(task_id, "0")
    assert wait_for(lambda: doomed.process.poll() is not None, timeout=20)
    assert doomed.process.returncode == EXIT_STATUS, doomed.log()
    assert queue.status(task_id)["status"]["state"] == "completed"  # the completion was stored
    assert found(index, f"{space}.killed") is None  # and not indexed: the host died first
    queue.reportCompleted(task_id, "0")  # the worker's retry, on the survivor: answered once indexed
    entry = found(index, f"{space}.killed")
    assert entry is not None and entry["taskId"] == task_id
    assert [t["taskId"] for t in index.listTasks(space)["tasks"]] == [task_id]
