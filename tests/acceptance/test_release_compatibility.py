"""The latest release (RELEASES.md) and this code on one storage, as a deployment lives them: work left in flight by
one is finished by the other, both ways, and with both serving at once; then the audit finds nothing
(docs/deploy.md#releases-upgrades-and-rollbacks).

The release's code is unpacked from this repository's history (`git archive`) and run as its own host process on the
test's Azurite; what is in flight covers the rows and messages a running deployment holds: pending runs and their
hints, a chain whose first task is running (its dependent waiting on an edge), a failed task whose dependent it
blocks (rerun by the other code), a claim left to expire (its check message), a deadline not yet reached (its
bucket message), completed tasks with `s3` (uploaded to whatever `putUrl`
that release gave), `azure`, `reference` and `error` artifacts, task groups and their events, the Index entry of a
completed task's route, the worker information of a worker that claimed, an object of the Object service, and a
client and a role of the Auth service."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import hashlib
import json
import os
import re
import signal
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import taskcluster

from shared import __version__, timeutil
from shared.domain.events import EXCHANGES
from shared.domain.messages import CLAIM_DUE_QUEUE
from tests.acceptance.helpers import run_audit, start_run
from tests.amqp import broker_reachable, delete_exchanges
from tests.conftest import (
    PROJECT,
    ROOT_ACCESS_TOKEN,
    ROOT_CLIENT_ID,
    HostProcess,
    queue_client,
    shards_of,
    slugid,
    stores_of,
    task_definition,
    task_queue_id,
    wait_for,
)
from tests.releases import ReleaseNotInHistory, unpack_release

CLAIM_TIMEOUT = 15  # outlasts the switch from one code to the other; the abandoned claim expires after it
NAMESPACE = f"test-compat-{uuid.uuid4().hex[:8]}"
# Where a broker runs (always in CI), both codes publish, and the audit checks every event went out: the dispatch
# messages and publication marks one code left are the other's to finish.
BUS = (
    {"event_bus": "amqp", "pulse_namespace": NAMESPACE, "event_lease": 2, "event_retry_max_delay": 2}
    if broker_reachable() or os.environ.get("QUEUE_TEST_REQUIRE_BROKER")
    else {}
)
SETTINGS = {
    "claim_timeout": CLAIM_TIMEOUT,
    "deadline_delay": 0,
    "claim_work_wait": 1,
    "claim_work_poll_interval": 0.2,
    "resolution_grace": 1,
    "worker_info_interval": 0,
    **BUS,
}
# This code parks checks due later than a lead (shared/domain/parking.py); a short one, so that the claims and
# the deadline here are parked as production's are, and a mover every second.
PARKING = {"park_lead": 5, "park_schedule": "*/1 * * * * *"}
# The release's reconciler, quick: on a rollback it repairs the claim whose check this code had already moved to a
# queue the release does not read (as it would in production, after QUEUE_RECONCILE_GRACE).
QUICK_RECONCILER = {"reconcile_schedule": "*/1 * * * * *", "reconcile_grace": 2}
WORKER = {"workerGroup": "compat", "workerId": "w1"}


@pytest.fixture(scope="module", autouse=True)
def _drop_exchanges() -> Iterator[None]:
    yield
    if BUS:
        delete_exchanges(NAMESPACE, list(EXCHANGES))


@pytest.fixture(scope="module")
def release_code(tmp_path_factory) -> Path:
    try:
        return unpack_release(tmp_path_factory.mktemp("release"))[1]
    except ReleaseNotInHistory as exc:
        pytest.skip(str(exc))


@pytest.fixture
def hosts(own_hosts, release_code) -> Callable[[str], HostProcess]:
    """`hosts("release")` or `hosts("current")`: a host of that code on the test's own Azurite."""

    def start(which: str, **settings: Any) -> HostProcess:
        if which == "release":
            return own_hosts(project=release_code, **SETTINGS, **settings)
        return own_hosts(project=PROJECT, **SETTINGS, **PARKING, **settings)

    return start


@dataclass
class InFlight:
    """What one code left in flight, for the other to finish."""

    queues: dict[str, str] = field(
        default_factory=lambda: {
            k: task_queue_id() for k in ("pending", "chain", "failed", "abandoned", "artifacts", "deadline")
        }
    )
    ids: dict[str, str] = field(default_factory=dict)
    data: dict[str, bytes] = field(default_factory=dict)
    tag: str = field(default_factory=lambda: slugid().lower().replace("_", "x").replace("-", "y"))
    client: dict[str, str] = field(default_factory=dict)

    def create(self, queue: taskcluster.Queue, key: str, role: str, **overrides: Any) -> str:
        task_id = self.ids[key] = slugid()
        queue.createTask(task_id, task_definition(taskQueueId=self.queues[role], **overrides))
        return task_id

    def claim(self, queue: taskcluster.Queue, role: str) -> list[dict[str, Any]]:
        return list(queue.claimWork(self.queues[role], {"tasks": 4, **WORKER})["tasks"])


def leave(queue: taskcluster.Queue, flight: InFlight) -> None:
    """Work in flight: pending, running with a dependent waiting, failed with a dependent it blocks, abandoned, before
    its deadline, and a completed task with an artifact of each kind."""
    now = timeutil.now()
    flight.create(queue, "pending", "pending")
    root = flight.create(queue, "root", "chain")
    flight.create(queue, "dependent", "chain", dependencies=[root], taskGroupId=root)
    assert [c["status"]["taskId"] for c in flight.claim(queue, "chain")] == [root]  # the dependent waits
    failed = flight.create(queue, "failed", "failed")
    flight.create(queue, "blocked", "failed", dependencies=[failed], taskGroupId=failed)
    assert [c["status"]["taskId"] for c in flight.claim(queue, "failed")] == [failed]
    queue.reportFailed(failed, "0")  # its dependent stays unscheduled until a rerun of it completes
    flight.create(queue, "abandoned", "abandoned")
    assert len(flight.claim(queue, "abandoned")) == 1  # and never reported: its claim expires
    flight.create(queue, "deadline", "deadline", deadline=timeutil.iso(now + dt.timedelta(seconds=20)))
    art = flight.create(queue, "artifacts", "artifacts", routes=[f"index.compat.{flight.tag}.done"])
    [claim] = flight.claim(queue, "artifacts")
    worker = taskcluster.Queue(
        {"rootUrl": queue.options["rootUrl"], "credentials": claim["credentials"], "maxRetries": 0}
    )
    expires = timeutil.iso(now + dt.timedelta(days=1))
    flight.data["s3"], flight.data["azure"] = b"s3 data " * 500, b"azure data " * 300
    s3 = worker.createArtifact(
        art, "0", "public/s3.bin", {"storageType": "s3", "expires": expires, "contentType": "application/octet-stream"}
    )
    assert httpx.put(s3["putUrl"], content=flight.data["s3"]).status_code in (200, 201)  # as that release answers
    azure = worker.createArtifact(
        art,
        "0",
        "public/azure.txt",
        {
            "storageType": "azure",
            "expires": expires,
            "contentType": "text/plain",
            "contentLength": len(flight.data["azure"]),
        },
    )
    assert httpx.put(azure["putUrl"], content=flight.data["azure"], headers=azure["headers"]).status_code == 201
    worker.finishArtifact(art, "0", "public/azure.txt", {"uploadId": azure["uploadId"]})
    worker.createArtifact(
        art,
        "0",
        "public/ref",
        {"storageType": "reference", "expires": expires, "contentType": "text/plain", "url": "https://example.com/ref"},
    )
    worker.createArtifact(
        art,
        "0",
        "public/err",
        {"storageType": "error", "expires": expires, "reason": "file-missing-on-worker", "message": "gone"},
    )
    worker.reportCompleted(art, "0")
    leave_beside_the_tasks(queue.options["rootUrl"], flight)


def leave_beside_the_tasks(root_url: str, flight: InFlight) -> None:
    """An object of the Object service, and a client and a role of the Auth service."""
    credentials = {"clientId": ROOT_CLIENT_ID, "accessToken": ROOT_ACCESS_TOKEN}
    objects = taskcluster.Object({"rootUrl": root_url, "credentials": credentials, "maxRetries": 0})
    flight.data["object"] = f"object of {flight.tag}".encode()
    name, upload_id = f"compat/{flight.tag}", slugid()
    objects.createUpload(
        name,
        {
            "projectId": "compat",
            "uploadId": upload_id,
            "expires": timeutil.iso(timeutil.now() + dt.timedelta(days=1)),
            "proposedUploadMethods": {
                "dataInline": {
                    "contentType": "text/plain",
                    "objectData": base64.b64encode(flight.data["object"]).decode(),
                }
            },
        },
    )
    objects.finishUpload(name, {"projectId": "compat", "uploadId": upload_id})
    auth = taskcluster.Auth({"rootUrl": root_url, "credentials": credentials, "maxRetries": 0})
    auth.createRole(f"project:compat-{flight.tag}", {"description": "compat", "scopes": [f"secrets:get:{flight.tag}"]})
    created = auth.createClient(
        f"compat/{flight.tag}",
        {
            "expires": timeutil.iso(timeutil.now() + dt.timedelta(days=1)),
            "description": "compat",
            "scopes": [f"assume:project:compat-{flight.tag}"],
        },
    )
    flight.client = {"clientId": created["clientId"], "accessToken": created["accessToken"]}


def finish(queue: taskcluster.Queue, flight: InFlight) -> None:
    """What the other code does with it: every task ends as it should, every artifact reads as it was written."""
    ids = flight.ids
    assert [c["status"]["taskId"] for c in flight.claim(queue, "pending")] == [ids["pending"]]
    queue.reportCompleted(ids["pending"], "0")
    queue.reportCompleted(ids["root"], "0")  # claimed by the other code
    claimed: list[str] = []
    wait_for(lambda: claimed.extend(c["status"]["taskId"] for c in flight.claim(queue, "chain")) or claimed, timeout=30)
    assert claimed == [ids["dependent"]]
    queue.reportCompleted(ids["dependent"], "0")
    finish_the_failed(queue, flight)

    def retried() -> bool:  # the claim the other code took expired here: a new run to claim
        return [c["runId"] for c in flight.claim(queue, "abandoned") if c["status"]["taskId"] == ids["abandoned"]] == [
            1
        ]

    wait_for(retried, timeout=30)
    queue.reportCompleted(ids["abandoned"], "1")
    runs = queue.status(ids["abandoned"])["status"]["runs"]
    assert [(r["state"], r.get("reasonResolved")) for r in runs] == [
        ("exception", "claim-expired"),
        ("completed", "completed"),
    ]
    wait_for(lambda: queue.status(ids["deadline"])["status"]["state"] == "exception", timeout=40)
    assert queue.status(ids["deadline"])["status"]["runs"][0]["reasonResolved"] == "deadline-exceeded"
    anonymous = taskcluster.Queue({"rootUrl": queue.options["rootUrl"], "maxRetries": 0})
    for name, data in (("public/s3.bin", flight.data["s3"]), ("public/azure.txt", flight.data["azure"])):
        got = httpx.get(anonymous.buildUrl("getArtifact", ids["artifacts"], "0", name), follow_redirects=True)
        assert got.status_code == 200 and hashlib.sha256(got.content).digest() == hashlib.sha256(data).digest(), name
    ref = httpx.get(anonymous.buildUrl("getArtifact", ids["artifacts"], "0", "public/ref"))
    assert ref.status_code == 303 and ref.headers["location"] == "https://example.com/ref"
    assert httpx.get(anonymous.buildUrl("getArtifact", ids["artifacts"], "0", "public/err")).status_code == 424
    for task_id in ids.values():
        assert queue.status(task_id)["status"]["state"] in ("completed", "exception"), task_id
    finish_beside_the_tasks(queue, flight)


def finish_the_failed(queue: taskcluster.Queue, flight: InFlight) -> None:
    """The failed task, rerun here: its dependent runs once the rerun completes, not before."""
    ids = flight.ids
    assert queue.status(ids["blocked"])["status"]["state"] == "unscheduled"
    assert queue.rerunTask(ids["failed"])["status"]["runs"][-1]["runId"] == 1
    assert [(c["status"]["taskId"], c["runId"]) for c in flight.claim(queue, "failed")] == [(ids["failed"], 1)]
    queue.reportCompleted(ids["failed"], "1")
    released: list[str] = []
    wait_for(lambda: released.extend(c["status"]["taskId"] for c in flight.claim(queue, "failed")) or released, 30)
    assert released == [ids["blocked"]]
    queue.reportCompleted(ids["blocked"], "0")
    runs = queue.status(ids["failed"])["status"]["runs"]
    assert [(r["state"], r.get("reasonResolved")) for r in runs] == [("failed", "failed"), ("completed", "completed")]


def finish_beside_the_tasks(queue: taskcluster.Queue, flight: InFlight) -> None:
    """The other code reads what the first left beside the tasks: their group and events, the Index entry, the
    worker, the object, the client and its role."""
    root_url, ids = queue.options["rootUrl"], flight.ids
    group = queue.listTaskGroup(ids["root"])
    assert sorted(t["status"]["taskId"] for t in group["tasks"]) == sorted([ids["root"], ids["dependent"]])
    events = httpx.get(f"{root_url}/api/queue/v1/task/{ids['artifacts']}/events").json()["events"]
    assert [e["exchange"].rsplit("/", 1)[1] for e in events][:4] == [
        "task-defined",
        "task-pending",
        "task-running",
        "artifact-created",
    ], events
    index = taskcluster.Index({"rootUrl": root_url, "maxRetries": 0})
    assert wait_for(lambda: _found(index, f"compat.{flight.tag}.done"), timeout=20) == ids["artifacts"]
    provisioner, worker_type = flight.queues["artifacts"].split("/")
    assert queue.getWorker(provisioner, worker_type, WORKER["workerGroup"], WORKER["workerId"])["workerId"] == "w1"
    objects = taskcluster.Object(
        {
            "rootUrl": root_url,
            "maxRetries": 0,
            "credentials": {"clientId": ROOT_CLIENT_ID, "accessToken": ROOT_ACCESS_TOKEN},
        }
    )
    url = objects.startDownload(f"compat/{flight.tag}", {"acceptDownloadMethods": {"simple": True}})["url"]
    assert httpx.get(url).content == flight.data["object"]
    mine = taskcluster.Auth({"rootUrl": root_url, "credentials": flight.client, "maxRetries": 0})
    assert f"secrets:get:{flight.tag}" in mine.currentScopes()["scopes"]  # the client, and the role it assumes


def _found(index: taskcluster.Index, path: str) -> str | None:
    try:
        return str(index.findTask(path)["taskId"])
    except taskcluster.exceptions.TaskclusterRestFailure:
        return None


@pytest.fixture
def audit_clean(own_azurite) -> Iterator[None]:
    yield
    assert run_audit(own_azurite, published=bool(BUS)) == []


def test_work_left_by_the_release_is_finished_by_this_code(hosts, audit_clean):
    """An upgrade: the release's checks, queued with their whole delay in what are now parking queues, are moved
    to the triggered queues when they show."""
    before = hosts("release")
    flight = InFlight()
    leave(before.client(), flight)
    before.stop()
    finish(hosts("current").client(), flight)


def test_work_left_by_this_code_is_finished_by_the_release(hosts, audit_clean):
    """A rollback: the release triggers the parking queues, so a parked check (the deadline's bucket here) reaches
    it, early, and is put back until due; a check this code had already moved (the abandoned claim's, waited for
    here) is in a queue the release does not read, and the release's reconciler expires that claim."""
    before = hosts("current")
    flight = InFlight()
    leave(before.client(), flight)
    wait_for(lambda: messages_in(before, CLAIM_DUE_QUEUE) > 0, timeout=20)  # moved, due at its takenUntil
    before.stop()
    finish(hosts("release", **QUICK_RECONCILER).client(), flight)


def messages_in(host: HostProcess, base: str) -> int:
    """Messages in every shard of check queue `base`, read as the host reads them (its shards and accounts)."""

    async def count() -> int:
        tables, queues = stores_of(host.env)
        try:
            return sum([await queues.approximate_count(q) for q in shards_of(host.env).check_queues(base)])
        finally:
            await queues.close()
            await tables.close()

    return asyncio.run(count())


def test_both_serving_at_once_finish_each_others_work(hosts, audit_clean):
    """A rollout: old and new instances side by side on one storage, each taking the other's work (and each
    one's triggers taking any check message)."""
    release, current = hosts("release"), hosts("current")
    from_release, from_current = InFlight(), InFlight()
    leave(release.client(), from_release)
    leave(current.client(), from_current)
    with ThreadPoolExecutor(2) as both:  # at once: each one's running root is reported within its claim
        done = [
            both.submit(finish, current.client(), from_release),
            both.submit(finish, release.client(), from_current),
        ]
        for finished in done:
            finished.result()


def test_this_code_starts_on_the_latest_releases_make_run_data_dir(release_code, tmp_path):
    """`make run` of the latest release, then of this code on the same data dir: same credentials, same tasks."""

    def stamp(code: Path) -> list[str]:
        return re.findall(r"^AZURITE_(?:VERSION|STAMP) := .*$", (code / "Makefile").read_text(), re.M)

    if stamp(release_code) != stamp(PROJECT):
        pytest.skip("the release runs another Azurite build than this code (build it in its own .tools)")
    (release_code / ".tools").symlink_to(PROJECT / ".tools")  # the same Azurite build
    process, port, log = start_run(tmp_path, "data", project=release_code)
    try:
        token = re.search(r"TASKCLUSTER_ACCESS_TOKEN=(\S+)", log.read_text()).group(1)
        task_id = slugid()
        queue_client(f"http://127.0.0.1:{port}", credentials={"clientId": "root", "accessToken": token}).createTask(
            task_id, task_definition()
        )
    finally:
        process.send_signal(signal.SIGINT)
        assert process.wait(30) == 0
    process, port, log = start_run(tmp_path, "data")
    try:
        assert "(generated" not in log.read_text() and token in log.read_text()
        assert httpx.get(f"http://127.0.0.1:{port}/api/queue/v1/task/{task_id}/status").status_code == 200
        assert json.loads((tmp_path / "data" / "format.json").read_text())["writtenBy"] == __version__
    finally:
        process.send_signal(signal.SIGINT)
        assert process.wait(30) == 0


def test_anonymous_callers_keep_their_scopes_through_a_rollout(hosts):
    """The release read what anonymous callers may do from QUEUE_ANONYMOUS_SCOPES; this code plants that value as
    the role `anonymous` at its first start, so both answer alike side by side, until the operator changes the role
    (which only this code follows)."""
    setting = {"anonymous_scopes": "queue:status:* queue:list-provisioners", "client_cache_seconds": 0}
    release = hosts("release", **setting)
    before = sorted(taskcluster.Auth({"rootUrl": release.root_url, "maxRetries": 0}).currentScopes()["scopes"])
    current = hosts("current", **setting)
    for host in (release, current):
        assert taskcluster.Queue({"rootUrl": host.root_url, "maxRetries": 0}).listProvisioners() is not None
    after = taskcluster.Auth({"rootUrl": current.root_url, "maxRetries": 0}).currentScopes()["scopes"]
    assert sorted(s for s in after if s != "assume:anonymous") == before
    root = {"clientId": ROOT_CLIENT_ID, "accessToken": ROOT_ACCESS_TOKEN}
    taskcluster.Auth({"rootUrl": current.root_url, "credentials": root, "maxRetries": 0}).updateRole(
        "anonymous", {"description": "changed", "scopes": ["queue:status:*"]}
    )
    assert "queue:list-provisioners" not in httpx.get(f"{current.root_url}/api/auth/v1/scopes/current").text
    assert httpx.get(f"{release.root_url}/api/queue/v1/provisioners").status_code == 200  # the release's setting


def test_listing_tokens_across_a_rollout(hosts):
    """A page that fits answers the store's token, which both codes read; a page this code cut in bytes answers a
    `cut:` token, which this code goes on from and the release refuses with 400 (its client starts again)."""
    current = hosts("current", list_page_bytes=64 * 1024)
    release = hosts("release")
    root = {"clientId": ROOT_CLIENT_ID, "accessToken": ROOT_ACCESS_TOKEN}
    queue = taskcluster.Queue({"rootUrl": current.root_url, "credentials": root, "maxRetries": 0})
    group = slugid()
    ids = sorted(slugid() for _ in range(20))
    for task_id in ids:
        queue.createTask(task_id, task_definition(taskGroupId=group, payload={"blob": "x" * 10_000}))

    def listed(host: HostProcess, **params: Any) -> dict[str, Any]:
        answer = httpx.get(f"{host.root_url}/api/queue/v1/task-group/{group}/list", params=params, timeout=30)
        assert answer.status_code == 200, answer.text
        return dict(answer.json())

    def taken(page: dict[str, Any]) -> list[str]:
        return [t["status"]["taskId"] for t in page["tasks"]]

    for lister, other in ((release, current), (current, release)):
        first = listed(lister, limit=2)
        assert not first["continuationToken"].startswith("cut:")
        following = taken(listed(other, limit=10, continuationToken=first["continuationToken"]))
        assert taken(first) == ids[:2] and following and following == ids[2 : 2 + len(following)]
    cut = listed(current)
    assert cut["continuationToken"].startswith("cut:") and taken(cut) == ids[:16]
    refused = httpx.get(
        f"{release.root_url}/api/queue/v1/task-group/{group}/list",
        params={"continuationToken": cut["continuationToken"]},
    )
    assert refused.status_code == 400 and refused.json()["code"] == "InvalidRequestArguments"
    assert taken(cut) + taken(listed(current, continuationToken=cut["continuationToken"])) == ids
