"""Fault injection for tests: named points where a process can be made to die as if killed.

`QUEUE_FAULTS` lists point names (comma-separated); when execution reaches one of them the process exits at
once with status 70, skipping every cleanup, as a crash or SIGKILL would. Production leaves it empty.
"""

from __future__ import annotations

import logging
import os
import sys

EXIT_STATUS = 70
POINTS = frozenset({
    "after-state-write",  # a state change and its events are stored; nothing else happened yet
    "dispatch-before-publish",  # the dispatcher holds the stream's lease and read its events
    "dispatch-after-publish",  # an event is published; the cursor has not moved
})

_armed: frozenset[str] = frozenset()


def parse(names: str | None) -> frozenset[str]:
    """The points named in `names` (comma-separated); unknown names are an error."""
    wanted = frozenset(n.strip() for n in (names or "").split(",") if n.strip())
    unknown = wanted - POINTS
    if unknown:
        raise ValueError(f"unknown fault points: {', '.join(sorted(unknown))}")
    return wanted


def arm(names: str | None) -> None:
    """Arm the points named in `names`."""
    global _armed
    _armed = parse(names)


def point(name: str) -> None:
    if name in _armed:
        logging.getLogger("queue.faults").error("fault injected at %s: exiting", name)
        sys.stderr.flush()
        os._exit(EXIT_STATUS)
