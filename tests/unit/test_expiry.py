"""A task group outlives its tasks (its expiry extends past theirs, as Taskcluster's by an hour): when its last
task expires first, the group is brought back by an expiry entry of its own and deleted when due, not left."""

from __future__ import annotations

import datetime as dt

import pytest

from shared import errors, timeutil
from shared.domain.expiry import TASK_EXPIRY_TABLE
from shared.operations.expiry import GROUP_KEY
from tests.conftest import slugid
from tests.services import create_task

pytestmark = pytest.mark.service(expiry_delay=0)


async def _group_entries(service, group):
    return (await service.stores.tables.query(TASK_EXPIRY_TABLE, "RowKey eq @k", {"k": GROUP_KEY + group})).entities


async def test_a_group_that_outlives_its_tasks_is_deleted_once_it_expires(service, clock):
    group = slugid()
    created = clock.now
    expires = created + dt.timedelta(hours=2)
    task_id = await create_task(
        service,
        taskGroupId=group,
        created=timeutil.iso(created),
        deadline=timeutil.iso(created + dt.timedelta(hours=1)),
        expires=timeutil.iso(expires),
    )
    group_expires = (await service.groups.get(group)).expires
    assert group_expires > expires  # by a tenth of the task's lifetime: 12 minutes
    clock.now = expires + dt.timedelta(minutes=1)  # the task expired, its group not yet
    await service.expiry.expire_tasks()
    with pytest.raises(errors.TaskNotFound):
        await service.queries.task(task_id)
    assert (await service.groups.get(group)).task_group_id == group
    assert len(await _group_entries(service, group)) == 1
    await service.expiry.expire_tasks()  # not due yet: nothing changes
    assert (await service.groups.get(group)).task_group_id == group
    clock.now = group_expires + dt.timedelta(seconds=1)
    await service.expiry.expire_tasks()
    with pytest.raises(errors.ResourceNotFound):
        await service.groups.get(group)
    assert await _group_entries(service, group) == []


async def test_a_group_entry_of_a_group_a_task_joined_since_is_dropped(service, clock):
    group = slugid()
    created = clock.now
    first = await create_task(
        service,
        taskGroupId=group,
        created=timeutil.iso(created),
        deadline=timeutil.iso(created + dt.timedelta(hours=1)),
        expires=timeutil.iso(created + dt.timedelta(hours=2)),
    )
    clock.now = created + dt.timedelta(hours=2, minutes=1)
    await service.expiry.expire_tasks()
    assert len(await _group_entries(service, group)) == 1 and first
    later = await create_task(
        service,
        taskGroupId=group,
        created=timeutil.iso(clock.now),
        deadline=timeutil.iso(clock.now + dt.timedelta(hours=1)),
        expires=timeutil.iso(clock.now + dt.timedelta(days=30)),
    )
    clock.now += dt.timedelta(hours=1)  # the entry comes due; the group has a member now
    await service.expiry.expire_tasks()
    assert await _group_entries(service, group) == [] and (await service.groups.get(group)).task_group_id == group
    assert await service.queries.task(later)
