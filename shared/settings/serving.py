"""How the HTTP front serves: the local host's port and connection bounds, the public rootUrl, and what tests
switch on."""

from __future__ import annotations

import re
import urllib.parse

from pydantic import BaseModel, Field, field_validator

HOSTED_SERVICES = ("queue", "object", "auth", "index", "purge-cache")  # what this app serves itself
_SERVICE = re.compile(r"[a-z][a-z0-9-]*")
_HOST = re.compile(r"[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\]")  # a name, an IPv4 or a bracketed IPv6 address
_BASE_PATH = re.compile(r"(/[A-Za-z0-9\-._~!$&'()*+,;=:@]*)*")  # path characters, no escapes


def parse_base(text: str) -> str:
    """A service's base URL: http(s), a host, a port if any, a path without escapes or dot segments, nothing else:
    no credentials (they would go with every request, wherever it is sent), query or fragment; ValueError."""
    parts = urllib.parse.urlsplit(text)
    if "@" in parts.netloc:
        raise ValueError("its base URL holds credentials (`user:password@`): a base URL names none")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"`{text}` has a port that is no port") from None
    if parts.scheme not in ("http", "https") or not _HOST.fullmatch(
        parts.netloc.rsplit(":", 1)[0] if port else parts.netloc
    ):
        raise ValueError(f"`{text}` is not `http(s)://host[:port][/path]`")
    if parts.query or parts.fragment or "?" in text or "#" in text:
        raise ValueError(f"`{text}` holds a query or a fragment")
    path = parts.path.rstrip("/")
    if not _BASE_PATH.fullmatch(path) or {".", ".."} & set(path.split("/")):
        raise ValueError(f"`{text}` has a path with escapes or dot segments")
    return text.rstrip("/")


def parse_forwarding(value: str) -> dict[str, str]:
    """`QUEUE_FORWARD_SERVICES` as a map of service name to base URL; ValueError naming what is wrong."""
    services: dict[str, str] = {}
    for pair in re.split(r"[\s,]+", value.strip()):
        if not pair:
            continue
        name, _, base = pair.partition("=")
        if not _SERVICE.fullmatch(name):
            raise ValueError(f"`{pair}` is not `<service>=<http(s) base URL>`")
        if name in HOSTED_SERVICES:
            raise ValueError(f"`{name}` is served by this app itself and cannot be forwarded")
        try:
            services[name] = parse_base(base)
        except ValueError as exc:
            raise ValueError(f"`{name}`: {exc}") from None
    return services


class ServingSettings(BaseModel):
    port: int = Field(default=7071, ge=1, le=65535, description="Port of the local host's HTTP server.")
    http_max_connections: int = Field(
        default=1000,
        ge=1,
        description="Connections the local host's HTTP server "
        "holds at once; one more is answered 503 and closed (docs/security.md).",
    )
    http_header_timeout: float = Field(
        default=10,
        gt=0,
        description="Seconds a connection to the local host may "
        "take to send a whole request head (from opening, or from its previous "
        "answer); then it is closed.",
    )
    http_body_timeout: float = Field(
        default=10,
        gt=0,
        description="Seconds a connection to the local host may "
        "send nothing while its request body is read (while the server itself waits, "
        "the wait does not count); then it is closed.",
    )
    http_per_peer_share: float = Field(
        default=0.5,
        gt=0,
        le=1,
        description="Share of `http_max_connections` one "
        "peer address may hold; one more from it is answered 503 and closed.",
    )
    http_min_body_rate: float = Field(
        default=16 * 1024,
        ge=0,
        description="Bytes a second a request body must average on the local host once `http_body_grace` has "
        "passed (the time the server is not reading does not count); slower, the connection is closed.",
    )
    http_body_grace: float = Field(
        default=30,
        ge=0,
        description="Seconds of a request body on the local host before `http_min_body_rate` applies.",
    )
    http_request_body_limit: int = Field(
        default=5 * 1024**3,
        ge=1,
        description="Largest request body, as Azure's `FUNCTIONS_REQUEST_BODY_SIZE_LIMIT` (infra sets both): the "
        "local host answers a larger one 413, as the Functions host does (local_host/front_end.py).",
    )
    http_answer_within: float = Field(
        default=230,
        gt=0,
        description="Seconds a request may wait for its answer's head: then the local host answers 502 and drops "
        "the request, as Azure's front end does after 230 s (local_host/front_end.py).",
    )
    root_url: str | None = Field(default=None, description="Public rootUrl; default http://127.0.0.1:<QUEUE_PORT>.")
    inspector_push_index: str = Field(
        default="",
        description="The Index path of a push's decision task, `{project}` and `{revision}` in it (Firefox CI: "
        "`gecko.v2.{project}.revision.{revision}.taskgraph.decision`): the inspector's Open box opens a revision "
        "or a Treeherder push URL through it. Empty: looked up among the recent pushes only.",
    )
    inspector_treeherder_url: str = Field(
        default="",
        description="Treeherder's address (`https://treeherder.mozilla.org`): the inspector links a push and a task "
        "to it. Empty: no such link.",
    )
    faults: str = Field(
        default="",
        description="Tests only: fault-injection points at which the process exits as if killed (`shared/faults.py`).",
    )
    clock_offset: float = Field(
        default=0,
        ge=-3600,
        le=3600,
        description="Tests and the fault campaign only: seconds this process's clock runs ahead of the machine's "
        "(behind when negative), so that claims, deadlines and leases are judged by clocks that disagree "
        "(bench.soak --skew). Refused when storage is reached by identity (a deployment).",
    )
    validate_responses: bool = Field(
        default=False, description="Validate every response body against its schema (on in tests; costs CPU)."
    )
    log_level: str = Field(default="INFO", description="Level of the queue's logs.")

    forward_services: str = Field(
        default="",
        description="Services of this rootUrl that run elsewhere (worker-manager, hooks, secrets, ...): "
        "`<service>=<base URL>` pairs separated by spaces or commas, e.g. `hooks=http://10.0.0.5:8080`. Requests "
        "to `/api/<service>/`, `/references/<service>/` and `/schemas/<service>/` are forwarded there, streamed "
        "(docs/services.md).",
    )
    forward_timeout: float = Field(
        default=120,
        gt=0,
        description="Seconds a forwarded exchange may take in all, waiting for a connection and the whole answer "
        "included; then it is cut (docs/security.md).",
    )
    forward_connections: int = Field(
        default=32, ge=1, description="Connections to one forwarded service at once; more requests wait for one."
    )
    forward_per_caller: int = Field(
        default=8,
        ge=1,
        description="Forwarded requests one caller address may have under way at once, every service together; "
        "one more is answered 503 with Retry-After.",
    )

    @field_validator("forward_services")
    @classmethod
    def _valid_forwarding(cls, value: str) -> str:
        parse_forwarding(value)
        return value

    @property
    def forwarded_services(self) -> dict[str, str]:
        return parse_forwarding(self.forward_services)

    @field_validator("faults")
    @classmethod
    def _known_faults(cls, value: str) -> str:
        from shared import faults

        faults.parse(value)
        return value

    @field_validator("root_url")
    @classmethod
    def _strip_slash(cls, value: str | None) -> str | None:
        return value.rstrip("/") if value else value

    @property
    def public_root_url(self) -> str:
        return self.root_url or f"http://127.0.0.1:{self.port}"
