"""The largest task the queue takes, on Azurite: one Azure Table entity holds 1 MiB, and a task's row carries its
definition (at most MAX_DEFINITION_CHARS of JSON, stored as UTF-16: ASCII is the worst case, two bytes a
character), its runs, the dependencies it still waits for and up to LISTED dependents (shared/domain/tasks.py).
A task with all of them at their bounds goes through its life; one character more is refused and writes nothing."""

from __future__ import annotations

import asyncio

import pytest

from shared import errors
from shared.domain.definitions import normalize
from shared.domain.dependencies import LISTED
from shared.domain.tasks import MAX_DEFINITION_CHARS, TASKS_TABLE, definition_size, task_row
from shared.operations.claims import Claim
from tests.conftest import schema_defaults, slugid, task_definition, task_queue_id
from tests.services import azurite_service

DEPENDENCIES = 100  # a definition's most (createTask refuses more)


def sized(task_id: str, definition: dict, size: int) -> dict:
    """`definition` with its defaults, its payload padded with ASCII so that its JSON as createTask counts it
    (normalized: the group, expires) is `size` characters."""
    full = dict(definition, **schema_defaults(definition), payload={"pad": ""})
    full["payload"]["pad"] = "x" * (size - definition_size(normalize(task_id, full)))
    assert definition_size(normalize(task_id, full)) == size
    return full


def test_the_largest_task_goes_through_its_life_and_one_character_more_is_refused(azurite):
    async def go():
        queue = azurite_service(azurite.connection_string)
        try:
            deps_queue, tq = task_queue_id(), task_queue_id()
            deps = [slugid() for _ in range(DEPENDENCIES)]
            for dep in deps:
                definition = task_definition(taskQueueId=deps_queue)
                await queue.creation.create_task(dep, dict(definition, **schema_defaults(definition)))
            definition = task_definition(taskQueueId=tq, dependencies=deps, retries=1)

            refused = slugid()
            with pytest.raises(errors.TaskTooLarge):
                await queue.creation.create_task(refused, sized(refused, definition, MAX_DEFINITION_CHARS + 1))
            assert await queue.stores.tables.get(TASKS_TABLE, refused, task_row(refused)) is None

            big = slugid()
            await queue.creation.create_task(big, sized(big, definition, MAX_DEFINITION_CHARS))
            dependents = [slugid() for _ in range(LISTED)]
            for start in range(0, LISTED, 25):
                await asyncio.gather(
                    *(
                        queue.creation.create_task(
                            d,
                            dict(
                                child := task_definition(taskQueueId=task_queue_id(), dependencies=[big]),
                                **schema_defaults(child),
                            ),
                        )
                        for d in dependents[start : start + 25]
                    )
                )
            stored = await queue.stores.tables.get(TASKS_TABLE, big, task_row(big))
            assert stored is not None
            row_bytes = sum(2 * len(v) if isinstance(v, str) else 8 for v in stored.data.values())
            assert 800_000 < row_bytes < 1_000_000, row_bytes  # at its bounds, and within the entity's 1 MiB
            assert len((await queue.tasks.load(big)).dependents or []) == LISTED

            for dep in deps:  # the dependencies complete: the big task is scheduled
                assert isinstance(await queue.claims.claim(dep, 0, "g", "w"), Claim)
                await queue.lifecycle.resolve(dep, 0, "completed", "completed")
            await queue.stores.settled()
            assert (await queue.queries.task(big)).status()["state"] == "pending"

            assert isinstance(await queue.claims.claim(big, 0, "g", "w"), Claim)
            await queue.lifecycle.resolve(big, 0, "exception", "worker-shutdown")  # a retry: a second run
            assert isinstance(await queue.claims.claim(big, 1, "g", "w"), Claim)
            await queue.lifecycle.resolve(big, 1, "completed", "completed")
            await queue.stores.settled()
            status = (await queue.queries.task(big)).status()
            assert [r["state"] for r in status["runs"]] == ["exception", "completed"]
            assert (await queue.queries.task(big)).definition["payload"]["pad"].startswith("xxx")
            states = {(await queue.queries.task(d)).status()["state"] for d in dependents}
            assert states == {"pending"}
        finally:
            await queue.close()

    asyncio.run(go())
