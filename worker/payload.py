"""The reference worker's task payload: what to run, with what environment, for how long, and what to upload.

{"command": ["python", "-c", "print(1)"] | "echo hello && make",   (a list runs as is; a string with /bin/sh -c)
 "env": {"NAME": "value"},                                          (added to the task's environment)
 "maxRunTime": 3600,                                                (seconds; the run fails when exceeded)
 "artifacts": [{"name": "public/build/out.tar.gz", "path": "out.tar.gz",
                "contentType": "application/gzip", "expires": "<date>"}]}   (paths relative to the task's folder)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

DEFAULT_MAX_RUN_TIME = 3600
MAX_MAX_RUN_TIME = 5 * 24 * 3600


class MalformedPayload(ValueError):
    """The payload cannot be run; the message says why (the task is resolved exception/malformed-payload)."""


@dataclass(frozen=True)
class ArtifactSpec:
    name: str
    path: str
    content_type: str = "application/octet-stream"
    expires: str | None = None


@dataclass(frozen=True)
class Payload:
    command: list[str]
    env: dict[str, str] = field(default_factory=dict)
    max_run_time: int = DEFAULT_MAX_RUN_TIME
    artifacts: list[ArtifactSpec] = field(default_factory=list)


def _artifact(index: int, raw: Any) -> ArtifactSpec:
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str) or not isinstance(raw.get("path"), str):
        raise MalformedPayload(f"artifacts[{index}] must be an object with string `name` and `path`")
    unknown = set(raw) - {"name", "path", "contentType", "expires", "type"}
    if unknown:
        raise MalformedPayload(f"artifacts[{index}] has unknown properties: {', '.join(sorted(unknown))}")
    if raw.get("type", "file") != "file":
        raise MalformedPayload(f"artifacts[{index}]: only `file` artifacts are supported")
    if raw["path"].startswith("/") or ".." in raw["path"].split("/"):
        raise MalformedPayload(f"artifacts[{index}]: path must stay inside the task's folder")
    content_type = raw.get("contentType", "application/octet-stream")
    expires = raw.get("expires")
    if not isinstance(content_type, str) or (expires is not None and not isinstance(expires, str)):
        raise MalformedPayload(f"artifacts[{index}]: contentType and expires must be strings")
    return ArtifactSpec(raw["name"], raw["path"], content_type, expires)


def parse(raw: Any) -> Payload:
    """The payload, or MalformedPayload saying what is wrong."""
    if not isinstance(raw, dict):
        raise MalformedPayload("the payload must be an object")
    unknown = set(raw) - {"command", "env", "maxRunTime", "artifacts"}
    if unknown:
        raise MalformedPayload(f"unknown payload properties: {', '.join(sorted(unknown))}")
    command = raw.get("command")
    if isinstance(command, str) and command.strip():
        argv = ["/bin/sh", "-c", command]
    elif isinstance(command, list) and command and all(isinstance(a, str) for a in command):
        argv = list(command)
    else:
        raise MalformedPayload("`command` must be a non-empty list of strings, or a shell command string")
    env = raw.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise MalformedPayload("`env` must map names to string values")
    max_run_time = raw.get("maxRunTime", DEFAULT_MAX_RUN_TIME)
    if not isinstance(max_run_time, int) or isinstance(max_run_time, bool) or not 1 <= max_run_time <= MAX_MAX_RUN_TIME:
        raise MalformedPayload(f"`maxRunTime` must be a whole number of seconds from 1 to {MAX_MAX_RUN_TIME}")
    artifacts = raw.get("artifacts", [])
    if not isinstance(artifacts, list):
        raise MalformedPayload("`artifacts` must be a list")
    return Payload(argv, dict(env), max_run_time, [_artifact(i, a) for i, a in enumerate(artifacts)])
