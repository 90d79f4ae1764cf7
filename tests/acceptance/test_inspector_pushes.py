"""Pushes you can find (issue #74), in Chromium: the start page lists each recent push with its decision task's
name, project, revision and owner and its failed / exception / unfinished counts, coloured by its worst task,
filtered and paged; the Open box takes a revision, a Treeherder push URL (through the Index template the deployment
sets when the push is not among the recent ones it can read) and a task's label."""

from __future__ import annotations

import secrets
from typing import Any

import pytest
import taskcluster

from tests.acceptance.browsing import WAIT_MS, answer_dialog, claimed_task, needs_browser, shot, sign_in, wait_js
from tests.acceptance.conftest import QUICK_CLAIMS
from tests.conftest import HostProcess, slugid, task_definition, task_queue_id, wait_for

pytestmark = needs_browser
TEMPLATE = "testpushes.v1.{project}.{revision}"
TREEHERDER = "https://treeherder.example.org"


@pytest.fixture(scope="module")
def host(host_factory) -> HostProcess:
    return host_factory(**QUICK_CLAIMS, inspector_push_index=TEMPLATE, inspector_treeherder_url=TREEHERDER)


def revision() -> str:
    return secrets.token_hex(20)


def named(name: str, **more: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "description": "push test", "owner": "dev@example.com", "source": "https://x/"},
        **more,
    }


def push(queue, project: str, rev: str, *, routes: list[str] | None = None, tq: str | None = None) -> str:
    """A decision task (its taskId its group's, a Treeherder route) that created one more task: a push."""
    decision = slugid()
    routes = [f"tc-treeherder.v2.{project}.{rev}.4242"] if routes is None else routes
    queue.createTask(
        decision,
        task_definition(
            taskGroupId=decision, taskQueueId=tq or task_queue_id(), routes=routes, **named("Decision Task")
        ),
    )
    queue.createTask(slugid(), task_definition(taskGroupId=decision, **named("build-linux64/opt")))
    return decision


def test_the_start_page_lists_pushes_by_project_and_revision_worst_first_filtered_and_paged(host, page):
    queue = host.client()
    project, red_rev = f"proj{secrets.token_hex(3)}", revision()
    greens = [push(queue, project, revision()) for _ in range(20)]
    red = push(queue, project, red_rev)
    failed = claimed_task(queue, taskGroupId=red, **named("build-win64/opt"))
    queue.reportFailed(failed, "0")
    cancelled = slugid()
    queue.createTask(cancelled, task_definition(taskGroupId=red, **named("test-win64/opt-1")))
    queue.cancelTask(cancelled)
    page.goto(f"{host.root_url}/inspector/")
    sign_in(page)
    row = f"#recent-groups-table tr[data-group='{red}']"
    page.wait_for_selector(f"{row}[data-worst='failed']", timeout=WAIT_MS)
    cells = page.locator(f"{row} td").all_inner_texts()
    assert cells[0].startswith("Decision Task") and red in cells[0]
    assert cells[1:4] == [project, red_rev[:12], "dev@example.com"]
    assert page.inner_text(f"{row} .push-counts") == "running · 2 unfinished · 1 failed · 1 exception"
    assert (
        page.get_attribute(f"{row} td:nth-child(3) a", "href") == f"{TREEHERDER}/jobs?repo={project}&revision={red_rev}"
    )
    shot(page, "pushes")
    page.fill("#push-filter", project)
    wait_js(page, "document.querySelectorAll('#recent-groups-table tbody tr').length === 20")
    assert page.inner_text("#push-list .pager").startswith("1\u201320 of 21")
    page.click("#pushes-next")
    wait_js(page, "document.querySelectorAll('#recent-groups-table tbody tr').length === 1")
    assert page.is_disabled("#pushes-next") and not page.is_disabled("#pushes-previous")
    page.fill("#push-filter", f"{project} {red_rev[:8]}")
    wait_js(page, "document.querySelectorAll('#recent-groups-table tbody tr').length === 1")
    assert page.get_attribute("#recent-groups-table tbody tr", "data-group") == red
    page.fill("#push-filter", "no-such-push-anywhere")
    page.wait_for_selector("#push-list p:has-text('No recent push matches')", timeout=WAIT_MS)
    assert greens[0] not in page.inner_text("#push-list")


def test_the_open_box_takes_a_revision_a_treeherder_push_and_a_label(host, page):
    queue = host.client()
    project, rev, indexed_rev = f"proj{secrets.token_hex(3)}", revision(), revision()
    found = push(queue, project, rev)
    # Indexed at the deployment's template only (no route the start page reads a revision from), once completed.
    tq = task_queue_id()
    path = TEMPLATE.format(project=project, revision=indexed_rev)
    indexed = push(queue, project, indexed_rev, routes=[f"index.{path}"], tq=tq)
    queue.claimWork(tq, {"tasks": 1, "workerGroup": "wg", "workerId": "w1"})
    queue.reportCompleted(indexed, "0")
    index = taskcluster.Index({"rootUrl": host.root_url})
    wait_for(lambda: _indexed(index, path), timeout=15)
    labelled = slugid()
    queue.createTask(labelled, task_definition(taskGroupId=found, **named("test-linux1804-64/opt-mochitest-1")))
    page.goto(f"{host.root_url}/inspector/")
    sign_in(page)
    page.wait_for_selector(f"#recent-groups-table tr[data-group='{found}']", timeout=WAIT_MS)

    def open_(value: str) -> None:
        page.fill("#goto-id", value)
        page.press("#goto-id", "Enter")

    open_(rev[:12])
    wait_js(page, f"location.hash === '#/groups/{found}'")
    open_(f"https://treeherder.mozilla.org/jobs?repo={project}&revision={rev}")
    wait_js(page, f"location.hash === '#/groups/{found}'")
    open_(f"https://treeherder.mozilla.org/jobs?repo={project}&revision={indexed_rev}")
    wait_js(page, f"location.hash === '#/groups/{indexed}'")
    open_("test-linux1804-64/opt-mochitest-1")  # reads as a task queue; no worker ever asked for it: a label
    wait_js(page, f"location.hash === '#/tasks/{labelled}'")
    open_("test-linux1804-64/opt-mochitest-999")
    page.wait_for_selector("#notice .message-error:has-text('no task labelled')", timeout=WAIT_MS)
    open_(revision())
    page.wait_for_selector("#notice .message-error:has-text('No push of revision')", timeout=WAIT_MS)


def _indexed(index, path: str) -> bool:
    try:
        return bool(index.findTask(path))
    except taskcluster.exceptions.TaskclusterRestFailure:
        return False


def test_a_retrigger_runs_a_copy_of_the_task_beside_it(host, page):
    """A sheriff's retrigger of an intermittent failure: a new task, the same definition in the same group, its
    dates moved to now and tagged with the task it copies; the failed one stays as it is."""
    queue = host.client()
    group = slugid()
    build = claimed_task(queue, taskGroupId=group, **named("build-linux64/opt"))
    queue.reportCompleted(build, "0")
    flaky = claimed_task(queue, taskGroupId=group, dependencies=[build], **named("test-linux64/opt-xpcshell-3"))
    queue.reportFailed(flaky, "0")
    page.goto(f"{host.root_url}/inspector/#/tasks/{flaky}")
    page.wait_for_selector("#retrigger-task[disabled]", timeout=WAIT_MS)  # anonymous: createTask's scopes lacking
    sign_in(page)
    page.wait_for_selector("#retrigger-task:not([disabled])", timeout=WAIT_MS)
    answer_dialog(page, lambda: page.click("#retrigger-task"), accept=True)
    wait_js(page, f"location.hash.startsWith('#/tasks/') && location.hash !== '#/tasks/{flaky}'")
    copy = page.evaluate("location.hash").split("/")[2]
    definition = queue.task(copy)
    original = queue.task(flaky)
    assert definition["taskGroupId"] == group and definition["dependencies"] == [build]
    assert definition["tags"]["retriggerOf"] == flaky and definition["metadata"] == original["metadata"]
    assert definition["created"] > original["created"] and definition["payload"] == original["payload"]
    assert queue.status(copy)["status"]["state"] == "pending"  # its build completed: it runs now
    assert queue.status(flaky)["status"]["state"] == "failed"


def test_the_group_page_names_its_push(host, page):
    """Issue #85: the group page did not say which push it is. It names the project and revision its decision task
    built (read as listRecentTaskGroups reads them: a Treeherder route here, an Index route elsewhere), the owner, the
    decision task, and the push in Treeherder."""
    queue = host.client()
    rev = revision()
    group = push(queue, "autoland", rev)
    page.goto(f"{host.root_url}/inspector/#/groups/{group}")
    # The push line shows the owner first and the project and revision once the decision task is read (its
    # definition is not in the group's brief listing): stop 92's CI read it in between.
    page.wait_for_selector("#group-push code", timeout=WAIT_MS)
    said = page.inner_text("#group-push")
    assert "autoland" in said and rev[:12] in said and "dev@example.com" in said and "Decision Task" in said, said
    assert page.get_attribute("#push-treeherder", "href") == f"{TREEHERDER}/jobs?repo=autoland&revision={rev}"
    indexed = push(queue, "mozilla-central", rev, routes=[f"index.gecko.v2.mozilla-central.revision.{rev}.taskgraph.x"])
    page.goto(f"{host.root_url}/inspector/#/groups/{indexed}")
    page.wait_for_selector("#group-push code", timeout=WAIT_MS)
    assert "mozilla-central" in page.inner_text("#group-push")


def test_a_label_is_looked_for_in_the_group_being_read_first(host, page):
    """Issue #85: a pasted label was looked for in the 5 newest pushes only (none, signed out). On a group's page, or
    a task's of that group, the Open box finds a label of that group first, whatever pushes came since."""
    queue = host.client()
    group = push(queue, "autoland", revision())
    label = f"test-windows11-64/opt-{secrets.token_hex(3)}"
    labelled = slugid()
    queue.createTask(labelled, task_definition(taskGroupId=group, **named(label)))
    for _ in range(6):  # newer pushes: the group is no longer among the newest five
        push(queue, "autoland", revision())
    for start in (f"#/groups/{group}", f"#/tasks/{group}"):
        page.goto(f"{host.root_url}/inspector/{start}")
        page.wait_for_selector("#goto-id", timeout=WAIT_MS)
        page.fill("#goto-id", label)
        page.press("#goto-id", "Enter")
        wait_js(page, f"location.hash === '#/tasks/{labelled}'")


def test_a_failed_label_says_how_it_went_on_the_projects_previous_push(host, page):
    """Issue #85: nothing said that the same label failed on the project's previous push (not this push's doing).
    A failed row says how its label went on the previous push of its project, a link to that task."""
    queue = host.client()
    project, label = f"proj{secrets.token_hex(3)}", "test-linux64/opt-xpcshell-3"
    older_rev = revision()
    older = push(queue, project, older_rev)
    before = claimed_task(queue, taskGroupId=older, **named(label))
    queue.reportFailed(before, "0")
    push(queue, f"other{secrets.token_hex(3)}", revision())  # another project's push between them
    newer = push(queue, project, revision())
    now = claimed_task(queue, taskGroupId=newer, **named(label))
    queue.reportFailed(now, "0")
    page.goto(f"{host.root_url}/inspector/#/")
    sign_in(page)  # listing the recent pushes takes queue:list-recent-task-groups
    page.wait_for_selector("#signed-in-as", timeout=WAIT_MS)
    page.goto(f"{host.root_url}/inspector/#/groups/{newer}")
    said = page.locator(f"tr[data-task-id='{now}'] .previous-push")
    said.wait_for(timeout=WAIT_MS)
    assert said.inner_text() == f"previous push ({older_rev[:12]}): failed"
    assert said.locator("a").get_attribute("href") == f"#/tasks/{before}"
