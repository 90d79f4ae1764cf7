"""The task groups of more than one task (a push: a decision task and what it created), most recent first, for
the inspector's start page (listRecentTaskGroups, this queue's extension).

RecentTaskGroups: PartitionKey = the UTC day the group became one (`YYYY-MM-DD`), RowKey = `<10^13 - its time in
ms, 13 digits>~<taskGroupId>` (newest first within a day), `taskGroupId`, `schedulerId`, `since`, `expires`. A row
is written once per group, by the join that gives it its second task (or that creates a group named after no task
of it: shared/operations/writes/group_store.py), not per task; a lost write leaves the group off this list only. The
listing reads the last DAYS_LISTED days, a partition each; the expiry timer deletes the days before
DAYS_KEPT.
"""

from __future__ import annotations

import datetime as dt

RECENT_GROUPS_TABLE = "RecentTaskGroups"
INVERT = 10**13  # a time in ms subtracted from this sorts newest first (good until the year 2286)


def day_of(at: dt.datetime) -> str:
    return at.astimezone(dt.UTC).strftime("%Y-%m-%d")


def row_key(at: dt.datetime, task_group_id: str) -> str:
    return f"{INVERT - int(at.timestamp() * 1000):013d}~{task_group_id}"
