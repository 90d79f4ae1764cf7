"""The fuzz tier through schemathesis: requests generated from every route's own schemas (the OpenAPI document the
queue serves, shared/api/openapi.py), valid and invalid, sent anonymously, with credentials that hold no scope,
with credentials that fail, and as root, against a local host on an Azurite of its own. Asserted for every one:
no 5xx, errors in Taskcluster's format, 200 answers valid against their schemas; for every refused request that
would write: nothing a read can see changed (tasks, their artifacts and events, groups, dependencies, clients,
roles, objects); and over the whole run, the host's memory flat.

Short by default (CI); the long run, with new examples each time, is a documented command (docs/security.md):

    QUEUE_FUZZ_EXAMPLES=200 QUEUE_FUZZ_RANDOM=1 .venv/bin/python -m pytest -s tests/acceptance/test_fuzz_openapi.py

It prints the requests sent, the refusals checked for changes and the host's RSS before and after.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import itertools
import os
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import mohawk
import pytest
import requests
import schemathesis
from azure.data.tables import TableServiceClient
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

from local_host import azurite as azurite_mod
from shared import timeutil
from tests.conftest import ROOT_ACCESS_TOKEN, azurite_of_its_own, slugid, task_definition

EXAMPLES = int(os.environ.get("QUEUE_FUZZ_EXAMPLES", "6"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    derandomize=not os.environ.get("QUEUE_FUZZ_RANDOM"),
    suppress_health_check=list(HealthCheck),
)
# What a refused request must not change: what the API reads (not the index rows and hints a refused write may
# put before it is refused, which their timers drop).
WATCHED_TABLES = ("Tasks", "TaskDependency", "TaskRequirement", "Clients", "Roles", "Objects", "Index")
WRITES = {"PUT", "POST", "DELETE"}
STATS: Counter[str] = Counter()


class Hawk(requests.auth.AuthBase):
    """Signs the prepared request as the official clients do (its final URL and body)."""

    def __init__(self, client_id: str, access_token: str) -> None:
        self.credentials = {"id": client_id, "key": access_token, "algorithm": "sha256"}

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        body = request.body or b""
        content = body.encode() if isinstance(body, str) else body
        sender = mohawk.Sender(
            self.credentials,
            request.url,
            request.method,
            content=content,
            content_type=request.headers.get("Content-Type", ""),
        )
        request.headers["Authorization"] = sender.request_header
        return request


@pytest.fixture(scope="module")
def fuzz_storage(tmp_path_factory) -> Iterator[azurite_mod.Azurite]:
    with azurite_of_its_own(tmp_path_factory, "azurite-openapi-fuzz") as instance:
        yield instance


@pytest.fixture(scope="module")
def fuzz_host(host_factory, fuzz_storage):
    # No triggers' work on the tasks while the run goes: long claims, no deadline delay past the run.
    return host_factory(
        storage=fuzz_storage.connection_string, claim_work_wait=0, claim_timeout=3600, client_cache_seconds=0
    )


@pytest.fixture(scope="module")
def callers(fuzz_host) -> list[tuple[str, requests.auth.AuthBase | None]]:
    """Anonymous, a client that holds no scope, credentials that fail, and root."""
    session = requests.Session()
    root = Hawk("root", ROOT_ACCESS_TOKEN)
    created = session.put(
        f"{fuzz_host.root_url}/api/auth/v1/clients/fuzz/no-scopes",
        auth=root,
        json={"expires": timeutil.iso(timeutil.now() + dt.timedelta(days=1)), "description": "fuzz", "scopes": []},
    )
    assert created.status_code == 200, created.text
    for _ in range(3):  # a few tasks for generated requests to meet
        session.put(f"{fuzz_host.root_url}/api/queue/v1/task/{slugid()}", auth=root, json=task_definition())
    return [
        ("anonymous", None),
        ("no-scopes", Hawk("fuzz/no-scopes", created.json()["accessToken"])),
        ("bad-token", Hawk("root", "x" * 44)),
        ("root", root),
    ]


def fingerprint(storage: azurite_mod.Azurite) -> str:
    """What the watched tables hold: every entity's keys and ETag."""
    service = TableServiceClient.from_connection_string(storage.connection_string)
    digest = hashlib.sha256()
    for table in WATCHED_TABLES:
        try:
            for entity in service.get_table_client(table).list_entities(select=["PartitionKey", "RowKey"]):
                digest.update(
                    f"{table}|{entity['PartitionKey']}|{entity['RowKey']}|{entity.metadata['etag']}\n".encode()
                )
        except Exception as exc:  # a table not created yet
            if "TableNotFound" not in str(exc):
                raise
    return digest.hexdigest()


def settled(storage: azurite_mod.Azurite) -> str:
    """The fingerprint once the work after earlier answers (tidying, follow-ups) has stopped changing it."""
    last = fingerprint(storage)
    for _ in range(20):
        time.sleep(0.1)
        now = fingerprint(storage)
        if now == last:
            return now
        last = now
    return last


@pytest.fixture(scope="module")
def rss(fuzz_host) -> Iterator[dict[str, float]]:
    seen = {"before": fuzz_host.rss_mb()}
    yield seen
    seen["after"] = fuzz_host.rss_mb()
    print(f"\nopenapi fuzz: {dict(STATS)}; host RSS {seen['before']:.0f} -> {seen['after']:.0f} MB")


CALLER_TURN = itertools.count()


def exercise(case: schemathesis.Case, callers: list[tuple[str, Any]], storage: azurite_mod.Azurite) -> None:
    name, auth = callers[next(CALLER_TURN) % len(callers)]
    writes = case.method.upper() in WRITES
    before = settled(storage) if writes else None
    response = case.call(auth=auth, timeout=30)
    STATS["requests"] += 1
    STATS[f"{response.status_code // 100}xx"] += 1
    assert response.status_code < 500, f"{case.method} {case.formatted_path} as {name}: {response.text[:1000]}"
    if response.status_code >= 400:
        body = response.json()
        assert set(body) == {"code", "message", "requestInfo"}, body
        if before is not None:
            assert settled(storage) == before, (
                f"refused {case.method} {case.formatted_path} as {name} changed "
                f"storage: {response.status_code} {body['code']}"
            )
            STATS["refusals checked"] += 1
    else:
        case.validate_response(response, checks=[schemathesis.checks.response_schema_conformance])


@pytest.mark.parametrize("service", ["queue", "auth", "object", "index"])
def test_every_operation_with_valid_and_invalid_generated_requests(fuzz_host, service, callers, fuzz_storage, rss):
    schema = schemathesis.openapi.from_url(f"{fuzz_host.root_url}/references/{service}/v1/openapi.json", timeout=30)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 5
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @FUZZ
            @given(case=operation.as_strategy(generation_mode=mode))
            def run(case: schemathesis.Case) -> None:
                exercise(case, callers, fuzz_storage)

            try:
                run()
            except Unsatisfiable:
                if mode is GenerationMode.POSITIVE:
                    # A taskQueueId holds a `/`, which schemathesis puts in no path parameter: these routes get
                    # invalid requests here, and valid ones in tests/acceptance/test_fuzz.py.
                    assert "{taskQueueId}" in operation.path, f"{operation.label}: no valid request generated"
                    STATS["valid: '/' in a path parameter"] += 1
                else:
                    STATS["invalid: nothing to make invalid"] += 1


def test_memory_stayed_flat(fuzz_host, rss):
    assert STATS["requests"] > 0
    grown = fuzz_host.rss_mb() - rss["before"]
    assert grown < 60, f"host RSS grew {grown:.0f} MB over {STATS['requests']} requests"
