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
    """A monotonic clock in seconds (what `time.monotonic` answers), from 0. With `step`, each reading moves it on
    by that much, as a real one moves between two readings: two events read in turn are never at the same time."""

    def __init__(self, step: float = 0.0) -> None:
        self.now = 0.0
        self.step = step

    def __call__(self) -> float:
        self.now += self.step
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
