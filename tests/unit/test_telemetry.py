"""One request record per API call: under the Functions host, whose invocation is the request's record in
Application Insights, the app's span is an INTERNAL child of it; elsewhere it is the request's (SERVER) span."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from shared import telemetry

HOST_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
HOST_SPAN = "00f067aa0ba902b7"


async def answer(scope: dict[str, Any], receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"{}"})


async def call(app: Any, **extra: Any) -> None:
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": "/api/queue/v1/task/abc/status",
        "raw_path": b"/api/queue/v1/task/abc/status",
        "query_string": b"",
        "headers": [(b"host", b"queue.example")],
        "server": ("queue.example", 80),
        "client": ("127.0.0.1", 5000),
        **extra,
    }

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        pass

    await app(scope, receive, send)


def spans_of(**extra: Any) -> list[Any]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    asyncio.run(call(telemetry.traced(answer, tracer_provider=provider), **extra))
    return list(exporter.get_finished_spans())


def request_span(spans: list[Any]) -> Any:
    """The request's span: the one whose parent is not among them (the middleware's send spans are its children)."""
    ids = {s.context.span_id for s in spans}
    [span] = [s for s in spans if s.parent is None or s.parent.span_id not in ids]
    return span


def test_outside_the_host_the_span_is_the_requests_record():
    span = request_span(spans_of())
    assert span.kind == trace.SpanKind.SERVER and span.parent is None


def test_under_the_host_the_span_is_a_child_of_its_invocation():
    handed = SimpleNamespace(trace_parent=f"00-{HOST_TRACE}-{HOST_SPAN}-01", trace_state="", attributes={})
    span = request_span(spans_of(**{"azure_functions.trace_context": handed}))
    assert span.kind == trace.SpanKind.INTERNAL  # a dependency in Application Insights, not a second request
    assert format(span.context.trace_id, "032x") == HOST_TRACE
    assert span.parent is not None and format(span.parent.span_id, "016x") == HOST_SPAN


def test_a_host_context_without_a_valid_traceparent_is_ignored():
    handed = SimpleNamespace(trace_parent="not-a-traceparent", trace_state=None, attributes={})
    assert request_span(spans_of(**{"azure_functions.trace_context": handed})).kind == trace.SpanKind.SERVER
