"""Structured logs: one JSON object a line, with a fixed field set (taskId top-level).

Log with `%`-style arguments and pass the fields through `extra=fields(...)`:
    log.info("claimed run %d", run_id, extra=fields(taskId=task_id, runId=run_id))
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

FIELDS = (
    "event",
    "taskId",
    "taskGroupId",
    "runId",
    "taskQueueId",
    "workerGroup",
    "workerId",
    "reason",
    "queue",
    "messageId",
    "dequeueCount",
    "durationMs",
    "object",
    "operation",
    "requestId",
    "moved",  # parked checks moved to their triggers' queues by a run of move_due_checks
    "waiting",  # ... and those left waiting in the parking queues
)


def fields(**values: Any) -> dict[str, Any]:
    unknown = set(values) - set(FIELDS)
    if unknown:
        raise ValueError(f"unknown log fields: {sorted(unknown)}")
    return values


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in FIELDS:
            value = record.__dict__.get(name)
            if value is not None:
                out[name] = value
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def configure(level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    handler.formatter.converter = __import__("time").gmtime  # type: ignore[union-attr]
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("azure", "uvicorn.access"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    logging.getLogger("mohawk").setLevel(logging.ERROR)  # warns on every request that nonces are not checked
