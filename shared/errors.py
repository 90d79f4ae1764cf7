"""Every error the queue raises, and the one place that maps each to its HTTP status and Taskcluster code.

An error's docstring is its message; `{name}` fields are filled from the keyword arguments it is raised with,
which are also kept as `details`.
"""

from __future__ import annotations

import string
from typing import Any, ClassVar


class _Blank(dict[str, Any]):
    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def _unwrapped(doc: str) -> str:
    """A docstring as one message: its wrapped lines joined by spaces (a blank line stays a paragraph break)."""
    paragraphs = [" ".join(line.strip() for line in part.splitlines()) for part in doc.strip().split("\n\n")]
    return "\n\n".join(paragraphs)


class QueueError(Exception):
    """Internal error"""

    code: ClassVar[str] = "InternalServerError"
    status: ClassVar[int] = 500

    def __init__(self, message: str | None = None, **details: Any) -> None:
        self.details = details
        template = message if message is not None else _unwrapped(type(self).__doc__ or type(self).__name__)
        # Only templates are formatted: a literal message may hold braces (regexes, user input).
        try:
            self.message = string.Formatter().vformat(template, (), _Blank(details)) if details else template
        except (ValueError, IndexError):
            self.message = template
        super().__init__(self.message)


# --- The Taskcluster error codes: status and code are declared here and nowhere else. -------------------


class MalformedPayload(QueueError):
    """The request body is not valid JSON: {error}"""

    code, status = "MalformedPayload", 400


class InvalidRequestArguments(QueueError):
    """Invalid request arguments"""

    code, status = "InvalidRequestArguments", 400


class InputValidationError(QueueError):
    """The request body does not match its schema"""

    code, status = "InputValidationError", 400


class InputError(QueueError):
    """Invalid input"""

    code, status = "InputError", 400


class AuthenticationFailed(QueueError):
    """Authentication failed"""

    code, status = "AuthenticationFailed", 401


class InsufficientScopes(QueueError):
    """The client lacks the scopes this request needs"""

    code, status = "InsufficientScopes", 403


class ResourceNotFound(QueueError):
    """Resource not found"""

    code, status = "ResourceNotFound", 404


class RequestConflict(QueueError):
    """The request conflicts with the current state"""

    code, status = "RequestConflict", 409


class ResourceExpired(QueueError):
    """The resource has expired"""

    code, status = "ResourceExpired", 410


class InputTooLarge(QueueError):
    """The request is too large"""

    code, status = "InputTooLarge", 413


class InternalServerError(QueueError):
    """Internal server error"""


class ServiceUnavailable(QueueError):
    """The service is busy; retry in a few seconds"""

    code, status = "ServiceUnavailable", 503

    @property
    def retry_after(self) -> int:
        """Seconds a client should wait before retrying (the `Retry-After` header)."""
        return int(self.details.get("retry_after", 5))


# --- Specific errors, named for what happened. --------------------------------------------------------------


class SettingsError(InternalServerError):
    """Invalid settings: {problems}"""


class UnknownRoute(ResourceNotFound):
    """No such API endpoint: {method} {path}"""


class TaskNotFound(ResourceNotFound):
    """Task `{taskId}` not found"""


class RunNotFound(ResourceNotFound):
    """Run {runId} of task `{taskId}` not found"""


class TaskIdConflict(RequestConflict):
    """taskId `{taskId}` is already used by another task with a different definition"""


class DeadlinePassed(RequestConflict):
    """Task `{taskId}` cannot be modified: its deadline {deadline} has passed"""


class RunNotRunning(RequestConflict):
    """Run {runId} of task `{taskId}` is not running (it is {state}, or not the latest run)"""


class RunAlreadyClaimed(RequestConflict):
    """Run {runId} of task `{taskId}` is already claimed by another worker, or is no longer pending"""


class RunResolvedDifferently(RequestConflict):
    """Run {runId} of task `{taskId}` is already resolved as {state}/{reasonResolved}"""


class MaxRunsReached(RequestConflict):
    """Maximum number of runs reached ({maxRuns})"""


class TaskTooLarge(InputTooLarge):
    """The task definition is {size} characters of JSON; at most {limit} are allowed"""


class BodyTooLarge(InputTooLarge):
    """The request body is {size} bytes; at most {limit} are allowed"""
