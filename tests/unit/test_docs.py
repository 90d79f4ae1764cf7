"""The docs that are generated from the code are current, and every route declares its scopes."""

from __future__ import annotations

from pathlib import Path

from shared.api.auth_v1 import api as auth_api
from shared.api.index_v1 import api as index_api
from shared.api.object_v1 import api as object_api
from shared.api.purge_cache_v1 import api as purge_cache_api
from shared.api.queue_v1 import api
from shared.api.queue_v1.tasks import CREATE_TASK_SCOPES
from shared.api.reference import render
from shared.api.routing import render_scopes

PROJECT = Path(__file__).resolve().parents[2]


def test_api_reference_is_current():
    rendered = render([api, object_api, auth_api, index_api, purge_cache_api])
    assert (PROJECT / "docs" / "api.md").read_text() == rendered, (
        "docs/api.md is stale: run `python -m shared.api.reference > docs/api.md`"
    )


def test_every_route_declares_scopes_or_is_public_on_purpose():
    monitoring = {"ping", "heartbeat", "lbheartbeat", "version"}
    public = {r.name for r in api.routes if r.scopes is None}
    # uploadArtifactData is authorized by its URL's signature, as a presigned S3 URL is (operations/s3_uploads.py)
    assert public == {*monitoring, "uploadArtifactData"}
    assert {r.name for r in object_api.routes if r.scopes is None} == {*monitoring, "uploadObjectData"}
    # What a caller asks about its own credentials needs none, nor what other services ask about their callers
    # and client libraries about their signing (as in Taskcluster's auth service).
    assert {r.name for r in auth_api.routes if r.scopes is None} == {
        *monitoring,
        "currentScopes",
        "authenticateHawk",
        "testAuthenticate",
        "testAuthenticateGet",
    }
    assert {r.name for r in purge_cache_api.routes if r.scopes is None} == monitoring


def test_create_task_scopes_render_like_taskclusters():
    rendered = render_scopes(
        CREATE_TASK_SCOPES,
        {
            "scopes": ["secrets:get:a"],
            "routes": ["index.x"],
            "projectId": "proj",
            "schedulerId": "sched",
            "priorities": ["highest", "very-high"],
            "provisionerId": "prov",
            "workerType": "wt",
        },
    )
    assert rendered == {
        "AllOf": [
            "secrets:get:a",
            "queue:route:index.x",
            "queue:create-task:project:proj",
            "queue:scheduler-id:sched",
            {"AnyOf": ["queue:create-task:highest:prov/wt", "queue:create-task:very-high:prov/wt"]},
        ]
    }
