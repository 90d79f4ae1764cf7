"""Telemetry: logs, traces and metrics to Application Insights through OpenTelemetry, when it is configured.

`APPLICATIONINSIGHTS_CONNECTION_STRING` turns it on (the deployment sets it); without it nothing is configured
and nothing leaves the machine, except that `OTEL_METRICS_EXPORTER=console` prints the queue's metrics
(shared/metrics.py) every `OTEL_METRIC_EXPORT_INTERVAL` ms (default 60,000), to read them locally. Logs keep
their fixed fields (`shared/logs.py`: taskId, runId, ...) as custom dimensions; metrics go to customMetrics;
traces are a span per API request (the ASGI middleware: the request's record, or under the Functions host a child
of the host's invocation, which is) with the Azure SDK's storage and Service Bus calls as its dependencies. With
`APPLICATIONINSIGHTS_AUTHENTICATION_STRING` = `Authorization=AAD;ClientId=<id>` the exporter authenticates with
that managed identity (the Application Insights resource then has local authentication off, as Microsoft's
templates make it).
"""

from __future__ import annotations

import functools
import logging
import os
import sys
from typing import Any

CONNECTION_SETTING = "APPLICATIONINSIGHTS_CONNECTION_STRING"
AUTHENTICATION_SETTING = "APPLICATIONINSIGHTS_AUTHENTICATION_STRING"
# Under the Functions host (which sets FUNCTIONS_WORKER_RUNTIME) with host.json's telemetryMode OpenTelemetry, the
# host forwards the worker's log records itself; exporting them here too would send each twice. With
# PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY=true the Python worker sets up the distro's exporter itself, before
# the app is imported, and a second one here would double everything: the deployment sets it false.
WORKER_RUNTIME_SETTING = "FUNCTIONS_WORKER_RUNTIME"
# The Python worker's own packages: `azure_functions_worker` (Python 3.12 and before), `proxy_worker` (3.13 on).
WORKER_MODULES = ("azure_functions_worker", "proxy_worker")
WORKER_TELEMETRY_SETTING = "PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY"
SERVICE_NAME = "taskcluster-queue"
log = logging.getLogger("queue")


def _authentication(text: str | None) -> dict[str, str]:
    parts = (part.split("=", 1) for part in (text or "").split(";") if "=" in part)
    return {key.strip().lower(): value.strip() for key, value in parts}


def _credential(environ: os._Environ[str] | dict[str, str]) -> Any:
    auth = _authentication(environ.get(AUTHENTICATION_SETTING))
    if auth.get("authorization", "").upper() != "AAD":
        return None
    from azure.identity import ManagedIdentityCredential

    return ManagedIdentityCredential(client_id=auth.get("clientid") or None)


@functools.cache
def configure() -> bool:
    """Export logs and traces if Application Insights is configured (once per process); True if it is."""
    environ = os.environ
    connection_string = environ.get(CONNECTION_SETTING)
    if connection_string and environ.get(WORKER_TELEMETRY_SETTING, "").strip().lower() == "true":
        log.info(
            "telemetry: the Functions worker exports it (%s=true); not configured again here", WORKER_TELEMETRY_SETTING
        )
        return True
    if not connection_string:
        if environ.get("OTEL_METRICS_EXPORTER", "").lower() == "console":
            _console_metrics(int(environ.get("OTEL_METRIC_EXPORT_INTERVAL") or 60000))
        return False
    # The distro's default sampler keeps 5 *spans* a second, which drops the storage calls of a request (a
    # createTask makes several) while keeping the request. Sample whole traces instead: all of a request or
    # none. OTEL_TRACES_SAMPLER_ARG is the kept fraction (1.0 unless set; the deployment makes it a parameter).
    environ.setdefault("OTEL_TRACES_SAMPLER", "microsoft.fixed_percentage")
    environ.setdefault("OTEL_TRACES_SAMPLER_ARG", "1.0")
    from azure.monitor.opentelemetry import configure_azure_monitor
    from opentelemetry.sdk.resources import Resource

    # The exporter's own HTTP calls go through azure-core: its logs at INFO would be exported in turn.
    for noisy in ("azure", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    configure_azure_monitor(
        connection_string=connection_string,
        credential=_credential(environ),
        disable_logging=under_functions_host(environ),  # the host forwards them
        resource=Resource.create({"service.name": environ.get("OTEL_SERVICE_NAME", SERVICE_NAME)}),
        logger_name="",  # the root logger: the queue's loggers and the host's
        # Live metrics stream to the endpoint the connection string names (Azure's always name one).
        enable_live_metrics="liveendpoint=" in connection_string.lower(),
        # Only what this code uses; the other bundled instrumentations (Django, Flask, psycopg2...) stay off.
        instrumentation_options={
            name: {"enabled": False}
            for name in ("django", "fastapi", "flask", "psycopg2", "requests", "urllib", "urllib3")
        },
    )
    log.info(
        "telemetry: exporting %s to Application Insights",
        "traces (the Functions host exports the logs)" if under_functions_host(environ) else "logs and traces",
    )
    return True


def under_functions_host(environ: os._Environ[str] | dict[str, str]) -> bool:
    """Whether this process is a Functions host's language worker (the host forwards its logs): the Python worker
    imported it (its package is loaded before the app), or the host said so in `FUNCTIONS_WORKER_RUNTIME`, an app
    setting Flex Consumption deprecates and may not hand to the worker (#66: logs exported twice then)."""
    return any(name in sys.modules for name in WORKER_MODULES) or bool(environ.get(WORKER_RUNTIME_SETTING))


def _console_metrics(interval_ms: int) -> None:
    """The queue's metrics (shared/metrics.py) printed as JSON every `interval_ms`, to read them locally."""
    from opentelemetry import metrics
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import ConsoleMetricExporter, PeriodicExportingMetricReader

    reader = PeriodicExportingMetricReader(ConsoleMetricExporter(), export_interval_millis=interval_ms)
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    log.info("telemetry: printing metrics every %d ms (OTEL_METRICS_EXPORTER=console)", interval_ms)


def instrument_asgi(app: Any) -> Any:
    """The ASGI app with a span per request, when telemetry is on; the app itself otherwise."""
    if not configure():
        return app
    return traced(app)


def traced(app: Any, tracer_provider: Any = None) -> Any:
    """A span per request (not `/ping`): the request's record (a SERVER span) where nothing records the request
    before this app; under the Functions host, whose invocation is the request's record, an INTERNAL span that is
    its child (one request record per API call, with this app's route and the storage calls beneath)."""
    from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware

    return UnderHostInvocation(
        OpenTelemetryMiddleware(app, excluded_urls="api/queue/v1/ping", tracer_provider=tracer_provider)
    )


class UnderHostInvocation:
    """ASGI middleware: the Functions host's invocation (its trace context, which the `azure.functions` ASGI adapter
    hands over as the scope's `azure_functions.trace_context`) made the current span, so that the span the
    OpenTelemetry middleware starts is an INTERNAL child of it rather than a second SERVER span."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        from opentelemetry import context

        parent = host_invocation(scope)
        if parent is None:
            await self.app(scope, receive, send)
            return
        token = context.attach(parent)
        try:
            await self.app(scope, receive, send)
        finally:
            context.detach(token)


def host_invocation(scope: dict[str, Any]) -> Any:
    """The OpenTelemetry context of the host's invocation of this request, or None (not under the host, or it
    passed no valid `traceparent`)."""
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    handed = scope.get("azure_functions.trace_context")
    traceparent = getattr(handed, "trace_parent", None)
    if not traceparent:
        return None
    carrier = {"traceparent": str(traceparent), "tracestate": str(getattr(handed, "trace_state", "") or "")}
    parent = TraceContextTextMapPropagator().extract(carrier)
    return parent if trace.get_current_span(parent).get_span_context().is_valid else None
