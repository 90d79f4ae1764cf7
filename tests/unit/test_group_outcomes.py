"""A push as the start page lists it (shared/domain/group_outcomes.py, shared/domain/decision_tasks.py): its
decision task, the project and revision it built, and its counts read from the group's own rows; a rerun leaves the
failures."""

from __future__ import annotations

import pytest

from shared.domain.decision_tasks import push_of
from shared.runtime import Queue
from tests.conftest import schema_defaults, slugid, task_definition
from tests.unit.helpers import create_member, run, states

REVISION = "4f1c2a9d8e7b6c5a4f1c2a9d8e7b6c5a4f1c2a9d"


pytestmark = pytest.mark.service(resolution_grace=5)


async def decision(service: Queue, **fields: object) -> str:
    task_id = slugid()
    definition = task_definition(taskGroupId=task_id, **fields)
    await service.creation.create_task(task_id, dict(definition, **schema_defaults(definition)))
    return task_id


async def failures(service: Queue, group: str) -> dict[str, dict[str, object]]:
    await service.stores.background.settled()
    found, _ = await service.groups.failures(group, limit=100, continuation=None)
    return {f.task_id: f.to_json() for f in found}


async def test_a_push_is_listed_with_its_decision_task_and_counts(service: Queue) -> None:
    group = await decision(
        service,
        routes=[f"tc-treeherder.v2.autoland.{REVISION}.181203"],
        metadata={
            "name": "Gecko Decision Task",
            "owner": "dev@example.com",
            "source": "https://x/y",
            "description": "",
        },
    )
    build = await create_member(service, group)
    test = await create_member(service, group, build)
    lint = await create_member(service, group)
    await run(service, group, "completed")
    await run(service, build, "failed")
    await run(service, lint, "completed")
    await service.lifecycle.cancel_task(test)
    assert await states(service, build, test) == ["failed", "exception"]
    listed = await failures(service, group)
    assert {t: f["state"] for t, f in listed.items()} == {build: "failed", test: "exception"}
    assert listed[test]["reasonResolved"] == "canceled"
    [push] = await service.groups.recent(20)
    assert push["decisionTask"] == {
        "taskId": group,
        "name": "Gecko Decision Task",
        "owner": "dev@example.com",
        "source": "https://x/y",
    }
    assert (push["project"], push["revision"]) == ("autoland", REVISION)
    assert push["counts"] == {"unresolved": 0, "failed": 1, "exception": 1, "rerunWaiting": 0, "atLeast": False}


async def test_a_rerun_takes_a_task_off_the_failures_and_a_waiting_one_says_what_for(service: Queue) -> None:
    group = await decision(service)
    build = await create_member(service, group)
    test = await create_member(service, group, build)
    await run(service, group, "completed")
    await run(service, build, "failed")
    await service.lifecycle.cancel_task(test)
    await service.reruns.rerun_when_ready(build)
    await service.reruns.rerun_when_ready(test)
    listed = await failures(service, group)
    assert list(listed) == [test]  # the build runs again: not a failure any more
    assert listed[test]["rerunWaitsFor"] == [build]
    await run(service, build, "completed")
    assert await states(service, test) == ["pending"]
    assert await failures(service, group) == {}  # released: its rerun is under way
    await run(service, test, "failed")
    assert {t: f["runId"] for t, f in (await failures(service, group)).items()} == {test: 1}


async def test_counts_are_bounded_and_said_to_be_a_floor(service: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    from shared.operations.writes import group_members
    from shared.stores import group_outcomes

    monkeypatch.setattr(group_outcomes, "COUNTED", 2)
    monkeypatch.setattr(group_members, "COUNTED", 2)
    group = await decision(service)
    for _ in range(3):
        await create_member(service, group)
    [push] = await service.groups.recent(20)
    assert push["counts"]["unresolved"] == 2 and push["counts"]["atLeast"]


@pytest.mark.parametrize(
    ("definition", "expected"),
    [
        ({"routes": [f"tc-treeherder.try.{REVISION[:12]}"]}, ("try", REVISION[:12])),
        (
            {"routes": [f"index.gecko.v2.mozilla-central.revision.{REVISION}.taskgraph.decision"]},
            ("mozilla-central", REVISION),
        ),
        (
            {"payload": {"env": {"GECKO_HEAD_REV": REVISION, "GECKO_HEAD_REPOSITORY": "https://hg.mozilla.org/try"}}},
            ("try", REVISION),
        ),
        (
            {"metadata": {"source": f"https://github.com/mozilla-mobile/fenix/raw/{REVISION}/.taskcluster.yml"}},
            ("fenix", REVISION),
        ),
        (
            {
                "metadata": {
                    "source": f"https://hg.mozilla.org/releases/mozilla-beta/raw-file/{REVISION}/.taskcluster.yml"
                }
            },
            ("mozilla-beta", REVISION),
        ),
        ({"routes": ["notify.email.x.on-failed"], "metadata": {"source": "https://example.com/"}}, None),
    ],
)
def test_the_project_and_revision_are_read_from_routes_env_or_source(
    definition: dict[str, object], expected: tuple[str, str] | None
) -> None:
    push = push_of("T", definition)
    assert ((push["project"], push["revision"]) if "revision" in push else None) == expected


async def test_the_rows_stay_apart_from_the_members_and_expire_with_them(service: Queue) -> None:
    """Compatibility: the `f:` rows sort apart from the `m:`/`a:` ranges every release reads (a release before this
    one never sees them) and are deleted with the member at its expiry (a release before this one leaves them in
    the group's partition: a row per failure, only while it runs; changes/74.upgrade.md)."""
    group = await decision(service)
    build = await create_member(service, group)
    await run(service, group, "completed")
    await run(service, build, "failed")
    assert list(await failures(service, group)) == [build]
    assert sorted(await service.stores.groups.all_members(group)) == sorted([group, build])
    assert not await service.stores.groups.unresolved(group)
    await service.stores.groups.forget_member(group, build)
    assert await failures(service, group) == {}


async def test_decision_tasks_remembered_are_bounded(service: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    """A definition never changes, so a listing reads each decision task once per process; at most PUSHES_KNOWN."""
    from shared.operations import groups as groups_mod

    monkeypatch.setattr(groups_mod, "PUSHES_KNOWN", 3)
    pushes = [await decision(service) for _ in range(5)]
    for group in pushes:
        await create_member(service, group)
        assert (await service.groups._push(group))["decisionTask"]["taskId"] == group
    assert list(service.groups._pushes) == pushes[-3:]  # the newest three, the oldest forgotten
