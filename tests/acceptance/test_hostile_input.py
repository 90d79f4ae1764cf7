"""Hostile input, through the official client and plain HTTP on Azurite: input that is not JSON as Taskcluster
defines it, rewritten artifacts, malformed tokens, parameters and headers, and costly refusals. Each is refused
with a 4xx in Taskcluster's error format and changes nothing."""

from __future__ import annotations

import base64
import json
import math
from typing import Any

import httpx
import mohawk
import pytest
import taskcluster
from azure.data.tables import TableClient, UpdateMode

from shared import timeutil
from shared.storage.sharded import partition_account
from tests.acceptance.helpers import azure_request, claimed, in_days, put
from tests.conftest import ROOT_ACCESS_TOKEN, azurite_env, expect_error, slugid, task_definition

WORKER = {"workerGroup": "wg-1", "workerId": "worker-1"}


@pytest.fixture
def queue(host):
    return host.client()


def signed(
    host,
    method,
    path,
    *,
    content: bytes = b"",
    content_type: str = "application/json",
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    """A request signed by hand as root (the official client would not send what these tests send)."""
    url = f"{host.root_url}/api/queue/v1{path}"
    sender = mohawk.Sender(
        {"id": "root", "key": ROOT_ACCESS_TOKEN, "algorithm": "sha256"},
        url,
        method,
        content=content,
        content_type=content_type,
    )
    sent = {"Authorization": sender.request_header, "Content-Type": content_type, **(headers or {})}
    return httpx.request(method, url, headers=sent, content=content or None)


def assert_error(response: httpx.Response, status: int, code: str) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["code"] == code, body
    assert set(body) == {"code", "message", "requestInfo"}, body
    return body


# --- 1. JSON that cannot be answered again --------------------------------------------------------------------


@pytest.mark.parametrize(
    "payload",
    [
        '{"x": NaN}',
        '{"x": Infinity}',
        '{"x": -Infinity}',
        '{"x": 1e999}',
        '{"x": "\\ud800"}',
        '{"\\udfff": 1}',
        '{"x": ["ok", {"y": "\\udc00 tail"}]}',
    ],
)
def test_non_finite_numbers_and_lone_surrogates_are_refused_and_nothing_is_stored(host, queue, payload):
    task_id = slugid()
    definition = task_definition()
    text = json.dumps(definition).replace('"payload": {', f'"payload": {{"bad": {payload}, ', 1)
    response = signed(host, "PUT", f"/task/{task_id}", content=text.encode())
    body = assert_error(response, 400, "InputValidationError")
    assert "finite" in body["message"] or "surrogate" in body["message"], body["message"]
    expect_error(404, "ResourceNotFound", queue.task, task_id)


def test_the_official_client_sending_nan_is_refused(queue):
    """The Python client sends `float("nan")` as `NaN`."""
    task_id = slugid()
    body = expect_error(
        400, "InputValidationError", queue.createTask, task_id, task_definition(payload={"ratio": math.nan})
    )
    assert "NaN" in body["message"]
    expect_error(404, "ResourceNotFound", queue.task, task_id)


def test_nesting_has_a_limit_and_the_deepest_json_is_a_400_not_a_500(host, queue):
    task_id = slugid()
    deep = "[" * 1000 + "]" * 1000  # Python's parser recurses; 1,000 deep overflowed it (a 500)
    text = json.dumps(task_definition()).replace('"payload": {', f'"payload": {{"deep": {deep}, ', 1)
    body = assert_error(signed(host, "PUT", f"/task/{task_id}", content=text.encode()), 400, "InputValidationError")
    assert "nested" in body["message"]
    ok = json.dumps(task_definition(payload={"deep": json.loads("[" * 90 + "]" * 90)}))
    assert signed(host, "PUT", f"/task/{task_id}", content=ok.encode()).status_code == 200
    assert queue.task(task_id)["payload"]["deep"] == json.loads("[" * 90 + "]" * 90)
    # Anonymous too, on any route with a body, and in a Hawk header's ext.
    anonymous = httpx.post(
        f"{host.root_url}/api/queue/v1/tasks",
        content=b'{"taskIds": ' + b"[" * 2000,
        headers={"Content-Type": "application/json"},
    )
    assert anonymous.status_code == 400
    ext = base64.urlsafe_b64encode(b'{"a":' + b"[" * 5000 + b"]" * 5000 + b"}").decode().rstrip("=")
    sender = mohawk.Sender(
        {"id": "root", "key": ROOT_ACCESS_TOKEN, "algorithm": "sha256"},
        f"{host.root_url}/api/queue/v1/task/{task_id}",
        "GET",
        content="",
        content_type="",
        ext=ext,
    )
    response = httpx.get(
        f"{host.root_url}/api/queue/v1/task/{task_id}", headers={"Authorization": sender.request_header}
    )
    assert_error(response, 401, "AuthenticationFailed")


def account_of(azurite: Any, partition_key: str) -> str:
    """The connection string of the account (of this Azurite) holding a partition, sharded as the hosts are."""
    accounts = int(azurite_env(azurite).get("QUEUE_STORAGE_SHARDS") or 1)
    return str(azurite.account_connection_string(partition_account(partition_key, accounts)))


def poison_stored_definition(azurite: Any, task_id: str) -> None:
    """Put a NaN into a stored definition, as a queue before these checks could have stored it (in the account
    that holds the task, sharded as the hosts are)."""
    table = TableClient.from_connection_string(account_of(azurite, task_id), "Tasks")
    entity = table.get_entity(task_id, f"task:{task_id}")
    assert entity["definitionChunks"] == 1
    entity["definition_0"] = entity["definition_0"].replace('"payload":{', '"payload":{"legacy":NaN,', 1)
    assert "NaN" in entity["definition_0"]
    table.update_entity(entity, mode=UpdateMode.REPLACE)


def test_a_task_stored_with_nan_before_the_checks_is_still_answered(host, queue, azurite):
    """Every answer can be rendered (a non-finite number as null, as Taskcluster's JSON.stringify writes it), so
    such a task does not break `task`, its group's listing, or a claimWork batch it is part of."""
    group = slugid()
    definition = task_definition(taskGroupId=group)
    ids = [slugid() for _ in range(3)]
    for task_id in ids:
        queue.createTask(task_id, dict(definition, created=timeutil.iso(timeutil.now())))
    poison_stored_definition(azurite, ids[1])
    assert queue.task(ids[1])["payload"]["legacy"] is None
    listed = {t["status"]["taskId"]: t["task"] for t in queue.listTaskGroup(group)["tasks"]}
    assert set(listed) == set(ids) and listed[ids[1]]["payload"]["legacy"] is None
    assert len(queue.tasks({"taskIds": ids})["tasks"]) == 3
    claims = queue.claimWork(definition["taskQueueId"], {"tasks": 3, **WORKER})["tasks"]
    assert sorted(c["status"]["taskId"] for c in claims) == sorted(ids)  # the whole batch, none left hanging


# --- 2. Finished artifacts cannot be rewritten -----------------------------------------------------------------


def test_a_finished_artifact_keeps_its_bytes_and_is_served_as_declared(host, queue):
    task_id, worker = claimed(queue)
    data = b"the original log\n"
    created = worker.createArtifact(task_id, "0", "public/log.txt", azure_request(data, "text/plain"))
    # The uploader claims another content type for its blob: the download says what was declared.
    response = httpx.put(
        created["putUrl"], content=data, headers={**created["headers"], "x-ms-blob-content-type": "text/html"}
    )
    assert response.status_code == 201
    worker.finishArtifact(task_id, "0", "public/log.txt", {"uploadId": created["uploadId"]})
    # The putUrl still writes its blob until it expires, but the artifact no longer reads that blob.
    assert put(created, b"<script>rewritten</script>").status_code == 201
    worker.reportCompleted(task_id, "0")
    assert put(created, b"<script>rewritten again</script>").status_code == 201
    download = httpx.get(queue.buildUrl("getArtifact", task_id, "0", "public/log.txt"), follow_redirects=True)
    assert download.content == data
    assert download.headers["content-type"] == "text/plain"
    assert "content-disposition" not in download.headers  # plain text is shown in place
    assert queue.artifactInfo(task_id, "0", "public/log.txt")["contentLength"] == len(data)
    content = queue.artifact(task_id, "0", "public/log.txt")
    assert httpx.get(content["url"]).content == data


def test_an_artifact_a_browser_would_run_is_served_as_an_attachment(host, queue):
    task_id, worker = claimed(queue)
    for name, content_type in [("public/page.html", "text/html; charset=utf-8"), ("public/x.svg", "image/svg+xml")]:
        data = b"<svg onload=alert(1)></svg>"
        created = worker.createArtifact(task_id, "0", name, azure_request(data, content_type))
        assert put(created, data).status_code == 201
        worker.finishArtifact(task_id, "0", name, {"uploadId": created["uploadId"]})
        download = httpx.get(queue.buildUrl("getArtifact", task_id, "0", name), follow_redirects=True)
        assert download.content == data
        assert download.headers["content-type"] == content_type
        assert download.headers["content-disposition"] == "attachment"


@pytest.mark.parametrize(
    "disposition, served",
    [
        ("attachment=x", "attachment"),  # a browser knows no such type: it rendered the page inline
        ("attachment x", "attachment"),
        ("attachment/x", "attachment"),
        ('attachment"', "attachment"),
        ("inline", "attachment"),
        ('attachment; filename="report.html"', 'attachment; filename="report.html"'),  # a name is kept
    ],
)
def test_an_s3_upload_cannot_make_its_page_render_inline(host, queue, disposition, served):
    task_id, worker = claimed(queue)
    name = f"public/page-{slugid()[:6]}.html"
    data = b"<script>alert(document.domain)</script>"
    created = worker.createArtifact(
        task_id, "0", name, {"storageType": "s3", "expires": in_days(), "contentType": "text/html"}
    )
    headers = {"Content-Type": "text/html", "Content-Disposition": disposition}
    assert httpx.put(created["putUrl"], content=data, headers=headers).status_code == 200
    download = httpx.get(queue.buildUrl("getArtifact", task_id, "0", name), follow_redirects=True)
    assert download.content == data and download.headers["content-disposition"] == served


# --- 4. Malformed tokens, parameters and headers: 4xx, never 500 ------------------------------------------------

BAD_TOKENS = [
    "!!!",
    "bm90IGpzb24",
    base64.urlsafe_b64encode(b"[]").decode(),
    base64.urlsafe_b64encode(b'{"PartitionKey": 5}').decode(),
    base64.urlsafe_b64encode(b'{"PartitionKey": "a\\u0000", "RowKey": "b"}').decode(),
    base64.urlsafe_b64encode(b'{"PartitionKey": "' + b"x" * 5000 + b'"}').decode(),
    "\u00e9\u00e9",
]


def test_a_malformed_continuation_token_is_a_400_on_every_listing(host, queue):
    task_id, _ = claimed(queue)
    tq = queue.task(task_id)["taskQueueId"]
    prov, wt = tq.split("/")
    listings = [
        f"/task-group/{task_id}/list",
        f"/task/{task_id}/dependents",
        f"/task/{task_id}/events",
        f"/task-group/{task_id}/events",
        f"/task/{task_id}/runs/0/artifacts",
        f"/task/{task_id}/artifacts",
        "/provisioners",
        f"/provisioners/{prov}/worker-types",
        "/task-queues",
        f"/provisioners/{prov}/worker-types/{wt}/workers",
        f"/task-queues/{tq}/pending",
        f"/task-queues/{tq}/claimed",
    ]
    for path in listings:
        assert signed(host, "GET", path).status_code == 200, path
        for token in BAD_TOKENS:
            response = signed(host, "GET", f"{path}?{httpx.QueryParams(continuationToken=token)}")
            body = assert_error(response, 400, "InvalidRequestArguments")
            assert "continuationToken" in body["message"], (path, token)
    # Anonymous callers reach the same code.
    anonymous = httpx.get(
        f"{host.root_url}/api/queue/v1/task-group/{task_id}/list", params={"continuationToken": "!!!"}
    )
    assert_error(anonymous, 400, "InvalidRequestArguments")


@pytest.mark.parametrize(
    "path",
    [
        "/task/%s%%0A",
        "/task/%s/runs/0%%0A/artifacts",
        "/task/%s/runs/0/artifact-info/public%%2Fa%%00b",
        "/task/%s/runs/0/artifact-info/caf%%C3%%A9",
        "/task/%s/runs/0/artifact-info/a%%0Ab",
        "/task/%s/runs/0/artifact-info/%%FF",
    ],
)
def test_malformed_path_parameters_are_400(host, queue, path):
    task_id, _ = claimed(queue)
    assert_error(signed(host, "GET", path % task_id), 400, "InvalidRequestArguments")


def test_artifact_names_must_be_printable_ascii(host, queue):
    task_id, worker = claimed(queue)
    for name in ["public/a\x00b", "public/tab\tname", "public/caf\u00e9", "public/new\nline", "public/\x7f"]:
        expect_error(400, "InvalidRequestArguments", worker.createArtifact, task_id, "0", name, azure_request(b"x"))
    assert queue.listArtifacts(task_id, "0")["artifacts"] == []


def test_a_scope_ending_in_a_newline_is_not_a_scope(host, queue):
    task_id = slugid()
    body = expect_error(
        400, "InputValidationError", queue.createTask, task_id, task_definition(scopes=["queue:get-task:x\n"])
    )
    assert "scopes" in body["message"]
    expect_error(400, "InputValidationError", queue.createTask, task_id, task_definition(taskQueueId="prov/type\n"))
    expect_error(404, "ResourceNotFound", queue.task, task_id)
    narrowed = taskcluster.Queue(
        {
            "rootUrl": host.root_url,
            "maxRetries": 0,
            "authorizedScopes": ["queue:ping\n"],
            "credentials": {"clientId": "root", "accessToken": ROOT_ACCESS_TOKEN},
        }
    )
    expect_error(401, "AuthenticationFailed", narrowed.status, slugid())


def test_a_body_must_be_sent_as_json(host, queue):
    task_id = slugid()
    text = json.dumps(task_definition()).encode()
    for content_type in ["text/plain", "application/x-www-form-urlencoded", ""]:
        body = assert_error(
            signed(host, "PUT", f"/task/{task_id}", content=text, content_type=content_type), 400, "MalformedPayload"
        )
        assert "Content-Type: application/json" in body["message"]
    expect_error(404, "ResourceNotFound", queue.task, task_id)
    assert (
        signed(
            host, "PUT", f"/task/{task_id}", content=text, content_type="application/json; charset=utf-8"
        ).status_code
        == 200
    )
    # Not UTF-8: refused as not JSON.
    assert_error(signed(host, "PUT", f"/task/{slugid()}", content=b'{"x": "\xff"}'), 400, "MalformedPayload")


def test_oversized_and_malformed_headers_get_taskclusters_json_error(host):
    huge = httpx.get(f"{host.root_url}/api/queue/v1/ping", headers={"X-Big": "x" * 200_000})
    body = assert_error(huge, 400, "InvalidRequestArguments")
    assert "HTTP" in body["message"]
    # Headers the queue reads itself: a Host its signature check cannot use, garbage Authorization.
    task = f"{host.root_url}/api/queue/v1/task/{slugid()}"
    for headers in [
        {"Host": "a:b:c"},
        {"Host": "127.0.0.1:notaport"},
        {"Authorization": b'Hawk id="\xe9"'},
        {"Authorization": 'Hawk id="root", ts="x", nonce="n", mac="m"'},
        {"Authorization": "Hawk " + "a" * 10_000},
        {"Authorization": "Basic abc"},
    ]:
        response = httpx.get(task, headers=headers)
        assert 400 <= response.status_code < 500, (headers, response.text)
        assert set(response.json()) == {"code", "message", "requestInfo"}


# --- 5. Bounded work for a refused createTask --------------------------------------------------------------------


def test_many_missing_dependencies_are_refused_before_any_edge_is_written(host, queue, azurite):
    missing = [slugid() for _ in range(10_000)]
    task_id = slugid()
    body = expect_error(400, "InputError", queue.createTask, task_id, task_definition(dependencies=missing))
    assert "Dependencies not found" in body["message"]
    expect_error(404, "ResourceNotFound", queue.task, task_id)
    for dependency in missing[:50:7]:
        for table in ("TaskDependency", "Tasks"):  # the edges of long lists, and of short ones
            rows = TableClient.from_connection_string(account_of(azurite, dependency), table)
            assert list(rows.query_entities("PartitionKey eq @pk", parameters={"pk": dependency})) == []
    requirements = TableClient.from_connection_string(account_of(azurite, task_id), "TaskRequirement")
    assert list(requirements.query_entities("PartitionKey eq @pk", parameters={"pk": task_id})) == []


def test_a_long_list_of_dependencies_that_exist_is_still_accepted(host, queue):
    tq = task_definition()["taskQueueId"]
    required = [slugid() for _ in range(40)]
    for dependency in required:
        queue.createTask(dependency, task_definition(taskQueueId=tq))
    for _ in range(3):
        [claim] = queue.claimWork(tq, {"tasks": 1, **WORKER})["tasks"]
        queue.reportCompleted(claim["status"]["taskId"], "0")
    waiting = slugid()
    assert queue.createTask(waiting, task_definition(dependencies=required))["status"]["state"] == "unscheduled"
    expect_error(400, "InputError", queue.createTask, slugid(), task_definition(dependencies=[*required, slugid()]))
    assert [d["status"]["taskId"] for d in queue.listDependentTasks(required[-1])["tasks"]] == [waiting]


@pytest.mark.parametrize("url", ["javascript:alert(1)", "file:///etc/passwd", "data:text/html,hello"])
def test_a_reference_that_is_not_http_is_refused(host, queue, url):
    task_id, worker = claimed(queue)
    body = {"storageType": "reference", "expires": in_days(), "url": url, "contentType": "text/plain"}
    expect_error(400, "InputError", worker.createArtifact, task_id, "0", "public/ref", body)
    expect_error(404, "ResourceNotFound", queue.artifact, task_id, "0", "public/ref")
