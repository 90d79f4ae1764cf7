"""Purge-cache API v1 routes, as Taskcluster's purge-cache service declares them: purgeCache, allPurgeRequests,
purgeRequests. Scopes are Taskcluster's (`purge-cache:<workerPoolId>:<cacheName>`,
`purge-cache:all-purge-requests`, `purge-cache:purge-requests::<workerPoolId>`, the double colon theirs).
"""

from __future__ import annotations

from typing import Any

from shared import errors, timeutil
from shared.api import monitoring
from shared.api.queue_v1.common import PAGING, paging
from shared.api.routing import Api, Call, Reply
from shared.runtime import Queue

api = Api("purge-cache", "v1")
monitoring.register(api)
PurgeCall = Call[Queue]


@api.route(
    "POST",
    "/purge-cache/<workerPoolId>",
    name="purgeCache",
    title="Purge Worker Cache",
    scopes="purge-cache:<workerPoolId>:<cacheName>",
    input="purge-cache/purge-cache-request",
)
async def purge_cache(call: PurgeCall) -> Reply:
    """Ask the pool's workers to drop their caches named `cacheName` made before now; a purge of the same cache
    again moves its time to now. Workers see it within QUEUE_PURGE_CACHE_SECONDS."""
    cache_name = call.body["cacheName"]
    await call.authorize(cacheName=cache_name)
    await call.context.purge_cache.purge(call.params["workerPoolId"], cache_name)
    return Reply(None, status=204)


# Before purgeRequests: `/purge-cache/<workerPoolId>` would not take `list` (no `/`), but the order says which wins.
@api.route(
    "GET",
    "/purge-cache/list",
    name="allPurgeRequests",
    title="All Open Purge Requests",
    scopes="purge-cache:all-purge-requests",
    output="purge-cache/all-purge-cache-request-list",
    query=PAGING,
)
async def all_purge_requests(call: PurgeCall) -> dict[str, Any]:
    """Every pool's open requests (for administrators; workers ask purgeRequests), a page at a time."""
    await call.authorize()
    found, token = await call.context.purge_cache.page(**paging(call))
    return {"requests": [r.to_api() for r in found], **({"continuationToken": token} if token else {})}


@api.route(
    "GET",
    "/purge-cache/<workerPoolId>",
    name="purgeRequests",
    title="Open Purge Requests for a worker pool",
    scopes="purge-cache:purge-requests::<workerPoolId>",
    output="purge-cache/purge-cache-request-list",
    query={"since": "^.*$"},
)
async def purge_requests(call: PurgeCall) -> dict[str, Any]:
    """The pool's caches to drop if they were made before each request's `before`: those requested at or after
    `since` (a date; all open ones without it). What generic-worker asks before every task."""
    await call.authorize()
    since_text = call.query.get("since")
    try:
        since = timeutil.parse(since_text) if since_text else None
    except ValueError:
        raise errors.InvalidRequestArguments("since must be a date, not `{since}`", since=since_text) from None
    found = await call.context.purge_cache.of_pool(call.params["workerPoolId"], since)
    return {"requests": [r.to_api() for r in found]}
