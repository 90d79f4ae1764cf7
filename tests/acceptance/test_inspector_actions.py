"""The decision task's in-tree actions on a task's page (issue #85), in Chromium: a push whose decision task wrote
`public/actions.json` as taskgraph writes it for Firefox CI; the actions that apply to a task by its tags are
offered (an in-tree Retrigger instead of the page's own), one is triggered through the hooks service this queue
forwards to (here a stand-in that records what it is sent), its hookPayload rendered with JSON-e in Taskcluster's
UI's context, and the action task it created is linked."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from local_host.azurite import free_port
from tests.acceptance.browsing import WAIT_MS, answer_dialog, claimed_task, in_days, needs_browser, sign_in
from tests.acceptance.conftest import QUICK_CLAIMS
from tests.conftest import slugid, task_definition, task_queue_id, wait_for

pytestmark = needs_browser

CREATED = "AcTionTaskCreatedByHoA"  # the taskId the stand-in says its hook created


class Hooks:
    """The hooks service as far as triggerHook goes: records each trigger and answers as Taskcluster's does."""

    def __init__(self) -> None:
        self.triggered: list[dict[str, Any]] = []
        hooks = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                hooks.triggered.append(
                    {
                        "path": self.path,
                        "body": json.loads(body),
                        "signed": "Hawk " in self.headers.get("authorization", ""),
                    }
                )
                answer = json.dumps({"taskId": CREATED, "status": {"taskId": CREATED}}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture(scope="module")
def hooks() -> Iterator[Hooks]:
    served = Hooks()
    yield served
    served.server.shutdown()
    served.server.server_close()


@pytest.fixture(scope="module")
def host(host_factory, hooks):
    return host_factory(**QUICK_CLAIMS, forward_services=f"hooks={hooks.url}")


def actions_file(decision: str) -> dict[str, Any]:
    """actions.json as taskgraph writes it (version 1): variables, and hook actions with contexts and schemas."""
    hook = {"kind": "hook", "hookGroupId": "project-gecko", "hookId": "in-tree-action-3-generic/c0ffee"}
    return {
        "version": 1,
        "variables": {"head_rev": "0123456789abcdef", "decision_task": decision},
        "actions": [
            {
                **hook,
                "name": "retrigger",
                "title": "Retrigger",
                "description": "Create a clone of the task.",
                "order": 1,
                "context": [{}],
                "schema": {"type": "object", "properties": {"times": {"type": "integer", "default": 1}}},
                "hookPayload": {
                    "decision": {"rev": {"$eval": "head_rev"}, "action": {"name": "retrigger"}},
                    "user": {
                        "input": {"$eval": "input"},
                        "taskId": {"$eval": "taskId"},
                        "group": {"$eval": "taskGroupId"},
                    },
                },
            },
            {**hook, "name": "build-only", "title": "Build only", "context": [{"kind": "build"}], "hookPayload": {}},
            {
                **hook,
                "name": "backfill",
                "title": "Backfill",
                "order": 2,
                "context": [{"kind": "test"}],
                "schema": {"type": "object", "properties": {"depth": {"type": "integer"}}, "required": ["depth"]},
                "hookPayload": {},
            },
            {**hook, "name": "group-action", "title": "Group action", "context": [], "hookPayload": {}},
        ],
    }


def test_a_tasks_in_tree_actions_are_offered_and_triggered_through_its_hooks(host, hooks, page):
    queue = host.client()
    group, tq = slugid(), task_queue_id()  # the decision task: the task the group is named after
    queue.createTask(group, task_definition(taskGroupId=group, taskQueueId=tq))
    wait_for(lambda: queue.claimWork(tq, {"tasks": 1, "workerGroup": "wg", "workerId": "w1"})["tasks"], timeout=15)
    created = queue.createArtifact(
        group,
        "0",
        "public/actions.json",
        {"storageType": "s3", "expires": in_days(), "contentType": "application/json"},
    )
    put = httpx.put(
        created["putUrl"],
        content=json.dumps(actions_file(group)).encode(),
        headers={"content-type": "application/json"},
    )
    assert put.status_code == 200
    queue.reportCompleted(group, "0")
    test = claimed_task(queue, taskGroupId=group, tags={"kind": "test"})
    queue.reportFailed(test, "0")
    page.goto(f"{host.root_url}/inspector/#/tasks/{test}")
    sign_in(page)
    button = page.locator("button.in-tree-action[data-action='retrigger']")
    button.wait_for(timeout=WAIT_MS)
    page.wait_for_selector("button.in-tree-action[data-action='retrigger']:not([disabled])", timeout=WAIT_MS)
    offered = page.evaluate("[...document.querySelectorAll('button.in-tree-action')].map(b => b.dataset.action)")
    assert offered == ["retrigger", "backfill"]  # by order; not the build-only one, not the group's
    assert page.is_disabled("button.in-tree-action[data-action='backfill']")  # its input has no default
    assert page.locator("#retrigger-task").count() == 0  # the in-tree Retrigger replaces the page's own
    answer_dialog(page, button.click, accept=True)
    page.wait_for_selector("#action-task", timeout=WAIT_MS)
    assert page.inner_text("#action-task") == CREATED
    [trigger] = hooks.triggered
    assert trigger["path"] == "/api/hooks/v1/hooks/project-gecko/in-tree-action-3-generic%2Fc0ffee/trigger"
    assert trigger["signed"]
    assert trigger["body"] == {
        "decision": {"rev": "0123456789abcdef", "action": {"name": "retrigger"}},
        "user": {"input": {"times": 1}, "taskId": test, "group": group},
    }
