"""An OpenAPI 3.1 document of each service, generated from its route table (as the API references are): paths with
their parameters' patterns, query parameters, request bodies and 200 answers with their JSON schemas inlined, and
Taskcluster's error body for every other answer. Served at `<rootUrl>/references/<service>/v1/openapi.json` (not in
the manifest, which lists Taskcluster's reference formats only), for API tools: the fuzz tier drives schemathesis
with it (tests/acceptance/test_fuzz_openapi.py). Authentication is Taskcluster's Hawk, which OpenAPI cannot
describe; the document says so, and names each method's scopes (`x-taskcluster-scopes`).
"""

from __future__ import annotations

import functools
import inspect
import re
import urllib.parse
from typing import Any

from shared import validation
from shared.api.routing import PARAM_PATTERNS, Api, Route

ERROR_BODY = {
    "type": "object",
    "description": "Taskcluster's error format.",
    "properties": {
        "code": {"type": "string"},
        "message": {"type": "string"},
        "requestInfo": {
            "type": "object",
            "properties": {
                "method": {"type": "string"},
                "params": {"type": "object"},
                "payload": {},
                "time": {"type": "string"},
            },
            "required": ["method", "params", "payload", "time"],
        },
    },
    "required": ["code", "message", "requestInfo"],
    "additionalProperties": False,
}


@functools.cache
def _names_by_id() -> dict[str, str]:
    """Each schema's name by its `$id` (without the fragment)."""
    return {validation.schema(name)["$id"].removesuffix("#"): name for name in validation.schema_names()}


def inline(node: Any, base: str, seen: tuple[str, ...] = ()) -> Any:
    """A schema with its `$ref`s replaced by what they point to (a `$ref` met again inside itself becomes `{}`),
    and without `$id` / `$schema`: a document that tools which follow no URIs can use. `base` names the schema
    the refs are relative to."""
    if isinstance(node, list):
        return [inline(n, base, seen) for n in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target, _, pointer = node["$ref"].partition("#")
        uri = urllib.parse.urljoin(validation.schema(base)["$id"], target).partition("#")[0]
        name = _names_by_id()[uri]
        resolved: Any = validation.schema(name)
        for part in [p for p in pointer.split("/") if p]:
            resolved = resolved[int(part)] if isinstance(resolved, list) else resolved[part]
        key = f"{uri}#{pointer}"
        extra = {k: v for k, v in node.items() if k != "$ref"}
        return inline({**resolved, **extra}, name, (*seen, key)) if key not in seen else {}
    return {k: inline(v, base, seen) for k, v in node.items() if k not in ("$id", "$schema")}


def _operation(route: Route) -> dict[str, Any]:
    names = re.findall(r"<([a-zA-Z]+)>", route.path)
    parameters: list[dict[str, Any]] = [
        {
            "name": n,
            "in": "path",
            "required": True,
            "schema": {"type": "string", **({"pattern": PARAM_PATTERNS[n]} if n in PARAM_PATTERNS else {})},
        }
        for n in names
    ]
    parameters += [
        {"name": n, "in": "query", "required": False, "schema": {"type": "string", "pattern": pattern}}
        for n, pattern in sorted(route.query.items())
    ]
    ok: dict[str, Any] = {"description": "Success"}
    if route.output:
        ok["content"] = {"application/json": {"schema": inline(validation.schema(route.output), route.output)}}
    operation: dict[str, Any] = {
        "operationId": route.name,
        "summary": route.title,
        "description": inspect.getdoc(route.handler) or route.title,
        "parameters": parameters,
        "responses": {
            "200": ok,
            "default": {
                "description": "An error, in Taskcluster's format",
                "content": {"application/json": {"schema": ERROR_BODY}},
            },
        },
        "x-taskcluster-scopes": route.scopes,
    }
    if route.input:
        operation["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": inline(validation.schema(route.input), route.input)}},
        }
    return operation


def openapi(api: Api, root_url: str) -> dict[str, Any]:
    """The OpenAPI 3.1 document of one route table, its server under `root_url`."""
    paths: dict[str, dict[str, Any]] = {}
    for route in api.routes:
        path = re.sub(r"<([a-zA-Z]+)>", r"{\1}", route.path)
        paths.setdefault(path, {})[route.method.lower()] = _operation(route)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": f"{api.service_name} API",
            "version": api.version,
            "description": "Generated from the route table (shared/api/openapi.py). Requests authenticate "
            "with Taskcluster's Hawk (docs/auth.md), which OpenAPI cannot describe; a "
            "request without it is anonymous. Each operation names its scopes in "
            "`x-taskcluster-scopes`.",
        },
        "servers": [{"url": f"{root_url.rstrip('/')}{api.prefix}"}],
        "paths": paths,
    }
