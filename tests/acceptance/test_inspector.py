"""The web inspector in a real browser (Debian's Chromium driven by Playwright) against a local host on Azurite,
with tasks run by the reference worker: a group goes from pending to completed on the page without a reload, a
task's page shows its runs and artifacts and its download link returns the bytes, a running task's live log grows
on the page, a failed task is shown failed, and a sign-in with wrong credentials shows a clear error.

The screenshots in docs/inspector/ are taken here when QUEUE_TEST_SCREENSHOTS=1 (so a test run leaves the docs as
they are): `QUEUE_TEST_SCREENSHOTS=1 make test PYTEST_ARGS=tests/acceptance/test_inspector.py`.
"""

from __future__ import annotations

import sys
import time

import httpx
import pytest
import taskcluster

from shared import __version__
from tests.acceptance.browsing import WAIT_MS, answer_dialog, needs_browser, shot, sign_in, wait_js
from tests.acceptance.conftest import QUICK_CLAIMS
from tests.acceptance.helpers import WorkerProcess, submit
from tests.conftest import ROOT_ACCESS_TOKEN, ROOT_CLIENT_ID, slugid, task_definition, task_queue_id, wait_for

PY = sys.executable
pytestmark = needs_browser


@pytest.fixture(scope="module")
def host(host_factory):
    return host_factory(claim_timeout=6, worker_info_interval=0, **QUICK_CLAIMS)


def group_task(queue, tq: str, group: str, name: str, command: str, **extra) -> str:
    task_id = slugid()
    queue.createTask(
        task_id,
        task_definition(
            taskQueueId=tq,
            taskGroupId=group,
            payload={"command": command, **extra},
            metadata={
                "name": name,
                "description": "inspector test",
                "owner": "tests@example.com",
                "source": "https://example.com/tests",
            },
        ),
    )
    return task_id


def test_a_group_goes_from_pending_to_completed_on_the_page_without_a_reload(host, page, tmp_path):
    queue = host.client()
    tq, group = task_queue_id(), slugid()
    # Each build runs 3 s, so the tasks are running for longer than the page's refresh period (2 s after each
    # refresh's end): with 1 s builds the whole running stretch (about 2.2 s) could fall between two refreshes.
    ids = [group_task(queue, tq, group, f"build {i}", f"echo building {i}; sleep 3") for i in range(5)]
    failing = group_task(queue, tq, group, "lint", "echo 'lint: 2 problems'; exit 2")
    page.goto(f"{host.root_url}/")  # the rootUrl leads to the inspector
    assert page.url.startswith(f"{host.root_url}/inspector/")
    page.goto(f"{host.root_url}/inspector/#/groups/{group}")
    page.wait_for_selector("#count-pending[data-count='6']", timeout=WAIT_MS)
    page.evaluate("window.__notReloaded = true")
    worker = WorkerProcess(host, tq, tmp_path, "--capacity", "3")
    try:
        page.wait_for_selector("#count-running:not([data-count='0'])", timeout=WAIT_MS)
        shot(page, "group-running")
        page.wait_for_selector("#count-completed[data-count='5']", timeout=WAIT_MS)
        page.wait_for_selector("#count-failed[data-count='1']", timeout=WAIT_MS)
    finally:
        worker.stop()
    assert page.evaluate("window.__notReloaded") is True  # updated live, not by a reload
    assert page.get_attribute(f"tr[data-task-id='{failing}']", "data-state") == "failed"
    assert page.inner_text(f"tr[data-task-id='{failing}'] .state").lower() == "failed"
    for task_id in ids:
        assert page.get_attribute(f"tr[data-task-id='{task_id}']", "data-state") == "completed"
    shot(page, "group")
    page.click("#count-failed")  # the state filter
    wait_js(page, "document.querySelectorAll('#group-tasks tbody tr').length === 1", timeout=WAIT_MS)
    assert page.get_attribute("#group-tasks tbody tr", "data-task-id") == failing


def test_large_groups_are_paged(host, page):
    queue = host.client()
    tq, group = task_queue_id(), slugid()
    for i in range(105):
        group_task(queue, tq, group, f"shard {i:03}", "true")
    page.goto(f"{host.root_url}/inspector/#/groups/{group}")
    page.wait_for_selector("#count-pending[data-count='105']", timeout=WAIT_MS)
    assert page.locator("#group-tasks tbody tr").count() == 100
    assert "page 1 of 2" in page.inner_text("#page-of")
    page.click("a[rel=next]")
    wait_js(page, "document.querySelectorAll('#group-tasks tbody tr').length === 5", timeout=WAIT_MS)
    assert "shard 104" in page.inner_text("#group-tasks")


def test_a_tasks_page_shows_runs_dependencies_and_artifacts_whose_links_download_the_bytes(host, page, tmp_path):
    queue = host.client()
    tq, group = task_queue_id(), slugid()
    first = group_task(queue, tq, group, "prepare", "echo prepared")
    task_id = slugid()
    queue.createTask(
        task_id,
        task_definition(
            taskQueueId=tq,
            taskGroupId=group,
            dependencies=[first],
            payload={
                "command": [PY, "-c", "open('report.txt', 'w').write('report: all good\\n')"],
                "artifacts": [{"name": "public/report.txt", "path": "report.txt", "contentType": "text/plain"}],
            },
            metadata={
                "name": "report",
                "description": "writes a report",
                "owner": "tests@example.com",
                "source": "https://example.com/tests",
            },
        ),
    )
    worker = WorkerProcess(host, tq, tmp_path)
    try:
        wait_for(lambda: queue.status(task_id)["status"]["state"] == "completed", timeout=30)
    finally:
        worker.stop()
    page.goto(f"{host.root_url}/inspector/#/tasks/{task_id}")
    page.wait_for_selector("article.run[data-state='completed'] li[data-artifact='public/report.txt']", timeout=WAIT_MS)
    run = page.inner_text("article.run[data-run-id='0']")
    assert "scheduled" in run and "completed" in run and "wg/ref-1" in run  # the reasons and the worker
    assert page.locator("li[data-artifact='public/logs/live.log'] a.view-log").count() == 1
    assert "prepare" in page.inner_text("#depends-on")
    href = page.get_attribute("li[data-artifact='public/report.txt'] a.download", "href")
    # Followed by the browser itself (the queue's redirect to Blob Storage, across origins).
    assert page.evaluate("href => fetch(href).then(r => r.text())", href) == "report: all good\n"
    assert httpx.get(href, follow_redirects=True).text == "report: all good\n"
    shot(page, "task")
    page.goto(f"{host.root_url}/inspector/#/tasks/{first}")
    page.wait_for_selector(f"#dependents a[href='#/tasks/{task_id}']", timeout=WAIT_MS)


def test_a_running_tasks_live_log_grows_on_the_page(host, page, tmp_path):
    queue = host.client()
    tq = task_queue_id()
    task_id = submit(
        queue,
        tq,
        {"command": [PY, "-u", "-c", "import time\nfor i in range(16):\n    print('step', i)\n    time.sleep(0.5)"]},
    )
    worker = WorkerProcess(host, tq, tmp_path)
    try:
        wait_for(lambda: queue.status(task_id)["status"]["state"] == "running", timeout=30)
        page.goto(f"{host.root_url}/inspector/#/tasks/{task_id}/runs/0/logs/public%2Flogs%2Flive.log")
        wait_js(page, "document.querySelector('#log').textContent.includes('step 3')", timeout=WAIT_MS)
        early = page.inner_text("#log")
        assert "step 15" not in early  # seen while the command was still printing
        assert page.inner_text("#run-state").lower() == "running"
        page.evaluate("window.__notReloaded = true")
        shot(page, "live-log")
        wait_js(page, "document.querySelector('#log').textContent.includes('exit code 0')", timeout=WAIT_MS)
    finally:
        worker.stop()
    final = page.inner_text("#log")
    assert final.startswith(early.rstrip("\n").rsplit("\n", 1)[0])  # appended to, not replaced
    assert "step 15" in final and page.evaluate("window.__notReloaded") is True
    wait_js(page, "document.querySelector('#log-status').textContent.includes('the whole log')", timeout=WAIT_MS)


def test_a_sign_in_lasts_across_tabs_until_it_ends_or_is_signed_out_everywhere(host, page):
    """Issue #85: a sign-in lasted one tab, so a Ctrl+clicked failure opened anonymous, Rerun disabled. It is the
    browser's now (localStorage), for a working day: a new tab opens signed in, signing out in one tab signs out
    the others, and an expired sign-in is forgotten."""
    queue = host.client()
    task_id = submit(queue, task_queue_id(), {"command": "true"})
    page.goto(f"{host.root_url}/inspector/#/tasks/{task_id}")
    sign_in(page)
    page.wait_for_selector("#signed-in-as", timeout=WAIT_MS)
    assert "until" in page.inner_text("#signed-in-until")
    other = page.context.new_page()  # as a Ctrl+click opens it
    other.goto(f"{host.root_url}/inspector/#/tasks/{task_id}")
    other.wait_for_selector("#signed-in-as", timeout=WAIT_MS)
    other.wait_for_selector("#cancel-task:not([disabled])", timeout=WAIT_MS)
    page.click("#sign-out")
    other.wait_for_selector("#sign-in", timeout=WAIT_MS)  # heard from the other tab, without a reload
    other.wait_for_selector("#cancel-task[disabled]", timeout=WAIT_MS)
    sign_in(other)
    page.wait_for_selector("#signed-in-as", timeout=WAIT_MS)
    other.evaluate(
        "() => { const kept = JSON.parse(localStorage.getItem('tc-inspector-credentials'));"
        " kept.expires = Date.now() - 1000; localStorage.setItem('tc-inspector-credentials', JSON.stringify(kept)); }"
    )
    other.reload()
    other.wait_for_selector("#sign-in", timeout=WAIT_MS)
    assert other.evaluate("localStorage.getItem('tc-inspector-credentials')") is None
    other.close()


def test_sign_in_with_wrong_credentials_shows_a_clear_error_and_right_ones_enable_the_buttons(host, page):
    queue = host.client()
    task_id = submit(queue, task_queue_id(), {"command": "true"})
    page.goto(f"{host.root_url}/inspector/#/tasks/{task_id}")
    page.wait_for_selector("#cancel-task", timeout=WAIT_MS)
    assert page.is_disabled("#cancel-task")  # the anonymous scopes may not cancel
    sign_in(page, token="not-the-token")
    page.wait_for_selector("#sign-in-error:not(:empty)", timeout=WAIT_MS)
    error = page.inner_text("#sign-in-error")
    assert "Sign-in failed" in error and "accessToken" in error
    assert page.locator("#signed-in-as").count() == 0
    shot(page, "sign-in-error")
    sign_in(page)
    page.wait_for_selector("#signed-in-as", timeout=WAIT_MS)
    assert page.inner_text("#signed-in-as") == ROOT_CLIENT_ID
    page.wait_for_selector("#cancel-task:not([disabled])", timeout=WAIT_MS)
    asked = answer_dialog(page, lambda: page.click("#cancel-task"), accept=False)  # dismissed: nothing changes
    assert "Cancel task" in asked and queue.status(task_id)["status"]["state"] == "pending"
    answer_dialog(page, lambda: page.click("#cancel-task"), accept=True)
    page.wait_for_selector("#action-feedback .message-ok", timeout=WAIT_MS)
    assert queue.status(task_id)["status"]["state"] == "exception"
    page.wait_for_selector("#rerun-task:not([disabled])", timeout=WAIT_MS)
    page.click("#rerun-task")
    wait_for(lambda: queue.status(task_id)["status"]["state"] == "pending", timeout=10)
    page.wait_for_selector("#action-feedback .message-ok", timeout=WAIT_MS)
    assert "now pending" in page.inner_text("#action-feedback")
    queue.cancelTask(task_id)  # elsewhere: the feedback must not say "pending" beside it
    page.wait_for_selector("#action-feedback:empty", state="attached", timeout=WAIT_MS)


def test_the_task_queue_view_shows_pending_and_claimed_tasks_and_workers(host, page, tmp_path):
    queue = host.client()
    tq = task_queue_id()
    running = submit(queue, tq, {"command": ["sleep", "20"]})
    worker = WorkerProcess(host, tq, tmp_path, "--capacity", "1")
    try:
        wait_for(lambda: queue.status(running)["status"]["state"] == "running", timeout=30)
        waiting = submit(queue, tq, {"command": "true"})
        page.goto(f"{host.root_url}/inspector/#/queues/{tq}")
        page.wait_for_selector("#pending .quiet, #pending table", timeout=WAIT_MS)
        assert "Sign in" in page.inner_text("#pending")  # the anonymous scopes may not list them
        sign_in(page)
        page.wait_for_selector(f"#pending a[href='#/tasks/{waiting}']", timeout=WAIT_MS)
        page.wait_for_selector(f"#claimed a[href='#/tasks/{running}']", timeout=WAIT_MS)
        page.wait_for_selector("#workers a[href*='/wg/ref-1']", timeout=WAIT_MS)
        assert page.inner_text("#pending-count") == "1" and page.inner_text("#claimed-count") == "1"
        shot(page, "task-queue")
        page.click("#workers a[href*='/wg/ref-1']")
        page.wait_for_selector(f"#worker a[href='#/tasks/{running}']", timeout=WAIT_MS)
        assert page.inner_text("#quarantine") == "no"
        shot(page, "worker")
    finally:
        worker.stop()


def test_the_task_queue_view_lists_pending_tasks_oldest_first(host, page):
    """The queue lists a task queue's pending tasks in its index's order (by taskId): the view shows them by when
    they became pending (issue #65: "oldest first" was not in time order)."""
    queue = host.client()
    tq = task_queue_id()
    created = []
    for _ in range(6):
        created.append(submit(queue, tq, {"command": "true"}))
        time.sleep(0.05)  # each pending a moment after the one before
    listed = [t["taskId"] for t in queue.listPendingTasks(tq)["tasks"]]
    assert sorted(listed) == sorted(created)
    page.goto(f"{host.root_url}/inspector/#/queues/{tq}")
    page.wait_for_selector("#pending .quiet, #pending table", timeout=WAIT_MS)
    sign_in(page)
    page.wait_for_selector(f"#pending a[href='#/tasks/{created[-1]}']", timeout=WAIT_MS)
    shown = page.eval_on_selector_all("#pending tbody a", "links => links.map(a => a.hash.split('/').pop())")
    assert shown == created


def test_task_content_is_shown_as_text_never_as_markup(host, page):
    queue = host.client()
    group = slugid()
    task_id = group_task(queue, task_queue_id(), group, "<img src=x onerror=window.__owned=1>", "true")
    page.goto(f"{host.root_url}/inspector/#/groups/{group}")
    page.wait_for_selector(f"tr[data-task-id='{task_id}']", timeout=WAIT_MS)
    assert "<img src=x" in page.inner_text(f"tr[data-task-id='{task_id}']")
    assert page.evaluate("window.__owned") is None
    assert page.locator("#group-tasks img").count() == 0


def test_the_index_is_browsed_by_namespace_and_opens_the_indexed_task(host, page):
    queue = host.client()
    space = "insp" + slugid().lower().replace("-", "x").replace("_", "y")
    task_id = slugid()
    note = "<img src=x onerror=window.__owned=1>"
    definition = task_definition(
        routes=[f"index.{space}.builds.<b>linux64"], extra={"index": {"rank": 42, "data": {"note": note}}}
    )
    queue.createTask(task_id, definition)
    [claim] = wait_for(
        lambda: queue.claimWork(definition["taskQueueId"], {"tasks": 1, "workerGroup": "g", "workerId": "w"})["tasks"]
    )
    queue.reportCompleted(claim["status"]["taskId"], "0")
    index = taskcluster.Index({"rootUrl": host.root_url, "maxRetries": 0})
    wait_for(lambda: index.listTasks(f"{space}.builds")["tasks"])
    page.goto(f"{host.root_url}/inspector/")
    page.click("#browse-index", timeout=WAIT_MS)
    page.click(f"#index-namespaces a:text-is('{space}')", timeout=WAIT_MS)  # anonymous callers may list
    page.click("#index-namespaces a:text-is('builds')", timeout=WAIT_MS)
    page.wait_for_selector(f"#index-tasks a:text-is('{task_id}')", timeout=WAIT_MS)
    row = page.inner_text("#index-tasks tbody tr")
    assert "<b>linux64" in row and "42" in row and "<img src=x" in row  # shown as text, never as markup
    assert page.evaluate("window.__owned") is None and page.locator("#index-tasks b, #index-tasks img").count() == 0
    shot(page, "index")
    page.click(f"#index-tasks a:text-is('{task_id}')")
    wait_js(page, f"window.location.hash === '#/tasks/{task_id}'")
    page.wait_for_selector("text=completed", timeout=WAIT_MS)


def test_the_footer_names_the_running_release(host, page):
    page.goto(f"{host.root_url}/inspector/")
    # wait_js, not wait_for_function: Playwright polls the latter with eval, which the page's CSP refuses (the
    # footer filled before the first check hid that; a slower page failed with EvalError).
    wait_js(page, "document.getElementById('about').textContent.includes('tc-azure-queue')")
    release = httpx.get(f"{host.root_url}/__version__").json()
    assert page.inner_text("#about") == f"tc-azure-queue {__version__} · commit {release['commit'][:12]}"


def test_the_inspector_files_are_served_with_a_content_security_policy(host):
    index = httpx.get(f"{host.root_url}/inspector/")
    assert index.status_code == 200 and index.headers["content-type"].startswith("text/html")
    assert "default-src 'self'" in index.headers["content-security-policy"]
    again = httpx.get(f"{host.root_url}/inspector/", headers={"if-none-match": index.headers["etag"]})
    assert again.status_code == 304
    script = httpx.get(f"{host.root_url}/inspector/inspector.js")
    assert script.headers["content-type"].startswith("text/javascript")
    missing = httpx.get(f"{host.root_url}/inspector/../shared/settings.py")
    assert missing.status_code == 404 and missing.json()["code"] == "ResourceNotFound"
    assert httpx.get(f"{host.root_url}/", follow_redirects=False).headers["location"] == "/inspector/"


def test_current_scopes_answers_the_official_auth_client(host):
    import taskcluster

    auth = taskcluster.Auth(
        {"rootUrl": host.root_url, "credentials": {"clientId": ROOT_CLIENT_ID, "accessToken": ROOT_ACCESS_TOKEN}}
    )
    assert "*" in auth.currentScopes()["scopes"]
    anonymous = taskcluster.Auth({"rootUrl": host.root_url}).currentScopes()["scopes"]
    assert "queue:get-task:*" in anonymous and "*" not in anonymous
    wrong = taskcluster.Auth(
        {"rootUrl": host.root_url, "maxRetries": 0, "credentials": {"clientId": ROOT_CLIENT_ID, "accessToken": "wrong"}}
    )
    with pytest.raises(taskcluster.exceptions.TaskclusterAuthFailure):
        wrong.currentScopes()


def test_the_task_page_shows_the_payload_readably_with_copy_buttons(host, page):
    """Issue #65: the command a task runs as shell lines, its image, environment and time limit, and Copy buttons
    for the command, the taskId and the definition."""
    queue = host.client()
    task_id = slugid()
    payload = {
        "image": "ubuntu:24.04",
        "command": ["/bin/bash", "-c", "echo 'hello' && make check"],
        "env": {"MOZ_AUTOMATION": "1"},
        "maxRunTime": 600,
        "artifacts": {"public/build": {"type": "directory", "path": "/builds"}},
    }
    queue.createTask(task_id, task_definition(taskQueueId=task_queue_id(), payload=payload))
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=host.root_url)
    page.goto(f"{host.root_url}/inspector/#/tasks/{task_id}")
    page.wait_for_selector("#payload-command", timeout=WAIT_MS)
    command = "/bin/bash -c 'echo '\\''hello'\\'' && make check'"
    assert page.inner_text("#payload-command") == command
    facts = page.inner_text("#payload")
    assert "ubuntu:24.04" in facts and "MOZ_AUTOMATION" in facts and "600 s" in facts
    assert "Other payload fields" in facts  # artifacts: as JSON, folded
    shot(page, "task-payload")
    page.click("#copy-command")
    page.wait_for_selector("#copy-command:has-text('Copied')", timeout=WAIT_MS)
    assert page.evaluate("navigator.clipboard.readText()") == command
    page.click("#copy-task-id")
    page.wait_for_selector("#copy-task-id:has-text('Copied')", timeout=WAIT_MS)
    assert page.evaluate("navigator.clipboard.readText()") == task_id
    page.click("#copy-definition")
    page.wait_for_selector("#copy-definition:has-text('Copied')", timeout=WAIT_MS)
    copied = page.evaluate("async () => JSON.parse(await navigator.clipboard.readText())")
    assert copied["payload"]["env"] == {"MOZ_AUTOMATION": "1"} and copied["taskQueueId"]
