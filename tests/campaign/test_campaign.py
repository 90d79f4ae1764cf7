"""The fault campaign, short (issue 86): bench.soak with each scenario on (bench/campaign.py), a few hundred tasks
each, through real host processes, Azurite, the fault proxy and RabbitMQ. Each run fails itself (exit 1) on a lost
task, a run handed to two workers, an audit violation, a claim refused although reclaimed in time, a 5xx answer
outside the outage windows, or an event missing at its listener; here each also shows its scenario happened.

Its own tier (tests/campaign), so that it runs once in `make test` and not again in CI's sharded acceptance pass.
The long run's command and figures: docs/performance.md#the-fault-campaign."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.amqp import broker_reachable
from tests.conftest import PROJECT

pytestmark = pytest.mark.slow
SOAK = [sys.executable, "-m", "bench.soak", "--hosts", "2", "--workers", "6", "--seed", "7", "--azurite-every", "0"]
needs_broker = pytest.mark.skipif(
    not broker_reachable() and not os.environ.get("QUEUE_TEST_REQUIRE_BROKER"), reason="no RabbitMQ on 127.0.0.1"
)


def soak(*args: str) -> str:
    done = subprocess.run([*SOAK, *args], cwd=PROJECT, capture_output=True, text=True, timeout=800)
    assert done.returncode == 0, f"{done.stdout[-6000:]}\n{done.stderr[-3000:]}"
    assert re.search(r"lost 0, doubled claims 0", done.stdout), done.stdout[-3000:]
    return done.stdout


@needs_broker
def test_a_rollout_to_this_code_and_back_while_tasks_flow():
    out = soak(
        "--tasks", "300", "--events", "--faults", "0.05", "--rollout", "--rollout-every", "4",
        "--kill-every", "12", "--hold", "0.1", "--claim-timeout", "8",
    )  # fmt: skip
    assert "4 of 4 replacements" in out, out[-3000:]
    assert re.search(r"events at the listener: [1-9]\d* received, \d+ duplicated, 0 missing", out), out[-3000:]


def test_a_storage_outage_refused_then_busy():
    out = soak(
        "--tasks", "300", "--storage-outage", "16", "--outage-at", "8", "--kill-every", "0", "--hold", "0.1",
        "--claim-timeout", "8",
    )  # fmt: skip
    assert re.search(r"storage outage at t=\d+s for 16 s, answering again [\d.]+ s after", out), out[-3000:]
    assert "clients' 5xx outside them 0" in out


@needs_broker
def test_a_broker_outage():
    out = soak("--tasks", "300", "--events", "--broker-outage", "20", "--outage-at", "5", "--kill-every", "0")
    assert re.search(r"broker outage at t=\d+s for 20 s", out), out[-3000:]
    assert re.search(r"events at the listener: [1-9]\d* received, \d+ duplicated, 0 missing", out), out[-3000:]


def test_clocks_that_disagree_by_up_to_two_seconds():
    out = soak("--tasks", "300", "--skew", "2", "--hold", "0.3", "--claim-timeout", "10", "--kill-every", "10")
    assert re.search(r"held claims [1-9]\d*, reclaims [1-9]\d*", out), out[-3000:]
    assert "lost although reclaimed in time 0" in out
