"""Operations called as the API calls them, answered as the API answers (shared/api/answers.py): for tests that
drive the queue directly on a store and check the answers a client would get."""

from __future__ import annotations

from typing import Any

from shared.api import answers
from shared.domain.artifacts import Artifact
from shared.domain.messages import CLAIM_QUEUE, RESOLVED_QUEUE, ResolvedCheck
from shared.runtime import Queue
from shared.storage.base import QueueMessage


async def claim_work(
    queue: Queue, task_queue_id: str, worker_group: str, worker_id: str, count: int, **options: Any
) -> list[dict[str, Any]]:
    claims = await queue.work.claim_work(task_queue_id, worker_group, worker_id, count, **options)
    return [answers.claim(c, queue.claims.credentials(c), include_task=True) for c in claims]


async def create_artifact(queue: Queue, task_id: str, run_id: int, name: str, body: dict[str, Any]) -> dict[str, Any]:
    return answers.created_artifact(await queue.artifacts.create(task_id, run_id, name, body))


async def task_events(queue: Queue, task_id: str, *, limit: int, continuation: str | None) -> dict[str, Any]:
    events, token = await queue.queries.task_events(task_id, limit=limit, continuation=continuation)
    namespace = queue.settings.pulse_namespace
    return answers.page("events", [answers.event(seq, e, namespace) for seq, e in events], token, taskId=task_id)


async def group_events(queue: Queue, group_id: str, *, limit: int, continuation: str | None) -> dict[str, Any]:
    events, token = await queue.groups.events(group_id, limit=limit, continuation=continuation)
    namespace = queue.settings.pulse_namespace
    return answers.page("events", [answers.event(seq, e, namespace) for seq, e in events], token, taskGroupId=group_id)


async def list_artifacts(
    queue: Queue, task_id: str, run_id: int | None, *, limit: int, continuation: str | None
) -> dict[str, Any]:
    found, token = await queue.artifact_reads.list(task_id, run_id, limit=limit, continuation=continuation)
    return answers.page("artifacts", [answers.artifact(a) for a in found], token)


async def list_dependents(queue: Queue, task_id: str, *, limit: int, continuation: str | None) -> dict[str, Any]:
    tasks, token = await queue.queries.dependents(task_id, limit=limit, continuation=continuation)
    return answers.page("tasks", [answers.definition_and_status(t) for t in tasks], token, taskId=task_id)


async def artifact_url(queue: Queue, artifact: Artifact) -> str | None:
    """Where getArtifact redirects to."""
    return (await queue.artifact_reads.location(artifact)).url


async def resolution_messages(queue: Queue, visibility: int = 30) -> list[tuple[str, QueueMessage]]:
    """The resolution messages waiting, with their queue: in `task-resolved`, and in the claim queue the claim
    checks that a resolution turned into its message (the triggers' work, for tests that run it by hand)."""
    found: list[tuple[str, QueueMessage]] = []
    for name in (RESOLVED_QUEUE, CLAIM_QUEUE):
        for message in await queue.stores.queues.receive(name, 32, visibility):
            if ResolvedCheck.carried_by(message.json()):
                found.append((name, message))
            else:
                await queue.stores.queues.release(name, message, 0)
    return found
