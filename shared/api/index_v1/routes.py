"""Index API v1 routes, as Taskcluster's index service declares them: findTask, findTasksAtIndex, listNamespaces,
listTasks (and their deprecated POST forms), insertTask, deleteTask, findArtifactFromTask.

Scopes are Taskcluster's: `index:find-task:<indexPath>`, `index:list-namespaces:<namespace>`,
`index:list-tasks:<namespace>`, `index:insert-task:<namespace>`, `index:delete-task:<namespace>`; an artifact's
`queue:get-artifact:<name>` unless it is `public/`.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

from shared import timeutil
from shared.api import monitoring
from shared.api.queue_v1.artifacts import artifact_reply
from shared.api.queue_v1.common import PAGING, paging
from shared.api.routing import Api, Call, Reply
from shared.domain.index import MAX_DATA_BYTES, IndexDataTooLarge, IndexedTask, checked_rank, data_size
from shared.runtime import Queue

api = Api("index", "v1")
monitoring.register(api)
IndexCall = Call[Queue]
PUBLIC_PREFIX = "public/"
ANONYMOUS_LOOKUPS = 100  # index paths one findTasksAtIndex page of a caller without credentials looks up


def _tasks(entries: list[IndexedTask], token: str | None) -> dict[str, Any]:
    return {"tasks": [e.to_api() for e in entries], **({"continuationToken": token} if token else {})}


@api.route(
    "GET",
    "/task/<indexPath>",
    name="findTask",
    title="Find Indexed Task",
    scopes="index:find-task:<indexPath>",
    output="index/indexed-task-response",
)
async def find_task(call: IndexCall) -> dict[str, Any]:
    """The task indexed at `indexPath` (a dotted path, e.g. `some-app.<revision>.linux-64.release-build`): its
    taskId, rank, data and expiry. 404 when nothing is indexed there or the entry expired."""
    await call.authorize()
    return (await call.context.index.find(call.params["indexPath"])).to_api()


@api.route(
    "POST",
    "/tasks/indexes",
    name="findTasksAtIndex",
    title="Find tasks at indexes",
    scopes={"AllOf": [{"for": "indexPath", "in": "indexes", "each": "index:find-task:<indexPath>"}]},
    input="index/list-tasks-at-index",
    output="index/list-tasks-response",
    stability="experimental",
    query=PAGING,
)
async def find_tasks_at_index(call: IndexCall) -> dict[str, Any]:
    """The tasks indexed at each of the given paths (up to 1000), those that exist: `limit` paths are looked up
    per page, and `continuationToken` goes on with the next ones. A caller without credentials gets pages of at
    most 100 paths (a storage read each), so that one anonymous request costs at most 100 reads."""
    indexes: list[str] = call.body["indexes"]
    await call.authorize(indexes=indexes)
    page = paging(call)
    if call.caller.client_id is None:
        page["limit"] = min(page["limit"], ANONYMOUS_LOOKUPS)
    return _tasks(*await call.context.index.find_many(indexes, **page))


async def _list_namespaces(call: IndexCall, page: dict[str, Any]) -> dict[str, Any]:
    await call.authorize()
    namespaces, token = await call.context.index.list_namespaces(call.params["namespace"], **page)
    return {"namespaces": namespaces, **({"continuationToken": token} if token else {})}


@api.route(
    "GET",
    "/namespaces/<namespace>",
    name="listNamespaces",
    title="List Namespaces",
    scopes="index:list-namespaces:<namespace>",
    output="index/list-namespaces-response",
    query=PAGING,
)
async def list_namespaces(call: IndexCall) -> dict[str, Any]:
    """The namespaces directly under `namespace` (the root: empty) that hold an entry not yet expired, a page of
    up to `limit` (1000) at a time. A page may hold fewer than `limit` and still have a `continuationToken`."""
    return await _list_namespaces(call, paging(call))


@api.route(
    "POST",
    "/namespaces/<namespace>",
    name="listNamespacesPost",
    title="List Namespaces (POST)",
    scopes="index:list-namespaces:<namespace>",
    input="index/list-namespaces-request",
    output="index/list-namespaces-response",
    stability="deprecated",
)
async def list_namespaces_post(call: IndexCall) -> dict[str, Any]:
    """listNamespaces with `limit` and `continuationToken` in the body, as older clients call it."""
    return await _list_namespaces(
        call, {"limit": call.body["limit"], "continuation": call.body.get("continuationToken")}
    )


async def _list_tasks(call: IndexCall, page: dict[str, Any]) -> dict[str, Any]:
    await call.authorize()
    return _tasks(*await call.context.index.list_tasks(call.params["namespace"], **page))


@api.route(
    "GET",
    "/tasks/<namespace>",
    name="listTasks",
    title="List Tasks",
    scopes="index:list-tasks:<namespace>",
    output="index/list-tasks-response",
    query=PAGING,
)
async def list_tasks(call: IndexCall) -> dict[str, Any]:
    """The entries directly in `namespace` that have not expired (not those of namespaces below it), a page of
    up to `limit` (1000) at a time. A page may hold fewer than `limit` and still have a `continuationToken`."""
    return await _list_tasks(call, paging(call))


@api.route(
    "POST",
    "/tasks/<namespace>",
    name="listTasksPost",
    title="List Tasks (POST)",
    scopes="index:list-tasks:<namespace>",
    input="index/list-namespaces-request",
    output="index/list-tasks-response",
    stability="deprecated",
)
async def list_tasks_post(call: IndexCall) -> dict[str, Any]:
    """listTasks with `limit` and `continuationToken` in the body, as older clients call it."""
    return await _list_tasks(call, {"limit": call.body["limit"], "continuation": call.body.get("continuationToken")})


@api.route(
    "PUT",
    "/task/<namespace>",
    name="insertTask",
    title="Insert Task into Index",
    scopes="index:insert-task:<namespace>",
    input="index/insert-task-request",
    output="index/indexed-task-response",
)
async def insert_task(call: IndexCall) -> dict[str, Any]:
    """Index `taskId` at the path `namespace` (its last word is the entry's name; the namespaces above it are
    created). An entry already there stays if its rank is higher (the answer is then that entry); of equal
    rank, the later insert wins. `data` holds at most 32 KiB of JSON. Completed tasks are indexed at their
    `index.<path>` routes without this call."""
    await call.authorize()
    body = call.body
    if data_size(body["data"]) > MAX_DATA_BYTES:
        raise IndexDataTooLarge(size=data_size(body["data"]))
    index = call.context.index
    entry = IndexedTask(
        call.params["namespace"],
        body["taskId"],
        checked_rank(body["rank"]),
        body["data"],
        timeutil.to_ms(timeutil.parse(body["expires"])),
        index.stores.now(),
    )
    return (await index.insert(entry)).to_api()


@api.route(
    "DELETE",
    "/task/<namespace>",
    name="deleteTask",
    title="Remove Task from Index",
    scopes="index:delete-task:<namespace>",
)
async def delete_task(call: IndexCall) -> dict[str, Any]:
    """Remove the entry at the path `namespace` (nothing there is not an error). The namespaces above it stay
    until they expire."""
    await call.authorize()
    await call.context.index.delete(call.params["namespace"])
    return {}


@api.route(
    "GET",
    "/task/<indexPath>/artifacts/<name>",
    name="findArtifactFromTask",
    title="Get Artifact From Indexed Task",
    scopes={"if": "private", "then": {"AllOf": ["queue:get-artifact:<name>"]}},
)
async def find_artifact_from_task(call: IndexCall) -> Reply:
    """303 to the artifact `name` of the latest run of the task indexed at `indexPath`. A `public/` artifact:
    to the Queue's getLatestArtifact URL, as Taskcluster answers, which anyone may follow. Any other: the caller
    needs `queue:get-artifact:<name>` (and for each artifact a link leads to), and is sent straight to the data,
    as getLatestArtifact would send it (so no signed Queue URL is needed); an error artifact answers 424."""
    name = call.params["name"]
    public = name.startswith(PUBLIC_PREFIX)
    await call.authorize(private=not public)
    entry = await call.context.index.find(call.params["indexPath"])
    if public:
        root = call.context.settings.public_root_url.rstrip("/")
        url = f"{root}/api/queue/v1/task/{entry.task_id}/artifacts/{urllib.parse.quote(name, safe='')}"
        return Reply(None, 303, {"location": url})
    chain, artifact = await call.context.artifact_reads.follow(entry.task_id, None, name)
    await call.require({"AllOf": [f"queue:get-artifact:{n}" for n in chain]})
    reply = await artifact_reply(call, artifact)
    # A redirect without a body, as Taskcluster's index answers: its clients take a JSON body for the answer.
    return Reply(None, 303, reply.headers) if reply.status == 303 else reply
