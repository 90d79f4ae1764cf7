"""The inspector reached the ways people reach it, in Chromium: Taskcluster's UI addresses (as the official
`taskcluster-urls` ui() builds them, the ones Taskcluster's tools print) served by the queue and opened in the
inspector, a log's line anchor kept; the Open box taking any id or a pasted URL of either UI; a title per view; an
axe-core check of every view (no serious or critical violation); and 400-px screens without sideways scrolling."""

from __future__ import annotations

import urllib.parse

import httpx
import pytest
import taskcluster
import taskcluster_urls
from axe_playwright_python.sync_playwright import Axe
from taskcluster.client import createApiClient

from tests.acceptance.browsing import (
    LOG,
    WAIT_MS,
    claimed_task,
    finished_task_with_log,
    in_days,
    needs_browser,
    sign_in,
    wait_js,
)
from tests.conftest import slugid, task_definition, task_queue_id, wait_for

pytestmark = needs_browser


@pytest.fixture(scope="module")
def sample(host):
    """A group with a completed task (with a log, indexed) and a pending one, in one task queue."""
    queue = host.client()
    tq, group = task_queue_id(), slugid()
    space = "access" + slugid().lower().replace("-", "x").replace("_", "y")
    done = finished_task_with_log(
        queue, "one\ntwo\nthree\n", taskQueueId=tq, taskGroupId=group, routes=[f"index.{space}.latest"]
    )
    pending = slugid()
    queue.createTask(pending, task_definition(taskQueueId=tq, taskGroupId=group))
    failed = claimed_task(queue, taskGroupId=group)  # a task queue of its own: the pending task is not taken
    log = (  # a run-task timestamp and a red error line: their colours on a selected line count for contrast
        "::group::Build\n[task 2026-11-28T10:41:07.512Z] compiling\n"
        "\x1b[31merror: undefined reference to `main'\x1b[0m\n::endgroup::\nexit code 2 after 1 s\n"
    )
    created = queue.createArtifact(
        failed, "0", LOG, {"storageType": "azure", "expires": in_days(), "contentType": "text/plain; charset=utf-8"}
    )
    assert (
        httpx.put(created["putUrl"], content=log.encode(), headers={"x-ms-blob-type": "BlockBlob"}).status_code == 201
    )
    queue.reportFailed(failed, "0")
    blocked = slugid()
    queue.createTask(blocked, task_definition(taskQueueId=tq, taskGroupId=group, dependencies=[failed]))
    index = taskcluster.Index({"rootUrl": host.root_url})
    wait_for(lambda: index.listTasks(space)["tasks"], timeout=15)
    return {"tq": tq, "group": group, "done": done, "pending": pending, "failed": failed, "space": space}


def hash_of(page) -> str:
    return urllib.parse.unquote(page.evaluate("location.hash"))


def test_taskclusters_ui_addresses_open_the_same_thing_in_the_inspector(host, page, sample):
    done, group, tq = sample["done"], sample["group"], sample["tq"]
    ui = lambda path: taskcluster_urls.ui(host.root_url, path)  # noqa: E731
    answer = httpx.get(ui(f"tasks/{done}"))
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/html")
    assert "default-src 'self'" in answer.headers["content-security-policy"] and done not in answer.text
    cases = [
        (f"tasks/{done}", f"#/tasks/{done}"),
        (f"tasks/{done}/runs/0", f"#/tasks/{done}"),
        (f"tasks/groups/{group}", f"#/groups/{group}"),
        (f"tasks/{done}/runs/0/logs/{LOG}#L2", f"#/tasks/{done}/runs/0/logs/{LOG}#L2"),
        (f"tasks/{done}/runs/0/logs/live/{LOG}", f"#/tasks/{done}/runs/0/logs/{LOG}"),
        (f"provisioners/{tq.replace('/', '/worker-types/')}", f"#/queues/{tq}"),
        (f"worker-manager/{urllib.parse.quote(tq, safe='')}", f"#/queues/{tq}"),
        (f"tasks/index/{sample['space']}/latest", f"#/index/{sample['space']}"),
        (f"task-group-inspector/#/{group}", f"#/groups/{group}"),
    ]
    for path, expected in cases:
        page.goto(ui(path))
        wait_js(page, "location.pathname.endsWith('/inspector/')")
        assert hash_of(page) == expected, path
    page.goto(ui(f"tasks/{done}/runs/0/logs/{LOG}#L2"))
    page.wait_for_selector("#log .line.sel[data-n='2']", timeout=WAIT_MS)  # the line anchor kept
    # An artifact's address leads to the artifact, as Taskcluster's UI does.
    got = httpx.get(ui(f"tasks/{done}/runs/0/{LOG}"))
    assert got.status_code == 200  # the page; the browser then reads the artifact
    page.goto(ui(f"tasks/{done}/runs/0/{LOG}"))
    wait_js(page, "document.body.innerText.includes('three')")


def test_the_open_box_takes_any_id_or_a_pasted_address(host, page, sample):
    done, group = sample["done"], sample["group"]
    page.goto(f"{host.root_url}/inspector/")
    page.wait_for_selector("#goto-id")

    def open_(value: str) -> None:
        page.fill("#goto-id", value)
        page.press("#goto-id", "Enter")

    open_(group)  # a taskGroupId that is no task's id: the group
    wait_js(page, f"location.hash === '#/groups/{group}'")
    open_(done)
    wait_js(page, f"location.hash === '#/tasks/{done}'")
    open_(f"https://firefox-ci-tc.services.mozilla.com/tasks/groups/{group}")
    wait_js(page, f"location.hash === '#/groups/{group}'")
    open_(f"{host.root_url}/inspector/#/tasks/{done}")
    wait_js(page, f"location.hash === '#/tasks/{done}'")
    open_(f"https://treeherder.mozilla.org/jobs?repo=try&selectedTaskRun={sample['pending']}-0")
    wait_js(page, f"location.hash === '#/tasks/{sample['pending']}'")
    open_(f"{host.root_url}/inspector/#/tasks/{done}")
    wait_js(page, f"location.hash === '#/tasks/{done}'")
    open_(f"https://treeherder.mozilla.org/jobs?repo=try&selectedTaskRun={sample['pending']}.0")  # Treeherder today
    wait_js(page, f"location.hash === '#/tasks/{sample['pending']}'")
    open_(sample["tq"])
    wait_js(page, f"location.hash === '#/queues/{sample['tq']}'")
    open_(f"{sample['space']}.latest")  # an index path: the task indexed there
    wait_js(page, f"location.hash === '#/tasks/{done}'")
    open_(f"{host.root_url}/inspector/#/groups/{group}")
    wait_js(page, f"location.hash === '#/groups/{group}'")
    open_(f"index.{sample['space']}.latest")  # the route as the task definition lists it
    wait_js(page, f"location.hash === '#/tasks/{done}'")
    missing = slugid()
    open_(missing)
    page.wait_for_selector(f"#notice:has-text('There is no task and no task group {missing}')", timeout=WAIT_MS)
    open_("not an id at all")
    page.wait_for_selector("#notice:has-text('is neither a taskId')", timeout=WAIT_MS)


def test_the_start_page_lists_the_task_queues_with_work_first_with_their_counts(host, page, sample):
    queue = host.client()
    busy = task_queue_id()
    for _ in range(3):
        queue.createTask(slugid(), task_definition(taskQueueId=busy))
    # A worker took one and left: the queue is known (workers make it so, as in Taskcluster), 2 wait, 1 is claimed.
    wait_for(lambda: queue.claimWork(busy, {"tasks": 1, "workerGroup": "wg", "workerId": "gone"})["tasks"])
    page.goto(f"{host.root_url}/inspector/")
    page.wait_for_selector("#task-queues:has-text('queue:list-task-queues')", timeout=WAIT_MS)
    sign_in(page)
    row = f"#busy-queues tr[data-task-queue='{busy}']"
    page.wait_for_selector(row, timeout=WAIT_MS)
    cells = page.locator(f"{row} td").all_inner_texts()
    provisioner, worker_type = busy.split("/")
    assert cells[:4] == [provisioner, worker_type, "2", "1"]
    page.click(f"{row} a")
    wait_js(page, f"location.hash === '#/queues/{busy}'")


def test_the_start_page_finds_the_recent_pushes_and_a_task_queue_no_worker_ever_polled(host, page):
    """Issue #65: 2,000 pending tasks in a task queue no worker asked for work from were nowhere on the start page,
    nor were the recent task groups. listTaskQueues does not list the queue (as in Taskcluster); listSeenTaskQueues,
    this queue's extension, does, and the start page counts it; listRecentTaskGroups lists the push."""
    queue = host.client()
    unpolled, push = task_queue_id(), slugid()
    for _ in range(2):
        queue.createTask(slugid(), task_definition(taskQueueId=unpolled, taskGroupId=push))
    listed = [q["taskQueueId"] for q in queue.listTaskQueues()["taskQueues"]]
    assert unpolled not in listed
    wait_for(lambda: unpolled in [q["taskQueueId"] for q in seen_task_queues(host)], timeout=10)
    page.goto(f"{host.root_url}/inspector/")
    sign_in(page)
    row = f"#busy-queues tr[data-task-queue='{unpolled}']"
    page.wait_for_selector(row, timeout=WAIT_MS)
    cells = page.locator(f"{row} td").all_inner_texts()
    assert cells[2:] == ["2", "0", "no worker has asked for work"]
    # The push is among the recent task groups (listRecentTaskGroups), running, a link to its page.
    group_row = f"#recent-groups-table tr[data-group='{push}']"
    page.wait_for_selector(group_row, timeout=WAIT_MS)
    assert page.get_attribute(group_row, "data-worst") == "running"
    assert page.inner_text(f"{group_row} .push-counts").startswith("running · 2 unfinished")
    page.click(f"{group_row} a")
    wait_js(page, f"location.hash === '#/groups/{push}'")


def seen_task_queues(host) -> list[dict[str, str]]:
    served = createApiClient("Served", {"reference": httpx.get(f"{host.root_url}/references/queue/v1/api.json").json()})
    client = served({"rootUrl": host.root_url, "credentials": host.client().options["credentials"], "maxRetries": 0})
    return list(client.listSeenTaskQueues()["taskQueues"])


def views(host, sample) -> list[tuple[str, str, str]]:
    """(address, a selector shown once the view is loaded, what its title starts with)"""
    base = f"{host.root_url}/inspector/#"
    return [
        (f"{base}/", "#browse-index", "Queue inspector"),
        (f"{base}/groups/{sample['group']}", f"tr[data-task-id='{sample['failed']}'] .why-line", "Task group"),
        (f"{base}/tasks/{sample['failed']}", "#exit-code", "test task (failed)"),
        (f"{base}/tasks/{sample['failed']}/runs/0/logs/{LOG.replace('/', '%2F')}", "#log .section-error", "live.log"),
        # A log opened at its error line (View log's address): the selected line's contrast counts.
        (f"{base}/tasks/{sample['failed']}/runs/0/logs/{LOG.replace('/', '%2F')}#L2-L3", "#log .line.sel", "live.log"),
        (
            f"{base}/tasks/{sample['done']}",
            "article.run[data-state='completed'] li[data-artifact]",
            "test task (completed)",
        ),
        (f"{base}/tasks/{sample['done']}/runs/0/logs/{LOG.replace('/', '%2F')}", "#log .line[data-n='3']", "live.log"),
        (f"{base}/tasks/{sample['pending']}", "#cancel-task", "test task (pending)"),
        (f"{base}/queues/{sample['tq']}", "#pending", "Task queue"),
        (f"{base}/workers/{sample['tq']}/wg/w1", "#worker:not(:has-text('Loading'))", "Worker wg/w1"),
        (f"{base}/index/{sample['space']}", "#index-tasks table", f"Index {sample['space']}"),
        (f"{base}/tasks/not-a-task-id", "text=Not a taskId", "Task not-a-task-id"),
        (f"{base}/nowhere", "text=Not found", "Not found"),
    ]


def serious_violations(axe: Axe, page) -> list[tuple[str, str, list[str]]]:
    return [
        (v["id"], v["impact"], [n["target"] for n in v["nodes"]][:3])
        for v in axe.run(page).response["violations"]
        if v["impact"] in ("serious", "critical")
    ]


def test_every_view_has_its_title(host, page, sample):
    titles = set()
    for address, loaded, title in views(host, sample):
        page.goto(address)
        page.wait_for_selector(loaded, timeout=WAIT_MS)
        wait_js(page, f"document.title.startsWith({title!r})")
        titles.add(page.title())
    assert len(titles) == len(views(host, sample)) - 2  # each view names its tab (the three logs share a name)


@pytest.mark.parametrize("width", [1280, 800])
@pytest.mark.parametrize("signed_in", [False, True], ids=["anonymous", "signed-in"])
def test_no_view_has_a_serious_accessibility_violation(browser, host, sample, width, signed_in):
    """axe-core on every view (a log opened at a line too), at 1280 and 800 px, anonymous and signed in (the
    action buttons enabled); the group's graph open."""
    context = browser.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    axe = Axe()
    try:
        if signed_in:
            page.goto(f"{host.root_url}/inspector/#/")
            sign_in(page)
            page.wait_for_selector("#signed-in-as", timeout=WAIT_MS)
        found = {}
        for address, loaded, _ in views(host, sample):
            page.goto(address)
            page.wait_for_selector(loaded, timeout=WAIT_MS)
            if "/groups/" in address:
                if signed_in:
                    page.wait_for_selector("#rerun-failed:not([disabled])", timeout=WAIT_MS)
                page.click("#graph-details summary")
                page.wait_for_selector("#graph-details canvas", timeout=WAIT_MS)
            serious = serious_violations(axe, page)
            if serious:
                found[address] = serious
        assert not found, found
    finally:
        context.close()


def test_at_400_px_nothing_scrolls_sideways_and_sign_in_is_on_screen(browser, host, sample):
    context = browser.new_context(viewport={"width": 400, "height": 800})
    page = context.new_page()
    try:
        for address, loaded, _ in views(host, sample):
            page.goto(address)
            page.wait_for_selector(loaded, timeout=WAIT_MS)
            width = page.evaluate("document.documentElement.scrollWidth")
            assert width <= 400, f"{address} is {width} px wide"
            box = page.locator("#sign-in button[type=submit]").bounding_box()
            assert box and box["x"] >= 0 and box["x"] + box["width"] <= 400, address
    finally:
        context.close()
