"""Which tasks of a group did not succeed, kept in the group's own partition so that a push's row on the start
page and its rerun plan are read in a query or two, not from every task of it.

Rows (Tasks table, PartitionKey = taskGroupId, beside shared/domain/groups.py's):
`f:<taskId>`: a member whose newest run failed or ended in an exception: `state` (failed, exception), `runId`,
`reason` (its reasonResolved) and, once it is marked to rerun when its dependencies complete (rerunTaskWhenReady),
`waitsFor` (the dependencies it waits for, comma-separated, the first DEPENDENCIES_NAMED). Written by the resolution's
group step (after the answer; an upsert, so a repeated message changes nothing); deleted when the task gets its
new run (rerunTask, or the release of a waiting rerun) and with the member's other rows at its expiry.

Best effort: a lost write leaves a count short by one until the next resolution of that task; the group's own page
(listTaskGroup, every task's status) stays the truth, which the start page links to. A release before this one
writes no such row (its groups count no failure) and leaves the rows it finds (they expire with the group's
partition: `forget` is called for every member).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

UNSUCCESSFUL, UNSUCCESSFUL_END = "f:", "f;"  # ";" sorts right after ":"
COUNTED = 1000  # rows of a kind counted for a group's row on the start page (one page); more is "at least"
UNSUCCESSFUL_STATES = ("failed", "exception")


@dataclass(frozen=True)
class Unsuccessful:
    """A member whose newest run failed or ended in an exception (`waits_for`: marked to rerun once these complete;
    None: not marked)."""

    task_id: str
    state: str
    run_id: int
    reason: str
    resolved: str
    waits_for: list[str] | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "taskId": self.task_id,
            "state": self.state,
            "runId": self.run_id,
            "reasonResolved": self.reason,
            "resolved": self.resolved,
        }
        if self.waits_for is not None:
            out["rerunWaitsFor"] = self.waits_for
        return out


@dataclass(frozen=True)
class GroupCounts:
    """What a push's row says of its tasks; `at_least`: a kind had more than COUNTED rows (its count is a floor)."""

    unresolved: int
    failed: int
    exception: int
    rerun_waiting: int
    at_least: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "unresolved": self.unresolved,
            "failed": self.failed,
            "exception": self.exception,
            "rerunWaiting": self.rerun_waiting,
            "atLeast": self.at_least,
        }
