"""Discovery, as a Taskcluster deployment serves it: `<rootUrl>/references/manifest.json`, each service's API
reference (`/references/<service>/v1/api.json`, generated from the route tables like docs/api.md, so the
extension methods are in it), the queue's exchange reference (`/references/queue/v1/exchanges.json`) and the
schemas (`/schemas/<service>/v1/<name>.json`, and the metaschema they name); and beside the references, not in
the manifest, an OpenAPI document of each service (`/references/<service>/v1/openapi.json`, shared/api/openapi.py).

The official clients build a client class from an API reference (`createApiClient` in Python, `createClient` in
JavaScript); tools such as the UI's documentation and `taskcluster-lib-references` read the manifest. Every id
in these documents is under the deployment's rootUrl (QUEUE_ROOT_URL, or the local host's address), never under
the Host a request names.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from shared import validation
from shared.api.openapi import openapi
from shared.api.routing import Api, Route
from shared.domain.events import (
    EXCHANGES,
    GROUP_EXCHANGES,
    GROUP_KEY_WORDS,
    TASK_KEY_WORDS,
)

# Documents are built with URLs under this origin, and served with the deployment's rootUrl in its place (the
# absolute form a Taskcluster deployment serves). The reference formats' own schemas are Taskcluster's and are not
# served here.
ORIGIN = validation.ROOT.removesuffix("schemas/")
REFERENCE_SCHEMA = ORIGIN + "schemas/common/api-reference-v0.json#"
EXCHANGES_SCHEMA = ORIGIN + "schemas/common/exchanges-reference-v0.json#"
MANIFEST_SCHEMA = ORIGIN + "schemas/common/manifest-v3.json#"

SERVICES = {
    "queue": (
        "Queue",
        "The queue service is responsible for accepting tasks and tracking their state as they "
        "are executed by workers, in order to ensure they are eventually resolved. This one runs on Azure "
        "Functions over Azure Storage (the extension methods are marked in their descriptions).",
    ),
    "object": (
        "Object Service",
        "The object service provides HTTP-accessible storage for large blobs of data: "
        "here, block blobs of the artifact container, uploaded once and then immutable.",
    ),
    "index": (
        "Task Index",
        "The index service is responsible for indexing tasks: a completed task's "
        "`index.<namespace>` routes make it findable by name, and a task indexed so can be found, listed and "
        "its artifacts downloaded by that name. Built into this queue (indexed from its own record of each "
        "completion, no event bus needed).",
    ),
    "purge-cache": (
        "Purge Cache Service",
        "The purge-cache service is responsible for tracking cache-purge requests: users create purge requests "
        "for caches of a worker pool, and workers consult the service before starting a new task, and purge "
        "caches older than the request. Built into this queue.",
    ),
    "auth": (
        "Authentication",
        "Clients, roles, scope expansion and authenticateHawk (which Taskcluster's other services call for every "
        "request they receive), in the shapes of Taskcluster's auth service. "
        "This queue authenticates in process, with the clients and roles these routes manage.",
    ),
}

# What the words of the routing keys mean (Taskcluster's summaries, shortened).
KEY_WORDS: dict[str, tuple[str, bool, bool]] = {  # name -> (summary, required, multipleWords)
    "routingKeyKind": (
        "Identifier for the routing-key kind: always `primary` for the formalized routing key.",
        True,
        False,
    ),
    "taskId": ("`taskId` for the task this message concerns", True, False),
    "runId": ("`runId` of the latest run for the task, `_` if no run exists.", False, False),
    "workerGroup": ("`workerGroup` of the latest run, `_` if not claimed.", False, False),
    "workerId": ("`workerId` of the latest run, `_` if not claimed.", False, False),
    "provisionerId": ("`provisionerId` this task is targeted at.", True, False),
    "workerType": ("`workerType` this task must run on.", True, False),
    "schedulerId": ("`schedulerId` this task was created by.", True, False),
    "taskGroupId": ("`taskGroupId` this task was created in.", True, False),
    "reserved": ("Space reserved for future routing-key entries; bind with `#` at the end.", False, True),
}
EXCHANGE_TITLES = {
    "task-defined": "Task Defined Messages",
    "task-pending": "Task Pending Messages",
    "task-running": "Task Running Messages",
    "artifact-created": "Artifact Creation Messages",
    "task-completed": "Task Completed Messages",
    "task-failed": "Task Failed Messages",
    "task-exception": "Task Exception Messages",
    "task-priority-changed": "Task Priority Changed Messages",
    "task-group-resolved": "Task Group Resolved Messages",
    "task-group-sealed": "Task Group Sealed Messages",
    "task-group-priority-changed": "Task Group Priority Changed Messages",
}


def _camel(name: str) -> str:
    head, *rest = name.split("-")
    return head + "".join(word.title() for word in rest)


def _schema_ref(service: str, name: str) -> str:
    """A schema's id relative to the service's schemas (`v1/task.json#`), as references write it."""
    path: str = validation.schema(name)["$id"]
    return path.removeprefix(validation.ROOT).removeprefix(f"{service}/")


def _entry(api: Api, route: Route) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "type": "function",
        "method": route.method.lower(),
        "route": route.path,
        "args": [arg.strip("<>") for arg in route.path.split("/") if arg.startswith("<")],
        "query": sorted(route.query),
        "name": route.name,
        "stability": route.stability,
        "title": route.title,
        "description": inspect.getdoc(route.handler) or route.title,
    }
    if route.scopes is not None:
        entry["scopes"] = route.scopes
    if route.input:
        entry["input"] = _schema_ref(api.service_name, route.input)
    if route.output:
        entry["output"] = _schema_ref(api.service_name, route.output)
    return entry


def api_reference(api: Api) -> dict[str, Any]:
    """The API reference (api-reference-v0) of one route table."""
    title, description = SERVICES[api.service_name]
    return {
        "$schema": REFERENCE_SCHEMA,
        "apiVersion": api.version,
        "serviceName": api.service_name,
        "title": f"{title} API",
        "description": description,
        "entries": [_entry(api, route) for route in api.routes],
    }


def exchanges_reference(namespace: str) -> dict[str, Any]:
    """The queue's exchange reference (exchanges-reference-v0): what the dispatcher publishes."""
    entries = []
    for exchange, schema in EXCHANGES.items():
        words = GROUP_KEY_WORDS if exchange in GROUP_EXCHANGES else TASK_KEY_WORDS
        key = []
        for word in words:
            summary, required, multiple = KEY_WORDS[word]
            if exchange in GROUP_EXCHANGES and word == "taskGroupId":
                summary = "`taskGroupId` of the group this message concerns"
            item: dict[str, Any] = {"name": word, "summary": summary, "required": required, "multipleWords": multiple}
            if word == "routingKeyKind":
                item["constant"] = "primary"
            key.append(item)
        entries.append(
            {
                "type": "topic-exchange",
                "exchange": exchange,
                "name": _camel(exchange),
                "title": EXCHANGE_TITLES[exchange],
                "description": f"Published on `{exchange}` (docs/events.md); the payload follows the schema named.",
                "routingKey": key,
                "schema": _schema_ref("queue", schema),
            }
        )
    return {
        "$schema": EXCHANGES_SCHEMA,
        "apiVersion": "v1",
        "serviceName": "queue",
        "title": "Queue AMQP Exchanges",
        "description": "The exchanges the queue publishes its messages on "
        "(AMQP topic exchanges, and Service Bus topics of the same names).",
        "exchangePrefix": f"exchange/{namespace}/v1/",
        "entries": entries,
    }


class Discovery:
    """Answers GETs of the manifest, the references and the schemas (`documents` of the ApiApp)."""

    def __init__(self, apis: list[Api], *, root_url: Callable[[], str], namespace: Callable[[], str]) -> None:
        self.apis = apis
        self.root_url = root_url
        self.namespace = namespace
        # Each document's bytes, rendered at its first request: the OpenAPI documents take 0.7 MB, and rendering
        # one per request let 500 anonymous GETs delay a ping 8 s. Bounded: only the documents above are kept.
        self._rendered: dict[str, bytes] = {}

    @functools.cached_property
    def _documents(self) -> dict[str, dict[str, Any]]:
        """Each document by its path, with ids relative to the rootUrl (made absolute per request)."""
        docs: dict[str, dict[str, Any]] = {}
        for api in self.apis:
            docs[f"/references/{api.service_name}/{api.version}/api.json"] = api_reference(api)
        docs["/references/queue/v1/exchanges.json"] = exchanges_reference(self.namespace())
        docs["/references/manifest.json"] = {
            "$schema": MANIFEST_SCHEMA,
            "references": [ORIGIN + path[1:] for path in sorted(docs)],
        }
        for path, schema in validation.published().items():
            docs[f"/schemas/{path}"] = schema
        for api in self.apis:  # not in the manifest: it lists Taskcluster's reference formats
            docs[f"/references/{api.service_name}/{api.version}/openapi.json"] = openapi(api, ORIGIN)
        return docs

    def __call__(self, request: Request) -> Response | None:
        path = request.scope["path"]
        text = self._rendered.get(path)
        if text is None:
            found = self._documents.get(path)
            if found is None:
                return None
            # The rootUrl of the settings, never the request's Host: these answers are cached (max-age) by whoever
            # relays them, so a Host header a client chose must not end up in what others read.
            root = self.root_url().rstrip("/")
            text = self._rendered[path] = json.dumps(found, indent=2).replace(ORIGIN, f"{root}/").encode()
        return Response(text, media_type="application/json", headers={"cache-control": "max-age=300"})
