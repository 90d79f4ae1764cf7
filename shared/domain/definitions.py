"""A task definition as createTask takes it: normalized into the form stored (ids completed, dates re-serialised,
`expires` defaulted) and checked (dates, scopes, size; its dependencies once read). Pure decisions: the use case,
shared/operations/creation.py, reads and writes."""

from __future__ import annotations

import datetime as dt
from typing import Any, cast

from shared import errors, timeutil
from shared.domain.tasks import DEFINITION_FIELDS, MAX_DEFINITION_CHARS, Task, TaskDefinition, definition_size

CREATED_DRIFT = dt.timedelta(minutes=15)
DEFAULT_EXPIRES = dt.timedelta(days=365)


def normalize(task_id: str, body: dict[str, Any]) -> TaskDefinition:
    """The stored definition: schema defaults already applied; ids completed, dates re-serialised."""
    definition = dict(body)
    tq, prov, wt = (definition.get(k) for k in ("taskQueueId", "provisionerId", "workerType"))
    if tq is None:
        if prov is None or wt is None:
            raise errors.InputError("Either taskQueueId, or both provisionerId and workerType, must be given")
        tq = f"{prov}/{wt}"
    elif (prov is not None or wt is not None) and f"{prov}/{wt}" != tq:
        raise errors.InputError(
            "taskQueueId `{tq}` does not match provisionerId/workerType `{prov}/{wt}`", tq=tq, prov=prov, wt=wt
        )
    prov, wt = tq.split("/", 1)
    definition.update(taskQueueId=tq, provisionerId=prov, workerType=wt)
    definition.setdefault("taskGroupId", task_id)
    for key in ("created", "deadline"):
        definition[key] = timeutil.normalize(definition[key])
    if "expires" in definition:
        definition["expires"] = timeutil.normalize(definition["expires"])
    else:  # a year after the deadline (the latest date there is, for a deadline the checks will refuse anyway)
        deadline = timeutil.parse(definition["deadline"])
        definition["expires"] = timeutil.iso(
            deadline + min(DEFAULT_EXPIRES, dt.datetime.max.replace(tzinfo=dt.UTC) - deadline)
        )
    return cast(TaskDefinition, {key: definition[key] for key in DEFINITION_FIELDS})


def check_definition(definition: TaskDefinition, now: dt.datetime, max_deadline_days: float) -> None:
    created = timeutil.parse(definition["created"])
    deadline = timeutil.parse(definition["deadline"])
    expires = timeutil.parse(definition["expires"])
    problems = []
    if abs(created - now) > CREATED_DRIFT:
        problems.append(
            f"created ({definition['created']}) must be within 15 minutes of the current time ({timeutil.iso(now)})"
        )
    if created > deadline:
        problems.append("created must not be after deadline")
    if deadline < now:
        problems.append(f"deadline ({definition['deadline']}) is in the past")
    if deadline > now + dt.timedelta(days=max_deadline_days) + CREATED_DRIFT:
        problems.append(f"deadline must be at most {max_deadline_days:g} days from now")
    if expires < deadline:
        problems.append("expires must not be before deadline")
    doubled = [s for s in definition["scopes"] if s.endswith("**")]
    if doubled:
        problems.append(f"scopes must not end in `**`: {', '.join(doubled)}")
    if problems:
        raise errors.InputError("Invalid task definition:\n" + "\n".join(f"* {p}" for p in problems))
    size = definition_size(definition)
    if size > MAX_DEFINITION_CHARS:
        raise errors.TaskTooLarge(size=size, limit=MAX_DEFINITION_CHARS)


def refuse_dependencies(wanted: list[str], found: dict[str, Task], definition: TaskDefinition) -> None:
    """400 when a wanted dependency was not found, or expires before the task's deadline."""
    missing = [d for d in wanted if d not in found]
    if missing:
        raise errors.InputError("Dependencies not found: {missing}", missing=", ".join(missing))
    deadline = timeutil.parse(definition["deadline"])
    expiring = [d for d in wanted if found[d].expires < deadline]
    if expiring:
        raise errors.InputError("Dependencies expire before this task's deadline: {ids}", ids=", ".join(expiring))
