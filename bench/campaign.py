"""The fault campaign's scenarios for bench.soak (issue 86), each a flag, each reporting what it did: a rollout of
this code over the latest release and back, a storage outage, a broker outage, clocks that disagree, and workers
that hold their claims and reclaim them. What they must not break is judged here too: the clients' 5xx answers
outside the outage windows, claims lost although reclaimed in time, the time the queue takes to answer again after
an outage ends, and every event published (a listener bound to every exchange: missing and duplicated events)."""

from __future__ import annotations

import collections
import contextlib
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

STORAGE = ("storage outage", "azurite restart")  # outages after which the API answers again (the broker's: events)
SETTLE = 5.0  # seconds after an outage ends during which its effects may still show (a request then in flight)


@dataclass
class Windows:
    """Outage windows, the clients' 5xx answers, and how soon calls succeeded again (wall-clock seconds: the
    holders judge their claims by it)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    spans: list[tuple[str, float, float | None]] = field(default_factory=list)  # (what, start, end)
    server_errors: list[float] = field(default_factory=list)
    recovered: dict[int, float] = field(default_factory=dict)  # span index -> seconds from its end to a success

    def begin(self, what: str) -> int:
        with self.lock:
            self.spans.append((what, time.time(), None))
            return len(self.spans) - 1

    def end(self, index: int) -> None:
        with self.lock:
            what, start, _ = self.spans[index]
            self.spans[index] = (what, start, time.time())

    def server_error(self) -> None:
        with self.lock:
            self.server_errors.append(time.time())

    def succeeded(self, started: float) -> None:
        """A call that started at `started` succeeded: the first after an outage's end is its recovery."""
        with self.lock:
            for index, (what, _, end) in enumerate(self.spans):
                if what in STORAGE and end is not None and started >= end and index not in self.recovered:
                    self.recovered[index] = time.time() - end

    def outside(self) -> int:
        """5xx answers outside every outage window (and its SETTLE)."""
        with self.lock:
            spans = [(start, (end if end is not None else float("inf")) + SETTLE) for _, start, end in self.spans]
            return sum(1 for at in self.server_errors if not any(start <= at <= end for start, end in spans))

    def report(self, started: float) -> str:
        with self.lock:
            parts = []
            for index, (what, start, end) in enumerate(self.spans):
                length = f"{end - start:.0f} s" if end is not None else "unended"
                back = self.recovered.get(index)
                verb = "answering" if what in STORAGE else "publishing"
                again = f", {verb} again {back:.1f} s after" if back is not None else ""
                parts.append(f"{what} at t={start - started:.0f}s for {length}{again}")
            return "; ".join(parts) or "none"

    def overlapping(self, start: float, end: float) -> bool:
        """Whether an outage window (and its SETTLE) overlaps [start, end]."""
        with self.lock:
            return any(
                begin <= end and start <= (stop if stop is not None else float("inf")) + SETTLE
                for _, begin, stop in self.spans
            )

    def worst_recovery(self, kind: str) -> float | None:
        with self.lock:
            found = [
                self.recovered[i] for i, (what, _, _) in enumerate(self.spans) if what == kind and i in self.recovered
            ]
            return max(found) if found else None


class StorageOutage:
    """Every storage call of every host fails for `seconds`: the proxies refuse connections for the first half and
    answer 503 ServerBusy for the second (local_host/fault_proxy.py's signals), then storage serves again."""

    def __init__(self, proxies: list[subprocess.Popen[bytes]], seconds: float, windows: Windows) -> None:
        self.proxies, self.seconds, self.windows = proxies, seconds, windows

    def _signal(self, signum: signal.Signals) -> None:
        for proxy in self.proxies:
            with contextlib.suppress(ProcessLookupError):
                proxy.send_signal(signum)

    def run(self, stop: threading.Event) -> None:
        index = self.windows.begin("storage outage")
        try:
            self._signal(signal.SIGUSR1)
            if not stop.wait(self.seconds / 2):
                self._signal(signal.SIGUSR2)
                stop.wait(self.seconds / 2)
        finally:
            self._signal(signal.SIGHUP)
            self.windows.end(index)


class BrokerOutage:
    """The broker unreachable for `seconds`: the hosts reach it through a TCP proxy (tests/amqp.py) that is cut,
    every connection through it dropped, then restored on the same port. `received` counts what a listener bound
    straight to the broker got: the first event after the outage is when publishing resumed."""

    def __init__(self, proxy: Any, seconds: float, windows: Windows, received: Callable[[], int]) -> None:
        self.proxy, self.seconds, self.windows, self.received = proxy, seconds, windows, received

    def run(self, stop: threading.Event) -> None:
        index = self.windows.begin("broker outage")
        try:
            self.proxy.cut()
            stop.wait(self.seconds)
        finally:
            self.proxy.restore()
            self.windows.end(index)
        before, ended = self.received(), time.time()
        while time.time() - ended < 60 and not stop.wait(0.2):
            if self.received() > before:
                self.windows.recovered[index] = time.time() - ended  # the API never stopped: publishing did
                return


class Rollout:
    """The hosts replaced one at a time by this code (`forward`), every `every` seconds while tasks flow, then
    replaced back by the release the same way: each a graceful stop (SIGTERM, as Flex drains an instance) and a
    start of the other code on the same port."""

    def __init__(
        self,
        hosts: list[Any],
        release: str,
        every: float,
        ready: Callable[[Any], None],
        rolled_back: Callable[[], str],
    ) -> None:
        self.hosts, self.release, self.every, self.ready, self.rolled_back = hosts, release, every, ready, rolled_back
        self.steps: list[str] = []
        self.after = ""

    def run(self, stop: threading.Event, started: float) -> None:
        for code in ("current", "release"):
            for host in self.hosts:
                if stop.wait(self.every):
                    return
                host.replace(code)
                with contextlib.suppress(RuntimeError):
                    self.ready(host)
                self.steps.append(f"host {host.index} -> {self._name(code)} at t={time.time() - started:.0f}s")
        self.after = self.rolled_back()  # the rollback's last step, as docs/deploy.md has the operator take it

    def _name(self, code: str) -> str:
        return "this code" if code == "current" else self.release

    def report(self) -> str:
        done = len(self.steps)
        whole = 2 * len(self.hosts)
        return (
            f"{done} of {whole} replacements ({'; '.join(self.steps[-2:]) or 'none'}); then {self.after or 'nothing'}"
        )


@dataclass
class Holds:
    """Workers that hold a claim past its first takenUntil, reclaiming `lead` seconds before each by a true clock.
    A claim refused (409) to an attempt that started more than `skew` + 1 s before the takenUntil the worker knew
    is a claim lost although reclaimed in time: must be 0."""

    skew: float
    lead: float
    windows: Windows
    lock: threading.Lock = field(default_factory=threading.Lock)
    held: int = 0
    reclaims: int = 0
    late: int = 0  # refused to an attempt started too close to (or after) takenUntil: the worker was late
    excused: int = 0  # refused in time, but an outage overlapped the claim's last stretch: no one could answer
    lost_in_time: list[str] = field(default_factory=list)

    def in_time(self, attempt_started: float, taken_until: float) -> bool:
        return attempt_started < taken_until - self.skew - 1.0

    def refused(self, what: str, attempt_started: float, taken_until: float) -> None:
        excused = self.windows.overlapping(attempt_started, taken_until)
        with self.lock:
            if not self.in_time(attempt_started, taken_until):
                self.late += 1
            elif excused:
                self.excused += 1
            else:
                self.lost_in_time.append(what)

    def report(self) -> str:
        return (
            f"held claims {self.held}, reclaims {self.reclaims} (each {self.lead:g} s before takenUntil), "
            f"refused late {self.late}, refused in time across an outage {self.excused}, lost although reclaimed in "
            f"time {len(self.lost_in_time)}"
        )


def event_tally(received: Iterable[Any], completed_runs: dict[str, int]) -> tuple[int, int, list[str]]:
    """From a listener's messages: (received, duplicated, missing). Duplicated: a message id received more than
    once. Missing: a task without its task-defined, or without the task-completed of the run that completed it."""
    ids: collections.Counter[str] = collections.Counter()
    defined: set[str] = set()
    completed: set[tuple[str, int]] = set()
    total = 0
    for message in received:
        total += 1
        ids[message.message_id or ""] += 1
        status = message.payload.get("status", {})
        task_id = status.get("taskId")
        if message.exchange == "task-defined":
            defined.add(task_id)
        elif message.exchange == "task-completed":
            completed.add((task_id, int(message.payload.get("runId", -1))))
    duplicated = sum(n - 1 for n in ids.values() if n > 1)
    missing = [f"task-defined {t}" for t in completed_runs if t not in defined] + [
        f"task-completed {t}/{run}" for t, run in completed_runs.items() if (t, run) not in completed
    ]
    return total, duplicated, missing
