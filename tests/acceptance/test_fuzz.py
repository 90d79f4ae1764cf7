"""The API fuzzed on Azurite: bodies generated from the official JSON schemas (Hypothesis), arbitrary JSON and
bytes, odd path parameters, query strings and headers, on every route, signed as root so that handlers run in
full. No answer may be a 5xx, every error is in Taskcluster's format, and afterwards the invariant audit finds
no violation in what the requests left behind.

Deterministic by default (the same examples each run, so CI is repeatable); `QUEUE_FUZZ_RANDOM=1` explores
new ones and `QUEUE_FUZZ_EXAMPLES=N` runs more.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import threading
import urllib.parse
from collections.abc import Iterator
from typing import Any

import httpx
import mohawk
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from local_host import azurite as azurite_mod
from shared import timeutil
from shared.api.object_v1 import api as object_api
from shared.api.queue_v1 import api
from shared.api.routing import Route
from tests.acceptance.helpers import run_audit
from tests.conftest import ROOT_ACCESS_TOKEN, azurite_of_its_own, slugid, task_definition
from tests.schema_strategies import schema_strategy

EXAMPLES = int(os.environ.get("QUEUE_FUZZ_EXAMPLES", "100"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    derandomize=not os.environ.get("QUEUE_FUZZ_RANDOM"),
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
        HealthCheck.filter_too_much,
    ],
)
TASK_QUEUE = "fuzz-prov/fuzz-type"
WORKER = {"workerGroup": "fuzz-wg", "workerId": "fuzz-w"}


@pytest.fixture(scope="module")
def fuzz_azurite(tmp_path_factory) -> Iterator[azurite_mod.Azurite]:
    """An Azurite of the module's own: the audit looks at what the fuzzing left, and nothing else."""
    with azurite_of_its_own(tmp_path_factory, "azurite-fuzz") as instance:
        yield instance


@pytest.fixture(scope="module")
def fuzz_host(host_factory, fuzz_azurite):
    return host_factory(storage=fuzz_azurite.connection_string, claim_work_wait=0, claim_timeout=2, deadline_delay=0)


class Api:
    """Signed requests as root on one keep-alive client per thread, and the tasks the fuzzing made."""

    def __init__(self, root_url: str) -> None:
        self.root_url = root_url
        self.local = threading.local()
        self.task_ids: list[str] = []

    def request(
        self,
        method: str,
        path: str,
        *,
        content: bytes = b"",
        content_type: str = "application/json",
        headers: dict[str, str] | None = None,
        sign: bool = True,
        service: str = "queue",
    ) -> httpx.Response:
        url = f"{self.root_url}/api/{service}/v1{path}"
        sent = {"Content-Type": content_type, **(headers or {})}
        if sign:
            sender = mohawk.Sender(
                {"id": "root", "key": ROOT_ACCESS_TOKEN, "algorithm": "sha256"},
                url,
                method,
                content=content,
                content_type=content_type,
            )
            sent["Authorization"] = sender.request_header
        if not hasattr(self.local, "client"):
            self.local.client = httpx.Client(timeout=30)
        response: httpx.Response = self.local.client.request(method, url, headers=sent, content=content or None)
        check(response, f"{method} {path}")
        return response


def check(response: httpx.Response, what: str) -> None:
    assert response.status_code < 500, f"{what} -> {response.status_code}: {response.text[:2000]}"
    if response.status_code >= 400:
        body = response.json()
        assert set(body) == {"code", "message", "requestInfo"}, f"{what}: {body}"


@pytest.fixture(scope="module")
def fuzz_api(fuzz_host) -> Api:
    client = Api(fuzz_host.root_url)
    for _ in range(4):  # a few real tasks, one of them claimed, for generated requests to find
        task_id = slugid()
        response = client.request(
            "PUT", f"/task/{task_id}", content=json.dumps(task_definition(taskQueueId=TASK_QUEUE)).encode()
        )
        assert response.status_code == 200
        client.task_ids.append(task_id)
    client.request("POST", f"/claim-work/{TASK_QUEUE}", content=json.dumps({"tasks": 1, **WORKER}).encode())
    return client


JSON_LEAVES = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40)
)
ANY_JSON = st.recursive(
    JSON_LEAVES,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner, max_size=5),
    max_leaves=30,
)
ODD_TEXT = st.sampled_from(
    [
        "",
        " ",
        "%00",
        "%0A",
        "..",
        "%2F",
        "%FF",
        "x" * 300,
        "\u00e9",
        "a%20b",
        "*",
        "-1",
        "99999999999999999999",
        "0",
        "1",
        "latest",
    ]
) | st.text(min_size=1, max_size=40)
RAW_BODIES = st.sampled_from(
    [
        b"NaN",
        b'{"a": NaN}',
        b"[" * 3000,
        b'{"a": "\\ud800"}',
        b"\xff\xfe",
        b"null",
        b"1e999",
        b'{"a":1}{"b":2}',
        b"\x00",
        b"[]",
        b"{}" * 1000,
    ]
) | st.binary(max_size=200)


def route_params(route: Route, api_: Api, draw: Any) -> str:
    def value(name: str) -> str:
        real = {
            "taskId": api_.task_ids,
            "taskGroupId": api_.task_ids,
            "runId": ["0", "1"],
            "taskQueueId": [TASK_QUEUE],
            "provisionerId": ["fuzz-prov"],
            "workerType": ["fuzz-type"],
            "workerGroup": [WORKER["workerGroup"]],
            "workerId": [WORKER["workerId"]],
            "name": ["public/log.txt", "public/x"],
        }.get(name, ["x"])
        kind = draw(st.sampled_from(["real", "new", "odd"]))
        if kind == "real":  # one of what exists (the list grows as the fuzzing goes: draw an index, not a value)
            chosen = real[draw(st.integers(min_value=0, max_value=10**6)) % len(real)]
        else:
            chosen = slugid() if kind == "new" else draw(ODD_TEXT)
        if re.fullmatch(r"(%[0-9A-Fa-f]{2}|[A-Za-z0-9._~-])+", chosen) and "%" in chosen:
            return chosen  # already percent-encoded, as sent (generated text that only starts with `%` is quoted)
        return urllib.parse.quote(chosen, safe="/" if name == "taskQueueId" else "")

    return re.sub(r"<([a-zA-Z]+)>", lambda m: value(m.group(1)), route.path)


def plausible(body: Any) -> Any:
    """Dates near now, so that a generated definition gets past the first checks and deeper code runs."""
    if isinstance(body, dict) and "created" in body and "deadline" in body:
        now = timeutil.now()
        body = {**body, "created": timeutil.iso(now), "deadline": timeutil.iso(now + dt.timedelta(hours=1))}
        body.pop("expires", None)
        body["taskQueueId"] = TASK_QUEUE
        body.pop("provisionerId", None)
        body.pop("workerType", None)
    return body


@FUZZ
@given(data=st.data())
def test_generated_create_task_bodies_never_get_a_5xx(fuzz_api, data):
    body = data.draw(schema_strategy("create-task-request"))
    if data.draw(st.booleans()):
        body = plausible(body)
    task_id = slugid()
    response = fuzz_api.request("PUT", f"/task/{task_id}", content=json.dumps(body).encode())
    if response.status_code == 200:
        fuzz_api.task_ids.append(task_id)
        stored = fuzz_api.request("GET", f"/task/{task_id}")
        assert stored.status_code == 200


@settings(FUZZ, max_examples=EXAMPLES * 5)  # most are refused at once: cheap
@given(data=st.data())
def test_every_route_with_generated_parameters_bodies_and_queries(fuzz_api, data):
    route = data.draw(st.sampled_from(api.routes))
    path = route_params(route, fuzz_api, data.draw)
    query = data.draw(
        st.dictionaries(st.sampled_from(["limit", "continuationToken", "quarantined", "x"]), ODD_TEXT, max_size=2)
    )
    if query:
        path += "?" + str(httpx.QueryParams(query))
    content = b""
    if route.input is not None:
        kind = data.draw(st.sampled_from(["schema", "json", "raw"]))
        if kind == "schema":
            content = json.dumps(plausible(data.draw(schema_strategy(route.input)))).encode()
        elif kind == "json":
            content = json.dumps(data.draw(ANY_JSON)).encode()
        else:
            content = data.draw(RAW_BODIES)
    sign = data.draw(st.booleans() | st.just(True))
    fuzz_api.request(route.method, path, content=content, sign=sign)


@FUZZ
@given(data=st.data())
def test_object_service_routes_with_generated_requests(fuzz_api, data):
    route = data.draw(st.sampled_from(object_api.routes))
    path = route_params(route, fuzz_api, data.draw)
    content = b""
    if route.input is not None:
        if data.draw(st.booleans()):
            content = json.dumps(data.draw(schema_strategy(route.input))).encode()
        else:
            content = data.draw(RAW_BODIES)
    fuzz_api.request(route.method, path, content=content, service="object")


@FUZZ
@given(data=st.data())
def test_generated_artifact_requests_never_get_a_5xx(fuzz_api, data):
    claimed = fuzz_api.request(
        "POST", f"/claim-work/{TASK_QUEUE}", content=json.dumps({"tasks": 1, **WORKER}).encode()
    ).json()["tasks"]
    known = fuzz_api.task_ids[data.draw(st.integers(min_value=0, max_value=10**6)) % len(fuzz_api.task_ids)]
    task_id = claimed[0]["status"]["taskId"] if claimed else known
    name = data.draw(
        st.sampled_from(["public/a", "public/dir/b.txt"])
        | st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=1, max_size=60)
    )
    body = data.draw(schema_strategy("create-artifact-request"))
    path = f"/task/{task_id}/runs/0/artifacts/{urllib.parse.quote(name, safe='')}"
    fuzz_api.request("POST", path, content=json.dumps(body).encode())
    fuzz_api.request("PUT", path, content=json.dumps({"uploadId": slugid()}).encode())
    fuzz_api.request("GET", path)


def test_the_audit_finds_no_violation_after_the_fuzzing(fuzz_api, fuzz_azurite):
    assert len(fuzz_api.task_ids) > 4  # generated definitions were accepted, not only refused
    assert run_audit(fuzz_azurite, settle=30, published=False) == []
