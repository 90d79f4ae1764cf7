"""Purge-cache, built in, through the official Python client's `PurgeCache` class against a local host on
Azurite: a purge seen by the pool's workers (all open requests, or those since a time), the administrators'
listing in pages, Taskcluster's scopes, and bad input refused."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
import taskcluster

from shared import timeutil
from tests.conftest import ROOT_ACCESS_TOKEN, ROOT_CLIENT_ID, expect_error

ROOT = {"clientId": ROOT_CLIENT_ID, "accessToken": ROOT_ACCESS_TOKEN}


@pytest.fixture(scope="module")
def host(host_factory):
    return host_factory(client_cache_seconds=0)


def purge_cache(host, credentials=None) -> taskcluster.PurgeCache:
    given = {"credentials": dict(credentials)} if credentials is not None else {}
    return taskcluster.PurgeCache({"rootUrl": host.root_url, "maxRetries": 0, **given})


def pool() -> str:
    return f"prov-{uuid.uuid4().hex[:8]}/wt-{uuid.uuid4().hex[:8]}"


def client(host, *scopes: str) -> dict[str, str]:
    made = taskcluster.Auth({"rootUrl": host.root_url, "credentials": dict(ROOT), "maxRetries": 0}).createClient(
        f"pc/{uuid.uuid4().hex[:10]}",
        {"expires": timeutil.iso(timeutil.now() + dt.timedelta(days=1)), "description": "d", "scopes": list(scopes)},
    )
    return {"clientId": made["clientId"], "accessToken": made["accessToken"]}


def test_a_purge_reaches_the_pools_workers(host):
    admin, pool_id = purge_cache(host, ROOT), pool()
    assert admin.purgeRequests(pool_id) == {"requests": []}
    before = timeutil.now()
    assert admin.purgeCache(pool_id, {"cacheName": "gecko-level-3-checkouts"}) is None  # 204
    admin.purgeCache(pool_id, {"cacheName": "pip"})
    provisioner, worker_type = pool_id.split("/")
    found = admin.purgeRequests(pool_id)["requests"]
    assert sorted(r["cacheName"] for r in found) == ["gecko-level-3-checkouts", "pip"]
    assert all(r["provisionerId"] == provisioner and r["workerType"] == worker_type for r in found)
    assert all(timeutil.parse(r["before"]) >= before - dt.timedelta(seconds=1) for r in found)
    later = timeutil.iso(timeutil.now() + dt.timedelta(seconds=1))
    assert admin.purgeRequests(pool_id, query={"since": later}) == {"requests": []}
    assert purge_cache(host, ROOT).purgeRequests(pool()) == {"requests": []}  # another pool sees none


def test_a_purge_again_moves_its_time_and_the_since_filter_sees_it(host):
    admin, pool_id = purge_cache(host, ROOT), pool()
    admin.purgeCache(pool_id, {"cacheName": "c"})
    first = admin.purgeRequests(pool_id)["requests"][0]["before"]
    since = timeutil.iso(timeutil.parse(first) + dt.timedelta(milliseconds=1))
    admin.purgeCache(pool_id, {"cacheName": "c"})
    again = admin.purgeRequests(pool_id, query={"since": since})["requests"]
    assert len(again) == 1 and again[0]["before"] > first


def test_every_open_request_is_listed_in_pages(host):
    admin, pool_id = purge_cache(host, ROOT), pool()
    for n in range(5):
        admin.purgeCache(pool_id, {"cacheName": f"cache-{n}"})
    seen, token = [], None
    while True:
        page = admin.allPurgeRequests(query={"limit": 2, **({"continuationToken": token} if token else {})})
        assert len(page["requests"]) <= 2
        seen += [(f"{r['provisionerId']}/{r['workerType']}", r["cacheName"]) for r in page["requests"]]
        token = page.get("continuationToken")
        if not token:
            break
    assert {(pool_id, f"cache-{n}") for n in range(5)} <= set(seen) and len(seen) == len(set(seen))


def test_taskclusters_scopes_guard_each_endpoint(host):
    pool_id = pool()
    purger = purge_cache(host, client(host, f"purge-cache:{pool_id}:allowed"))
    purger.purgeCache(pool_id, {"cacheName": "allowed"})
    expect_error(403, "InsufficientScopes", purger.purgeCache, pool_id, {"cacheName": "other"})
    expect_error(403, "InsufficientScopes", purger.allPurgeRequests)
    worker = purge_cache(host, client(host, f"purge-cache:purge-requests::{pool_id}"))
    assert [r["cacheName"] for r in worker.purgeRequests(pool_id)["requests"]] == ["allowed"]
    expect_error(403, "InsufficientScopes", worker.purgeRequests, pool())
    expect_error(403, "InsufficientScopes", purge_cache(host).purgeRequests, pool_id)


def test_bad_input_is_refused_and_changes_nothing(host):
    admin, pool_id = purge_cache(host, ROOT), pool()
    expect_error(400, "InvalidRequestArguments", admin.purgeRequests, pool_id, query={"since": "yesterday"})
    expect_error(400, "InvalidRequestArguments", admin.purgeCache, "prov/wt!", {"cacheName": "c"})
    expect_error(400, "InputValidationError", admin.purgeCache, pool_id, {"cacheName": 3})
    expect_error(400, "InputError", admin.purgeCache, pool_id, {"cacheName": "c" * 1025})
    # Names whose key would pass Azure's 1 KiB (round four: 500, retried five times by the official client).
    expect_error(400, "InvalidRequestArguments", admin.purgeCache, pool_id, {"cacheName": "c" * 513})
    expect_error(400, "InvalidRequestArguments", admin.purgeCache, pool_id, {"cacheName": "/" * 171})
    admin_auth = taskcluster.Auth({"rootUrl": host.root_url, "credentials": dict(ROOT), "maxRetries": 0})
    expect_error(400, "InputError", admin_auth.createRole, "r/" * 200, {"description": "", "scopes": []})
    expect_error(
        400,
        "InvalidRequestArguments",
        admin_auth.createClient,
        "/" * 200,
        {"expires": timeutil.iso(timeutil.now() + dt.timedelta(days=1)), "description": "", "scopes": []},
    )
    assert admin.purgeRequests(pool_id) == {"requests": []}
