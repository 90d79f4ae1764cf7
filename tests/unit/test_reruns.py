"""rerunTaskWhenReady (shared/operations/reruns.py): a failed build, the tests and the summary its failure left
cancelled; rerunning them all runs none ahead of what it depends on."""

from __future__ import annotations

import pytest

from shared.domain.tasks import Task
from shared.operations import creation as creation_mod
from shared.operations import reruns as reruns_mod
from shared.runtime import Queue
from tests.conftest import schema_defaults, slugid, task_definition
from tests.unit.helpers import create_member, run, states

# Resolutions followed up here, after the answer (as in production): settled before each look.
pytestmark = pytest.mark.service(resolution_grace=5)


async def failed_push(service: Queue) -> tuple[str, str, str, str]:
    """build (failed) <- test <- summary, and lint (failed, on nothing); the group cancelled."""
    group = slugid()
    build = await create_member(service, group)
    test = await create_member(service, group, build)
    summary = await create_member(service, group, test)
    lint = await create_member(service, group)
    await run(service, build, "failed")
    await run(service, lint, "failed")
    for task_id in (test, summary):
        await service.lifecycle.cancel_task(task_id)
    assert await states(service, build, test, summary, lint) == ["failed", "exception", "exception", "failed"]
    return build, test, summary, lint


async def test_a_rerun_waits_for_the_dependencies_and_runs_in_their_order(service: Queue) -> None:
    build, test, summary, lint = await failed_push(service)
    outcomes = [(await service.reruns.rerun_when_ready(t))[1] for t in (build, test, summary, lint)]
    assert outcomes == ["rerun", "waiting", "waiting", "rerun"]  # only what depends on nothing unmet runs now
    assert await states(service, build, test, summary, lint) == ["pending", "exception", "exception", "pending"]
    await run(service, build, "completed")
    assert await states(service, test, summary) == ["pending", "exception"]  # the test now, the summary still not
    rerun = (await service.tasks.load(test)).runs[-1]
    assert rerun.reason_created == "rerun"
    await run(service, test, "completed")
    assert await states(service, summary) == ["pending"]
    await run(service, summary, "completed")
    assert not (await service.tasks.load(summary)).rerun_when_ready


async def test_a_dependency_that_fails_again_keeps_its_dependents_waiting(service: Queue) -> None:
    build, test, _, _ = await failed_push(service)
    await service.reruns.rerun_when_ready(build)
    await service.reruns.rerun_when_ready(test)
    await run(service, build, "failed")
    assert await states(service, test) == ["exception"]  # still waiting for a build that completes
    await service.lifecycle.rerun_task(build)
    await run(service, build, "completed")
    assert await states(service, test) == ["pending"]


async def test_a_dependency_completed_while_the_mark_was_written_releases_it_here(
    service: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The build completes after the first look at it and before the mark: its release found no mark; the look
    after the mark finds it completed and reruns the test."""
    build, test, _, _ = await failed_push(service)
    await service.lifecycle.rerun_task(build)
    real_mark = reruns_mod.Reruns._mark

    async def completes_first(self: reruns_mod.Reruns, task_id: str, unmet: list[str]) -> Task:
        await run(service, build, "completed")
        return await real_mark(self, task_id, unmet)

    monkeypatch.setattr(reruns_mod.Reruns, "_mark", completes_first)
    _, outcome = await service.reruns.rerun_when_ready(test)
    assert outcome == "rerun" and await states(service, test) == ["pending"]


async def test_a_plain_rerun_clears_the_mark(service: Queue) -> None:
    """rerunTask of a task waiting to rerun runs it now, and the dependency's completion later reruns nothing."""
    build, test, _, _ = await failed_push(service)
    await service.lifecycle.rerun_task(build)
    await service.reruns.rerun_when_ready(test)
    await service.lifecycle.rerun_task(test)
    await run(service, test, "failed")
    await run(service, build, "completed")
    task = await service.tasks.load(test)
    assert task.state == "failed" and len(task.runs) == 2 and not task.rerun_when_ready


async def test_a_task_that_waits_for_the_first_time_is_left_to_its_dependencies(service: Queue) -> None:
    group = slugid()
    build = await create_member(service, group)
    test = await create_member(service, group, build)
    task, outcome = await service.reruns.rerun_when_ready(test)
    assert outcome == "unchanged" and task.state == "unscheduled" and not task.rerun_when_ready


async def test_the_mark_is_stored_and_a_row_without_it_reads_unmarked(service: Queue) -> None:
    task = await service.tasks.load(await create_member(service, slugid()))
    assert "rerunWhenReady" not in task.to_entity().data  # unmarked: none written
    task.rerun_when_ready = True
    entity = task.to_entity()
    assert entity.data["rerunWhenReady"] is True and Task.from_entity(entity).rerun_when_ready
    del entity.data["rerunWhenReady"]  # as a release before it wrote the row
    assert Task.from_entity(entity).rerun_when_ready is False


async def test_a_task_with_requirement_rows_waits_the_same(service: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    """A task whose dependencies are kept as requirement rows (more than IN_ROW of them) is rerun by the
    resolution that satisfies its last one, as a first-time waiter is scheduled."""
    monkeypatch.setattr(creation_mod, "IN_ROW", 1)  # two dependencies are then "many"
    group = slugid()
    build, lint = await create_member(service, group), await create_member(service, group)
    test = await create_member(service, group, build, lint)
    assert (await service.tasks.load(test)).waiting is None  # requirement rows
    await run(service, build, "failed")
    await run(service, lint, "completed")
    await service.lifecycle.cancel_task(test)
    await service.lifecycle.rerun_task(build)
    assert (await service.reruns.rerun_when_ready(test))[1] == "waiting"
    assert await states(service, test) == ["exception"]
    await run(service, build, "completed")
    assert await states(service, test) == ["pending"]


async def test_an_all_resolved_summary_waits_for_a_dependency_that_waits_for_its_own_rerun(service: Queue) -> None:
    """A push sealed, cancelled and rerun: a summary that requires its tests only resolved counted a cancelled test
    as met although the test was waiting to run again, so it ran at once and reported the push green while the
    build failed again and the tests never ran (issue 74)."""
    group = slugid()
    build = await create_member(service, group)
    test = await create_member(service, group, build)
    summary_id = slugid()
    definition = task_definition(taskGroupId=group, dependencies=[test], requires="all-resolved")
    await service.creation.create_task(summary_id, dict(definition, **schema_defaults(definition)))
    await run(service, build, "failed")
    for task_id in (summary_id, test):  # the group cancelled
        await service.lifecycle.cancel_task(task_id)
    outcomes = [(await service.reruns.rerun_when_ready(t))[1] for t in (build, test, summary_id)]
    assert outcomes == ["rerun", "waiting", "waiting"]
    await run(service, build, "failed")  # fails again: the test never runs, nor does the summary
    assert await states(service, test, summary_id) == ["exception", "exception"]
    await service.lifecycle.rerun_task(build)
    await run(service, build, "completed")
    assert await states(service, test, summary_id) == ["pending", "exception"]
    await run(service, test, "failed")  # resolved: what the summary requires
    assert await states(service, summary_id) == ["pending"]
