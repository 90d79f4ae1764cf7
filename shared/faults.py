"""Fault injection for tests: named points where a process can be made to die, or an operation to fail.

`QUEUE_FAULTS` lists point names (comma-separated). At a point named plainly the process exits at once with
status 70, skipping every cleanup, as a crash or SIGKILL would. At a point named `<point>:raise` the operation
raises `InjectedFault` instead, every time, as a bug or a storage outage would: a queue-triggered function that
keeps failing so ends in its poison queue. Production leaves it empty.
"""

from __future__ import annotations

import logging
import os
import sys

EXIT_STATUS = 70
RAISE = ":raise"
POINTS = frozenset(
    {
        "before-state-write",  # the change's messages are put (hint, checks, dispatch request); nothing is written
        "after-state-write",  # a state change and its events are stored; nothing else happened yet
        "claimed-before-response",  # claimWork claimed runs and deleted their hints; the worker hears nothing
        "resolution-mid-page",  # dependency resolution scheduled one dependent of its page; the rest are not done
        "dispatch-before-publish",  # the dispatcher holds the stream's lease and read its events
        "dispatch-after-publish",  # an event is published; the cursor has not moved
        "check-claim",  # a claim check is about to be handled
        "check-deadline",  # a deadline check is about to be handled
        "resolve-dependencies",  # a resolution message is about to be handled
        "before-indexing",  # a completed task's index routes are about to be written
    }
)

_exits: frozenset[str] = frozenset()
_raises: frozenset[str] = frozenset()


class InjectedFault(RuntimeError):
    """An operation failed at a fault point armed with `:raise` (tests only)."""


def parse(names: str | None) -> tuple[frozenset[str], frozenset[str]]:
    """The points named in `names` (comma-separated) at which to exit, and those at which to raise; unknown
    names are an error."""
    wanted = [n.strip() for n in (names or "").split(",") if n.strip()]
    raises = frozenset(n.removesuffix(RAISE) for n in wanted if n.endswith(RAISE))
    exits = frozenset(n for n in wanted if not n.endswith(RAISE))
    unknown = (exits | raises) - POINTS
    if unknown:
        raise ValueError(f"unknown fault points: {', '.join(sorted(unknown))}")
    return exits, raises


def arm(names: str | None) -> None:
    """Arm the points named in `names`."""
    global _exits, _raises
    _exits, _raises = parse(names)


def point(name: str) -> None:
    if name in _raises:
        raise InjectedFault(f"fault injected at {name}")
    if name in _exits:
        logging.getLogger("queue.faults").error("fault injected at %s: exiting", name)
        sys.stderr.flush()
        os._exit(EXIT_STATUS)
