"""Telemetry: with APPLICATIONINSIGHTS_CONNECTION_STRING set, logs (with their fixed fields) and traces reach
Application Insights through OpenTelemetry; without it nothing is sent (issue #8).

The ingestion endpoint is a local stand-in that records what Azure Monitor's exporter posts (`/v2.1/track`)."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import PROJECT, slugid, task_definition, wait_for
from tests.stand_ins import JsonEndpoint


class Ingestion(JsonEndpoint):
    """Application Insights' ingestion endpoint (`POST /v2.1/track`): keeps every envelope posted."""

    def __init__(self) -> None:
        self.envelopes: list[dict[str, Any]] = []
        super().__init__(self._track)

    def _track(self, method: str, path: str, headers: Any, body: bytes) -> tuple[int, Any]:
        if headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        items = json.loads(body)
        self.envelopes.extend(items if isinstance(items, list) else [items])
        return 200, {"itemsReceived": len(items), "itemsAccepted": len(items), "errors": []}

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.envelopes if e.get("data", {}).get("baseType") == kind]


@pytest.fixture
def ingestion() -> Iterator[Ingestion]:
    endpoint = Ingestion()
    yield endpoint
    endpoint.stop()


def test_logs_and_traces_reach_application_insights(host_factory, ingestion):
    host = host_factory(
        extra_env={
            "APPLICATIONINSIGHTS_CONNECTION_STRING": (
                f"InstrumentationKey=00000000-0000-0000-0000-000000000000;IngestionEndpoint={ingestion.url}"
            ),
            "APPLICATIONINSIGHTS_STATSBEAT_DISABLED_ALL": "true",  # the SDK's own usage reports: not to Microsoft
            "OTEL_BLRP_SCHEDULE_DELAY": "200",
            "OTEL_BSP_SCHEDULE_DELAY": "200",  # export within a fraction of a second
        }
    )
    try:
        queue = host.client()
        task_id = slugid()
        queue.createTask(task_id, task_definition())

        def task_log() -> list[dict[str, Any]]:
            return [
                e
                for e in ingestion.of_type("MessageData")
                if e["data"]["baseData"].get("properties", {}).get("taskId") == task_id
            ]

        [record] = wait_for(task_log, timeout=20)[:1]
        assert record["data"]["baseData"]["properties"]["event"] == "task-defined"

        requests = wait_for(
            lambda: [e for e in ingestion.of_type("RequestData") if task_id in e["data"]["baseData"].get("url", "")],
            timeout=20,
        )
        request = requests[0]["data"]["baseData"]
        assert request["responseCode"] == "200" and request["success"] is True
        # The storage calls of that request are its dependencies, in the same operation.
        operation = requests[0]["tags"]["ai.operation.id"]
        dependencies = wait_for(
            lambda: [
                e for e in ingestion.of_type("RemoteDependencyData") if e["tags"].get("ai.operation.id") == operation
            ],
            timeout=20,
        )
        assert any("127.0.0.1" in (d["data"]["baseData"].get("target") or "") for d in dependencies)
    finally:
        host.stop()


def test_without_a_connection_string_nothing_is_configured():
    """No exporter is even imported: nothing can leave the machine."""
    code = (
        "import sys, os; os.environ.pop('APPLICATIONINSIGHTS_CONNECTION_STRING', None);"
        "from shared import telemetry; assert telemetry.configure() is False;"
        "import function_app;"
        "assert not [m for m in sys.modules if m.startswith(('azure.monitor', 'opentelemetry.sdk'))], 'imported'"
    )
    subprocess.run([sys.executable, "-c", code], cwd=PROJECT, check=True)
