"""The tests' clocks: set by hand, moved on by `advance`, so that expiry and cache tests take no real time."""

from __future__ import annotations

import datetime as dt

from shared import timeutil


class Clock:
    """A wall clock (what the service's `now` answers): now, or `start`."""

    def __init__(self, start: dt.datetime | None = None) -> None:
        self.now = start or timeutil.now()

    def __call__(self) -> dt.datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += dt.timedelta(seconds=seconds)


class Ticks:
    """A monotonic clock in seconds (what `time.monotonic` answers), from 0."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
