"""Writes the API reference (docs/api.md) from the route table, so the docs cannot drift from the code.

python -m shared.api.reference > docs/api.md
"""

from __future__ import annotations

import inspect
import json

from shared.api import auth_v1, index_v1, monitoring, object_v1, purge_cache_v1, queue_v1
from shared.api.routing import Api, Route

HEADER = """# Queue API v1 reference

Generated from the route table by `python -m shared.api.reference > docs/api.md`; a test fails when this file
is out of date. Routes are served under `<rootUrl>/api/queue/v1`. Bodies are checked against the official
Taskcluster schemas named below (`shared/schemas/queue/v1/<name>.yml`, or `shared/schemas/ext/<name>.yml` for
this queue's extensions, such as the `azure` artifact type), with schema defaults filled in first.

Discovery as a Taskcluster deployment serves it: `<rootUrl>/references/manifest.json` lists the API references
(`/references/queue/v1/api.json`, `/references/object/v1/api.json`, generated from the same route tables as this
file, extension methods included) and the exchange reference (`/references/queue/v1/exchanges.json`); every
schema is served at `<rootUrl>/schemas/<service>/v1/<name>.json`, and an OpenAPI 3.1 document of each service at
`<rootUrl>/references/<service>/v1/openapi.json` (for API tools; not in the manifest). Every answer carries
Taskcluster's CORS headers
(`Access-Control-Allow-Origin: *`, ...), and a preflight `OPTIONS` is answered `200`. A route takes only the query
parameters listed with it (and `bewit`); any other is a `400 InvalidRequestArguments`.

Every error has Taskcluster's body `{code, message, requestInfo: {method, params, payload, time}}`:

| code | status | when |
|---|---|---|
| `InvalidRequestArguments` | 400 | a path parameter does not match its pattern (e.g. a taskId that is not a slugid) |
| `MalformedPayload` | 400 | the body is not JSON |
| `InputValidationError` | 400 | the body does not match the route's schema |
| `InputError` | 400 | the body is well-formed but not acceptable (dates, `**` scopes, task queue mismatch, ...) |
| `AuthenticationFailed` | 401 | credentials are wrong (with `www-authenticate: hawk`) |
| `InsufficientScopes` | 403 | the credentials lack the scopes the route needs |
| `ResourceNotFound` | 404 | unknown task or run, or no such route |
| `RequestConflict` | 409 | the request conflicts with the task's state |
| `ResourceExpired` | 410 | the artifact's `expires` has passed |
| `InputTooLarge` | 413 | a body over 10 MiB, or a task definition over 400,000 characters of JSON |
| `InternalServerError` | 500 | a bug or an outage of storage; safe to retry |

Scopes are written as Taskcluster writes them: `<param>` is substituted from the path, the body or the stored
task; `{"for": x, "in": list, "each": scope}` stands for one scope per list item. A caller without them gets
`403 InsufficientScopes`; see [auth.md](auth.md) for how callers authenticate.

## Limits and settings that shape the API

| what | value |
|---|---|
| `created` | within 15 minutes of the queue's clock |
| `deadline` | not in the past, at most `QUEUE_MAX_TASK_DEADLINE_DAYS` (5) days ahead |
| `expires` | not before `deadline`; default `deadline` + 1 year |
| runs per task | 50 (`rerunTask` answers 409 beyond) |
| `claimWork` | 1 to 32 tasks; long-polls up to `QUEUE_CLAIM_WORK_WAIT` (20 s), then `{"tasks": []}` |
| claims | last `QUEUE_CLAIM_TIMEOUT` (1200 s) unless reclaimed; temporary credentials expire at `takenUntil` |
| task definition | at most 400,000 characters of JSON (one Azure Table entity holds 1 MiB) |
| artifacts | created while the run runs, or `QUEUE_ARTIFACT_EXCEPTION_WINDOW` (25 min) after an `exception`; \
names up to 1024 characters; upload and download URLs last 30 min ([artifacts.md](artifacts.md)) |

An `error` artifact answers `getArtifact` with `424` and the body `{reason, message}` (not the error format).
"""


def _scopes(route: Route) -> str:
    if route.scopes is None:
        return "none"
    if isinstance(route.scopes, str):
        return f"`{route.scopes}`"
    return "\n\n```json\n" + json.dumps(route.scopes, indent=2) + "\n```\n"


ROUTE_MODULES = (
    monitoring,
    *queue_v1.ROUTE_MODULES,
    *object_v1.ROUTE_MODULES,
    *auth_v1.ROUTE_MODULES,
    *index_v1.ROUTE_MODULES,
    *purge_cache_v1.ROUTE_MODULES,
)
OBJECT_HEADER = """
# Object service API v1

Served under `<rootUrl>/api/object/v1` (Taskcluster's Object service, over the artifact container): the uploads
and downloads of `object` artifacts, which the official clients' upload and download helpers call with the
credentials `createArtifact` and `artifact` answer ([artifacts.md](artifacts.md)). Schemas:
`shared/schemas/object/v1/<name>.yml`, served at `<rootUrl>/schemas/object/v1/<name>.json`.
"""

AUTH_HEADER = """
# Auth service API v1

Served under `<rootUrl>/api/auth/v1`, so the official clients' `Auth` class reaches it: of Taskcluster's auth
service, what callers ask about their own credentials (the queue authenticates in process, [auth.md](auth.md)),
`authenticateHawk`, which Taskcluster's other services behind the same rootUrl call for every request they receive
([services.md](services.md)), and the delegation endpoints ([auth.md](auth.md#what-the-auth-api-delegates)).
"""

PURGE_CACHE_HEADER = """
# Purge-cache API v1

Served under `<rootUrl>/api/purge-cache/v1` (Taskcluster's purge-cache service, built in: the official clients'
`PurgeCache` class, and generic-worker before every task that mounts a writable cache). A purge request tells a
worker pool's workers to drop the caches of a name made before it; requests are kept for a day. Workers' reads are
answered from a per-pool copy at most `QUEUE_PURGE_CACHE_SECONDS` old (10 s). Schemas: the official ones,
`shared/schemas/purge-cache/v1/<name>.yml`.

| limit | value |
|---|---|
| `cacheName` | at most 1024 characters (`400 InputError`) |
| open requests of one pool answered | 10,000 (a day's purges of distinct cache names) |
| listing page (`limit`) | 1 to 1000, default 1000 |
"""

INDEX_HEADER = """
# Index API v1

Served under `<rootUrl>/api/index/v1` (Taskcluster's index service, built in: [index](index-service.md)). A
completed task is indexed at each of its `index.<path>` routes; these routes find, list, insert and delete entries,
and download an indexed task's artifacts. Schemas: the official ones, `shared/schemas/index/v1/<name>.yml`, served
at `<rootUrl>/schemas/index/v1/<name>.json`.

| limit | value |
|---|---|
| index path | at most 255 characters of printable ASCII without spaces or `/ \\ # ?`; at most 64 \
dot-separated words, none empty (`400 InvalidRequestArguments`) |
| `data` | at most 32 KiB of JSON (`400 InputError`) |
| listing page (`limit`) | 1 to 1000, default 1000 |
| findTasksAtIndex | at most 1000 paths per call (`400 InputError`) |
"""


def _in_order(api: Api) -> list[Route]:
    """The routes by the module that declares them (tasks, work, groups, artifacts, workers), then as declared."""
    modules = [m.__name__ for m in ROUTE_MODULES]
    return sorted(
        api.routes,
        key=lambda r: modules.index(r.handler.__module__) if r.handler.__module__ in modules else len(modules),
    )


def render(apis: list[Api]) -> str:
    parts = [HEADER]
    for api in apis:
        if api is object_v1.api:
            parts.append(OBJECT_HEADER)
        if api is auth_v1.api:
            parts.append(AUTH_HEADER)
        if api is index_v1.api:
            parts.append(INDEX_HEADER)
        if api is purge_cache_v1.api:
            parts.append(PURGE_CACHE_HEADER)
        routes = _in_order(api)
        parts.append(
            "\n## Endpoints\n\n| name | method and route | input | output | stability |\n|---|---|---|---|---|"
        )
        for r in routes:
            parts.append(
                f"| [`{r.name}`](#{r.name.lower()}) | `{r.method} {r.path}` | {r.input or '-'} | "
                f"{r.output or '-'} | {r.stability} |"
            )
        for r in routes:
            doc = inspect.getdoc(r.handler)
            parts.append(
                f"\n### {r.name}\n\n{r.title}. `{r.method} {api.prefix}{r.path}`\n\n"
                + (f"{doc}\n\n" if doc else "")
                + (f"Query: {', '.join(f'`{q}`' for q in sorted(r.query))}\n\n" if r.query else "")
                + f"Scopes: {_scopes(r)}"
            )
    return "\n".join(parts) + "\n"


if __name__ == "__main__":
    print(render([queue_v1.api, object_v1.api, auth_v1.api, index_v1.api, purge_cache_v1.api]), end="")
